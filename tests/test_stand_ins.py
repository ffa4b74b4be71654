"""The benchmarks' stand-ins for a model: ours through the batcher (bench.serving.instant_model) and LibreTranslate's
CTranslate2 Translator (bench/serving/ct2_stand_in), each giving what the code around it reads."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

from bench.serving.instant_model import instant_model, search_alone
from bench.serving.servers import CT2_STAND_IN
from core.search import SearchOptions
from service.metrics import Metrics
from service.settings import Settings


def test_the_instant_model_ends_a_greedy_sentence_at_the_batchers_first_step(tiny_models_dir: Path):
    def translated(sentences: list[list[int]], opts: SearchOptions) -> tuple[list, list, float]:
        """The pairs, the hypotheses, and the batcher's decoder steps once it has stopped (its step's metrics are
        kept after its answers)."""
        pairs, batcher = instant_model(tiny_models_dir / "en-de", Settings(), metrics := Metrics())

        async def main() -> list:
            batcher.start()
            try:
                return await batcher.submit(sentences, opts)
            finally:
                await batcher.stop()

        return pairs, asyncio.run(main()), metrics.decoder_steps._value.get()

    pairs, greedy, steps = translated([[5, 6, 7, 3], [8, 3]], SearchOptions())
    assert [pair.name for pair in pairs] == ["en-de"]
    assert [[h.tokens for h in hyps] for hyps in greedy] == [[[]], [[]]]
    assert steps == 1
    _, beams, _ = translated([[9, 10, 3]], SearchOptions(beam_size=4))
    assert beams[0][0].tokens == []  # a beam's best ends at once too; the other beams take a step more


def test_the_stand_ins_search_alone_is_timed_per_sentence(tiny_models_dir: Path):
    """What bench.serving.lone_path takes from our stand-in's request time: the seconds of a sentence's search, more
    than nothing and far less than a second."""
    seconds = search_alone(tiny_models_dir / "en-de", ["A dog runs.", "The cat sleeps on the sofa."], SearchOptions(),
                           repeats=1)
    assert 0 < seconds < 0.1


def test_the_ctranslate2_stand_in_gives_the_source_tokens_back():
    script = ("import json, ctranslate2; translator = ctranslate2.Translator('no model', device='cpu'); "
              "results = translator.translate_batch([['▁A', '▁cat'], ['.']], num_hypotheses=2, beam_size=2); "
              "print(json.dumps([[r.hypotheses, r.scores] for r in results]))")
    env = {**os.environ, "PYTHONPATH": str(CT2_STAND_IN)}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == [[[["▁A", "▁cat"], ["▁A", "▁cat"]], [0.0, 0.0]], [[["."], ["."]], [0.0, 0.0]]]

"""The engine: every model folder served, each language pair with its translator and its batcher.

    engine = Engine(settings, metrics)
    engine.load()                      # blocking: loads and warms up every model (run it in a thread)
    engine.start()                     # in the event loop: one batcher per pair
    await engine.pair("en", "de").batcher.submit(ids, opts)
    await engine.stop(deadline=20)     # finish what was accepted, up to the deadline
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path

from service.batcher import Batcher
from service.metrics import Metrics
from service.search import SearchOptions
from service.settings import Settings
from service.translator import Translator

log = logging.getLogger(__name__)


def model_folders(path: Path) -> list[Path]:
    """`path` itself when it is a model folder (it holds config.json), else the model folders directly in it."""
    if (path / "config.json").is_file():
        return [path]
    folders = sorted(config.parent for config in path.glob("*/config.json"))
    if not folders:
        raise FileNotFoundError(f"no model folder (a folder with config.json, written by `python -m export`) in {path}")
    return folders


@dataclass
class Pair:
    """One language pair served: its translator, and the batcher that feeds it (once the engine has started)."""

    translator: Translator
    batcher: Batcher | None = None

    @property
    def source(self) -> str:
        return self.translator.config["source_language"]

    @property
    def target(self) -> str:
        return self.translator.config["target_language"]

    @property
    def name(self) -> str:
        return f"{self.source}-{self.target}"


class Engine:
    def __init__(self, settings: Settings, metrics: Metrics):
        self.settings = settings
        self.metrics = metrics
        self.pairs: dict[tuple[str, str], Pair] = {}

    def load(self) -> None:
        """Load every model folder and run each once, greedy and with beams, so no request pays for a first run."""
        s = self.settings
        for folder in model_folders(s.model_dir):
            translator = Translator(folder, s.precision, s.provider, s.threads, s.optimization, s.spin_threads)
            pair = Pair(translator)
            if (pair.source, pair.target) in self.pairs:
                other = self.pairs[pair.source, pair.target].translator.model_dir
                raise ValueError(f"two model folders translate {pair.name}: {other} and {folder}")
            for beam_size in (1, 2):
                translator.translate(["Warming up."], SearchOptions(beam_size=beam_size))
            self.metrics.model_info.labels(translator.name, translator.provider, s.precision).set(1)
            log.info("model %s (%s) ready on %s (%s)", translator.name, folder, translator.provider, s.precision)
            self.pairs[pair.source, pair.target] = pair

    def start(self) -> None:
        s = self.settings
        for pair in self.pairs.values():
            pair.batcher = Batcher(
                pair.translator, self.metrics, pair.name, s.max_batch_sentences, s.max_batch_tokens, s.max_wait_ms,
                s.max_queue, s.release_memory_after_s,
            )
            pair.batcher.start()

    async def stop(self, deadline: float | None = None) -> None:
        """Stop every batcher: accepted work finishes up to `deadline` seconds, what is left is answered 503."""
        await asyncio.gather(*(pair.batcher.stop(deadline) for pair in self.pairs.values() if pair.batcher))

    def pair(self, source: str, target: str) -> Pair | None:
        return self.pairs.get((source, target))

    def sources_into(self, target: str) -> list[str]:
        """The languages this server translates into `target`."""
        return sorted(source for source, t in self.pairs if t == target)

    def targets_of(self, source: str) -> list[str]:
        return sorted(target for s, target in self.pairs if s == source)

    @property
    def languages(self) -> list[str]:
        """Every language served, as a source or as a target."""
        return sorted({code for pair in self.pairs for code in pair})

"""The engine: every model folder served, each language pair with its translator and its batcher.

    engine = Engine(settings, metrics)
    await engine.start()                                   # loads and warms up every model, starts the batchers
    await engine.translate("en-de", sentences, options)    # hypotheses of each sentence
    await engine.stop(deadline=20)                         # finish what was accepted, up to the deadline

It runs in the engine process of `python -m service` (service.remote serves it to the HTTP workers), or inside the
one process that serves everything (TRANSLATOR_HTTP_WORKERS=0). Either way it is an EngineClient (service.client).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from core.folder import model_folders
from core.search import Hypothesis, SearchOptions
from service.batcher import Batcher
from service.client import Pair, ShuttingDown
from service.metrics import Metrics
from service.settings import Settings
from service.translator import Translator

log = logging.getLogger(__name__)


def load_translator(folder: Path, settings: Settings) -> Translator:
    """A model folder's translator, run once greedy and once with beams so that no request pays for a first run."""
    s = settings
    translator = Translator(folder, s.precision, s.provider, s.threads, s.optimization, s.spin_threads)
    for beam_size in (1, 2):
        translator.translate(["Warming up."], SearchOptions(beam_size=beam_size))
    log.info("model %s (%s) ready on %s (%s)", translator.name, folder, translator.provider, s.precision)
    return translator


class Engine:
    def __init__(self, settings: Settings, metrics: Metrics):
        self.settings = settings
        self.metrics = metrics
        self.pairs: dict[tuple[str, str], Pair] = {}
        self.batchers: list[Batcher] = []  # one per model folder
        self.routes: dict[str, Batcher] = {}  # pair name -> its folder's batcher
        self.closing = False

    @property
    def ready(self) -> bool:
        return bool(self.batchers) and not self.closing

    async def prepare(self) -> None:
        """Nothing: in this process the models load in start(), while /health answers."""

    async def start(self) -> None:
        """Load every model folder (in a thread: the event loop keeps answering), then start one batcher per folder:
        the pairs of a multi-target model share its batcher, their sentences its running batch."""
        translators: list[Translator] = []
        folders: dict[tuple[str, str], Path] = {}  # which folder serves a pair
        for folder in model_folders(self.settings.model_dir):
            translator = await asyncio.to_thread(load_translator, folder, self.settings)
            for pair in translator.config.pairs:
                if pair in folders:
                    raise ValueError(f"two model folders translate {'-'.join(pair)}: {folders[pair]} and {folder}")
                folders[pair] = folder
            translators.append(translator)
        s = self.settings
        for translator in translators:
            self.metrics.model_info.labels(translator.name, translator.provider, s.precision).set(1)
            batcher = Batcher(translator, self.metrics, translator.name, s.max_batch_sentences, s.max_batch_tokens,
                              s.max_wait_ms, s.max_queue, s.release_memory_after_s)
            batcher.start()
            self.batchers.append(batcher)
            for _, target in translator.config.pairs:
                pair = Pair(translator.model_dir, translator.config, translator.tokenizer, target, translator.provider,
                            s.precision)
                self.pairs[pair.source, pair.target] = pair
                self.routes[pair.name] = batcher

    async def translate(self, pair: str, sentences: list[list[int]], opts: SearchOptions) -> list[list[Hypothesis]]:
        if self.closing:
            raise ShuttingDown()
        return await self.routes[pair].submit(sentences, opts)

    async def stop(self, deadline: float | None = None) -> None:
        """Stop every batcher: accepted work finishes up to `deadline` seconds, what is left is answered 503."""
        self.closing = True
        await asyncio.gather(*(batcher.stop(deadline) for batcher in self.batchers))

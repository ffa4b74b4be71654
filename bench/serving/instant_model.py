"""A stand-in model whose sentences go through the engine's batcher (service.engine.batcher) and end at its first
step: an empty translation, after everything a request takes but the model's work.

    Supervisor(settings, models=INSTANT_MODELS).run()

service.testing's echo model answers without the batcher; this one measures the batcher's hand-offs too (from the
event loop to its thread and back), and one step of the search (core.search.RunningBatch) over a decoder that does
nothing. search_alone() times that step's search as an engine alone runs it (bench.serving.lone_path).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from core.folder import FolderConfig, ModelConfig
from core.search import SearchOptions, StepPlan, search
from core.tokenizer import load_tokenizer
from core.translate import source_ids
from service.engine.batcher import Batcher
from service.engine.engine import engine_config
from service.metrics import Metrics
from service.protocol import PairInfo
from service.settings import Settings
from service.testing import ECHO_PROVIDER

INSTANT_MODELS = "bench.serving.instant_model:instant_model"  # a model loader for service.engine


class InstantDecoder:
    """A decoder (core.search.Decoder) whose every row says </s> first, any other token far less likely."""

    cache_bytes = 0  # it holds no caches

    def __init__(self, config: ModelConfig) -> None:
        self.eos_id = config.eos_id

    def add(self, src: np.ndarray, src_mask: np.ndarray) -> None:
        """Nothing to keep."""

    def step(self, tokens: np.ndarray, width: int, log_probs: bool = True) -> tuple[np.ndarray, np.ndarray]:
        others = [t for t in range(width + 1) if t != self.eos_id][: width - 1]
        top = np.array([[self.eos_id, *others]] * len(tokens))
        return top, np.array([[0.0] + [-20.0 - j for j in range(width - 1)]] * len(tokens))

    def apply(self, plan: StepPlan) -> None:
        """Nothing to move."""


class InstantModel:
    """What the batcher needs of a model (service.engine.batcher.DecodingModel), with InstantDecoder."""

    def __init__(self, config: ModelConfig) -> None:
        self.model_config = config

    def new_decoder(self) -> InstantDecoder:
        return InstantDecoder(self.model_config)

    def release_memory(self) -> None:
        """Nothing to release."""


def instant_model(folder: Path, settings: Settings, metrics: Metrics) -> tuple[list[PairInfo], Batcher]:
    """A model folder's pairs, each sentence through a batcher (the service's limits) that ends it at once."""
    config = FolderConfig.load(folder)
    pairs = [PairInfo(source, target, str(folder), ECHO_PROVIDER, settings.precision) for source, target in
             config.pairs]
    return pairs, Batcher(InstantModel(config.model), metrics, folder.name, engine_config(settings).batch)


def search_alone(folder: Path, sentences: list[str], opts: SearchOptions, repeats: int = 3) -> float:
    """Seconds a sentence of what the served stand-in's engine does that an engine alone does too: the search
    (core.search.search) over InstantDecoder, one sentence at a time, as the batcher's first step ends it; the
    sentences' ids made beforehand. The least of `repeats` runs, after one to warm up."""
    config = FolderConfig.load(folder)
    tokenizer = load_tokenizer(folder, config.tokenizer, config.model.case_tags)
    sources = source_ids(tokenizer, config.model, sentences)
    decoder, best = InstantDecoder(config.model), float("inf")
    for run in range(repeats + 1):
        started = time.perf_counter()
        for ids in sources:
            search(decoder, [ids], opts, config.model)
        if run:
            best = min(best, (time.perf_counter() - started) / len(sources))
    return best

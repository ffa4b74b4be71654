"""What the HTTP side knows of an engine: the pairs it serves, and one call to translate a pair's sentences.

Two engines fit the EngineClient protocol: service.engine.Engine runs the models in this process (one process
serves everything: TRANSLATOR_HTTP_WORKERS=0, and tests), service.remote.RemoteEngine talks to the engine process
over ZeroMQ (the HTTP workers of `python -m service`). The request pipeline (service.pipeline) sees only this.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from core.folder import FolderConfig
from core.search import Hypothesis, SearchOptions
from core.tokenizer import AnyTokenizer, load_tokenizer


class QueueFull(Exception):
    """More sentences are waiting than the queue holds; the request should be retried later."""


class ShuttingDown(Exception):
    """The engine no longer accepts new work."""


class EngineGone(Exception):
    """The engine process died: nothing it had will be answered."""


@dataclass
class Pair:
    """One language pair served: its model folder's config and tokenizer, its target language (one of the folder's:
    a multi-target model serves several pairs), and where its engine runs it."""

    folder: Path
    config: FolderConfig
    tokenizer: AnyTokenizer
    target: str
    provider: str = ""  # ONNX Runtime's, once the engine has loaded the pair
    precision: str = ""

    @classmethod
    def load(cls, folder: Path) -> list[Pair]:
        """The HTTP side's view of a folder's pairs that an engine elsewhere serves: the config and tokenizer, no
        graphs."""
        config = FolderConfig.load(folder)
        tokenizer = load_tokenizer(folder, config.tokenizer, config.model.case_tags)
        return [cls(folder, config, tokenizer, target) for _, target in config.pairs]

    @property
    def source(self) -> str:
        return self.config.source_language

    @property
    def name(self) -> str:
        return f"{self.source}-{self.target}"

    def source_ids(self, sentences: list[str]) -> list[list[int]]:
        """What the encoder reads for these sentences (ModelConfig.source_ids into this pair's target)."""
        return self.config.model.source_ids(self.tokenizer.encode(sentences), self.target)


class EngineClient(Protocol):
    pairs: dict[tuple[str, str], Pair]  # (source, target) -> pair; filled once the engine is ready

    @property
    def ready(self) -> bool:
        """Every model is loaded and warm, and the engine takes work."""

    async def prepare(self) -> None:
        """What needs no running engine (tokenizers, sockets); done before the HTTP port is served."""

    async def start(self) -> None:
        """Load or wait for the engine; returns once it is ready (pairs filled)."""

    async def translate(self, pair: str, sentences: list[list[int]], opts: SearchOptions) -> list[list[Hypothesis]]:
        """The hypotheses of each sentence of `pair`, in order; raises QueueFull, ShuttingDown or EngineGone.
        Cancelling the call abandons the sentences: they leave the queue and the running batch."""

    async def stop(self, deadline: float) -> None:
        """Take no more work; accepted work is answered within `deadline` seconds (what is left: ShuttingDown)."""


class Pairs:
    """Lookups over the pairs an engine serves."""

    def __init__(self, pairs: dict[tuple[str, str], Pair]):
        self.pairs = pairs

    def pair(self, source: str, target: str) -> Pair | None:
        return self.pairs.get((source, target))

    def sources_into(self, target: str) -> list[str]:
        """The languages translated into `target`."""
        return sorted(source for source, t in self.pairs if t == target)

    def targets_of(self, source: str) -> list[str]:
        return sorted(target for s, target in self.pairs if s == source)

    @property
    def languages(self) -> list[str]:
        """Every language served, as a source or as a target."""
        return sorted({code for pair in self.pairs for code in pair})

    @property
    def names(self) -> str:
        return ", ".join(pair.name for pair in self.pairs.values())

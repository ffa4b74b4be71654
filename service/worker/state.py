"""What every request of an HTTP worker shares (State): settings, metrics, the engine, the store and the access it
checks, the translated files, DeepL's glossaries and document jobs and, once the engine serves, the pipeline."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from service.metrics import Metrics
from service.protocol import EngineClient, Phase
from service.settings import Settings
from service.store import Store
from service.worker.access import Access
from service.worker.deepl.glossaries import Glossaries
from service.worker.deepl.runner import DocumentRunner
from service.worker.files import TranslatedFiles
from service.worker.pipeline import Pipeline


@dataclass
class State:
    """What every request of this worker shares."""

    settings: Settings
    metrics: Metrics
    engine: EngineClient
    store: Store
    access: Access
    files: TranslatedFiles
    glossaries: Glossaries  # DeepL's
    documents: DocumentRunner  # DeepL's document jobs, and those this worker translates
    pipeline: Pipeline | None = None  # once the engine is READY and this worker has loaded the pairs' tokenizers
    serving: asyncio.Event = field(default_factory=asyncio.Event)  # set with the pipeline
    draining: asyncio.Future | None = None  # the drain, once begun

    @property
    def phase(self) -> Phase:
        """The engine's phase, but LOADING until this worker can translate too."""
        if self.engine.phase is Phase.READY and self.pipeline is None:
            return Phase.LOADING
        return self.engine.phase

    def stopping(self) -> bool:
        """Whether this worker is on its way out: draining, or its engine gone (its answers say Connection: close)."""
        return self.phase in (Phase.DRAINING, Phase.GONE)

    def drain(self) -> asyncio.Future:
        """Stop taking work; accepted work finishes up to drain_seconds, then what is left is answered 503."""
        if self.draining is None:
            self.draining = asyncio.ensure_future(self.engine.stop(self.settings.drain_seconds))
        return self.draining

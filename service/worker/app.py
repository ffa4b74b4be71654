"""The HTTP worker's FastAPI app: LibreTranslate's and DeepL's APIs (routes/), health, readiness and metrics, the
page at / and the docs, in front of an engine (service.protocol.EngineClient).

    app = create_app(settings, RemoteEngine(address, lifeline, settings))   # an HTTP worker of `python -m service`
    app = create_app(settings, Engine(settings, metrics), metrics)  # one process serves everything (service.solo)

The engine starts in the background, so /health answers at once and /ready turns 200 once the engine is READY and
this worker has the pairs' tokenizers. On SIGTERM (State.drain), accepted work finishes up to drain_seconds and
what is left is answered 503; so is everything once the engine is gone.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from service.metrics import Metrics
from service.protocol import EngineClient, Phase
from service.settings import Settings
from service.worker import errors
from service.worker.deepl.documents import DocumentJobs, JobFolder
from service.worker.deepl.glossaries import GlossaryFolder, GlossaryRepository
from service.worker.detect import LanguageDetector, every_language
from service.worker.files import TranslatedFiles
from service.worker.middleware import BodyLimit, CloseWhenStopping, Observe
from service.worker.pairs import Pairs
from service.worker.params import invisible_characters
from service.worker.pipeline import Pipeline
from service.worker.routes import deepl, deepl_documents, files, languages, operations, pages, translate

log = logging.getLogger(__name__)


def instance(pid: int | None = None) -> str:
    """Which service answered (the X-Translator-Instance header): host:pid of its main process."""
    return f"{socket.gethostname()}:{pid or os.getpid()}"


@dataclass
class State:
    """What every request of this worker shares."""

    settings: Settings
    metrics: Metrics
    engine: EngineClient
    files: TranslatedFiles
    glossaries: GlossaryRepository
    documents: DocumentJobs
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


def pipeline_for(engine: EngineClient, settings: Settings, metrics: Metrics) -> Pipeline:
    """The pairs' tokenizers and the language detector over every language served that it knows (a moment's work: in
    a thread)."""
    pairs = Pairs.load(engine.pairs)
    return Pipeline(engine, pairs, LanguageDetector(pairs.languages, skip_unknown=True), settings, metrics)


async def prepare(state: State) -> None:
    """What needs no running engine, done before the port is served: so a worker that starts late (or replaces one
    that died) takes no request before it can answer it."""
    await asyncio.to_thread(invisible_characters)
    await asyncio.to_thread(every_language)  # so that the pipeline is built a moment after the engine is READY
    await state.engine.prepare()


async def start(state: State) -> None:
    """Wait for the engine (the models load in the background: /health answers meanwhile), then take requests."""
    await state.engine.start()
    state.pipeline = await asyncio.to_thread(pipeline_for, state.engine, state.settings, state.metrics)
    state.serving.set()
    log.info("serving %s", state.pipeline.pairs.names)


def exit_on_failure(task: asyncio.Task) -> None:
    """Nothing was accepted yet: exit, so that a supervisor restarts us or a person sees why."""
    if not task.cancelled() and (error := task.exception()) is not None:
        log.critical("cannot serve the models of %s", task.get_name(), exc_info=error)
        os._exit(3)


def create_app(
    settings: Settings,
    engine: EngineClient,
    metrics: Metrics | None = None,
    main_pid: int | None = None,
    shared: Path | None = None,
) -> FastAPI:
    """The app in front of `engine`. `metrics`: the engine's too when it runs in this process. When this is one of
    the service's HTTP workers: `main_pid` is the service's main process, `shared` the folder all its workers share."""
    metrics = metrics or Metrics()
    if shared is None:
        own = tempfile.TemporaryDirectory(prefix="translator-")  # removed at exit
        shared = Path(own.name)
    state = State(settings, metrics, engine, TranslatedFiles(shared / "files"), GlossaryFolder(shared / "glossaries"),
                  JobFolder(shared / "documents"))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await prepare(state)
        loading = asyncio.create_task(start(state), name=str(settings.model_dir))
        loading.add_done_callback(exit_on_failure)
        yield
        if not loading.done():
            loading.cancel()
        else:
            await state.drain()

    app = FastAPI(
        title="Translator",
        description="Transformer translation on ONNX Runtime, with LibreTranslate's API",
        lifespan=lifespan,
        docs_url=None,  # routes/pages.py serves /docs with its assets
        redoc_url=None,
    )
    app.state.translator_state = state
    for routes in (translate, deepl, deepl_documents, files, languages, operations, pages):
        app.include_router(routes.router)
    errors.install(app)
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes, file_limit=settings.max_file_bytes)
    if settings.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_origins, allow_methods=["GET", "POST"],
                           allow_headers=["*"], max_age=600)
    app.add_middleware(Observe, metrics=metrics, instance=instance(main_pid))
    app.add_middleware(CloseWhenStopping, stopping=state.stopping)
    return app

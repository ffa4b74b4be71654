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
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from service.metrics import Metrics
from service.protocol import EngineClient
from service.settings import Settings
from service.store import Store, StoreUnavailable
from service.worker import errors
from service.worker.access import Access
from service.worker.deepl.documents import DocumentJobs
from service.worker.deepl.glossaries import Glossaries
from service.worker.deepl.runner import DocumentRunner
from service.worker.detect import LanguageDetector, every_language
from service.worker.files import TranslatedFiles
from service.worker.middleware import BodyLimit, CloseWhenStopping, Observe
from service.worker.pairs import Pairs
from service.worker.params import invisible_characters
from service.worker.pipeline import Pipeline
from service.worker.routes import deepl, deepl_documents, files, keys, languages, operations, pages, translate
from service.worker.state import State

log = logging.getLogger(__name__)


def instance(pid: int | None = None) -> str:
    """Which service answered (the X-Translator-Instance header): host:pid of its main process."""
    return f"{socket.gethostname()}:{pid or os.getpid()}"


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
    if state.settings.limits_on:
        await open_store(state.store)


async def open_store(store: Store) -> None:
    """Migrate the store and import TRANSLATOR_API_KEYS now rather than at the first request; if it cannot be
    reached, the service starts all the same: what needs no store is served, the rest answers 503 until it is."""
    try:
        await asyncio.to_thread(store.ready)
    except StoreUnavailable as error:
        log.error("the store is unavailable (%s): requests that need it get 503 until it answers", error)


async def start(state: State) -> None:
    """Wait for the engine (the models load in the background: /health answers meanwhile), then take requests."""
    await state.engine.start()
    state.pipeline = await asyncio.to_thread(pipeline_for, state.engine, state.settings, state.metrics)
    state.serving.set()
    log.info("serving %s", state.pipeline.pairs.names)
    state.documents.begin(state.pipeline)


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
) -> FastAPI:
    """The app in front of `engine`. `metrics`: the engine's too when it runs in this process. When this is one of
    the service's HTTP workers: `main_pid` is the service's main process."""
    metrics = metrics or Metrics()
    store = Store.of(settings)
    files_kept = TranslatedFiles(settings.data_dir / "files", store, settings.file_retention_s,
                                 settings.file_budget_bytes)
    access, glossaries = Access(settings, store, metrics), Glossaries(store)
    jobs = DocumentJobs(settings.data_dir / "documents", store, settings.document_lease_s, settings.file_retention_s)
    documents = DocumentRunner(jobs, glossaries, access, settings.document_lease_s)
    state = State(settings, metrics, engine, store, access, files_kept, glossaries, documents)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await prepare(state)
        loading = asyncio.create_task(start(state), name=str(settings.model_dir))
        loading.add_done_callback(exit_on_failure)
        yield
        if not loading.done():
            loading.cancel()
        else:
            await documents.stop()  # before the drain: their work in the engine is let go, not waited for
            await state.drain()
        await asyncio.to_thread(state.access.close)
        store.close()

    app = FastAPI(
        title="Translator",
        description="Transformer translation on ONNX Runtime, with LibreTranslate's API",
        lifespan=lifespan,
        docs_url=None,  # routes/pages.py serves /docs with its assets
        redoc_url=None,
        redirect_slashes=False,  # a redirect would be built from the client's Host header: 404 instead
        telemetry={"tracing": False, "metrics": False, "logs": False},  # ours is Prometheus' (service.metrics)
    )
    app.state.translator_state = state
    for routes in (translate, deepl, deepl_documents, files, keys, languages, operations, pages):
        app.include_router(routes.router)
    errors.install(app)
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes, file_limit=settings.max_file_bytes)
    if settings.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_origins, allow_methods=["GET", "POST"],
                           allow_headers=["*"], max_age=600)
    app.add_middleware(Observe, metrics=metrics, instance=instance(main_pid))
    app.add_middleware(CloseWhenStopping, stopping=state.stopping)
    if settings.trusted_proxies:
        app.add_middleware(ProxyHeadersMiddleware, trusted_hosts=settings.trusted_proxies)
    return app

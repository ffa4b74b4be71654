"""The FastAPI app: LibreTranslate's API (/translate, /detect, /languages, /translate_file, /frontend/settings),
health, readiness and metrics, the page at / and the docs (service.pages).

    app = create_app(Settings())                         # the models in this process (service.engine)
    app = create_app(settings, RemoteEngine(address, lifeline))  # an HTTP worker of `python -m service`

The engine starts in the background, so /health answers at once and /ready turns 200 when every model is warm.
A request is read (service.params), then translated by the pipeline (service.pipeline); a client that hangs up
abandons its work. On SIGTERM (State.drain), accepted work finishes up to drain_seconds and what is left is
answered 503; so is everything once the engine is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import tempfile
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Any, TypeVar
from urllib.parse import quote

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from core.folder import FolderConfig, model_folders
from service import pages
from service.client import EngineClient, EngineGone, Pairs, QueueFull, ShuttingDown
from service.detect import LanguageDetector
from service.files import TranslatedFiles
from service.metrics import Metrics
from service.middleware import CLIENT_GONE, BodyLimit, Observe
from service.params import invisible_characters, read_params, upload
from service.pipeline import RETRY_AFTER, Pipeline
from service.schemas import ApiError, DetectRequest, FileRequest, TranslateRequest
from service.settings import Settings

log = logging.getLogger(__name__)


def instance(pid: int | None = None) -> str:
    """Which service answered (the X-Translator-Instance header): host:pid of its main process."""
    return f"{socket.gethostname()}:{pid or os.getpid()}"


LANGUAGE_NAMES = {
    "en": "English", "de": "German", "fr": "French", "cs": "Czech", "es": "Spanish", "it": "Italian",
    "nl": "Dutch", "pt": "Portuguese", "pl": "Polish", "ru": "Russian", "zh": "Chinese", "ja": "Japanese",
}
FILE_FORMATS = {".txt": "text", ".html": "html", ".htm": "html"}
READY_GRACE_S = 1.0  # how long a request waits for this worker to hear that the engine is ready
Model = TypeVar("Model", bound=BaseModel)


@dataclass
class State:
    settings: Settings
    metrics: Metrics
    engine: EngineClient
    files: TranslatedFiles
    pipeline: Pipeline | None = None
    started: bool = False
    became_ready: asyncio.Event = field(default_factory=asyncio.Event)
    draining: asyncio.Task | None = None

    @property
    def ready(self) -> bool:
        return self.started and self.engine.ready and self.draining is None

    def drain(self) -> asyncio.Task:
        """Stop taking work; accepted work finishes up to drain_seconds, then what is left is answered 503."""
        if self.draining is None:
            self.draining = asyncio.create_task(self.engine.stop(self.settings.drain_seconds))
        return self.draining


def language_detector(settings: Settings) -> LanguageDetector:
    """Everything slow on the HTTP side, done while the engine loads: the language detector, the tables."""
    invisible_characters()
    pairs = [pair for folder in model_folders(settings.model_dir) for pair in FolderConfig.load(folder).pairs]
    return LanguageDetector(sorted({language for pair in pairs for language in pair}))


async def prepare(state: State) -> LanguageDetector:
    """What needs no running engine, done before the port is served: so a worker that starts late (or replaces one
    that died) takes no request before it can answer it."""
    detector = await asyncio.to_thread(language_detector, state.settings)
    await state.engine.prepare()
    return detector


async def start(state: State, detector: LanguageDetector) -> None:
    """Wait for the engine (the models load in the background: /health answers meanwhile), then take requests."""
    await state.engine.start()
    state.pipeline = Pipeline(state.engine, detector, state.settings)
    state.started = True
    state.became_ready.set()
    log.info("serving %s", Pairs(state.engine.pairs).names)


def exit_on_failure(task: asyncio.Task) -> None:
    """Nothing was accepted yet: exit, so that a supervisor restarts us or a person sees why."""
    if not task.cancelled() and (error := task.exception()) is not None:
        log.critical("cannot serve the models of %s", task.get_name(), exc_info=error)
        os._exit(3)


def create_app(
    settings: Settings | None = None,
    engine: EngineClient | None = None,
    main_pid: int | None = None,
    shared: Path | None = None,
) -> FastAPI:
    """The app; without `engine`, the models run in this process (service.engine.Engine). When this is one of the
    service's HTTP workers: `main_pid` is the service's main process, `shared` the folder all its workers share."""
    settings = settings or Settings()
    metrics = Metrics()
    if engine is None:
        from service.engine import Engine  # here: ONNX Runtime only where the models run, not in HTTP workers

        engine = Engine(settings, metrics)
    if shared is None:
        own = tempfile.TemporaryDirectory(prefix="translator-")  # removed at exit
        shared = Path(own.name)
    state = State(settings, metrics, engine, TranslatedFiles(shared / "files"))

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        preparing = asyncio.create_task(prepare(state), name=str(settings.model_dir))
        preparing.add_done_callback(exit_on_failure)
        loading = asyncio.create_task(start(state, await preparing), name=str(settings.model_dir))
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
        docs_url=None,  # service.pages serves /docs with its assets
        redoc_url=None,
    )
    app.state.translator_state = state
    app.include_router(api_router(state))
    app.include_router(pages.router())
    install_error_handlers(app)
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)
    if settings.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_origins, allow_methods=["GET", "POST"],
                           allow_headers=["*"], max_age=600)
    app.add_middleware(Observe, metrics=metrics, instance=instance(main_pid))
    return app


def install_error_handlers(app: FastAPI) -> None:
    """Every error is LibreTranslate's {"error": message}."""

    @app.exception_handler(ApiError)
    async def api_error(request: Request, error: ApiError) -> JSONResponse:
        return JSONResponse({"error": error.message}, status_code=error.status, headers=error.headers)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        return JSONResponse({"error": str(error.detail)}, status_code=error.status_code, headers=error.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        return JSONResponse({"error": describe(error.errors())}, status_code=400)

    @app.exception_handler(ClientDisconnect)
    async def client_gone(request: Request, error: ClientDisconnect) -> JSONResponse:
        """The client hung up while sending its body: nobody reads the answer, the metrics count a 499."""
        return JSONResponse({"error": "Client closed the request"}, status_code=CLIENT_GONE)

    @app.exception_handler(Exception)
    async def fault(request: Request, error: Exception) -> JSONResponse:
        log.exception("unhandled error on %s", request.url.path)
        return JSONResponse({"error": "internal error"}, status_code=500)


def describe(errors: list[dict]) -> str:
    """'Invalid request: q: Input should be a valid string; ...' from pydantic's errors."""
    parts = [f"{'.'.join(str(p) for p in e['loc'] if p != 'body') or 'body'}: {e['msg']}" for e in errors]
    return "Invalid request: " + "; ".join(parts)


def validated(model: type[Model], params: dict[str, Any]) -> Model:
    try:
        return model.model_validate(params)
    except ValidationError as error:
        raise ApiError(400, describe(error.errors())) from None


async def unless_disconnected(request: Request, work: Any) -> Any:
    """Await `work`; if the client hangs up first, cancel it (its sentences leave the queue and the running batch)
    and answer 499, which nobody receives but the metrics count."""
    task = asyncio.ensure_future(work)

    async def disconnected() -> None:
        while not await request.is_disconnected():
            await asyncio.sleep(0.05)

    watch = asyncio.create_task(disconnected())
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
    if not task.done():
        task.cancel()
        raise ApiError(CLIENT_GONE, "Client closed the request")
    try:
        return task.result()
    except QueueFull:
        raise ApiError(503, "Server busy: the queue is full", RETRY_AFTER) from None
    except ShuttingDown:
        raise ApiError(503, "Server shutting down", RETRY_AFTER) from None
    except EngineGone:
        raise ApiError(503, "The engine is not running; the service is restarting", RETRY_AFTER) from None


def body_schema(model: type[BaseModel]) -> dict:
    """OpenAPI's description of a body read by service.params (JSON or form), which FastAPI cannot infer."""
    schema = {"schema": model.model_json_schema()}
    content = {"application/json": schema, "application/x-www-form-urlencoded": schema}
    return {"requestBody": {"content": content, "required": True}}


def api_router(state: State) -> APIRouter:
    api = APIRouter()

    async def pipeline(grace: float = READY_GRACE_S) -> Pipeline:
        """The pipeline, once the engine is ready. The engine's "ready" reaches every HTTP worker at once, give or
        take a moment: a request waits up to `grace` seconds for it, so that the worker that answered /ready first
        is not the only one that translates."""
        if state.draining:
            raise ApiError(503, "Server shutting down", RETRY_AFTER)
        if not state.started and grace > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(state.became_ready.wait(), grace)
        if not state.started:
            raise ApiError(503, "Models are loading", RETRY_AFTER)
        if not state.engine.ready:
            raise ApiError(503, "The engine is not running; the service is restarting", RETRY_AFTER)
        return state.pipeline

    async def params(request: Request) -> dict[str, Any]:
        return await read_params(request, state.settings.api_keys)

    @api.post("/translate", openapi_extra=body_schema(TranslateRequest))
    async def translate(request: Request) -> JSONResponse:
        """Translate q from source to target (LibreTranslate's API); parameters as JSON, form or query string."""
        p = await pipeline()
        req = validated(TranslateRequest, await params(request))
        return JSONResponse(await unless_disconnected(request, p.translate(req)))

    @api.post("/detect", openapi_extra=body_schema(DetectRequest))
    async def detect(request: Request) -> list[dict]:
        """The languages served, most likely first, with confidences in percent (LibreTranslate's /detect)."""
        p = await pipeline()
        req = validated(DetectRequest, await params(request))
        return [{"confidence": round(confidence, 1), "language": code} for code, confidence in p.detect(req.q)]

    @api.post("/translate_file")
    async def translate_file(request: Request) -> dict:
        """Translate a .txt or .html file (multipart form: file, source, target); answers its download URL."""
        p = await pipeline()
        fields = await params(request)
        req, file = validated(FileRequest, fields), upload(fields, "file")
        name = PurePath(file.filename or "file.txt").name
        if (kind := FILE_FORMATS.get(PurePath(name).suffix.lower())) is None:
            raise ApiError(400, f"Invalid request: {name}: supported files are {', '.join(FILE_FORMATS)}")
        try:
            text = (await file.read()).decode("utf-8")
        except UnicodeDecodeError:
            raise ApiError(400, f"Invalid request: {name} is not UTF-8 text") from None
        translate_req = validated(TranslateRequest, {"q": text, "source": req.source, "target": req.target,
                                                     "format": kind})
        translated = (await unless_disconnected(request, p.translate(translate_req)))["translatedText"]
        token = state.files.put(name, translated.encode("utf-8"))
        return {"translatedFileUrl": f"{request.base_url}download_file/{token}/{quote(name)}"}

    @api.get("/download_file/{token}/{name}", name="download_file")
    async def download_file(token: str, name: str) -> Response:
        """A file translated by /translate_file (the last 256 are kept)."""
        if (kept := state.files.get(token, name)) is None:
            raise ApiError(404, "No such file: translated files are kept for the last 256 translations")
        media = "text/html" if FILE_FORMATS[PurePath(name).suffix.lower()] == "html" else "text/plain"
        return Response(kept, media_type=f"{media}; charset=utf-8",
                        headers={"Content-Disposition": f'attachment; filename="{name}"'})

    @api.post("/suggest")
    async def suggest() -> None:
        """Suggestions of better translations are not collected by this server (LibreTranslate's answer)."""
        raise ApiError(403, "Suggestions are disabled on this server.")

    @api.get("/languages")
    async def languages() -> list[dict]:
        """Every language served, with the languages it translates into (LibreTranslate's shape)."""
        pairs = (await pipeline()).pairs
        return [{"code": code, "name": LANGUAGE_NAMES.get(code, code), "targets": pairs.targets_of(code)}
                for code in pairs.languages]

    @api.get("/frontend/settings")
    async def frontend_settings() -> dict:
        """What LibreTranslate's front end asks a server for."""
        pairs, s = (await pipeline()).pairs, state.settings
        first = next(iter(pairs.pairs.values()))
        return {
            "charLimit": s.max_chars,
            "frontendTimeout": 500,
            "apiKeys": bool(s.api_keys),
            "keyRequired": bool(s.api_keys),
            "suggestions": False,
            "filesTranslation": True,
            "supportedFilesFormat": list(FILE_FORMATS),
            "language": {
                "source": {"code": first.source, "name": LANGUAGE_NAMES.get(first.source, first.source)},
                "target": {"code": first.target, "name": LANGUAGE_NAMES.get(first.target, first.target)},
            },
        }

    @api.get("/health")
    async def health() -> dict:
        """The process is alive."""
        return {"status": "ok"}

    @api.get("/ready")
    async def ready() -> dict:
        """Every model is loaded and warm, and the server is not shutting down."""
        pairs = (await pipeline(grace=0)).pairs
        return {
            "status": "ready",
            "models": [{"model": pair.name, "provider": pair.provider, "precision": pair.precision}
                       for pair in pairs.pairs.values()],
        }

    @api.get("/metrics")
    async def metrics() -> Response:
        """Prometheus metrics."""
        return Response(state.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    return api

"""The FastAPI app: LibreTranslate-compatible /translate and /languages, health, readiness and metrics."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from service.batcher import Batcher, QueueFull, ShuttingDown
from service.metrics import Metrics
from service.schemas import ApiError, TranslateRequest
from service.search import SearchOptions
from service.settings import Settings
from service.text import join_translations, sentences_of, split_sentences
from service.translator import Translator

log = logging.getLogger(__name__)
INSTANCE = f"{socket.gethostname()}:{os.getpid()}"
LANGUAGE_NAMES = {"en": "English", "de": "German", "fr": "French", "cs": "Czech"}
RETRY_AFTER_SECONDS = "1"


@dataclass
class State:
    settings: Settings
    metrics: Metrics
    translator: Translator | None = None
    batcher: Batcher | None = None
    ready: bool = False


def load(state: State) -> Translator:
    """Load the model and run it once, greedy and with beams, so the first request is not the slow one."""
    s = state.settings
    translator = Translator(s.model_dir, s.precision, s.provider, s.threads, s.optimization, s.spin_threads)
    translator.translate(["Warming up."], SearchOptions(beam_size=1))
    translator.translate(["Warming up."], SearchOptions(beam_size=2))
    return translator


async def start(state: State) -> None:
    try:
        state.translator = await asyncio.to_thread(load, state)
    except Exception:  # nothing was accepted yet: exit, so that a supervisor restarts us or a person sees why
        log.critical("cannot load the model from %s", state.settings.model_dir, exc_info=True)
        os._exit(3)
    t, s = state.translator, state.settings
    state.metrics.model_info.labels(t.name, t.provider, s.precision).set(1)
    state.batcher = Batcher(
        t, state.metrics, s.max_batch_sentences, s.max_batch_tokens, s.max_wait_ms, s.max_queue
    )
    state.batcher.start()
    state.ready = True
    log.info("model %s ready on %s (%s)", t.name, t.provider, s.precision)


def create_app(settings: Settings | None = None) -> FastAPI:
    state = State(settings or Settings(), Metrics())

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        loading = asyncio.create_task(start(state))  # /health answers while the model loads
        yield
        state.ready = False
        if not loading.done():
            loading.cancel()
        elif state.batcher:
            await state.batcher.stop()  # finish what was accepted

    app = FastAPI(title="Translator", description="Transformer translation on ONNX Runtime", lifespan=lifespan)
    app.state.translator_state = state
    app.include_router(router(state))
    install_error_handlers(app)

    @app.middleware("http")
    async def observe(request: Request, call_next):
        started, status = time.perf_counter(), 500
        try:
            response = await call_next(request)
            status = response.status_code
            response.headers["X-Translator-Instance"] = INSTANCE
            return response
        finally:
            if request.url.path == "/translate":
                state.metrics.requests.labels(str(status)).inc()
                state.metrics.latency.observe(time.perf_counter() - started)

    return app


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(request: Request, error: ApiError) -> JSONResponse:
        return JSONResponse({"error": error.message}, status_code=error.status, headers=error.headers)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        return JSONResponse({"error": str(error.detail)}, status_code=error.status_code, headers=error.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        return JSONResponse({"error": describe(error.errors())}, status_code=400)

    @app.exception_handler(Exception)
    async def fault(request: Request, error: Exception) -> JSONResponse:
        log.exception("unhandled error on %s", request.url.path)
        return JSONResponse({"error": "internal error"}, status_code=500)


def describe(errors: list[dict]) -> str:
    """'Invalid request: q: Input should be a valid string; ...' from pydantic's errors."""
    parts = [f"{'.'.join(str(p) for p in e['loc'] if p != 'body') or 'body'}: {e['msg']}" for e in errors]
    return "Invalid request: " + "; ".join(parts)


async def read_request(request: Request) -> TranslateRequest:
    """The request from a JSON body or form data (LibreTranslate's clients send either)."""
    if request.headers.get("content-type", "").startswith("application/json"):
        try:
            body = json.loads(await request.body())
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ApiError(400, f"Invalid request: malformed JSON ({error})") from None
        if not isinstance(body, dict):
            raise ApiError(400, "Invalid request: the JSON body must be an object")
    else:
        form = await request.form()
        body = {key: form.get(key) for key in form.keys()}
        if len(qs := form.getlist("q")) > 1:
            body["q"] = qs
    try:
        return TranslateRequest.model_validate(body)
    except ValidationError as error:
        raise ApiError(400, describe(error.errors())) from None


def check_request(req: TranslateRequest, state: State) -> list[str]:
    """Every rule a request must meet before it is queued; returns its texts."""
    s, t = state.settings, state.translator
    if s.api_keys and req.api_key not in s.api_keys:
        raise ApiError(403, "Invalid API key")
    texts = [req.q] if isinstance(req.q, str) else req.q
    if not texts or any(not text.strip() for text in texts):
        raise ApiError(400, "Invalid request: q must hold non-empty text")
    if (chars := sum(len(text) for text in texts)) > s.max_chars:
        raise ApiError(400, f"Invalid request: {chars} characters, the limit is {s.max_chars}")
    src, tgt = t.config["source_language"], t.config["target_language"]
    if req.source not in ("auto", src) or req.target != tgt:
        raise ApiError(400, f"{req.source}->{req.target} is not supported; this server translates {src}->{tgt}")
    if req.format != "text":
        raise ApiError(400, "format 'html' is not supported; send 'text'")
    if req.alternatives > s.max_alternatives:
        raise ApiError(400, f"Invalid request: at most {s.max_alternatives} alternatives")
    if max(req.beam_size or s.beam_size, req.alternatives + 1) > s.max_beam_size:
        raise ApiError(400, f"Invalid request: beam_size is at most {s.max_beam_size}")
    return texts


def search_options(req: TranslateRequest, settings: Settings) -> SearchOptions:
    return SearchOptions(
        beam_size=max(req.beam_size or settings.beam_size, req.alternatives + 1),
        length_penalty=settings.length_penalty,
        n_best=req.alternatives + 1,
        max_length_ratio=settings.max_length_ratio,
        max_length=req.max_length or SearchOptions.max_length,
    )


async def translate_texts(req: TranslateRequest, state: State) -> dict:
    s, t = state.settings, state.translator
    texts = check_request(req, state)
    layouts = [split_sentences(text) for text in texts]
    sentences = [sentence for layout in layouts for sentence in sentences_of(layout)]
    if len(sentences) > (limit := min(s.max_sentences, s.max_queue)):  # more than the queue holds: never fits
        raise ApiError(400, f"Invalid request: {len(sentences)} sentences, the limit is {limit}")
    ids = [tokens + [t.tokenizer.eos_id] for tokens in t.tokenizer.encode(sentences)]
    if (longest := max(len(x) for x in ids)) > s.max_sentence_tokens:
        raise ApiError(400, f"Invalid request: a sentence of {longest} tokens, the limit is {s.max_sentence_tokens}")
    try:
        hyps = await state.batcher.submit(ids, search_options(req, s))
    except QueueFull:
        raise ApiError(503, "Server busy: the queue is full", {"Retry-After": RETRY_AFTER_SECONDS}) from None
    except ShuttingDown:
        raise ApiError(503, "Server shutting down", {"Retry-After": RETRY_AFTER_SECONDS}) from None
    # n-best texts of each sentence; a sentence with fewer hypotheses repeats its last one
    n = req.alternatives + 1
    nbest = [t.tokenizer.decode([h[min(k, len(h) - 1)].tokens for h in hyps]) for k in range(n)]
    results, offset = [], 0
    for layout in layouts:
        count = len(sentences_of(layout))
        results.append([join_translations(layout, nbest[k][offset : offset + count]) for k in range(n)])
        offset += count
    single = isinstance(req.q, str)
    body: dict = {"translatedText": results[0][0] if single else [r[0] for r in results]}
    if req.alternatives:
        body["alternatives"] = results[0][1:] if single else [r[1:] for r in results]
    if req.source == "auto":  # one source language: nothing to detect
        detected = {"confidence": 100.0, "language": t.config["source_language"]}
        body["detectedLanguage"] = detected if single else [detected] * len(texts)
    return body


def router(state: State) -> APIRouter:
    api = APIRouter()

    def require_ready() -> None:
        if not state.ready:
            raise ApiError(503, "Model is loading", {"Retry-After": RETRY_AFTER_SECONDS})

    @api.post(
        "/translate",
        openapi_extra={
            "requestBody": {
                "content": {
                    "application/json": {"schema": TranslateRequest.model_json_schema()},
                    "application/x-www-form-urlencoded": {"schema": TranslateRequest.model_json_schema()},
                },
                "required": True,
            }
        },
    )
    async def translate(request: Request) -> JSONResponse:
        """Translate q from source to target (LibreTranslate's API)."""
        require_ready()
        return JSONResponse(await translate_texts(await read_request(request), state))

    @api.get("/languages")
    async def languages() -> list[dict]:
        """The languages this server translates, in LibreTranslate's shape."""
        require_ready()
        src, tgt = state.translator.config["source_language"], state.translator.config["target_language"]
        return [
            {"code": src, "name": LANGUAGE_NAMES.get(src, src), "targets": [tgt]},
            {"code": tgt, "name": LANGUAGE_NAMES.get(tgt, tgt), "targets": []},
        ]

    @api.get("/health")
    async def health() -> dict:
        """The process is alive."""
        return {"status": "ok"}

    @api.get("/ready")
    async def ready() -> dict:
        """The model is loaded and warm."""
        require_ready()
        t = state.translator
        return {"status": "ready", "model": t.name, "provider": t.provider, "precision": t.precision}

    @api.get("/metrics")
    async def metrics() -> Response:
        """Prometheus metrics."""
        return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return api

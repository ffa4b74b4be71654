"""Every error a request can meet, and the one place where each becomes an HTTP answer.

The pipeline and the request reading raise domain errors (InvalidRequest, Forbidden, ...), the engine its
EngineErrors (service.protocol); install() maps each to its status, LibreTranslate's body {"error": message}, and
Retry-After where trying again later helps. DeepL's API (/v2/, /v3/) gets its own body, {"message": message},
its 429 Too Many Requests (with Retry-After) where the queue is full, and an error's `deepl_status` where it has
one (456 for a key's character quota).
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from service.protocol import EngineError, EngineFault, EngineGone, EngineStalled, Phase, QueueFull, ShuttingDown
from service.store import StoreUnavailable

log = logging.getLogger(__name__)

CLIENT_GONE = 499  # nginx's "client closed request": what a request whose client hung up is counted as
RETRY_AFTER = {"Retry-After": "1"}
DEEPL_PATHS = ("/v2/", "/v3/")


class RequestError(Exception):
    """A request that cannot be served as it is; `status` is its HTTP answer."""

    status = 400
    deepl_status: int | None = None  # DeepL's API's answer where it differs from `status`
    headers: dict[str, str] | None = None  # of its answer

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class InvalidRequest(RequestError):
    """Unreadable, malformed or over a limit: LibreTranslate's 400 "Invalid request: ..."."""

    def __init__(self, problem: str):
        super().__init__(f"Invalid request: {problem}")


class Unsupported(RequestError):
    """A language or pair that is not served (400, as LibreTranslate words it)."""


class Forbidden(RequestError):
    status = 403


class NotFound(RequestError):
    status = 404


class TooLarge(RequestError):
    status = 413


class Unavailable(RequestError):
    """Not now: the models are loading, the engine is not answering, the server is shutting down (503 with
    Retry-After)."""

    status = 503


class NotServing(Unavailable):
    """This worker does not take requests in its phase (service.protocol.Phase)."""

    MESSAGES = {
        Phase.LOADING: "Models are loading",
        Phase.STALLED: "Server busy: the engine is not answering",
        Phase.DRAINING: "Server shutting down",
        Phase.GONE: "The engine is not running; the service is restarting",
    }

    def __init__(self, phase: Phase):
        super().__init__(self.MESSAGES[phase])


class ClientGone(RequestError):
    """The client hung up: nobody reads the answer, the metrics count it."""

    status = CLIENT_GONE

    def __init__(self) -> None:
        super().__init__("Client closed the request")


ENGINE_ANSWERS: dict[type[EngineError], tuple[int, str]] = {
    QueueFull: (503, "Server busy: the queue is full"),
    ShuttingDown: (503, "Server shutting down"),
    EngineStalled: (503, "Server busy: the engine did not answer in time"),
    EngineGone: (503, "The engine is not running; the service is restarting"),
    EngineFault: (500, "internal error"),
}


def error(status: int, message: str, path: str = "", headers: dict[str, str] | None = None) -> JSONResponse:
    """The error body of the API that `path` belongs to (LibreTranslate's, or DeepL's), with `headers`; Retry-After
    on a 503 or 429 that does not name its own."""
    body = {"message": message} if path.startswith(DEEPL_PATHS) else {"error": message}
    if status in (429, 503):
        headers = {**RETRY_AFTER, **(headers or {})}
    return JSONResponse(body, status_code=status, headers=headers)


NOT_A_NUMBER = {"int_parsing", "int_type", "int_from_float"}


def describe(errors: list[dict]) -> str:
    """What is wrong, from pydantic's errors: LibreTranslate's words for a missing parameter or one that is not a
    number ("missing q parameter", "alternatives parameter is not a number"), else 'q: Input should be ...; ...'."""
    names = [".".join(str(p) for p in e["loc"] if p != "body") or "body" for e in errors]
    for name, e in zip(names, errors):
        if e["type"] == "missing":
            return f"missing {name} parameter"
    for name, e in zip(names, errors):
        if e["type"] in NOT_A_NUMBER:
            return f"{name} parameter is not a number"
    return "; ".join(f"{name}: {e['msg']}" for name, e in zip(names, errors))


def install(app: FastAPI) -> None:
    """The handlers: each error above, FastAPI's own, a client that hung up while sending, and any other fault."""

    @app.exception_handler(RequestError)
    async def request_error(request: Request, exc: RequestError) -> JSONResponse:
        deepl = request.url.path.startswith(DEEPL_PATHS)
        return error(exc.deepl_status if deepl and exc.deepl_status else exc.status, exc.message, request.url.path,
                     exc.headers)

    @app.exception_handler(StoreUnavailable)
    async def store_unavailable(request: Request, exc: StoreUnavailable) -> JSONResponse:
        log.warning("the store is unavailable on %s: %s", request.url.path, exc)
        return error(503, "The store of keys, limits and files is unavailable", request.url.path)

    @app.exception_handler(EngineError)
    async def engine_error(request: Request, exc: EngineError) -> JSONResponse:
        status, message = ENGINE_ANSWERS[type(exc)]
        if status == 500:
            log.error("the engine failed a request on %s: %s", request.url.path, exc)
        if isinstance(exc, QueueFull) and request.url.path.startswith(DEEPL_PATHS):
            status = 429  # DeepL's "too many requests": its clients wait and try again
        return error(status, message, request.url.path)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        response = error(exc.status_code, str(exc.detail), request.url.path)
        response.headers.update(exc.headers or {})
        return response

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return error(400, f"Invalid request: {describe(exc.errors())}", request.url.path)

    @app.exception_handler(ClientDisconnect)
    async def client_disconnected(request: Request, exc: ClientDisconnect) -> JSONResponse:
        return error(CLIENT_GONE, ClientGone().message, request.url.path)

    @app.exception_handler(Exception)
    async def fault(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s", request.url.path)
        return error(500, "internal error", request.url.path)

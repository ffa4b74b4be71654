"""ASGI middleware of the HTTP layer: the body-size limit, the request metrics with the instance header, and
Connection: close while the worker stops.

Plain ASGI rather than Starlette's BaseHTTPMiddleware, so that an endpoint still sees the client's disconnect.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.metrics import Metrics
from service.worker.errors import TooLarge, error
from service.worker.params import MAX_FIELDS


class BodyLimit:
    """What is too large to read is refused unread, so before its API key is checked: a body over `limit` bytes
    (`file_limit` for /translate_file) gets 413, at once when its Content-Length says so, else as soon as the bytes
    received pass the limit (the endpoint reading it gets TooLarge); a query string of more than MAX_FIELDS
    parameters gets 400 (parsing tens of thousands would hold the event loop)."""

    def __init__(self, app: ASGIApp, limit: int, file_limit: int):
        self.app = app
        self.limits = {"/translate_file": file_limit, "/v2/document": file_limit}  # documents: theirs; else `limit`
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if scope["query_string"].count(b"&") >= MAX_FIELDS:
            message = f"Invalid request: more than {MAX_FIELDS} query parameters"
            return await error(400, message, scope["path"])(scope, receive, send)
        limit = self.limits.get(scope["path"], self.limit)
        declared = dict(scope["headers"]).get(b"content-length", b"0")
        if not declared.isdigit() or int(declared) > limit:
            status, message = (400, "Invalid Content-Length") if not declared.isdigit() else (413, too_large(limit))
            return await error(status, message, scope["path"])(scope, receive, send)
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > limit:
                raise TooLarge(too_large(limit))
            return message

        await self.app(scope, limited_receive, send)


def too_large(limit: int) -> str:
    return f"Request body too large: the limit is {limit} bytes"


def observe_pair(request: Request, pair: str) -> None:
    """Name the language pair that a request's metrics are labelled with (Observe): a served pair's, or "" for none."""
    request.state.pair = pair


class Observe:
    """Counts the API's requests by status and language pair (observe_pair) with their latency, and names the
    answering process in a header."""

    OBSERVED = ("/translate", "/detect", "/translate_file")

    def __init__(self, app: ASGIApp, metrics: Metrics, instance: str):
        self.app = app
        self.metrics = metrics
        self.header = (b"x-translator-instance", instance.encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started, status = time.perf_counter(), 500
        state = scope.setdefault("state", {})  # request.state: where observe_pair names the pair

        async def send_with_header(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", []), self.header]
            await send(message)

        try:
            await self.app(scope, receive, send_with_header)
        finally:
            if scope["path"] in self.OBSERVED:
                pair = state.get("pair", "")
                self.metrics.requests.labels(str(status), pair).inc()
                self.metrics.latency.labels(pair).observe(time.perf_counter() - started)


class CloseWhenStopping:
    """While `stopping()` (the worker drains, or its engine is gone), every answer says Connection: close, so that
    its client sends the next request on a new connection (to a worker that serves) rather than on this one, which
    is about to close."""

    def __init__(self, app: ASGIApp, stopping: Callable[[], bool]):
        self.app = app
        self.stopping = stopping

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def send_closing(message: Message) -> None:
            if message["type"] == "http.response.start" and self.stopping():
                message["headers"] = [*message.get("headers", []), (b"connection", b"close")]
            await send(message)

        await self.app(scope, receive, send_closing)

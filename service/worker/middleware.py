"""ASGI middleware of the HTTP layer: the body-size limit, and the request metrics with the instance header.

Plain ASGI rather than Starlette's BaseHTTPMiddleware, so that an endpoint still sees the client's disconnect.
"""

from __future__ import annotations

import time

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.metrics import Metrics
from service.worker.errors import TooLarge


class BodyLimit:
    """A body over `limit` bytes gets 413 before it is read: at once when its Content-Length says so, else as soon as
    the bytes received pass the limit (the endpoint reading it gets TooLarge)."""

    def __init__(self, app: ASGIApp, limit: int):
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length", b"0")
        if not declared.isdigit() or int(declared) > self.limit:
            status, message = (400, "Invalid Content-Length") if not declared.isdigit() else (413, self.too_large())
            return await JSONResponse({"error": message}, status)(scope, receive, send)
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.limit:
                raise TooLarge(self.too_large())
            return message

        await self.app(scope, limited_receive, send)

    def too_large(self) -> str:
        return f"Request body too large: the limit is {self.limit} bytes"


class Observe:
    """Counts the API's requests by status with their latency, and names the answering process in a header."""

    OBSERVED = ("/translate", "/detect", "/translate_file")

    def __init__(self, app: ASGIApp, metrics: Metrics, instance: str):
        self.app = app
        self.metrics = metrics
        self.header = (b"x-translator-instance", instance.encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started, status = time.perf_counter(), 500

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
                self.metrics.requests.labels(str(status)).inc()
                self.metrics.latency.observe(time.perf_counter() - started)

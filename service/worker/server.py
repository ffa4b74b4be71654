"""uvicorn's server, with the limits on connections that uvicorn lacks, draining on SIGTERM.

uvicorn's HTTP implementations: httptools (llhttp, what uvicorn[standard] runs) reads a request head of any size,
with any number of header fields (httptools joins a field's pieces in memory: one 64 MB field grew a worker by
76 MB), and gives a connection all the time it wants before its first request, for its head and for its body; h11
bounds the head (16 KiB by default, h11_max_incomplete_event_size, answered 400) but parses in Python, and has no
timeouts either; uvicorn's only timeout is keep-alive, armed after an answer. BoundedHttpProtocol keeps httptools
and adds the rest (HttpLimits, from the settings), without losing throughput (bench/serving/hostile.py measures it):

- a head of more than max_header_bytes or max_header_fields: 431, and the connection closes (its bytes are counted
  as they arrive, so a worker holds at most the limit plus one read of a head, whatever its client sends);
- a new connection that sends nothing within header_timeout_s, or one idle for keep_alive_s after an answer:
  closed; a head not in within header_timeout_s of its first byte, or a body within body_timeout_s of its head: 408,
  and the connection closes;
- a Transfer-Encoding other than chunked (gzip, chunked included): 501, and the connection closes;
- an Upgrade (WebSocket, h2c) is not taken: the request is answered over HTTP/1.1 and the connection closes after.

These answers come from the protocol itself, before the app: LibreTranslate's {"error": ...} body, no metrics.

The drain: the deadline starts with the signal and ends before uvicorn's own graceful-shutdown limit, so uvicorn is
never what answers; the process then exits 0. While it drains (and once the engine is gone) every answer says
Connection: close (service.worker.middleware.CloseWhenStopping), so that no client sends another request on a
connection about to close; when uvicorn stops, an idle connection stays open LAST_REQUEST_S for a request already
on its way (answered, and the connection closed) instead of being closed under it.
"""

from __future__ import annotations

import asyncio
import functools
import json
import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httptools
import uvicorn
from fastapi import FastAPI
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from service.processes import DRAIN_MARGIN_SECONDS
from service.protocol import Phase
from service.settings import Settings
from service.worker.state import State

LAST_REQUEST_S = 1.0  # when uvicorn stops, how long an idle connection may still bring a request
LINGER_S = 1.0  # after an answer of the protocol's own, how long what the client still sends is read and dropped


@dataclass(frozen=True)
class HttpLimits:
    """What one connection may take (the settings of the same names)."""

    max_header_bytes: int
    max_header_fields: int
    header_timeout_s: float
    body_timeout_s: float

    @classmethod
    def of(cls, settings: Settings) -> HttpLimits:
        return cls(settings.max_header_bytes, settings.max_header_fields, settings.header_timeout_s,
                   settings.body_timeout_s)


class Refused(Exception):
    """A request that the protocol answers itself, closing its connection."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


class BoundedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol within HttpLimits (see the module's docstring)."""

    def __init__(self, *args: Any, limits: HttpLimits, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = limits
        self.reading_head = False  # between a request's first byte and the end of its head
        self.head_parsed = 0  # its request target and header fields, as the parser gives them
        self.head_read = 0  # the bytes of the reads that ended inside it (a field is given only once it is whole)
        self.fields = 0
        self.message_ended = False  # in the read being parsed
        self.deadline: float | None = None  # loop time by which the head or the body being read must be in
        self.expire: Callable[[], None] = self.head_timeout  # what is done then
        self.timer: asyncio.TimerHandle | None = None  # one per connection, moved only when it would be too late
        self.stopping = False
        self.discarding = False  # after an answer of our own: what comes is dropped until the connection closes

    # --- the connection -----------------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.close_when_idle()

    def connection_lost(self, exc: Exception | None) -> None:
        self.disarm()
        if self.timer is not None:
            self.timer.cancel()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.discarding:
            return
        self._unset_keepalive_if_required()
        self.message_ended = False
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self.cycle is not None:  # no WebSocket or HTTP/2 here: answered over HTTP/1.1, then closed
                self.cycle.keep_alive = False
            return
        except httptools.HttpParserError as error:  # malformed, or refused by a callback below
            cause = error.__context__
            self.refuse(cause if isinstance(cause, Refused) else Refused(400, "Invalid HTTP request"))
            return
        if self.reading_head and not self.message_ended:  # this read was all head
            self.head_read += len(data)
            if self.head_read > self.limits.max_header_bytes:
                self.refuse(self.head_too_large())
                return
        if not (self.reading_head or self.deadline is not None or self.answering() or self.transport.is_closing()):
            self.close_when_idle()

    def close_when_idle(self) -> None:
        """Close the connection unless a request begins in time: within header_timeout_s before its first request,
        keep_alive_s after one (as uvicorn arms it after each answer)."""
        seconds = self.limits.header_timeout_s if self.cycle is None else self.timeout_keep_alive
        self.timeout_keep_alive_task = self.loop.call_later(seconds, self.timeout_keep_alive_handler)

    def shutdown(self) -> None:
        """uvicorn stops: a connection answering closes after its answer, as in uvicorn; an idle one is given
        LAST_REQUEST_S for a request already on its way, which is answered with Connection: close."""
        self.stopping = True
        if self.answering():
            self.cycle.keep_alive = False
        elif not self.reading_head:
            self._unset_keepalive_if_required()
            self.timeout_keep_alive_task = self.loop.call_later(LAST_REQUEST_S, self.timeout_keep_alive_handler)

    # --- the parser's callbacks ---------------------------------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.reading_head, self.head_parsed, self.head_read, self.fields = True, 0, 0, 0
        self.arm(self.limits.header_timeout_s, self.head_timeout)

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        self.head_parsed += len(url)
        if self.head_parsed > self.limits.max_header_bytes:
            raise self.head_too_large()

    def on_header(self, name: bytes, value: bytes) -> None:
        self.head_parsed += len(name) + len(value) + 4  # ": " and CRLF
        self.fields += 1
        if self.head_parsed > self.limits.max_header_bytes or self.fields > self.limits.max_header_fields:
            raise self.head_too_large()
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self.reading_head = False
        codings = [c.strip().lower() for name, value in self.headers if name == b"transfer-encoding"
                   for c in value.split(b",")]
        if codings and codings != [b"chunked"]:
            coding = b", ".join(codings).decode("latin-1")
            raise Refused(501, f"Transfer-Encoding {coding!r} is not supported: send the body as it is, or chunked")
        super().on_headers_complete()
        if self.stopping:
            self.cycle.keep_alive = False
        self.arm(self.limits.body_timeout_s, self.body_timeout)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self.message_ended = True
        self.disarm()

    # --- the limits ---------------------------------------------------------------------------------------------

    def head_too_large(self) -> Refused:
        """The 431 of a head past a limit."""
        if self.fields > self.limits.max_header_fields:
            return Refused(431, f"Too many request header fields: the limit is {self.limits.max_header_fields}")
        return Refused(431, f"Request header fields too large: the limit is {self.limits.max_header_bytes} bytes")

    def arm(self, seconds: float, expire: Callable[[], None]) -> None:
        """Call `expire` unless disarmed within `seconds` (no timer is made per request: see on_timer)."""
        self.deadline, self.expire = self.loop.time() + seconds, expire
        if self.timer is None or self.timer.when() > self.deadline:
            self.on_timer()

    def disarm(self) -> None:
        self.deadline = None

    def on_timer(self) -> None:
        """The deadline is past: expire; else wait for it (it moved since this timer was set)."""
        if self.timer is not None:
            self.timer.cancel()
        self.timer = None
        if self.deadline is None:
            return
        if self.loop.time() < self.deadline:
            self.timer = self.loop.call_at(self.deadline, self.on_timer)
            return
        self.deadline = None
        self.expire()

    def answering(self) -> bool:
        """Whether an answer is still to go out on this connection."""
        return bool(self.pipeline) or (self.cycle is not None and not self.cycle.response_complete)

    def head_timeout(self) -> None:
        """The head is late: 408; unless an earlier answer is still going out (reading waits for it), then later."""
        if self.answering():
            self.arm(self.limits.header_timeout_s, self.head_timeout)
            return
        self.refuse(Refused(408, f"Request timeout: a head must come within {self.limits.header_timeout_s:g} s"))

    def body_timeout(self) -> None:
        """The body is late: 408 if its request is not answered yet (the app's receive() hears a disconnect), else
        the connection just closes; unless the request waits behind an earlier one (reading waits for it)."""
        if any(cycle is self.cycle for cycle, _ in self.pipeline):
            self.arm(self.limits.body_timeout_s, self.body_timeout)
            return
        if self.cycle.response_started:
            self.transport.close()
            return
        self.cycle.disconnected = True
        self.cycle.message_event.set()
        self.answer(Refused(408, f"Request timeout: a body must come within {self.limits.body_timeout_s:g} s"))

    def refuse(self, refused: Refused) -> None:
        """Answer a request that the app has not seen, and close the connection; only close it if an earlier
        request is still unanswered (the client would take this answer for that one's)."""
        if self.answering():
            self.disarm()
            self.transport.close()
        else:
            self.answer(refused)

    def answer(self, refused: Refused) -> None:
        """Write `refused` as the answer, LibreTranslate's {"error": ...} with Connection: close, and close: what the
        client still sends is read and dropped for LINGER_S (closing with unread bytes would send a reset, which may
        reach the client before it reads the answer)."""
        self.disarm()
        self._unset_keepalive_if_required()
        if self.transport.is_closing():
            return
        body = json.dumps({"error": refused.message}).encode()
        headers = [*self.server_state.default_headers, (b"content-type", b"application/json"),
                   (b"content-length", str(len(body)).encode()), (b"connection", b"close")]
        lines = [name + b": " + value + b"\r\n" for name, value in headers]
        self.transport.write(b"".join([STATUS_LINE[refused.status], *lines, b"\r\n", body]))
        self.discarding = True
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_S, self.transport.close)


class DrainingServer(uvicorn.Server):
    """uvicorn's server on BoundedHttpProtocol, draining on SIGTERM (see the module's docstring)."""

    def __init__(self, config: uvicorn.Config, state: State):
        super().__init__(config)
        self.state = state
        self.loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def for_app(cls, app: FastAPI, settings: Settings) -> DrainingServer:
        config = uvicorn.Config(
            app,
            host=settings.host,
            port=settings.port,
            log_level=settings.log_level,
            access_log=settings.access_log,
            http=functools.partial(BoundedHttpProtocol, limits=HttpLimits.of(settings)),
            ws="none",
            proxy_headers=False,  # the app reads X-Forwarded-For of TRANSLATOR_TRUSTED_PROXIES alone
            timeout_keep_alive=settings.keep_alive_s,
            timeout_graceful_shutdown=settings.drain_seconds + DRAIN_MARGIN_SECONDS,
        )
        return cls(config, app.state.translator_state)

    def run(self, sockets=None) -> None:
        signal.signal(signal.SIGTERM, exit_cleanly)  # uvicorn installs its own while serving, then restores this
        super().run(sockets)

    async def serve(self, sockets=None) -> None:
        self.loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame) -> None:
        if self.loop is not None and self.state.phase is Phase.READY:
            self.loop.call_soon_threadsafe(self.state.drain)
        super().handle_exit(sig, frame)


def exit_cleanly(signum: int, frame: object) -> None:
    """uvicorn re-raises SIGTERM once its shutdown is done; every request was answered, so exit 0."""
    raise SystemExit(0)

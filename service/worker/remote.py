"""The engine process, as an EngineClient of this HTTP worker: a connection to the engine's socket
(service.channel, service.engine.server), speaking service.protocol's messages.

The lifeline: a pipe whose only writer is the engine process. When the engine dies, this worker reads EOF at once
(and its connection ends), fails what it waited for with EngineGone (503) and turns GONE; the supervisor then stops
the service.

The heartbeat: once the engine is READY, this worker pings it every HEARTBEAT_S, one ping at a time. An engine that
is alive but stopped (SIGSTOP) or whose event loop is wedged answers no Pong: after TRANSLATOR_ENGINE_STALL_S
this worker turns STALLED (/ready and new requests get 503 at once), fails what it waited for with EngineStalled
(503) and tells the engine to drop that work (Cancel, read when it runs again); at the next Pong it is READY again.
A translation the engine does not answer within TRANSLATOR_ENGINE_TIMEOUT_S is dropped (Cancel) and answered
EngineStalled.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable
from multiprocessing.connection import Connection

from core.search import Hypothesis, SearchOptions
from service.channel import Channel, connect
from service.protocol import (
    ERRORS,
    Cancel,
    Done,
    EngineError,
    EngineGone,
    EngineStalled,
    Failed,
    Hello,
    PairInfo,
    Phase,
    Ping,
    Pong,
    Ready,
    Request,
    ShuttingDown,
    Translate,
    decode_reply,
    encode,
)
from service.settings import Settings

log = logging.getLogger(__name__)
HEARTBEAT_S = 0.5  # how often a worker pings the engine once it is READY
REFUSALS: dict[Phase, type[EngineError]] = {Phase.GONE: EngineGone, Phase.STALLED: EngineStalled}  # else ShuttingDown


class RemoteEngine:
    def __init__(self, path: str, lifeline: Connection, settings: Settings):
        self.path = path
        self.lifeline = lifeline
        self.silence_s, self.answer_s = settings.engine_stall_s, settings.engine_timeout_s
        self.phase = Phase.LOADING
        self.pairs: list[PairInfo] = []
        self.futures: dict[int, asyncio.Future] = {}
        self.ids = itertools.count()
        self.channel: Channel | None = None
        self.heartbeat: asyncio.Task | None = None
        self.ponged = asyncio.Event()  # a Pong came since the last Ping

    async def prepare(self) -> None:
        """Connect, and read the connection and the lifeline."""
        self.channel = await connect(self.path, self._received, self._lost)
        asyncio.get_running_loop().add_reader(self.lifeline.fileno(), self._engine_gone)

    async def start(self) -> None:
        """Wait for the engine to be ready: every worker learns the pairs the moment the engine's answer arrives; then
        start the heartbeat."""
        ready: Ready = await self._call(lambda id: Hello(id))
        self.pairs = ready.pairs
        if self.phase is Phase.LOADING:
            self.phase = Phase.READY
        self.heartbeat = asyncio.create_task(self._heartbeat())

    async def translate(self, pair: str, sentences: list[list[int]], opts: SearchOptions, bulk: bool = False
                        ) -> list[list[Hypothesis]]:
        if self.phase is not Phase.READY:
            raise REFUSALS.get(self.phase, ShuttingDown)()
        done: Done = await self._call(lambda id: Translate(id, pair, sentences, opts, bulk), self.answer_s)
        return done.hypotheses

    def stop(self, deadline: float) -> Awaitable[None]:
        """DRAINING from this call on; the awaitable waits up to `deadline` for what the engine still owes (the
        engine drains it too)."""
        if self.phase is not Phase.GONE:
            self.phase = Phase.DRAINING
        return self._owed(deadline)

    async def _owed(self, deadline: float) -> None:
        if waiting := [f for f in self.futures.values() if not f.done()]:
            await asyncio.wait(waiting, timeout=deadline)

    async def _call(self, message, deadline: float | None = None):
        """Send message(id) and await its reply, up to `deadline` seconds (None: no limit); cancelling, or the
        deadline passing (EngineStalled), tells the engine to drop the work."""
        if self.phase is Phase.GONE:
            raise EngineGone()
        request_id = next(self.ids)
        self.futures[request_id] = future = asyncio.get_running_loop().create_future()
        try:
            self._send(message(request_id))
            async with asyncio.timeout(deadline):  # the answer wakes this task itself, unlike wait_for's
                return await future
        except TimeoutError:
            self._cancel(request_id)
            raise EngineStalled(f"no answer within {deadline:g} s") from None
        except asyncio.CancelledError:
            self._cancel(request_id)
            raise
        finally:
            del self.futures[request_id]

    def _cancel(self, request_id: int) -> None:
        """Tell the engine to drop a request's work (unless it is gone)."""
        if self.phase is not Phase.GONE:
            self._send(Cancel(request_id))

    def _send(self, message: Request) -> None:
        self.channel.send(encode(message))

    async def _heartbeat(self) -> None:
        """Ping the engine every HEARTBEAT_S, one ping at a time; STALLED when no Pong comes within silence_s, until
        one comes."""
        while True:
            self.ponged.clear()
            self._send(Ping(next(self.ids)))
            try:
                await asyncio.wait_for(self.ponged.wait(), self.silence_s)
            except TimeoutError:
                self._stalled()
                await self.ponged.wait()
            await asyncio.sleep(HEARTBEAT_S)

    def _stalled(self) -> None:
        """The engine is silent: answer 503 to what waits for it, and tell it to drop that work."""
        if self.phase is not Phase.READY:
            return
        log.error("the engine has not answered for %g s: answering 503 until it does", self.silence_s)
        self.phase = Phase.STALLED
        waiting = [request_id for request_id, future in self.futures.items() if not future.done()]
        for request_id in waiting:
            self.futures[request_id].set_exception(EngineStalled("the engine stopped answering"))
        for request_id in waiting:
            self._cancel(request_id)

    def _ponged(self) -> None:
        self.ponged.set()
        if self.phase is Phase.STALLED:
            log.warning("the engine answers again: serving")
            self.phase = Phase.READY

    def _received(self, channel: Channel, payload: bytes) -> None:
        reply = decode_reply(payload)
        if isinstance(reply, Pong):
            self._ponged()
            return
        future = self.futures.get(reply.id)
        if future is None or future.done():
            return
        if isinstance(reply, Failed):
            future.set_exception(ERRORS[reply.error](reply.message))
        else:
            future.set_result(reply)

    def _lost(self, channel: Channel) -> None:
        """The connection ended: the engine process has ended (the lifeline says so too; whichever is heard first
        turns this worker GONE)."""
        if self.phase is not Phase.GONE:
            self._engine_gone()

    def _engine_gone(self) -> None:
        """The lifeline read EOF, or the connection ended: the engine process has ended."""
        asyncio.get_running_loop().remove_reader(self.lifeline.fileno())
        if self.heartbeat is not None:
            self.heartbeat.cancel()
        if self.phase is not Phase.DRAINING:  # in a drain, the engine ends when its work is done
            log.critical("the engine process has ended: answering 503 until the service restarts")
            self.phase = Phase.GONE
        for future in self.futures.values():
            if not future.done():
                future.set_exception(EngineGone())

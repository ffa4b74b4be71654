"""The engine process, as an EngineClient of this HTTP worker: a DEALER socket to the engine's ROUTER
(service.engine.server) over ipc://, speaking service.protocol's messages.

The lifeline: a pipe whose only writer is the engine process. When the engine dies, this worker reads EOF at once,
fails what it waited for with EngineGone (503) and turns GONE; the supervisor then stops the service.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable
from multiprocessing.connection import Connection

import zmq
import zmq.asyncio

from core.search import Hypothesis, SearchOptions
from service.protocol import (
    ERRORS,
    Cancel,
    Done,
    EngineGone,
    Failed,
    Hello,
    PairInfo,
    Phase,
    Ready,
    ShuttingDown,
    Translate,
    decode_reply,
    encode,
)

log = logging.getLogger(__name__)


class RemoteEngine:
    def __init__(self, address: str, lifeline: Connection):
        self.address = address
        self.lifeline = lifeline
        self.phase = Phase.LOADING
        self.pairs: list[PairInfo] = []
        self.futures: dict[int, asyncio.Future] = {}
        self.ids = itertools.count()
        self.socket: zmq.asyncio.Socket | None = None
        self.receiver: asyncio.Task | None = None

    async def prepare(self) -> None:
        """Connect, and watch the lifeline."""
        self.socket = zmq.asyncio.Context.instance().socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.connect(self.address)
        asyncio.get_running_loop().add_reader(self.lifeline.fileno(), self._engine_gone)
        self.receiver = asyncio.create_task(self._receive())

    async def start(self) -> None:
        """Wait for the engine to be ready: every worker learns the pairs the moment the engine's answer arrives."""
        ready: Ready = await self._call(lambda id: Hello(id))
        self.pairs = ready.pairs
        if self.phase is Phase.LOADING:
            self.phase = Phase.READY

    async def translate(self, pair: str, sentences: list[list[int]], opts: SearchOptions) -> list[list[Hypothesis]]:
        if self.phase is not Phase.READY:
            raise EngineGone() if self.phase is Phase.GONE else ShuttingDown()
        done: Done = await self._call(lambda id: Translate(id, pair, sentences, opts))
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

    async def _call(self, message):
        """Send message(id) and await its reply; cancelling tells the engine to drop the work."""
        if self.phase is Phase.GONE:
            raise EngineGone()
        request_id = next(self.ids)
        self.futures[request_id] = future = asyncio.get_running_loop().create_future()
        try:
            await self.socket.send(encode(message(request_id)))
            return await future
        except asyncio.CancelledError:
            if self.phase is not Phase.GONE:
                await asyncio.shield(self.socket.send(encode(Cancel(request_id))))
            raise
        finally:
            del self.futures[request_id]

    async def _receive(self) -> None:
        while True:
            reply = decode_reply(await self.socket.recv())
            future = self.futures.get(reply.id)
            if future is None or future.done():
                continue
            if isinstance(reply, Failed):
                future.set_exception(ERRORS[reply.error](reply.message))
            else:
                future.set_result(reply)

    def _engine_gone(self) -> None:
        """The lifeline read EOF: the engine process has ended."""
        asyncio.get_running_loop().remove_reader(self.lifeline.fileno())
        if self.phase is not Phase.DRAINING:  # in a drain, the engine ends when its work is done
            log.critical("the engine process has ended: answering 503 until the service restarts")
            self.phase = Phase.GONE
        for future in self.futures.values():
            if not future.done():
                future.set_exception(EngineGone())

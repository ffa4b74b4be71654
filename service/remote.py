"""The engine over ZeroMQ: EngineServer runs in the engine process, RemoteEngine in every HTTP worker.

One ROUTER socket in the engine, one DEALER in each worker, over ipc:// in a private folder. Messages are pickled
tuples (a socket between processes of one service, never a network):

    worker -> engine   ("hello", id)                               answered once the engine is ready: its pairs
                       ("translate", id, pair, sentences, options)  answered (id, "ok", hypotheses of each sentence)
                                                                    or (id, error name, message)
                       ("cancel", id)                               the client hung up: its sentences leave the engine

The lifeline: a pipe whose only writer is the engine process. When the engine dies, every worker reads EOF at once,
fails what it waited for with EngineGone (503) and reports itself not ready; the supervisor then stops the service.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import pickle
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import zmq
import zmq.asyncio

from core.search import Hypothesis, SearchOptions
from service.client import EngineClient, EngineGone, Pair, QueueFull, ShuttingDown

log = logging.getLogger(__name__)

ERRORS: dict[str, type[Exception]] = {"QueueFull": QueueFull, "ShuttingDown": ShuttingDown}


class EngineFault(Exception):
    """The engine failed a batch (the message says why); the request gets 500 and the service goes on."""


def dumps(message: tuple) -> bytes:
    return pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)


class EngineServer:
    """Serves an engine (service.engine.Engine, or any EngineClient) to the workers connected to `address`."""

    def __init__(self, engine: EngineClient, address: str):
        self.engine = engine
        self.socket = zmq.asyncio.Context.instance().socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 1000)
        self.socket.bind(address)
        self.loaded = asyncio.Event()
        self.tasks: dict[tuple[bytes, int], asyncio.Task] = {}

    async def serve(self) -> None:
        """Answer the workers until cancelled."""
        while True:
            worker, payload = await self.socket.recv_multipart()
            kind, request_id, *args = pickle.loads(payload)
            key = (worker, request_id)
            if kind == "cancel":
                if (task := self.tasks.get(key)) is not None:
                    task.cancel()
                continue
            self.tasks[key] = task = asyncio.create_task(self._answer(worker, request_id, kind, args))
            task.add_done_callback(lambda _, key=key: self.tasks.pop(key, None))

    async def _answer(self, worker: bytes, request_id: int, kind: str, args: list[Any]) -> None:
        try:
            reply = (request_id, "ok", await (self._hello() if kind == "hello" else self._translate(*args)))
        except asyncio.CancelledError:  # its worker no longer waits
            return
        except (QueueFull, ShuttingDown) as error:
            reply = (request_id, type(error).__name__, "")
        except Exception as error:
            log.exception("engine request failed")
            reply = (request_id, "EngineFault", f"{type(error).__name__}: {error}")
        await self.socket.send_multipart([worker, dumps(reply)])

    async def _hello(self) -> list[tuple[str, str, str]]:
        await self.loaded.wait()
        return [(pair.name, pair.provider, pair.precision) for pair in self.engine.pairs.values()]

    def _translate(self, pair: str, sentences: list[list[int]], opts: SearchOptions):
        return self.engine.translate(pair, sentences, opts)

    def close(self) -> None:
        self.socket.close()


class RemoteEngine:
    """The engine process, as an EngineClient of this HTTP worker."""

    def __init__(self, address: str, lifeline: Connection, folders: list[Path]):
        self.address = address
        self.lifeline = lifeline
        self.folders = folders
        self.loaded: dict[str, Pair] = {}  # by name, before the engine is ready
        self.pairs: dict[tuple[str, str], Pair] = {}
        self.futures: dict[int, asyncio.Future] = {}
        self.ids = itertools.count()
        self.gone = False
        self.closing = False
        self.socket: zmq.asyncio.Socket | None = None
        self.receiver: asyncio.Task | None = None

    @property
    def ready(self) -> bool:
        return bool(self.pairs) and not self.gone and not self.closing

    async def prepare(self) -> None:
        """Load the pairs' tokenizers (while the engine loads its models) and connect."""
        for folder in self.folders:
            self.loaded |= {pair.name: pair for pair in await asyncio.to_thread(Pair.load, folder)}
        self.socket = zmq.asyncio.Context.instance().socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.connect(self.address)
        asyncio.get_running_loop().add_reader(self.lifeline.fileno(), self._engine_gone)
        self.receiver = asyncio.create_task(self._receive())

    async def start(self) -> None:
        """Wait for the engine to be ready: every worker turns ready the moment the engine's answer arrives."""
        for name, provider, precision in await self._call("hello"):
            self.loaded[name].provider, self.loaded[name].precision = provider, precision
        self.pairs = {(pair.source, pair.target): pair for pair in self.loaded.values()}

    async def translate(self, pair: str, sentences: list[list[int]], opts: SearchOptions) -> list[list[Hypothesis]]:
        if self.closing:
            raise ShuttingDown()
        return await self._call("translate", pair, sentences, opts)

    async def stop(self, deadline: float) -> None:
        """Take no more work; wait up to `deadline` for what the engine still owes (the engine drains it too)."""
        self.closing = True
        if waiting := [f for f in self.futures.values() if not f.done()]:
            await asyncio.wait(waiting, timeout=deadline)

    async def _call(self, kind: str, *args: Any) -> Any:
        if self.gone:
            raise EngineGone()
        request_id = next(self.ids)
        self.futures[request_id] = future = asyncio.get_running_loop().create_future()
        try:
            await self.socket.send(dumps((kind, request_id, *args)))
            return await future
        except asyncio.CancelledError:
            if not self.gone:
                await asyncio.shield(self.socket.send(dumps(("cancel", request_id))))
            raise
        finally:
            del self.futures[request_id]

    async def _receive(self) -> None:
        while True:
            request_id, status, value = pickle.loads(await self.socket.recv())
            future = self.futures.get(request_id)
            if future is None or future.done():
                continue
            if status == "ok":
                future.set_result(value)
            else:
                future.set_exception(ERRORS.get(status, EngineFault)(value))

    def _engine_gone(self) -> None:
        """The lifeline read EOF: the engine process has ended."""
        asyncio.get_running_loop().remove_reader(self.lifeline.fileno())
        if not self.closing:
            log.critical("the engine process has ended: answering 503 until the service restarts")
        self.gone = True
        for future in self.futures.values():
            if not future.done():
                future.set_exception(EngineGone())

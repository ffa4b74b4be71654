"""The engine served to the HTTP workers over ZeroMQ: one ROUTER socket here, a DEALER in each worker
(service.worker.remote), over ipc:// in the service's private folder. The messages are service.protocol's.

The lifeline (a pipe whose only writer is the engine process) is held by service.engine.process: when this process
ends, every worker reads EOF at once. A Ping is answered at once, here on the event loop (the batchers decode in
their own threads): a worker that hears no Pong knows that this process is stopped or its loop wedged.

The socket is read by the event loop itself (a reader on ZeroMQ's file descriptor), not through zmq.asyncio: a
message is handled in the turn of the loop that sees it, and an answer leaves in the turn that has it. ZeroMQ's
descriptor says only that something changed, and a send may take that news: so the socket's events are read until
nothing waits, when the descriptor wakes the loop and after every send. A ROUTER socket never blocks a send (a
message for a worker that is gone is dropped).
"""

from __future__ import annotations

import asyncio
import logging

import zmq

from service.protocol import (
    KINDS,
    Cancel,
    Done,
    EngineClient,
    EngineError,
    ErrorKind,
    Failed,
    Hello,
    Ping,
    Pong,
    Ready,
    Reply,
    Request,
    Translate,
    decode_request,
    encode,
)

log = logging.getLogger(__name__)


class EngineServer:
    """Answers the workers connected to `address` from `engine` (service.engine.Engine, or any EngineClient)."""

    def __init__(self, engine: EngineClient, address: str):
        self.engine = engine
        self.socket = zmq.Context.instance().socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 1000)
        self.socket.bind(address)
        self.descriptor = self.socket.getsockopt(zmq.FD)  # readable when the socket's events may have changed
        self.loaded = asyncio.Event()  # set once the engine is READY: Hello is answered then
        self.tasks: dict[tuple[bytes, int], asyncio.Task] = {}

    async def serve(self) -> None:
        """Answer the workers until closed."""
        loop = asyncio.get_running_loop()
        loop.add_reader(self.descriptor, self._read)
        self._read()  # what came before the reader
        await loop.create_future()  # never done: the reader answers

    def _read(self) -> None:
        """Handle every message waiting on the socket."""
        while self.socket.getsockopt(zmq.EVENTS) & zmq.POLLIN:
            worker, payload = self.socket.recv_multipart(zmq.NOBLOCK)
            message = decode_request(payload)
            key = (worker, message.id)
            if isinstance(message, Ping):
                self.socket.send_multipart([worker, encode(Pong(message.id))])
            elif isinstance(message, Cancel):
                if (task := self.tasks.get(key)) is not None:
                    task.cancel()
            else:
                self.tasks[key] = task = asyncio.create_task(self._answer(worker, message))
                task.add_done_callback(lambda _, key=key: self.tasks.pop(key, None))

    async def _answer(self, worker: bytes, message: Request) -> None:
        try:
            reply = await self._reply(message)
        except asyncio.CancelledError:  # its worker no longer waits
            return
        except EngineError as error:
            reply = Failed(message.id, KINDS.get(type(error), ErrorKind.FAULT), str(error))
        except Exception as error:
            log.exception("engine request failed")
            reply = Failed(message.id, ErrorKind.FAULT, f"{type(error).__name__}: {error}")
        self.socket.send_multipart([worker, encode(reply)])
        self._read()  # the send may have taken the news of a message

    async def _reply(self, message: Hello | Translate) -> Reply:
        if isinstance(message, Hello):
            await self.loaded.wait()
            return Ready(message.id, self.engine.pairs)
        return Done(message.id, await self.engine.translate(message.pair, message.sentences, message.opts,
                                                            message.bulk))

    def close(self) -> None:
        asyncio.get_running_loop().remove_reader(self.descriptor)
        self.socket.close()

"""The engine served to the HTTP workers: one connection a worker (service.channel), on the listening socket that the
supervisor bound in the service's private folder. The messages are service.protocol's.

The lifeline (a pipe whose only writer is the engine process) is held by service.engine.process: when this process
ends, every worker reads EOF at once. A Ping is answered at once, here on the event loop (the batchers decode in
their own threads): a worker that hears no Pong knows that this process is stopped or its loop wedged. A worker's
connection that ends takes its work with it: what it asked for leaves the engine.
"""

from __future__ import annotations

import asyncio
import logging
import socket

from service.channel import Channel
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
    """Answers the workers that connect to `listener` from `engine` (service.engine.Engine, or any EngineClient)."""

    def __init__(self, engine: EngineClient, listener: socket.socket):
        self.engine = engine
        self.listener = listener
        self.server: asyncio.Server | None = None
        self.loaded = asyncio.Event()  # set once the engine is READY: Hello is answered then
        self.tasks: dict[tuple[Channel, int], asyncio.Task] = {}

    async def serve(self) -> None:
        """Answer the workers until closed."""
        loop = asyncio.get_running_loop()
        self.server = await loop.create_unix_server(lambda: Channel(self._received, self._lost), sock=self.listener)
        await self.server.serve_forever()

    def _received(self, worker: Channel, payload: bytes) -> None:
        message = decode_request(payload)
        key = (worker, message.id)
        if isinstance(message, Ping):
            worker.send(encode(Pong(message.id)))
        elif isinstance(message, Cancel):
            if (task := self.tasks.get(key)) is not None:
                task.cancel()
        else:
            self.tasks[key] = task = asyncio.create_task(self._answer(worker, message))
            task.add_done_callback(lambda _, key=key: self.tasks.pop(key, None))

    def _lost(self, worker: Channel) -> None:
        """A worker's connection ended: nobody waits for its work."""
        for (channel, _), task in list(self.tasks.items()):
            if channel is worker:
                task.cancel()

    async def _answer(self, worker: Channel, message: Request) -> None:
        try:
            reply = await self._reply(message)
        except asyncio.CancelledError:  # its worker no longer waits
            return
        except EngineError as error:
            reply = Failed(message.id, KINDS.get(type(error), ErrorKind.FAULT), str(error))
        except Exception as error:
            log.exception("engine request failed")
            reply = Failed(message.id, ErrorKind.FAULT, f"{type(error).__name__}: {error}")
        worker.send(encode(reply))

    async def _reply(self, message: Hello | Translate) -> Reply:
        if isinstance(message, Hello):
            await self.loaded.wait()
            return Ready(message.id, self.engine.pairs)
        return Done(message.id, await self.engine.translate(message.pair, message.sentences, message.opts,
                                                            message.bulk))

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
        else:
            self.listener.close()

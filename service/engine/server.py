"""The engine served to the HTTP workers: one connection a worker (service.channel), on the listening socket that the
supervisor bound in the service's private folder. The messages are service.protocol's.

A Translate goes to the engine as it is read, and its answer leaves from the thread that settles it (the batcher's,
as its last sentence ends): no other thread wakes on the way. The worker holds it to a deadline (it sends Cancel);
a Cancel, or the worker's connection ending, withdraws the work.

The lifeline (a pipe whose only writer is the engine process) is held by service.engine.process: when this process
ends, every worker reads EOF at once. A Ping is answered at once, here on the event loop (the batchers decode in
their own threads): a worker that hears no Pong knows that this process is stopped or its loop wedged.
"""

from __future__ import annotations

import asyncio
import logging
import socket

from service.channel import Channel, accept
from service.engine.batcher import Answer, Submission
from service.engine.engine import Engine
from service.protocol import (
    KINDS,
    Cancel,
    Done,
    EngineError,
    ErrorKind,
    Failed,
    Hello,
    Ping,
    Pong,
    Ready,
    Translate,
    decode_request,
    encode,
)

log = logging.getLogger(__name__)


def failed(request_id: int, error: Exception) -> Failed:
    """An error as a reply: an EngineError's kind, any other a fault."""
    if isinstance(error, EngineError):
        return Failed(request_id, KINDS.get(type(error), ErrorKind.FAULT), str(error))
    return Failed(request_id, ErrorKind.FAULT, f"{type(error).__name__}: {error}")


class EngineServer:
    """Answers the workers that connect to `listener` from `engine`."""

    def __init__(self, engine: Engine, listener: socket.socket):
        self.engine = engine
        self.listener = listener
        self.loaded = asyncio.Event()  # set once the engine is READY: Hello is answered then
        # what each worker waits for, to withdraw; an answer pops its own in the batcher's thread (one dict operation)
        self.sent: dict[tuple[Channel, int], tuple[str, Submission]] = {}

    async def serve(self) -> None:
        """Answer the workers until closed."""
        accept(self.listener, self._received, self._lost)
        await asyncio.get_running_loop().create_future()  # never done: the channels answer

    def _received(self, worker: Channel, payload: bytes) -> None:
        message = decode_request(payload)
        if isinstance(message, Translate):
            self._translate(worker, message)
        elif isinstance(message, Cancel):
            self._withdraw((worker, message.id))
        elif isinstance(message, Ping):
            worker.send(encode(Pong(message.id)))
        elif isinstance(message, Hello):
            asyncio.create_task(self._hello(worker, message))

    def _translate(self, worker: Channel, message: Translate) -> None:
        key = (worker, message.id)

        def answer(result: Answer) -> None:  # in the thread that settles it
            self.sent.pop(key, None)
            if isinstance(result, Exception) and not isinstance(result, EngineError):
                log.error("engine request failed", exc_info=result)
            worker.send(encode(failed(message.id, result) if isinstance(result, Exception) else
                               Done(message.id, result)))

        try:
            request = self.engine.send(message.pair, message.sentences, message.opts, message.bulk, answer)
        except Exception as error:  # refused (QueueFull, ShuttingDown), or a fault
            if not isinstance(error, EngineError):
                log.exception("engine request failed")
            worker.send(encode(failed(message.id, error)))
            return
        self.sent[key] = (message.pair, request)
        if request.done:  # answered already, maybe before it was kept: its answer found nothing to pop
            self.sent.pop(key, None)

    def _withdraw(self, key: tuple[Channel, int]) -> None:
        if (sent := self.sent.pop(key, None)) is not None:
            pair, request = sent
            self.engine.withdraw(pair, request)

    def _lost(self, worker: Channel) -> None:
        """A worker's connection ended: nobody waits for its work."""
        for key in [key for key in list(self.sent) if key[0] is worker]:
            self._withdraw(key)

    async def _hello(self, worker: Channel, message: Hello) -> None:
        await self.loaded.wait()
        worker.send(encode(Ready(message.id, self.engine.pairs)))

    def close(self) -> None:
        asyncio.get_running_loop().remove_reader(self.listener.fileno())
        self.listener.close()

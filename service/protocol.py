"""Between the processes: what an HTTP worker and the engine process say to each other, and what a worker may ask
of an engine (EngineClient), whether the engine runs in another process or in its own.

    worker -> engine   Hello(id)                           answered Ready(id, pairs) once every model is warm
                       Translate(id, pair, sentences, opts) answered Done(id, hypotheses) or Failed(id, error, text)
                       Cancel(id)                           the client hung up, or the deadline passed: its sentences
                                                            leave the engine
                       Ping(id)                             answered Pong(id) at once: the heartbeat

Messages are msgspec structs, tagged by their kind and encoded as MessagePack: typed on both sides, and no pickle
between processes. The engine states its pairs once, in Ready: each pair's languages, model folder, and where and
in which precision it runs; a worker loads its tokenizers from that folder. A worker holds the engine to deadlines
of its own settings: silent for longer than TRANSLATOR_ENGINE_STALL_S, the engine is STALLED; a translation not
answered within TRANSLATOR_ENGINE_TIMEOUT_S is dropped and answered 503.

Neither ONNX Runtime nor PyTorch: both sides import it.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable
from typing import Protocol

import msgspec

from core.folder import pair_name
from core.search import Hypothesis, SearchOptions


class Phase(enum.Enum):
    """Where an engine is in its life: the one state that readiness and shutdown read."""

    LOADING = "loading"  # the models load (/health answers; requests get 503)
    READY = "ready"  # every model warm: requests are taken
    STALLED = "stalled"  # a worker hears no Pong from the engine process: 503s until it answers again (then READY)
    DRAINING = "draining"  # shutting down: accepted work finishes up to the drain deadline, new work gets 503
    GONE = "gone"  # the engine process died: everything gets 503 until the service restarts


class EngineError(Exception):
    """An engine's refusal or failure of a request (service.worker.errors turns each into an HTTP answer)."""


class QueueFull(EngineError):
    """More work is waiting than can start in time (service.engine.admission), or this request's work waited past
    the deadline; the request should be retried later."""


class ShuttingDown(EngineError):
    """The engine no longer accepts new work, or the drain deadline passed before this work ran."""


class EngineGone(EngineError):
    """The engine process died: nothing it had will be answered."""


class EngineStalled(EngineError):
    """The engine did not answer in time (stopped, wedged, or far behind): the work was dropped; retry later."""


class EngineFault(EngineError):
    """The engine failed a batch (the message says why); the request gets 500 and the service goes on."""


class ErrorKind(enum.Enum):
    """The EngineErrors that cross between processes, by name."""

    QUEUE_FULL = "queue_full"
    SHUTTING_DOWN = "shutting_down"
    STALLED = "stalled"
    FAULT = "fault"


ERRORS: dict[ErrorKind, type[EngineError]] = {
    ErrorKind.QUEUE_FULL: QueueFull,
    ErrorKind.SHUTTING_DOWN: ShuttingDown,
    ErrorKind.STALLED: EngineStalled,
    ErrorKind.FAULT: EngineFault,
}
KINDS = {error: kind for kind, error in ERRORS.items()}


class PairInfo(msgspec.Struct, frozen=True):
    """One language pair as the engine serves it. A multi-target model folder serves several pairs."""

    source: str
    target: str
    folder: str  # the model folder: its config.json and tokenizer files
    provider: str  # ONNX Runtime's execution provider that runs it
    precision: str  # which graphs: fp32, fp16, int8

    @property
    def name(self) -> str:
        return pair_name(self.source, self.target)


# --- the messages ---------------------------------------------------------------------------------------------


class Hello(msgspec.Struct, tag=True):
    id: int


class Translate(msgspec.Struct, tag=True):
    id: int
    pair: str
    sentences: list[list[int]]  # source ids, as the encoder reads them
    opts: SearchOptions
    bulk: bool = False  # a document's sentences: after interactive work (service.engine.admission)


class Cancel(msgspec.Struct, tag=True):
    id: int


class Ping(msgspec.Struct, tag=True):
    id: int


class Ready(msgspec.Struct, tag=True):
    id: int
    pairs: list[PairInfo]


class Done(msgspec.Struct, tag=True):
    id: int
    hypotheses: list[list[Hypothesis]]  # of each sentence, best first


class Failed(msgspec.Struct, tag=True):
    id: int
    error: ErrorKind
    message: str = ""


class Pong(msgspec.Struct, tag=True):
    id: int


Request = Hello | Translate | Cancel | Ping
Reply = Ready | Done | Failed | Pong

_encoder = msgspec.msgpack.Encoder()
_requests = msgspec.msgpack.Decoder(Request)
_replies = msgspec.msgpack.Decoder(Reply)


def encode(message: Request | Reply) -> bytes:
    return _encoder.encode(message)


def decode_request(data: bytes) -> Request:
    return _requests.decode(data)


def decode_reply(data: bytes) -> Reply:
    return _replies.decode(data)


# --- what a worker asks of an engine ---------------------------------------------------------------------------


class EngineClient(Protocol):
    """An engine as an HTTP worker sees it: service.engine.Engine in this process, or service.worker.remote's
    RemoteEngine for the engine process."""

    @property
    def phase(self) -> Phase: ...

    @property
    def pairs(self) -> list[PairInfo]:
        """The pairs served; known once the engine is READY."""

    async def prepare(self) -> None:
        """What needs no running engine (sockets); done before the HTTP port is served."""

    async def start(self) -> None:
        """Load or wait for the engine; returns once it is READY."""

    async def translate(self, pair: str, sentences: list[list[int]], opts: SearchOptions, bulk: bool = False
                        ) -> list[list[Hypothesis]]:
        """The hypotheses of each sentence of `pair`, in order, within TRANSLATOR_ENGINE_TIMEOUT_S; raises an
        EngineError (EngineStalled past the deadline). Cancelling the call abandons the sentences: they leave the
        queue and the running batch. Bulk work (a document's) joins after interactive work and is never refused
        because of interactive work waiting, nor shed as overdue (service.engine.admission)."""

    def stop(self, deadline: float) -> Awaitable[None]:
        """DRAINING from this call on: no more work is taken; the awaitable returned ends once accepted work is
        answered, within `deadline` seconds (what is left then: ShuttingDown)."""

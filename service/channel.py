"""The link between the HTTP workers and the engine process: service.protocol's messages over a Unix stream socket,
one connection a worker, each message a frame (its length in 4 bytes, big-endian, then the message).

    listener = engine_listener(path)                  # the supervisor's, before either side starts
    accept(listener, received, lost)                  # the engine (service.engine.server)
    channel = await connect(path, received, lost)     # a worker (service.worker.remote)
    channel.send(message)                             # from any thread

The event loop reads a connection as data arrives and hands over every whole frame at once. A send writes at once,
from whichever thread sends (the engine answers from its batchers' threads, so an answer wakes no other thread);
what the socket cannot take yet is queued, without a bound, and the event loop writes it when the socket can take
it: what either side sends is bounded by the requests that wait.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from collections.abc import Callable

HEADER = struct.Struct("!I")  # a frame's length
READ_BYTES = 1 << 16

Received = Callable[["Channel", bytes], None]
Lost = Callable[["Channel"], None]


def engine_listener(path: str) -> socket.socket:
    """The engine's listening socket at `path`, bound before any process starts: a worker connects at once, and the
    engine accepts once it serves."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(256)
    return listener


def accept(listener: socket.socket, received: Received, lost: Lost) -> None:
    """Take every connection to `listener` on this event loop, each a Channel."""
    loop = asyncio.get_running_loop()
    listener.setblocking(False)

    def take() -> None:
        try:
            connection, _ = listener.accept()
        except BlockingIOError:  # another connection's readiness, already taken
            return
        Channel(connection, loop, received, lost)

    loop.add_reader(listener.fileno(), take)


async def connect(path: str, received: Received, lost: Lost) -> Channel:
    loop = asyncio.get_running_loop()
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.setblocking(False)
    await loop.sock_connect(connection, path)
    return Channel(connection, loop, received, lost)


class Channel:
    """One connection: `received(channel, message)` for each whole frame read, `lost(channel)` once it ends."""

    def __init__(self, connection: socket.socket, loop: asyncio.AbstractEventLoop, received: Received, lost: Lost):
        connection.setblocking(False)
        self.connection = connection
        self.loop = loop
        self.received = received
        self.lost = lost
        self.inbox = bytearray()  # what came of a frame not whole yet
        self.outbox = bytearray()  # what the socket could not take yet; guarded by `lock`
        self.lock = threading.Lock()
        self.closed = False
        loop.add_reader(connection.fileno(), self._read)

    def send(self, message: bytes) -> None:
        """Write a message now, or queue it (dropped once the connection has ended: its other side is gone)."""
        frame = HEADER.pack(len(message)) + message
        with self.lock:
            if self.closed:
                return
            if self.outbox:  # the socket is full: after what waits
                self.outbox += frame
                return
            try:
                sent = self.connection.send(frame)
            except BlockingIOError:
                sent = 0
            except OSError:  # the other side is gone: the reader hears it
                return
            if sent < len(frame):
                self.outbox += memoryview(frame)[sent:]
                self.loop.call_soon_threadsafe(self._watch)

    def close(self) -> None:
        """End the connection (on the event loop's thread); `lost` is called."""
        with self.lock:
            if self.closed:
                return
            self.closed = True
            self.outbox.clear()
        self.loop.remove_reader(self.connection.fileno())
        self.loop.remove_writer(self.connection.fileno())
        self.connection.close()
        self.lost(self)

    def _read(self) -> None:
        try:
            data = self.connection.recv(READ_BYTES)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:  # the other side has ended
            self.close()
            return
        self.inbox += data
        while len(self.inbox) >= HEADER.size:
            (size,) = HEADER.unpack_from(self.inbox)
            end = HEADER.size + size
            if len(self.inbox) < end:
                return
            message = bytes(self.inbox[HEADER.size : end])
            del self.inbox[:end]
            self.received(self, message)

    def _watch(self) -> None:
        """Write what waits whenever the socket can take it."""
        if not self.closed:
            self.loop.add_writer(self.connection.fileno(), self._write)

    def _write(self) -> None:
        with self.lock:
            try:
                sent = self.connection.send(self.outbox)
            except BlockingIOError:
                return
            except OSError:
                sent = len(self.outbox)
            del self.outbox[:sent]
            if not self.outbox:
                self.loop.remove_writer(self.connection.fileno())

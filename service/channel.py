"""The link between the HTTP workers and the engine process: service.protocol's messages over a Unix stream socket,
one connection a worker, each message a frame (its length in 4 bytes, big-endian, then the message).

    listener = engine_listener(path)                            # the supervisor's, before either side starts
    await loop.create_unix_server(lambda: Channel(received, lost), sock=listener)  # the engine (service.engine.server)
    await loop.create_unix_connection(lambda: Channel(received, lost), path)         # a worker (service.worker.remote)

Each side's event loop reads its connections as data arrives and hands over every whole frame at once; a send is
written by the transport, which queues what the socket cannot take yet (without a bound: what either side sends is
bounded by the requests that wait). Nothing else runs between the two processes: a message costs a write and a
read, and no thread's wake-up.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Callable

HEADER = struct.Struct("!I")  # a frame's length


def engine_listener(path: str) -> socket.socket:
    """The engine's listening socket at `path`, bound before any process starts: a worker connects at once, and the
    engine accepts once it serves."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(256)
    return listener


class Channel(asyncio.Protocol):
    """One connection: `received(channel, message)` for each whole frame read, `lost(channel)` when it ends."""

    def __init__(self, received: Callable[[Channel, bytes], None], lost: Callable[[Channel], None]):
        self.received = received
        self.lost = lost
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()  # what came of a frame not whole yet

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while len(self.buffer) >= HEADER.size:
            (size,) = HEADER.unpack_from(self.buffer)
            end = HEADER.size + size
            if len(self.buffer) < end:
                return
            message = bytes(self.buffer[HEADER.size : end])
            del self.buffer[:end]
            self.received(self, message)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost(self)

    def send(self, message: bytes) -> None:
        """Queue a message (dropped when the connection is closing: its other side is gone)."""
        if not self.transport.is_closing():
            self.transport.write(HEADER.pack(len(message)) + message)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

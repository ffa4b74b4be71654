"""uvicorn's server, draining on SIGTERM: the drain deadline starts with the signal and ends before uvicorn's own
graceful-shutdown limit, so uvicorn is never what answers; the process then exits 0."""

from __future__ import annotations

import asyncio
import signal

import uvicorn
from fastapi import FastAPI

from service.processes import DRAIN_MARGIN_SECONDS
from service.protocol import Phase
from service.settings import Settings
from service.worker.app import State


class DrainingServer(uvicorn.Server):
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

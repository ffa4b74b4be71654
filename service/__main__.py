"""python -m service [--model-dir DIR] [--host HOST] [--port PORT]; every setting also as TRANSLATOR_*.

On SIGTERM or SIGINT the server stops accepting connections and drains: accepted requests are finished for up to
TRANSLATOR_DRAIN_SECONDS, what is left is answered 503 with Retry-After, and the process exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from pathlib import Path

import uvicorn

from service.app import State, create_app
from service.settings import Settings

# uvicorn's own limit for in-flight requests after the signal, past the drain deadline: it is never what answers
DRAIN_MARGIN_SECONDS = 10


class DrainingServer(uvicorn.Server):
    """uvicorn's server, which on the exit signal also starts the app's drain, so that the drain deadline starts
    with the signal and ends before uvicorn's own graceful-shutdown limit."""

    def __init__(self, config: uvicorn.Config, state: State):
        super().__init__(config)
        self.state = state
        self.loop: asyncio.AbstractEventLoop | None = None

    async def serve(self, sockets=None) -> None:
        self.loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame) -> None:
        if self.loop is not None and self.state.ready:
            self.loop.call_soon_threadsafe(self.state.drain)
        super().handle_exit(sig, frame)


def exit_cleanly(signum: int, frame: object) -> None:
    """uvicorn re-raises SIGTERM once its shutdown is done; every request was answered, so exit 0."""
    raise SystemExit(0)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", type=Path)
    p.add_argument("--host")
    p.add_argument("--port", type=int)
    args = p.parse_args(argv)
    settings = Settings(**{k: v for k, v in vars(args).items() if v is not None})
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = create_app(settings)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        timeout_graceful_shutdown=settings.drain_seconds + DRAIN_MARGIN_SECONDS,
    )
    signal.signal(signal.SIGTERM, exit_cleanly)  # uvicorn installs its own while serving, then restores this
    # One worker per process: scale with replicas (and one replica per GPU), not uvicorn workers.
    DrainingServer(config, app.state.translator_state).run()


if __name__ == "__main__":
    main()

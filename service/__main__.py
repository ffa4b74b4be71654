"""python -m service [--model-dir DIR] [--host HOST] [--port PORT]; every setting also as TRANSLATOR_*."""

from __future__ import annotations

import argparse
import logging
import signal
from pathlib import Path

import uvicorn

from service.app import create_app
from service.settings import Settings


def exit_cleanly(signum: int, frame: object) -> None:
    """uvicorn re-raises SIGTERM once its graceful shutdown is done; every request is answered, so exit 0."""
    raise SystemExit(0)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model-dir", type=Path)
    p.add_argument("--host")
    p.add_argument("--port", type=int)
    args = p.parse_args(argv)
    settings = Settings(**{k: v for k, v in vars(args).items() if v is not None})
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    signal.signal(signal.SIGTERM, exit_cleanly)  # uvicorn installs its own while serving, then restores this
    # One worker per process: scale with replicas (and one replica per GPU), not uvicorn workers.
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        timeout_graceful_shutdown=30,
    )


if __name__ == "__main__":
    main()

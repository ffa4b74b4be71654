"""python -m service [--model-dir DIR] [--host HOST] [--port PORT] [--http-workers N]; every setting also as
TRANSLATOR_*.

With HTTP workers (the default: one per core, at most 8), service.supervisor starts the engine process and the
workers; with --http-workers 0, this one process serves everything. On SIGTERM or SIGINT the service stops
accepting connections and drains: accepted requests are finished for up to TRANSLATOR_DRAIN_SECONDS, what is left
is answered 503 with Retry-After, and it exits 0. If the engine dies, it exits 1 (a supervisor restarts it).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from service.app import create_app
from service.server import DrainingServer
from service.settings import Settings
from service.supervisor import Supervisor, setup_logging


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", type=Path)
    p.add_argument("--host")
    p.add_argument("--port", type=int)
    p.add_argument("--http-workers", type=int)
    args = p.parse_args(argv)
    settings = Settings(**{k: v for k, v in vars(args).items() if v is not None})
    setup_logging(settings)
    if settings.http_workers:
        raise SystemExit(Supervisor(settings).run())
    DrainingServer.for_app(create_app(settings), settings).run()


if __name__ == "__main__":
    main()

"""python -m service [--model-dir DIR] [--host HOST] [--port PORT] [--http-workers N]; every setting also as
TRANSLATOR_*.

With HTTP workers (the default: one per core, at most 8), service.supervisor starts the engine process and the
workers; with --http-workers 0, this one process serves everything. On SIGTERM or SIGINT the service stops
accepting connections and drains: accepted requests are finished for up to TRANSLATOR_DRAIN_SECONDS, what is left
is answered 503 with Retry-After, and it exits 0. If the engine dies, it exits 1 (a supervisor restarts it).
"""

from __future__ import annotations

import argparse

from service import __version__, processes
from service.settings import FLAGS, Settings, flag
from service.supervisor import Supervisor


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"mt-service {__version__}")
    for name in FLAGS:
        p.add_argument(flag(name), dest=name, help=Settings.model_fields[name].description)
    args = p.parse_args(argv)
    settings = Settings(**{k: v for k, v in vars(args).items() if v is not None})
    processes.setup_logging(settings)
    if settings.http_workers:
        raise SystemExit(Supervisor(settings).run())
    processes.run(processes.SOLO, settings)  # by name: ONNX Runtime is not loaded where a supervisor runs


if __name__ == "__main__":
    main()

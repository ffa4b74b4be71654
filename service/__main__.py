"""python -m service [--model-dir DIR] [--host HOST] [--port PORT] [--http-workers N]; every setting also as
TRANSLATOR_*.

With HTTP workers (the default: one per core, at most 8), service.supervisor starts the engine process and the
workers; with --http-workers 0, this one process serves everything. On SIGTERM or SIGINT the service stops
accepting connections and drains: accepted requests are finished for up to TRANSLATOR_DRAIN_SECONDS, what is left
is answered 503 with Retry-After, and it exits 0. If the engine dies, it exits 1 (a supervisor restarts it).
"""

from __future__ import annotations

import argparse

from pydantic import ValidationError

from service import __version__, processes
from service.settings import FLAGS, Settings, flag
from service.supervisor import Supervisor


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"mt-service {__version__}")
    for name in FLAGS:
        p.add_argument(flag(name), dest=name, help=Settings.model_fields[name].description)
    args = p.parse_args(argv)
    try:
        settings = Settings(**{k: v for k, v in vars(args).items() if v is not None})
    except ValidationError as error:
        p.exit(2, "".join(map(invalid_setting, error.errors())))
    processes.setup_logging(settings)
    if settings.http_workers:
        raise SystemExit(Supervisor(settings).run())
    processes.run(processes.SOLO, settings)  # by name: ONNX Runtime is not loaded where a supervisor runs


def invalid_setting(error: dict) -> str:
    """One line for one setting that does not validate: its variable (and flag), the value given, what is wrong."""
    name = str(error["loc"][0]) if error["loc"] else ""
    given = Settings.model_config["env_prefix"] + name.upper() + (f" ({flag(name)})" if name in FLAGS else "")
    return f"invalid setting {given} = {error['input']!r}: {error['msg']}\n"


if __name__ == "__main__":
    main()

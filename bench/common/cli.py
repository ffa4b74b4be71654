"""The command line every benchmark shares: its common arguments, and the command that reproduces a run."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from bench.common.defaults import BATCH_SIZES, BEAMS, MODEL_DIR, THREADS


def add_engine_arguments(p: argparse.ArgumentParser, ct2: bool = False) -> None:
    """--model-dir and --threads (and --ct2-dir), with the shared defaults."""
    p.add_argument("--model-dir", type=Path, default=MODEL_DIR, help="exported model folder (with model.pt)")
    p.add_argument("--threads", type=int, default=THREADS, help="inference threads of every engine or server")
    if ct2:
        p.add_argument("--ct2-dir", type=Path, help="CTranslate2 conversion (default: bench/results/tmp/ct2-NAME)")


def add_grid_arguments(p: argparse.ArgumentParser) -> None:
    """--batch-sizes and --beams, with the shared defaults."""
    p.add_argument("--batch-sizes", type=int, nargs="+", default=BATCH_SIZES)
    p.add_argument("--beams", type=int, nargs="+", default=BEAMS)


def parse_settings(pairs: list[str]) -> dict[str, str]:
    """`name=value` pairs (service settings, e.g. precision=int8) as a dict."""
    settings = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--setting wants name=value, got {pair!r}")
        settings[name.strip().lower()] = value.strip()
    return settings


def settings_of(args: argparse.Namespace, *leave_out: str) -> dict:
    """The arguments as JSON values (paths as strings)."""
    return {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if k not in leave_out}


def command_line(module: str, argv: list[str] | None = None) -> str:
    """The command that reproduces this run: python -m MODULE and its arguments."""
    return shlex.join(["python", "-m", module, *(sys.argv[1:] if argv is None else argv)])

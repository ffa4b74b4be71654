"""The graphs of a model folder that model.convert (--export) and model.pull write: `python -m export`, run as a
command (export/ stands on model/, not under it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def export(out: Path, variants: list[str]) -> None:
    """`python -m export out/model.pt --out out --variants ...`; CalledProcessError if it fails."""
    command = [sys.executable, "-m", "export", str(out / "model.pt"), "--out", str(out), "--variants", *variants]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)

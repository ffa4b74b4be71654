"""The graphs of a model folder that model.convert (--export) and model.pull write: `python -m export`, run as a
command (export/ stands on model/, not under it)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path


def export(out: Path, variants: list[str]) -> None:
    """`python -m export out/model.pt --out out --variants ...`; OSError (ENOSPC) where it stopped on a full disk,
    else CalledProcessError where it failed, its errors passed on to stderr."""
    command = [sys.executable, "-m", "export", str(out / "model.pt"), "--out", str(out), "--variants", *variants]
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode and os.strerror(errno.ENOSPC) in done.stderr:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(out))
    sys.stderr.write(done.stderr)
    done.check_returncode()

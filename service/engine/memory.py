"""Memory given back once idle: ONNX Runtime's arenas keep what the largest batch took, and glibc its free pages."""

from __future__ import annotations

import os
from pathlib import Path

RELEASE_GROWTH = 1.25  # memory is given back when idle once the process is this much larger than at start


def resident_bytes() -> int:
    """The process's resident memory (Linux; 0 elsewhere, where nothing is released)."""
    try:
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


class MemoryWatch:
    """The process's size when the watch began, to tell when it has grown enough to give memory back."""

    def __init__(self) -> None:
        self.baseline = resident_bytes()

    def grown(self) -> bool:
        return resident_bytes() > RELEASE_GROWTH * self.baseline

"""Memory given back to the system: glibc keeps the heap pages it frees (the engine's, service.engine.memory, and a
worker's once its documents are answered, service.worker.documents.translate)."""

from __future__ import annotations

import ctypes


def trim_malloc() -> None:
    """glibc's malloc_trim(0): free heap pages go back to the system (elsewhere nothing to do)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass

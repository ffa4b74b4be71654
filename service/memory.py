"""Memory given back to the system: glibc keeps the heap pages it frees (the engine's, service.engine.memory, and a
worker's once its documents are answered, service.worker.documents.translate)."""

from __future__ import annotations

import ctypes
from functools import cache

M_ARENA_MAX = -8  # mallopt's parameter (malloc.h): how many arenas glibc's malloc may make


@cache
def glibc() -> ctypes.CDLL | None:
    """glibc, where the process runs on it (elsewhere None: nothing to do)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "gnu_get_libc_version") else None  # another C library under glibc's name


def one_malloc_arena() -> None:
    """Every thread allocates from glibc's main arena, the one arena whose free top malloc_trim gives back: a
    thread's own arena kept the free top of its heap resident (what a large batch's tensors had taken there, under
    glibc's trim threshold), and a worker thread's arena depends on which threads ran at once. Called as a process
    starts, before its threads allocate (a thread keeps the arena it was given)."""
    if (libc := glibc()) is not None:
        libc.mallopt(M_ARENA_MAX, 1)


def trim_malloc() -> None:
    """glibc's malloc_trim(0): free heap pages go back to the system (elsewhere nothing to do)."""
    if (libc := glibc()) is not None:
        libc.malloc_trim(0)

"""What every process of `python -m service` does alike: log, end with its parent, and start by name.

A process is started by the name of its entry point ("service.engine.process:run"), so that the supervisor
imports neither side: ONNX Runtime is loaded in the engine process only, and an HTTP worker never loads it.
"""

from __future__ import annotations

import ctypes
import importlib
import logging
import multiprocessing
import os
import signal
from multiprocessing.process import BaseProcess

from service.memory import one_malloc_arena
from service.settings import Settings

SPAWN = multiprocessing.get_context("spawn")  # fresh interpreters: no inherited threads, sockets or locks
ENGINE = "service.engine.process:run"
WORKER = "service.worker.process:run"
SOLO = "service.solo:run"  # --http-workers 0: one process serves everything
# Past the drain deadline (TRANSLATOR_DRAIN_SECONDS), for the last answers to go out before anything is killed:
# the supervisor's wait for its processes, and uvicorn's own graceful-shutdown limit, which is never what answers.
DRAIN_MARGIN_SECONDS = 10
PR_SET_PDEATHSIG = 1


def setup_logging(settings: Settings) -> None:
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def entry_point(name: str):
    """The function named "module:function"."""
    module, _, function = name.partition(":")
    return getattr(importlib.import_module(module), function)


def run(name: str, *args: object) -> None:
    """Import and call the entry point `name` with `args` (a spawned process's target), its threads allocating
    from one malloc arena, whose free pages trim_malloc gives back."""
    one_malloc_arena()
    entry_point(name)(*args)


def start(entry: str, process_name: str, *args: object) -> BaseProcess:
    """A fresh interpreter running the entry point `entry` with `args`."""
    process = SPAWN.Process(target=run, name=process_name, args=(entry, *args))
    process.start()
    return process


def end_with_parent(parent: int) -> None:
    """SIGTERM this process when the supervisor dies, even by SIGKILL (Linux's PR_SET_PDEATHSIG): no orphan keeps the
    port or the GPU."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: the supervisor's own shutdown is all there is
        return
    if os.getppid() != parent:  # it died before the call
        os.kill(os.getpid(), signal.SIGTERM)

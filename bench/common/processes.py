"""Engines in processes of their own: a fresh interpreter each, so that imports, memory and threads are its own."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.common.engines import load_engine
from bench.common.machine import peak_rss_mib, rss_mib
from bench.common.timing import timed_run

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from core.search import SearchOptions


class Spawned:
    """target(conn, *args) in a spawned process, spoken to over a pipe; closing the pipe asks it to end."""

    def __init__(self, name: str, target: Callable[..., None], *args: object):
        self.name = name
        context = multiprocessing.get_context("spawn")
        self.conn, child = context.Pipe()
        self.process = context.Process(target=target, args=(child, *args), name=name)
        self.process.start()
        child.close()

    def send(self, message: object) -> None:
        self.conn.send(message)

    def receive(self) -> Any:
        try:
            return self.conn.recv()
        except EOFError:
            self.process.join()
            raise RuntimeError(f"{self.name} ended (exit code {self.process.exitcode})") from None

    def close(self) -> None:
        self.conn.close()
        self.process.join(timeout=60)


def serve_engine(
    conn: Connection, name: str, model_dir: Path, threads: int, ct2_dir: Path | None, pair: tuple[str, str] | None
) -> None:
    """An engine process: load the engine, say its memory, then answer every run asked for until the pipe closes."""
    from core.folder import FolderConfig
    from core.tokenizer import load_tokenizer

    rss_start = rss_mib()
    translate = load_engine(name, model_dir, threads, ct2_dir, pair)
    conn.send({"rss_start_mib": rss_start, "rss_loaded_mib": rss_mib()})
    # target tokens counted alike for every engine: the pieces of the folder's tokenizer (no case tags)
    counter = load_tokenizer(model_dir, FolderConfig.load(model_dir).tokenizer)
    while True:
        try:
            texts, opts, batch_size, in_order = conn.recv()
        except EOFError:
            return
        outputs, seconds = timed_run(translate, texts, opts, batch_size, in_order)
        tokens = sum(len(ids) for ids in counter.encode(outputs))
        conn.send({"seconds": seconds, "target_tokens": tokens, "outputs": outputs, "peak_rss_mib": peak_rss_mib()})


class EngineProcess(Spawned):
    """One engine (bench.common.engines) in a process of its own, so that its peak memory is its own and no engine's
    idle thread pool sits in another's process. `memory`: its RSS before and after loading the engine."""

    def __init__(
        self, name: str, model_dir: Path, threads: int, ct2_dir: Path | None = None, pair: tuple[str, str] | None = None
    ):
        super().__init__(name, serve_engine, name, model_dir, threads, ct2_dir, pair)
        self.memory: dict[str, float] = self.receive()

    def run(self, texts: list[str], opts: SearchOptions, batch_size: int, in_order: bool = False) -> dict:
        """One warmed-up run (timed_run): seconds, target_tokens, outputs and the process's peak_rss_mib so far."""
        self.send((texts, opts, batch_size, in_order))
        return self.receive()

"""The processes of `python -m service`: one engine process that owns the models, and HTTP workers in front of it.

    supervisor (this process)   binds the port, starts the others, replaces a worker that dies, and stops them all
    ├── engine                  service/engine/: the models on ONNX Runtime, their batchers, the workers' link
    └── worker x N              service/worker/: uvicorn + the FastAPI app with a RemoteEngine: parse, check, split,
                                tokenize, answer

The workers share the listening socket (the kernel hands each connection to one of them), and each connects to the
engine's Unix socket (service.channel), which this process binds too; metrics go through prometheus_client's
multiprocess files. If the engine dies, the workers answer 503 and the supervisor exits 1, so that docker or
Kubernetes restarts the service; it never hangs. It exits 1 too when the workers keep dying (more than 10 replaced
within a minute). On SIGTERM or SIGINT every process drains (accepted work finishes up to TRANSLATOR_DRAIN_SECONDS,
what is left gets 503) and the supervisor exits 0.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import tempfile
import time
from collections import deque
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess

from prometheus_client import multiprocess

from service import processes
from service.channel import engine_listener
from service.metrics import MULTIPROCESS_DIR
from service.processes import DRAIN_MARGIN_SECONDS, SPAWN
from service.settings import Settings

log = logging.getLogger(__name__)
ENGINE_GONE_GRACE_SECONDS = 1.0  # for the workers to answer 503 before the supervisor stops them
MAX_WORKER_RESTARTS = 10  # in RESTART_WINDOW_SECONDS: past that, workers are crash-looping and the service exits 1
RESTART_WINDOW_SECONDS = 60.0


def listening_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


class Supervisor:
    def __init__(self, settings: Settings, models: str | None = None):
        """`models` names a stand-in model loader for the engine process ("module:function", service.testing);
        None: the models on ONNX Runtime."""
        self.settings = settings
        self.models = models
        self.listener = listening_socket(settings.host, settings.port)  # first: a failed bind leaves nothing behind
        self.folder = tempfile.mkdtemp(prefix="translator-")  # the engine's socket, metrics files
        self.engine_path = os.path.join(self.folder, "engine")
        self.engine_listener = engine_listener(self.engine_path)
        self.lifeline, self.lifeline_writer = SPAWN.Pipe(duplex=False)
        self.engine: BaseProcess | None = None
        self.workers: list[BaseProcess] = []
        self.stopping = False
        self.restarts: deque[float] = deque()  # when workers were replaced, within the last window

    def run(self) -> int:
        """Start everything and watch it; returns the exit status: 0 after a drain, 1 if the engine died or the
        workers keep dying (a supervisor above, docker or Kubernetes, then restarts the service with its back-off)."""
        os.environ[MULTIPROCESS_DIR] = os.path.join(self.folder, "metrics")  # fresh: no counts of an earlier run
        os.makedirs(os.environ[MULTIPROCESS_DIR])
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._stop)
        try:
            self.engine = processes.start(processes.ENGINE, "engine", self.settings, self.engine_listener,
                                          self.lifeline_writer, os.getpid(), self.models)
            self.lifeline_writer.close()  # the engine holds the only writer now
            self.workers = [self._worker(i) for i in range(self.settings.http_workers)]
            log.info("%d HTTP workers on %s:%d, engine pid %d", len(self.workers), self.settings.host,
                     self.settings.port, self.engine.pid)
            return self._watch()
        finally:
            self._shutdown()
            shutil.rmtree(self.folder, ignore_errors=True)

    def _worker(self, index: int) -> BaseProcess:
        return processes.start(processes.WORKER, f"worker-{index}", self.settings, self.listener,
                               self.engine_path, self.lifeline, os.getpid())

    def _watch(self) -> int:
        while not self.stopping:
            wait([self.engine.sentinel, *(w.sentinel for w in self.workers)], timeout=0.5)
            if self.stopping:
                break
            if not self.engine.is_alive():
                log.critical("the engine process exited with %s: stopping the service", self.engine.exitcode)
                time.sleep(ENGINE_GONE_GRACE_SECONDS)
                return 1
            for i, worker in enumerate(self.workers):
                if not worker.is_alive():
                    log.error("HTTP worker %s exited with %s: replacing it", worker.pid, worker.exitcode)
                    multiprocess.mark_process_dead(worker.pid)  # its live gauges go; its counts stay
                    if self._crash_looping():
                        log.critical("%d HTTP workers died within %.0f s: stopping the service", len(self.restarts),
                                     RESTART_WINDOW_SECONDS)
                        return 1
                    self.workers[i] = self._worker(i)
        return 0

    def _crash_looping(self) -> bool:
        now = time.monotonic()
        self.restarts.append(now)
        while self.restarts[0] < now - RESTART_WINDOW_SECONDS:
            self.restarts.popleft()
        return len(self.restarts) > MAX_WORKER_RESTARTS

    def _stop(self, signum: int, frame: object) -> None:
        """SIGTERM or SIGINT: every process drains; _watch returns and _shutdown waits for them."""
        if not self.stopping:
            log.info("signal %d: draining for up to %.0f s", signum, self.settings.drain_seconds)
        self.stopping = True

    def _shutdown(self) -> None:
        """Signal every process still running, wait for it up to the drain deadline plus a margin, then kill it. The
        port closes first (the workers close their copies on the signal), so newcomers are refused, not queued."""
        self.listener.close()
        self.engine_listener.close()  # the engine has its own copy
        processes = [p for p in (*self.workers, self.engine) if p is not None and p.is_alive()]
        for process in processes:
            os.kill(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.settings.drain_seconds + DRAIN_MARGIN_SECONDS
        for process in processes:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                log.error("%s did not stop in time: killed", process.name)
                process.kill()
                process.join()


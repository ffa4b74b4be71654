"""Run the translation service (`python -m service`) in a subprocess, for benchmarks and tests.

    with running_service("models/en-de", Path("server.log"), max_batch_sentences=1) as service:
        httpx.post(service.url + "/translate", json={"q": "Hello.", "source": "en", "target": "de"})

Every keyword is a setting, passed as its TRANSLATOR_* variable; the context waits until /ready answers
and on leaving sends SIGTERM and waits for the process to end.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]


class ServiceFailed(RuntimeError):
    """The service process died or did not get ready in time."""


@dataclass
class RunningService:
    url: str
    process: subprocess.Popen
    log: Path

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM (a graceful shutdown), then SIGKILL if it has not ended within timeout; the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()


def free_port() -> int:
    """A TCP port on the loopback interface that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def service_env(model_dir: Path, port: int, settings: dict[str, object]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRANSLATOR_")}
    values = {"model_dir": Path(model_dir).resolve(), "host": "127.0.0.1", "port": port, **settings}
    env.update({f"TRANSLATOR_{key.upper()}": str(value) for key, value in values.items()})
    return env


def wait_ready(service: RunningService, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if service.process.poll() is not None:
            raise ServiceFailed(f"the service exited with {service.process.returncode}:\n{service.log_tail()}")
        try:
            if httpx.get(service.url + "/ready", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise ServiceFailed(f"the service was not ready within {timeout:.0f} s:\n{service.log_tail()}")


@contextmanager
def running_service(
    model_dir: Path, log: Path, ready_timeout: float = 120, **settings: object
) -> Iterator[RunningService]:
    """The service on a free loopback port, ready (model loaded and warm), with its output in `log`."""
    port = free_port()
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "service"],
            cwd=REPO,
            env=service_env(model_dir, port, settings),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    service = RunningService(f"http://127.0.0.1:{port}", process, log)
    try:
        wait_ready(service, ready_timeout)
        yield service
    finally:
        service.stop()

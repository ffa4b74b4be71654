"""Start the service in a subprocess and wait until it is ready: for tests, benchmarks and anyone embedding it.

    from service.launch import running_service

    with running_service("models/en-de", Path("service.log"), max_batch_sentences=1) as service:
        print(service.url)  # http://127.0.0.1:PORT, already answering /ready with 200

`running_service` runs `python -m service` on a free loopback port, each keyword a setting passed as its
TRANSLATOR_* variable, the process's output going to the log file. The context is entered once GET /ready answers
200 (the models loaded and warmed up); on leaving it sends SIGTERM, the service's graceful drain, and waits for the
exit. A process that dies or is not ready in time raises ServiceFailed with the end of its output. `running_server`
does the same for any HTTP server's command line. Standard library only: no torch, no HTTP client.
"""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]  # where `python -m service` runs
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never through an HTTP proxy


class ServiceFailed(RuntimeError):
    """The server process died or did not get ready in time."""


@dataclass
class RunningService:
    """A server started by running_service or running_server: its base URL, its process and its output."""

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


def answers_200(url: str) -> bool:
    try:
        with _DIRECT.open(url, timeout=5) as response:
            return response.status == 200
    except (urllib.error.URLError, http.client.HTTPException, OSError):  # not listening yet, or 503: loading
        return False


def wait_until_ready(server: RunningService, path: str, timeout: float) -> None:
    """Poll GET path until it answers 200; ServiceFailed if the process exits first or the time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise ServiceFailed(f"the server exited with {server.process.returncode}:\n{server.log_tail()}")
        if answers_200(server.url + path):
            return
        time.sleep(0.1)
    raise ServiceFailed(f"the server did not answer {path} within {timeout:.0f} s:\n{server.log_tail()}")


@contextmanager
def running_server(
    command: list[str],
    port: int,
    log: Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    ready_path: str = "/ready",
    ready_timeout: float = 120,
) -> Iterator[RunningService]:
    """An HTTP server's command that listens on 127.0.0.1:port, ready once GET ready_path answers 200."""
    with open(log, "wb") as out:
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
    server = RunningService(f"http://127.0.0.1:{port}", process, log)
    try:
        wait_until_ready(server, ready_path, ready_timeout)
        yield server
    finally:
        server.stop()


def service_env(model_dir: Path, port: int, settings: dict[str, object]) -> dict[str, str]:
    """This process's environment without its TRANSLATOR_* variables, plus the service's settings as those."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRANSLATOR_")}
    values = {"model_dir": Path(model_dir).resolve(), "host": "127.0.0.1", "port": port, **settings}
    env.update({f"TRANSLATOR_{key.upper()}": str(value) for key, value in values.items()})
    return env


@contextmanager
def running_service(
    model_dir: Path, log: Path, ready_timeout: float = 120, checkout: Path = REPO, **settings: object
) -> Iterator[RunningService]:
    """`python -m service` of a checkout (this one unless told) serving model_dir on a free loopback port, ready
    (models loaded and warm); its data folder beside the log unless a setting names one."""
    port = free_port()
    settings = {"data_dir": log.parent / "data", **settings}
    command, env = [sys.executable, "-m", "service"], service_env(model_dir, port, settings)
    with running_server(command, port, log, env, checkout, ready_timeout=ready_timeout) as service:
        yield service

"""Debian's PostgreSQL on loopback, in a folder of its own, for the store's tests and benchmarks (`make
system-deps` installs it). As root, which PostgreSQL refuses to run as, its commands run as the postgres user."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from service.launch import free_port


def bin_dir() -> Path:
    """The newest installed PostgreSQL's programs."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[4]))
    if not found:
        raise RuntimeError("PostgreSQL is not installed: `make system-deps` (apt-get install postgresql)")
    return Path(found[-1]).parent


def as_owner(command: list[str]) -> list[str]:
    """`command` as the postgres user when we are root."""
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


@dataclass
class Postgres:
    folder: Path
    port: int

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    @property
    def pid(self) -> int:
        """The server's first process (its backends are its children)."""
        return int((self.folder / "db" / "postmaster.pid").read_text().split()[0])

    def ctl(self, *args: str) -> None:
        command = [str(bin_dir() / "pg_ctl"), "-D", str(self.folder / "db"), "-l", str(self.folder / "log"), *args]
        subprocess.run(as_owner(command), check=True, capture_output=True, timeout=60)

    def start(self) -> None:
        options = f"-h 127.0.0.1 -p {self.port} -k {self.folder} -c fsync=off -c max_connections=200"
        self.ctl("start", "-w", "-o", options)

    def stop(self) -> None:
        self.ctl("stop", "-w", "-m", "fast")

    def database(self, name: str) -> str:
        """A new empty database; its URL."""
        self.psql(f'CREATE DATABASE "{name}"')
        return self.url.rsplit("/", 1)[0] + f"/{name}"

    def psql(self, sql: str, database: str = "postgres") -> str:
        command = [str(bin_dir() / "psql"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d", database,
                   "-At", "-c", sql]
        return subprocess.run(command, check=True, capture_output=True, text=True, timeout=60).stdout


@contextmanager
def running_postgres() -> Iterator[Postgres]:
    folder = Path(tempfile.mkdtemp(prefix="translator-pg-"))
    try:
        if os.geteuid() == 0:
            shutil.chown(folder, "postgres", "postgres")
        initdb = [str(bin_dir() / "initdb"), "-D", str(folder / "db"), "-A", "trust", "-U", "postgres",
                  "--no-sync", "-E", "UTF8"]
        subprocess.run(as_owner(initdb), check=True, capture_output=True, timeout=120)
        server = Postgres(folder, free_port())
        server.start()
        try:
            yield server
        finally:
            server.stop()
    finally:
        shutil.rmtree(folder, ignore_errors=True)

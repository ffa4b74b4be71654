"""The machine a result was measured on, and the memory of its processes (from /proc)."""

from __future__ import annotations

import os
import platform
import subprocess
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

from bench.common.cli import command_line


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def versions(packages: list[str]) -> dict[str, str]:
    """Installed versions of these distributions in this interpreter's environment."""
    found = {}
    for name in packages:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def environment(packages: list[str]) -> dict:
    """The machine and library versions a result was measured with."""
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "versions": versions(packages),
    }


def provenance(module: str) -> dict:
    """When, from which commit and with which command a result was measured."""
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=Path(__file__).parent)
    return {"commit": commit.stdout.strip() or "unknown", "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "command": command_line(module)}


def _proc_status_mib(field: str, pid: int | str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} for process {pid}")


def rss_mib(pid: int | str = "self") -> float:
    """A process's current resident set size (VmRSS), from /proc."""
    return _proc_status_mib("VmRSS", pid)


def descendants(pid: int) -> list[int]:
    """A process's children, their children, and so on (Linux's /proc/PID/task/*/children)."""
    children = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children += [int(c) for c in (task / "children").read_text().split()]
        except OSError:  # the task ended meanwhile
            continue
    return children + [grandchild for child in children for grandchild in descendants(child)]


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(pid: int) -> float:
    """The CPU time of a process and its living descendants; a process that ends meanwhile counts for nothing."""
    total = 0.0
    for member in [pid, *descendants(pid)]:
        try:
            total += cpu_seconds(member)
        except OSError:
            continue
    return total


def _tree_sum_mib(field: str, pid: int) -> float:
    """A /proc status field summed over a process and all its descendants; a process that ends meanwhile counts for
    nothing. Shared pages count once per process, as VmRSS does."""
    total = 0.0
    for member in [pid, *descendants(pid)]:
        try:
            total += _proc_status_mib(field, member)
        except (OSError, RuntimeError):
            continue
    return total


def tree_rss_mib(pid: int) -> float:
    """The resident set size of a process and all its descendants (a service's supervisor, engine and workers)."""
    return _tree_sum_mib("VmRSS", pid)


def tree_peak_rss_mib(pid: int) -> float:
    """The sum of the peak resident set sizes (VmHWM) of a process and its living descendants: an upper bound of the
    tree's peak, since each process may have peaked at another moment."""
    return _tree_sum_mib("VmHWM", pid)


def peak_rss_mib(pid: int | str = "self") -> float:
    """A process's peak resident set size (VmHWM), from /proc.

    Not getrusage's ru_maxrss: Linux carries that over fork and exec, so a worker started by a big
    driver would report the driver's peak.
    """
    return _proc_status_mib("VmHWM", pid)

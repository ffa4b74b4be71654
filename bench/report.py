"""What the benchmark reports share: the machine and library versions, medians, and writing results."""

from __future__ import annotations

import json
import os
import platform
import statistics
from importlib import metadata
from pathlib import Path

from bench.testset import REPO

RESULTS = REPO / "bench" / "results"


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


def _proc_status_mib(field: str, pid: int | str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} for process {pid}")


def rss_mib(pid: int | str = "self") -> float:
    """A process's current resident set size (VmRSS), from /proc."""
    return _proc_status_mib("VmRSS", pid)


def peak_rss_mib(pid: int | str = "self") -> float:
    """A process's peak resident set size (VmHWM), from /proc.

    Not getrusage's ru_maxrss: Linux carries that over fork and exec, so a worker started by a big
    driver would report the driver's peak.
    """
    return _proc_status_mib("VmHWM", pid)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def markdown_table(header: list[str], rows: list[list]) -> str:
    def cell(value) -> str:
        return f"{value:,.1f}" if isinstance(value, float) else str(value)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def write_results(out_dir: Path, name: str, data: dict, markdown: str) -> tuple[Path, Path]:
    """bench/results/NAME.json and NAME.md (or under out_dir)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / f"{name}.json", out_dir / f"{name}.md"
    json_path.write_text(json.dumps(data, indent=2) + "\n")
    md_path.write_text(markdown)
    return json_path, md_path


def log_x_ticks(ax, values: list[int]) -> None:
    """A log x axis labelled at exactly these values (batch sizes, concurrency levels)."""
    from matplotlib.ticker import NullFormatter

    ax.set_xscale("log")
    ax.set_xticks(values, [str(v) for v in values])
    ax.xaxis.set_minor_formatter(NullFormatter())

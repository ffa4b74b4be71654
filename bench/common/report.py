"""What a benchmark reports: medians, markdown tables, result files and figures."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from bench.common.cli import command_line
from bench.common.defaults import REPO
from bench.common.machine import cpu_model


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def markdown_table(header: list[str], rows: list[list]) -> str:
    def cell(value) -> str:
        return f"{value:,.1f}" if isinstance(value, float) else str(value)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def git_commit() -> str:
    """This checkout's commit (short), with "+changes" when tracked files differ from it; "unknown" outside git."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()

    try:
        commit = git("rev-parse", "--short", "HEAD")
        return commit + ("+changes" if git("status", "--porcelain", "--untracked-files=no") else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def provenance(command: str | None = None) -> dict[str, str]:
    """What every result file records: the commit, the date (UTC), the machine's CPU and the command."""
    if command is None:
        main = sys.modules.get("__main__")
        module = getattr(getattr(main, "__spec__", None), "name", None) or Path(sys.argv[0]).stem
        command = command_line(module)
    return {
        "commit": git_commit(),
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": cpu_model(),
        "command": command,
    }


def write_results(out_dir: Path, name: str, data: dict, markdown: str | None = None) -> tuple[Path, ...]:
    """bench/results/NAME.json (or under out_dir), its provenance first (the data's own "command" when it has one),
    and NAME.md beside it when there is markdown."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / f"{name}.json", out_dir / f"{name}.md"
    data = {"provenance": provenance(data.get("command")), **data}
    json_path.write_text(json.dumps(data, indent=2) + "\n")
    if markdown is None:
        return (json_path,)
    md_path.write_text(markdown)
    return json_path, md_path


@contextmanager
def figure(path: Path, panels: int) -> Iterator[list]:
    """The axes of a figure of panels side by side, written to path (PNG) on leaving."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, panels, figsize=(5.5 * panels, 4), squeeze=False)
    yield list(axes[0])
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def log_x_panel(ax, values: list[int]) -> None:
    """A log x axis labelled at exactly these values (batch sizes, concurrency levels), a light grid, the legend."""
    from matplotlib.ticker import NullFormatter

    ax.set_xscale("log")
    ax.set_xticks(values, [str(v) for v in values])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.grid(alpha=0.3)
    ax.legend()

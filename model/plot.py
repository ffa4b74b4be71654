"""Plot a run's losses against step: python -m model.plot RUN_DIR/metrics.jsonl --out loss.png"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure


def read_metrics(path: Path) -> list[dict]:
    """The records of a metrics.jsonl file, one JSON object a line."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def series(records: list[dict], key: str) -> tuple[list[int], list[float]]:
    """Steps and values of one metric; where a resumed run logged a step twice, the later record wins."""
    values = {r["step"]: r[key] for r in records if key in r}
    steps = sorted(values)
    return steps, [values[s] for s in steps]


def loss_keys(records: list[dict]) -> list[str]:
    """train_loss, then the validation losses of every corpus, in the order they first appear."""
    keys = dict.fromkeys(k for r in records for k in r if k == "train_loss" or k.startswith("val_loss/"))
    return sorted(keys, key=lambda k: k != "train_loss")


def plot(records: list[dict], out: Path, title: str = "") -> None:
    """Draw every loss against step into one PNG (or any format matplotlib infers from the suffix)."""
    fig = Figure(figsize=(8, 5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for key in loss_keys(records):
        ax.plot(*series(records, key), label=key, marker=None if key == "train_loss" else "o", markersize=3)
    ax.set(xlabel="step", ylabel="loss (nats per target token)", title=title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.savefig(out, dpi=120, bbox_inches="tight")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("metrics", type=Path, help="a run's metrics.jsonl")
    p.add_argument("--out", type=Path, default=Path("loss.png"))
    args = p.parse_args(argv)
    records = read_metrics(args.metrics)
    if not loss_keys(records):
        raise SystemExit(f"no losses in {args.metrics}")
    plot(records, args.out, title=args.metrics.parent.name)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

"""Make a shippable model.pt from a training run: python -m model.package RUN_DIR --out MODEL_DIR [--average 5]
                                                                       [--also CHECKPOINT ...]

Averages the last N step checkpoints (and any --also checkpoint of the same shape: the model a fine-tune started
from, so that the average keeps what it knew, "weight-space ensembling"), stores the weights in fp16 (half the size;
the PyTorch and ONNX fp32 models are both made from these same rounded weights) and copies the SentencePiece model
beside them.
"""

from __future__ import annotations

import argparse
import shutil
from collections.abc import Sequence
from pathlib import Path

import torch

from model.checkpoint import average_weights, step_checkpoints


def package(run_dir: Path, out: Path, average: int, also: Sequence[Path] = ()) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    last = step_checkpoints(run_dir / "checkpoints")[-average:]
    if not last:
        raise SystemExit(f"no step checkpoints in {run_dir / 'checkpoints'}")
    used = [*also, *last]
    state = average_weights(used)
    state["model"] = {k: v.half() for k, v in state["model"].items()}
    state["averaged"] = [p.name for p in used]
    torch.save(state, out / "model.pt")
    shutil.copy(run_dir / "spm.model", out / "spm.model")
    return used


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", type=Path)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--average", type=int, default=5, help="how many of the last checkpoints to average")
    p.add_argument("--also", type=Path, nargs="+", default=[], help="other checkpoints to average in, as many times "
                   "as named")
    args = p.parse_args(argv)
    used = package(args.run_dir, args.out, args.average, args.also)
    print(f"averaged {', '.join(p.name for p in used)} into {args.out / 'model.pt'}")


if __name__ == "__main__":
    main()

"""Offline translation speed of this checkout against another one (a commit before a change), side by side.

    git worktree add /tmp/base COMMIT
    python -m bench.offline.checkouts /tmp/base [--rounds 4] [--sentences 64] [--batched-sentences 512]
                                      [--precision fp32] [--out bench/results/checkouts.json]

Each round runs one fresh process per checkout, the first of the two alternating: the process imports that checkout's
service.translator (the script runs from this file with the checkout first on sys.path), loads that checkout's own
export of models/en-de (its --precision graphs) with every core, and translates test_2016_flickr greedy and with
beam 4, at batch size 1 (the first --sentences sentences) and 64 (the first --batched-sentences), after one small
untimed run of each shape. Reported are the medians over the rounds and this checkout's ratio to the other; the
machine is noisy, so only the ratios of one run mean much.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

# Not bench.common.defaults: with --measure this file runs as a script with the other checkout first on sys.path,
# which may have no bench.common, so it imports nothing from bench.
REPO = Path(__file__).resolve().parents[2]
SHAPES = [(1, 1), (1, 64), (4, 1), (4, 64)]  # (beam size, batch size)


def measure(sentences: int, batched: int, precision: str) -> dict[str, float]:
    """Sentences/s of each shape, in the checkout first on sys.path (run in a process of its own)."""
    try:
        from core.corpus import load_test_set
    except ImportError:  # a checkout from before core.corpus
        from model.data import load_test_set
    from core.search import SearchOptions
    from service.translator import Translator

    translator = Translator(Path("models/en-de"), precision, threads=os.cpu_count() or 1)
    sources, _ = load_test_set()
    speeds = {}
    for beam, batch_size in SHAPES:
        texts, opts = sources[: sentences if batch_size == 1 else batched], SearchOptions(beam_size=beam)
        translator.translate(texts[:8], opts, batch_size=batch_size)
        started = time.perf_counter()
        translator.translate(texts, opts, batch_size=batch_size)
        speeds[f"beam {beam}, batch {batch_size}"] = len(texts) / (time.perf_counter() - started)
    return speeds


def run_in(checkout: Path, sentences: int, batched: int, precision: str) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    command = [sys.executable, __file__, "--measure", str(sentences), str(batched), precision]
    done = subprocess.run(command, cwd=checkout, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("other", type=Path, help="the other checkout (a git worktree)")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--sentences", type=int, default=64)
    p.add_argument("--batched-sentences", type=int, default=512)
    p.add_argument("--precision", default="fp32", help="which graphs of each checkout's models/en-de")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "checkouts.json")
    args = p.parse_args(argv)
    checkouts = {"this": REPO, "other": args.other.resolve()}
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in checkouts}
    for round_ in range(args.rounds):
        for name in sorted(checkouts, reverse=round_ % 2 == 1):  # who goes first alternates
            runs[name].append(run_in(checkouts[name], args.sentences, args.batched_sentences, args.precision))
    medians = {name: {shape: statistics.median(r[shape] for r in rs) for shape in rs[0]} for name, rs in runs.items()}
    result = {"checkouts": {k: str(v) for k, v in checkouts.items()}, "precision": args.precision,
              "rounds": args.rounds, "runs": runs,
              "medians": medians, "ratio": {s: medians["this"][s] / medians["other"][s] for s in medians["this"]}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print("| shape | this (sentences/s) | other | ratio |\n|---|---|---|---|")
    for shape, ratio in result["ratio"].items():
        print(f"| {shape} | {medians['this'][shape]:.1f} | {medians['other'][shape]:.1f} | {ratio:.2f}× |")
    return result


if __name__ == "__main__":
    if sys.argv[1:2] == ["--measure"]:
        sys.path.insert(0, os.getcwd())
        print(json.dumps(measure(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])))
    else:
        main()

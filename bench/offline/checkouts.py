"""Offline translation speed of this checkout against another one (a commit before a change), side by side.

    git worktree add /tmp/base COMMIT
    python -m bench.offline.checkouts /tmp/base [--rounds 4] [--sentences 64] [--batched-sentences 512]
                                      [--batch-sizes 1 64] [--threads N] [--clock wall] [--precision fp32] [--guards]
                                      [--model-dir models/en-de] [--other-model-dir DIR]
                                      [--out bench/results/checkouts.json]

Each round runs one fresh process per checkout, the first of the two alternating: the process imports that checkout's
service.translator (the script runs from this file with the checkout first on sys.path), loads that checkout's own
export of models/en-de (its --precision graphs; --model-dir and --other-model-dir name other folders, relative to
each checkout) with --threads threads (default: every core), and translates test_2016_flickr greedy and with beam
4, at batch size 1 (the first --sentences sentences) and each other --batch-sizes (the first --batched-sentences),
after one small untimed run of each shape. --clock cpu times by the process's CPU time (time.process_time) rather
than the wall clock: with one thread, a measure of the work done that the programs beside it on a shared machine
disturb much less (their share of the cores does not count, their use of the caches still does). Reported are the
medians over the rounds and this checkout's ratio to the other (of sentences per second: above 1 is faster); the
machine is noisy, so only the ratios of one run mean much. --guards: every translation with the service's repetition
guards (its settings' defaults, as each checkout has them), as the service translates.
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
BEAMS = [1, 4]


def measure(sentences: int, batched: int, precision: str, model_dir: str, threads: int, batch_sizes: list[int],
            clock: str, guarded: bool = False) -> dict[str, float]:
    """Sentences/s of each shape, in the checkout first on sys.path (run in a process of its own)."""
    try:
        from core.corpus import load_test_set
    except ImportError:  # a checkout from before core.corpus
        from model.data import load_test_set
    from core.search import SearchOptions
    from service.settings import Settings
    from service.translator import Translator

    defaults = Settings()
    guards = {"repetition_penalty": defaults.repetition_penalty, "no_repeat_ngram_size": defaults.no_repeat_ngram_size,
              "ngram_repeats": defaults.ngram_repeats} if guarded else {}
    translator = Translator(Path(model_dir), precision, threads=threads)
    sources, _ = load_test_set()
    speeds = {}
    for beam, batch_size in [(beam, batch_size) for beam in BEAMS for batch_size in batch_sizes]:
        texts, opts = sources[: sentences if batch_size == 1 else batched], SearchOptions(beam_size=beam, **guards)
        translator.translate(texts[:8], opts, batch_size=batch_size)
        now = time.process_time if clock == "cpu" else time.perf_counter
        started = now()
        translator.translate(texts, opts, batch_size=batch_size)
        speeds[f"beam {beam}, batch {batch_size}"] = len(texts) / (now() - started)
    return speeds


def run_in(checkout: Path, args: argparse.Namespace, model_dir: Path) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    settings = [args.sentences, args.batched_sentences, args.precision, str(model_dir), args.threads,
                args.batch_sizes, args.clock, args.guards]
    command = [sys.executable, __file__, "--measure", json.dumps(settings)]
    done = subprocess.run(command, cwd=checkout, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("other", type=Path, help="the other checkout (a git worktree)")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--sentences", type=int, default=64)
    p.add_argument("--batched-sentences", type=int, default=512)
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 64])
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--clock", choices=["wall", "cpu"], default="wall", help="what times a shape (see above)")
    p.add_argument("--precision", default="fp32", help="which graphs of each checkout's model folder")
    p.add_argument("--model-dir", type=Path, default=Path("models/en-de"), help="this checkout's model folder")
    p.add_argument("--other-model-dir", type=Path, help="the other checkout's (default: --model-dir)")
    p.add_argument("--guards", action="store_true", help="with the service's repetition guards")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "checkouts.json")
    args = p.parse_args(argv)
    checkouts = {"this": REPO, "other": args.other.resolve()}
    model_dirs = {"this": args.model_dir, "other": args.other_model_dir or args.model_dir}
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in checkouts}
    for round_ in range(args.rounds):
        for name in sorted(checkouts, reverse=round_ % 2 == 1):  # who goes first alternates
            runs[name].append(run_in(checkouts[name], args, model_dirs[name]))
    medians = {name: {shape: statistics.median(r[shape] for r in rs) for shape in rs[0]} for name, rs in runs.items()}
    result = {"checkouts": {k: str(v) for k, v in checkouts.items()}, "precision": args.precision,
              "model_dirs": {k: str(v) for k, v in model_dirs.items()}, "threads": args.threads, "clock": args.clock,
              "guards": args.guards,
              "rounds": args.rounds, "runs": runs,
              "medians": medians, "ratio": {s: medians["this"][s] / medians["other"][s] for s in medians["this"]}}
    from bench.common.report import write_results  # here: the --measure side imports nothing from bench

    write_results(args.out.parent, args.out.stem, result)
    print("| shape | this (sentences/s) | other | ratio |\n|---|---|---|---|")
    for shape, ratio in result["ratio"].items():
        print(f"| {shape} | {medians['this'][shape]:.1f} | {medians['other'][shape]:.1f} | {ratio:.2f}× |")
    return result


if __name__ == "__main__":
    if sys.argv[1:2] == ["--measure"]:
        sys.path.insert(0, os.getcwd())
        print(json.dumps(measure(*json.loads(sys.argv[2]))))
    else:
        main()

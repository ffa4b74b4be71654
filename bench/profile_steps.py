"""Where our translator's time goes per decoding step: inside ONNX Runtime, or in Python around it.

    python -m bench.profile_steps [--model-dir models/en-de] [--precision fp32] [--threads 2]
                                  [--batch-sizes 1 16 64] [--beams 1 4] [--sentences 200]

Wraps, in this process only, the runs of the translator's encoder, decoder and select (the cache reordering)
sessions and the tokenizer, then translates the first N test sentences in batches.
Everything else is the search in NumPy (for beam search: candidates, sorting, finished hypotheses) plus glue.
CTranslate2 translates the same batches for comparison (its total only: it is all C++).
Writes bench/results/profile.json and profile.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from bench.engines import ensure_ct2_model, translate_in_batches
from bench.report import RESULTS, environment, markdown_table, write_results
from bench.testset import DEFAULT_SPLIT, REPO, load_test_set
from service.search import SearchOptions
from service.translator import Translator

PARTS = ["encoder", "decoder", "select", "tokenizer"]


class Stopwatch:
    """Total seconds and calls of wrapped functions, by name."""

    def __init__(self):
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)

    def wrap(self, name: str, fn: Callable) -> Callable:
        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[name] += time.perf_counter() - started
                self.calls[name] += 1

        return timed

    def reset(self) -> None:
        self.seconds.clear()
        self.calls.clear()


def instrument(t: Translator, watch: Stopwatch) -> None:
    t.encoder.run_with_iobinding = watch.wrap("encoder", t.encoder.run_with_iobinding)
    t.decoder.run_with_iobinding = watch.wrap("decoder", t.decoder.run_with_iobinding)
    t.select.run_with_iobinding = watch.wrap("select", t.select.run_with_iobinding)
    t.tokenizer.encode = watch.wrap("tokenizer", t.tokenizer.encode)
    t.tokenizer.decode = watch.wrap("tokenizer", t.tokenizer.decode)


def profile_run(translate: Callable, watch: Stopwatch, texts: list[str], batch_size: int, beam: int) -> dict:
    """One timed pass; milliseconds per decoder step, by part."""
    opts = SearchOptions(beam_size=beam)
    translate(texts[:batch_size], opts)  # warm-up at this shape
    watch.reset()
    started = time.perf_counter()
    translate_in_batches(translate, texts, batch_size, opts)
    total = time.perf_counter() - started
    steps = max(watch.calls["decoder"], 1)
    parts = {name: watch.seconds[name] for name in PARTS}
    parts["search and glue"] = total - sum(parts.values())
    return {
        "batch_size": batch_size,
        "beam_size": beam,
        "seconds": total,
        "decoder_steps": watch.calls["decoder"],
        "ms_per_step": {name: 1000 * s / steps for name, s in parts.items()},
        "share": {name: s / total for name, s in parts.items()},
    }


def ct2_seconds(ct2_dir: Path, threads: int, compute_type: str, texts: list[str], batch_size: int, beam: int) -> float:
    from bench.ct2_engine import CT2Translator

    translate = CT2Translator(ct2_dir, compute_type=compute_type, threads=threads).translate
    opts = SearchOptions(beam_size=beam)
    translate(texts[:batch_size], opts)
    started = time.perf_counter()
    translate_in_batches(translate, texts, batch_size, opts)
    return time.perf_counter() - started


def markdown(result: dict) -> str:
    header = ["batch", "beam", "steps", "total s", "CT2 total s"] + [f"{p} ms/step" for p in PARTS]
    header += ["search+glue ms/step", "ORT share"]
    rows = []
    for r in result["runs"]:
        ms, share = r["ms_per_step"], r["share"]
        ort_share = share["encoder"] + share["decoder"]
        rows.append(
            [r["batch_size"], r["beam_size"], r["decoder_steps"], f"{r['seconds']:.2f}", f"{r['ct2_seconds']:.2f}"]
            + [f"{ms[p]:.2f}" for p in PARTS]
            + [f"{ms['search and glue']:.2f}", f"{ort_share:.0%}"]
        )
    s = result["settings"]
    return (
        f"Our translator ({s['precision']}, {s['threads']} threads) on {s['sentences']} test sentences; "
        f"per decoder step (one session.run of the decoder for the whole batch).\n\n" + markdown_table(header, rows)
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", type=Path, default=REPO / "models/en-de")
    p.add_argument("--ct2-dir", type=Path, help="CTranslate2 conversion (default: bench/results/tmp/ct2-NAME)")
    p.add_argument("--precision", default="fp32", choices=["fp32", "int8"])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 16, 64])
    p.add_argument("--beams", type=int, nargs="+", default=[1, 4])
    p.add_argument("--sentences", type=int, default=200)
    p.add_argument("--split", default=DEFAULT_SPLIT)
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    args.ct2_dir = args.ct2_dir or RESULTS / "tmp" / f"ct2-{args.model_dir.resolve().name}"
    ensure_ct2_model(args.model_dir, args.ct2_dir)
    texts = load_test_set(args.split)[0][: args.sentences]
    t = Translator(args.model_dir, precision=args.precision, provider="cpu", threads=args.threads)
    watch = Stopwatch()
    instrument(t, watch)

    def translate(batch: list[str], opts: SearchOptions) -> list[str]:
        return [h[0].text for h in t.translate(batch, opts, batch_size=len(batch))]

    runs = []
    compute_type = {"fp32": "float32", "int8": "int8"}[args.precision]
    for beam in args.beams:
        for batch_size in args.batch_sizes:
            run = profile_run(translate, watch, texts, batch_size, beam)
            run["ct2_seconds"] = ct2_seconds(args.ct2_dir, args.threads, compute_type, texts, batch_size, beam)
            runs.append(run)
            print(f"batch {batch_size} beam {beam}: {run['ms_per_step']}", file=sys.stderr)
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if k != "out"}
    result = {"environment": environment(["onnxruntime", "ctranslate2", "numpy"]), "settings": settings, "runs": runs}
    for path in write_results(args.out, "profile", result, markdown(result)):
        print(path)


if __name__ == "__main__":
    main()

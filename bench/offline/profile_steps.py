"""Where our translator's time goes per decoding step: inside ONNX Runtime, or in Python around it.

    python -m bench.offline.profile_steps [--model-dir models/en-de] [--precision fp32] [--threads N]
                                          [--batch-sizes 1 16 64] [--beams 1 4] [--sentences 200] [--no-ct2]

Wraps, in this process only, the runs of the translator's encoder, decoder, select (the cache reordering: the select
graph, or with our kernels the move graph) and join (appending rows, growing the cache) sessions and the tokenizer,
then translates the first N test sentences in batches.
Everything else is the search in NumPy (for beam search: candidates, sorting, finished hypotheses) plus glue.
CTranslate2 translates the same batches for comparison (its total only: it is all C++), unless --no-ct2 (a folder
it cannot convert, such as a converted Marian model: bench.common.micro_model's).
Writes bench/results/profile.json and profile.md.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from bench.common.cli import add_engine_arguments, add_grid_arguments, settings_of
from bench.common.defaults import RESULTS, SHORT_RUN_SENTENCES
from bench.common.engines import COMPUTE_TYPES, Translate, ensure_ct2_model, load_engine, ort_engine
from bench.common.machine import environment
from bench.common.report import markdown_table, write_results
from bench.common.sentences import multi30k_sentences
from bench.common.timing import timed, timed_run, translate_all, warm_up
from core.corpus import TEST_SPLIT
from core.search import SearchOptions
from service.translator import Translator

PARTS = ["encoder", "decoder", "select", "join", "tokenizer"]


class Stopwatch:
    """Total seconds and calls of wrapped functions, by name."""

    def __init__(self):
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)

    def wrap(self, name: str, fn: Callable) -> Callable:
        def wrapped(*args, **kwargs):
            result, seconds = timed(fn, *args, **kwargs)
            self.seconds[name] += seconds
            self.calls[name] += 1
            return result

        return wrapped

    def reset(self) -> None:
        self.seconds.clear()
        self.calls.clear()


def instrument(t: Translator, watch: Stopwatch) -> None:
    sessions = t.sessions
    sessions.encoder.run_with_iobinding = watch.wrap("encoder", sessions.encoder.run_with_iobinding)
    sessions.decoder.run_with_iobinding = watch.wrap("decoder", sessions.decoder.run_with_iobinding)
    sessions.select.run_with_iobinding = watch.wrap("select", sessions.select.run_with_iobinding)
    if sessions.move is not None:  # with our kernels, the rows move in place rather than through the select graph
        sessions.move.run_with_iobinding = watch.wrap("select", sessions.move.run_with_iobinding)
    sessions.join.run_with_iobinding = watch.wrap("join", sessions.join.run_with_iobinding)
    t.tokenizer.encode = watch.wrap("tokenizer", t.tokenizer.encode)
    t.tokenizer.decode = watch.wrap("tokenizer", t.tokenizer.decode)


def profile_run(translate: Translate, watch: Stopwatch, texts: list[str], batch_size: int, beam: int) -> dict:
    """One timed pass; milliseconds per decoder step, by part."""
    opts = SearchOptions(beam_size=beam)
    warm_up(translate, texts, opts, batch_size)
    watch.reset()
    _, total = timed(translate_all, translate, texts, opts, batch_size, in_order=True)
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


def markdown(result: dict) -> str:
    header = ["batch", "beam", "steps", "total s", "CT2 total s"] + [f"{p} ms/step" for p in PARTS]
    header += ["search+glue ms/step", "ORT share"]
    rows = []
    for r in result["runs"]:
        ms, share = r["ms_per_step"], r["share"]
        ort_share = share["encoder"] + share["decoder"]
        rows.append(
            [r["batch_size"], r["beam_size"], r["decoder_steps"], f"{r['seconds']:.2f}",
             f"{r['ct2_seconds']:.2f}" if "ct2_seconds" in r else "-"]
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
    add_engine_arguments(p, ct2=True)
    p.add_argument("--precision", default="fp32", choices=["fp32", "int8"])
    add_grid_arguments(p)
    p.add_argument("--sentences", type=int, default=SHORT_RUN_SENTENCES)
    p.add_argument("--split", default=TEST_SPLIT)
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--no-ct2", action="store_true", help="leave CTranslate2 out")
    args = p.parse_args(argv)
    texts = multi30k_sentences(split=args.split)[: args.sentences]
    t = Translator(args.model_dir, precision=args.precision, provider="cpu", threads=args.threads)
    watch = Stopwatch()
    instrument(t, watch)
    translate = ort_engine(t)
    ct2 = None
    if not args.no_ct2:
        args.ct2_dir = ensure_ct2_model(args.model_dir, args.ct2_dir)
        ct2 = load_engine(f"ct2-{COMPUTE_TYPES[args.precision]}", args.model_dir, args.threads, args.ct2_dir)
    runs = []
    for beam in args.beams:
        for batch_size in args.batch_sizes:
            run = profile_run(translate, watch, texts, batch_size, beam)
            if ct2:
                _, run["ct2_seconds"] = timed_run(ct2, texts, SearchOptions(beam_size=beam), batch_size, in_order=True)
            runs.append(run)
            print(f"batch {batch_size} beam {beam}: {run['ms_per_step']}", file=sys.stderr)
    settings = settings_of(args, "out")
    result = {"environment": environment(["onnxruntime", "ctranslate2", "numpy"]), "settings": settings, "runs": runs}
    for path in write_results(args.out, "profile", result, markdown(result)):
        print(path)


if __name__ == "__main__":
    main()

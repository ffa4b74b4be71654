"""The bound of the output projection: how close each engine comes to the time of its largest product alone.

    python -m bench.offline.projection_bound [--model-dir models/en-de] [--threads 1] [--batch-size 64]
                                             [--beams 1 4] [--sentences 1000] [--rounds 3]

A decoding step's largest product is the output projection, (rows, d_model) x (d_model, vocabulary). An engine can be
no faster than that product alone, run for every step of the translation:
1. Our translator (fp32, the CPU provider) translates the first N test sentences in corpus order, in batches of the
   batch size, while the rows of every decoder step are recorded (a finished sentence leaves the batch, so the rows
   are what the translation needs).
2. The same products alone: for each row count met, a random (rows, d_model) by (d_model, vocabulary) product in
   ONNX Runtime (one MatMul node, its CPU provider) and in PyTorch (its BLAS), each on the same threads, timed
   REPEATS times; the bound is the sum over the steps of the faster one's median.
3. Our translator and CTranslate2 (float32, the same weights) translate the same batches in interleaved rounds.
Reported per beam: the bound, each engine's median time, and the bound's share of it (1.0 would be the projection
alone). Writes bench/results/projection-bound.json and .md.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from pathlib import Path

import numpy as np
import onnxruntime as ort

from bench.common.cli import add_engine_arguments, command_line
from bench.common.ct2_engine import CT2Translator
from bench.common.defaults import REPEATS, RESULTS, RUN_SENTENCES
from bench.common.engines import ensure_ct2_model, ort_engine
from bench.common.machine import environment
from bench.common.report import markdown_table, median, write_results
from bench.common.sentences import multi30k_sentences
from bench.common.timing import rotation, timed_run
from core.folder import IR_VERSION, OPSET, FolderConfig
from core.search import SearchOptions
from service.engine.decoder import EagerDecoder
from service.translator import Translator

PRODUCT_REPEATS = 20  # timed runs of each row count's product alone


def step_rows(translator: Translator, texts: list[str], opts: SearchOptions, batch_size: int) -> list[int]:
    """The rows of every decoder step while `translator` translates texts in batches, in corpus order."""
    rows: list[int] = []
    step = EagerDecoder.step

    def counted(decoder: EagerDecoder, tokens: np.ndarray, width: int, log_probs: bool = True):
        rows.append(len(tokens))
        return step(decoder, tokens, width, log_probs)

    EagerDecoder.step = counted
    try:
        for begin in range(0, len(texts), batch_size):
            translator.translate(texts[begin : begin + batch_size], opts, batch_size=batch_size)
    finally:
        EagerDecoder.step = step
    return rows


def matmul_session(d_model: int, vocab: int, threads: int) -> ort.InferenceSession:
    """One MatMul node, x (rows, d_model) by a random weight (d_model, vocab), on ONNX Runtime's CPU provider."""
    from onnx import TensorProto, helper, numpy_helper

    weight = np.random.default_rng(0).standard_normal((d_model, vocab), dtype=np.float32) / d_model**0.5
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "projection",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", d_model])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", vocab])],
        [numpy_helper.from_array(weight, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def product_seconds(run, x: np.ndarray) -> float:
    """The median seconds of run(x) over PRODUCT_REPEATS runs, after one untimed."""
    run(x)
    seconds = []
    for _ in range(PRODUCT_REPEATS):
        start = time.perf_counter()
        run(x)
        seconds.append(time.perf_counter() - start)
    return median(seconds)


def products(row_counts: Counter, d_model: int, vocab: int, threads: int) -> dict:
    """Each library's median seconds of the product at each row count met, and the bound: the sum over the steps of
    the faster one's."""
    import torch

    torch.set_num_threads(threads)
    session = matmul_session(d_model, vocab, threads)
    weight = torch.randn(d_model, vocab) / d_model**0.5
    libraries = {
        "onnxruntime": lambda x: session.run(None, {"x": x}),
        "pytorch": lambda x: torch.from_numpy(x) @ weight,
    }
    per_rows = {name: {} for name in libraries}
    for rows in sorted(row_counts):
        x = np.random.default_rng(rows).standard_normal((rows, d_model), dtype=np.float32)
        for name, run in libraries.items():
            per_rows[name][rows] = product_seconds(run, x)
    bound = sum(count * min(per_rows[name][rows] for name in libraries) for rows, count in row_counts.items())
    alone = {name: sum(count * per_rows[name][rows] for rows, count in row_counts.items()) for name in libraries}
    return {"bound_s": bound, "library_s": alone}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_engine_arguments(p, ct2=True)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--beams", type=int, nargs="+", default=[1, 4])
    p.add_argument("--sentences", type=int, default=RUN_SENTENCES)
    p.add_argument("--rounds", type=int, default=REPEATS)
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)

    cfg = FolderConfig.load(args.model_dir).model
    texts = multi30k_sentences()[: args.sentences]
    translator = Translator(args.model_dir, "fp32", provider="cpu", threads=args.threads)
    ct2 = CT2Translator(ensure_ct2_model(args.model_dir, args.ct2_dir), "float32", threads=args.threads)
    engines = {"ours": ort_engine(translator), "ctranslate2": ct2.translate}
    runs = []
    for beam in args.beams:
        opts = SearchOptions(beam_size=beam)
        rows = step_rows(translator, texts, opts, args.batch_size)
        bound = products(Counter(rows), cfg.d_model, cfg.vocab_size, args.threads)
        seconds = {name: [] for name in engines}
        for round_ in range(args.rounds):
            for name in rotation(list(engines), round_):
                seconds[name].append(timed_run(engines[name], texts, opts, args.batch_size, in_order=True)[1])
        engine_s = {name: median(values) for name, values in seconds.items()}
        runs.append({
            "beam": beam, "batch_size": args.batch_size, "steps": len(rows), "step_rows": sum(rows),
            **bound, "engine_s": engine_s, "bound_share": {name: bound["bound_s"] / s for name, s in engine_s.items()},
        })
        print(runs[-1], flush=True)

    table = markdown_table(
        ["beam", "steps", "rows", "bound s", "ORT product s", "PyTorch product s", "ours s", "CTranslate2 s",
         "bound / ours", "bound / CTranslate2"],
        [[r["beam"], r["steps"], r["step_rows"], f"{r['bound_s']:.3f}", f"{r['library_s']['onnxruntime']:.3f}",
          f"{r['library_s']['pytorch']:.3f}", f"{r['engine_s']['ours']:.3f}", f"{r['engine_s']['ctranslate2']:.3f}",
          f"{r['bound_share']['ours']:.2f}", f"{r['bound_share']['ctranslate2']:.2f}"] for r in runs],
    )
    markdown = (f"The output projection ({cfg.d_model} x {cfg.vocab_size}) alone, for every decoder step of "
                f"{len(texts)} test sentences at batch {args.batch_size}, against each engine's time, "
                f"{args.threads} thread(s), fp32.\n\n{table}")
    data = {"command": command_line("bench.offline.projection_bound", argv), "args": vars(args) | {
        "model_dir": str(args.model_dir), "ct2_dir": str(args.ct2_dir), "out": str(args.out)},
        "environment": environment(["onnxruntime", "ctranslate2", "torch"]), "runs": runs}
    for path in write_results(args.out, "projection-bound", data, markdown):
        print(path)


if __name__ == "__main__":
    main()

"""Other attention kernels against our decoder step's, on the CPU: behind the choice of the exported step's
attention (a ScatterND slot write and an ONNX Attention node, model.transformer.DecoderLayer).

    python -m bench.studies.decoding_attention [--checkpoint models/en-de/model.pt] [--rows 1 4 16 64]
                                               [--slots 24] [--rounds 8] [--precision fp32]
                                               [--variant-folder DIR --model-dir DIR]
                                               [--name decoding-attention] [--out bench/results]

The checkpoint's decoder step is exported as `python -m export` exports it (export.graphs.DecoderGraph) and as
variants with the same inputs and outputs (so that any of them serves as a folder's decoder.onnx):
- group-query: each self-attention one com.microsoft GroupQueryAttention of ONNX Runtime (GroupQueryStep): one Gemm
  for the packed query, key and value, the slot written in place at each row's position, attention over positions
  0..p alone, no index or mask built;
- kernels (where service.engine.kernels.build has built them): the export with every attention, self and cross, one
  operator of our own, the slot write included, and the log-softmax and top-k one more, as the service runs it on
  the CPU (service.engine.kernels.graph).
--precision int8 quantizes the export and group-query as export.quantize makes a folder's int8 graphs (the kernels
variant rewrites the quantized export). Each graph runs on the CPU provider with one thread and the service's
session options, the caches bound in place as service.engine.decoder.ExportedDecoder binds them, at each row count with
`slots` cache slots (positions drawn below it); reported are each variant's agreement with the export (logits,
caches, best tokens) and the CPU time of one run, the median over interleaved rounds of the mean of many runs, and
its time over the export's.

ONNX Runtime 1.31 has GroupQueryAttention kernels on the CPU in fp32 and on CUDA in fp16 and bf16 only
(tests/data/ort-1.31-cuda-kernels.json): a folder's fp32 graphs, which also run on CUDA, could not use it.
--variant-folder writes a copy of --model-dir with group-query as its decoder of that precision, for
bench.offline.checkouts to translate with (--model-dir DIR --other-model-dir the original).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
import torch.nn.functional as F
from torch import Tensor

from bench.common.cli import command_line, settings_of
from bench.common.defaults import RESULTS
from bench.common.machine import environment
from bench.common.report import markdown_table, median, write_results
from bench.common.timing import rotation
from bench.offline.gpu_check import Bucket, step_arrays, step_binding
from core.folder import GraphIO, ModelConfig
from export.__main__ import graph_names
from export.graphs import DecoderGraph, export_decoder, flatten, pairs
from export.quantize import quantize_int8
from model.checkpoint import load_model
from model.transformer import MultiHeadAttention
from service.engine.decoder import NO_CROSS, NO_TABLE
from service.engine.kernels import built_library
from service.engine.kernels.graph import CROSS_FROM, SLOT_ROWS, with_kernels
from service.engine.sessions import CPU_UNFUSED, session_options


def group_query_attention(qkv: Tensor, cache_k: Tensor, cache_v: Tensor, positions: Tensor, slots: Tensor,
                          n_heads: int) -> tuple[Tensor, Tensor, Tensor]:
    """com.microsoft GroupQueryAttention of one step's packed (N, 1, 3D) queries, keys and values over caches
    (N, H, L, Dh) that its outputs share: row i's key and value go to slot positions[i], its query attends to slots
    0..positions[i]. Exported only (ONNX Runtime computes it)."""
    n, _, width = qkv.shape
    out, cache_k, cache_v = torch.onnx.ops.symbolic_multi_out(
        "com.microsoft::GroupQueryAttention",
        (qkv, None, None, cache_k, cache_v, positions.to(torch.int32), slots),
        {"num_heads": n_heads, "kv_num_heads": n_heads},
        dtypes=(qkv.dtype, cache_k.dtype, cache_v.dtype), shapes=((n, 1, width // 3), cache_k.shape, cache_v.shape),
        version=1,
    )
    return out, cache_k, cache_v


class VariantStep(DecoderGraph):
    """DecoderGraph's step with the attention a subclass computes; the rest as model.transformer has it."""

    def forward(
        self, tokens: Tensor, positions: Tensor, src_mask: Tensor, self_kv: list[Tensor], cross_kv: list[Tensor]
    ) -> tuple[Tensor, ...]:
        m = self.model
        x = m.embed_tokens(tokens, positions)
        slots = torch.tensor(self_kv[0].shape[2], dtype=torch.int32)  # the caches' length
        new_kv = []
        for layer, (cache_k, cache_v), (cross_k, cross_v) in zip(m.decoder, pairs(self_kv), pairs(cross_kv)):
            h = layer.res_self.input(x)
            y, cache_k, cache_v = self.self_attention(layer.self_attn, h, cache_k, cache_v, positions, slots)
            x = layer.res_self.output(x, y)
            h = layer.res_cross.input(x)
            x = layer.res_cross.output(x, self.cross_attention(layer.cross_attn, h, cross_k, cross_v, src_mask))
            x = layer.res_ffn.output(x, layer.ffn(layer.res_ffn.input(x)))
            new_kv.append((cache_k, cache_v))
        return m.project(x), *flatten(new_kv)

    def self_attention(self, a: MultiHeadAttention, h: Tensor, cache_k: Tensor, cache_v: Tensor, positions: Tensor,
                       slots: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The sub-layer's output (N, D) and the caches with each row's slot written."""
        raise NotImplementedError

    def cross_attention(self, c: MultiHeadAttention, h: Tensor, cross_k: Tensor, cross_v: Tensor,
                        src_mask: Tensor) -> Tensor:
        return c(h, cross_k, cross_v, src_mask[:, None, None, :])


class GroupQueryStep(VariantStep):
    """Each self-attention one GroupQueryAttention (a static cache: its length is `slots`)."""

    def self_attention(self, a, h, cache_k, cache_v, positions, slots):
        weight = torch.cat([a.w_q.weight, a.w_k.weight, a.w_v.weight])
        bias = torch.cat([a.w_q.bias, a.w_k.bias, a.w_v.bias])
        qkv = F.linear(h, weight, bias)[:, None, :]
        out, cache_k, cache_v = group_query_attention(qkv, cache_k, cache_v, positions, slots, a.n_heads)
        return a.w_o(out[:, 0, :]), cache_k, cache_v


SOURCE = 14  # source tokens of the step's rows, padding included (each row's own length drawn below it)
VARIANTS = {"export": DecoderGraph, "group-query": GroupQueryStep}  # the step graphs exported


def cpu_session(path: Path, optimized: Path | None = None) -> ort.InferenceSession:
    """A session as the service makes it on the CPU, one thread, with our kernels' library where built."""
    options, library = session_options(1, "all"), built_library()
    if library:
        options.register_custom_ops_library(str(library))
    if optimized:
        options.optimized_model_filepath = str(optimized)
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"],
                                disabled_optimizers=CPU_UNFUSED)


class BoundStep:
    """One graph's session with a step's inputs bound as bench.offline.gpu_check binds them (each self-attention cache
    written in place), and its logits too."""

    def __init__(self, path: Path, arrays: dict[str, np.ndarray]):
        self.session = cpu_session(path)
        inputs = {x.name for x in self.session.get_inputs()}
        empty = {SLOT_ROWS: NO_TABLE, CROSS_FROM: NO_CROSS}  # every row reads its own, as a greedy batch binds them
        arrays = {**{name: value for name, value in empty.items() if name in inputs}, **arrays}
        self.binding, held = step_binding(self.session, arrays, "cpu")
        self.binding.bind_output(GraphIO.LOGITS)
        self.caches = dict(zip([n for n in arrays if n.startswith((f"{GraphIO.SELF}_", f"{GraphIO.CROSS}_"))], held))
        self.top_tokens, self.top_logp = held[-2:]

    def run(self) -> dict[str, np.ndarray]:
        """One run: its logits, its best tokens and its self-attention caches after it. The caches copied: a cache's
        OrtValue shares the memory of an array that only this step holds, which goes with it."""
        self.session.run_with_iobinding(self.binding)
        caches = {name: v.numpy().copy() for name, v in self.caches.items() if name.startswith(f"{GraphIO.SELF}_")}
        logits = self.binding.get_outputs()[-1]  # bound last
        return {**caches, GraphIO.LOGITS: logits.numpy(), GraphIO.TOP_TOKENS: self.top_tokens.numpy(),
                GraphIO.TOP_LOGP: self.top_logp.numpy()}

    def microseconds(self, runs: int) -> float:
        started = time.process_time()
        for _ in range(runs):
            self.session.run_with_iobinding(self.binding)
        return (time.process_time() - started) / runs * 1e6


def agreement(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> dict[str, float]:
    caches = [name for name in a if name.startswith(f"{GraphIO.SELF}_")]
    return {
        # nan where both are -inf: a token the model bans (an output bias of -inf)
        "logits_max_abs_diff": float(np.nanmax(np.abs(a[GraphIO.LOGITS] - b[GraphIO.LOGITS]))),
        "caches_max_abs_diff": max(float(np.abs(a[n] - b[n]).max()) for n in caches),
        "best_token_equal": float((a[GraphIO.TOP_TOKENS][:, 0] == b[GraphIO.TOP_TOKENS][:, 0]).mean()),
        "top_tokens_equal": float((a[GraphIO.TOP_TOKENS] == b[GraphIO.TOP_TOKENS]).mean()),  # all `width` of them
        "top_logp_max_abs_diff": float(np.nanmax(np.abs(a[GraphIO.TOP_LOGP] - b[GraphIO.TOP_LOGP]))),
    }


def measure(graphs: dict[str, Path], bucket: Bucket, cfg: ModelConfig, rounds: int) -> dict:
    """Each graph's agreement with the first (the export) on the same inputs, and its time of one run over rounds in
    turn."""
    arrays = step_arrays(bucket, cfg, np.random.default_rng(bucket.rows))
    steps = {name: BoundStep(path, arrays) for name, path in graphs.items()}
    outputs = {name: step.run() for name, step in steps.items()}
    runs = max(100, 4000 // bucket.rows)
    times: dict[str, list[float]] = {name: [] for name in steps}
    for round_ in range(rounds):
        for name in rotation(list(steps), round_):
            steps[name].microseconds(runs // 10)  # warm
            times[name].append(steps[name].microseconds(runs))
    base, *variants = steps
    return {"rows": bucket.rows, "slots": bucket.slots, "microseconds": times,
            "variants": {name: {**agreement(outputs[base], outputs[name]),
                                "median_microseconds": median(times[name]),
                                "ratio": median(times[name]) / median(times[base]),
                                "round_ratios": [t / b for b, t in zip(times[base], times[name])]}
                         for name in variants}}


def report(results: list[dict], checkpoint: str, precision: str, nodes: dict[str, int]) -> str:
    rows = [[r["rows"], name, median(r["microseconds"]["export"]),
             v["median_microseconds"], f"**{v['ratio']:.2f}×**",
             f"{min(v['round_ratios']):.2f}–{max(v['round_ratios']):.2f}", f"{v['logits_max_abs_diff']:.1e}",
             f"{v['caches_max_abs_diff']:.1e}", f"{v['best_token_equal']:.3f}"]
            for r in results for name, v in r["variants"].items()]
    header = ["rows", "variant", "export (µs)", "variant (µs)", "time ratio", "per round", "logits max diff",
              "caches max diff", "best token equal"]
    counts = ", ".join(f"{name} {count}" for name, count in nodes.items())
    return (f"# Decoding attention: the exported step against other kernels ({checkpoint}, {precision})\n\n"
            f"Nodes after ONNX Runtime's optimizations: {counts}. One thread, CPU time of one decoder run, median "
            "of the rounds.\n\n" + markdown_table(header, rows))


def optimized_nodes(path: Path) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        cpu_session(path, optimized=Path(tmp) / "optimized.onnx")
        return len(onnx.load(str(Path(tmp) / "optimized.onnx")).graph.node)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", type=Path, default=Path("models/en-de/model.pt"))
    p.add_argument("--rows", type=int, nargs="+", default=[1, 4, 16, 64])
    p.add_argument("--slots", type=int, default=24, help="self-attention cache slots")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--precision", choices=["fp32", "int8"], default="fp32")
    p.add_argument("--variant-folder", type=Path, help="write a copy of --model-dir with the variant decoder here")
    p.add_argument("--model-dir", type=Path, help="the checkpoint's model folder (for --variant-folder)")
    p.add_argument("--name", default="decoding-attention")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    torch.manual_seed(0)
    model = load_model(args.checkpoint)
    with tempfile.TemporaryDirectory() as tmp:
        graphs = {name: Path(tmp) / f"{name}.onnx" for name in VARIANTS}
        for name, step in VARIANTS.items():
            export_decoder(model, graphs[name], step)
            if args.precision == "int8":
                quantize_int8(graphs[name], graphs[name])
        if built_library():
            graphs["kernels"] = Path(tmp) / "kernels.onnx"
            onnx.save(with_kernels(onnx.load(str(graphs["export"]))), str(graphs["kernels"]))
        else:
            print("our kernels not built (python -m service.engine.kernels.build): that variant left out")
        if args.variant_folder:
            if not args.model_dir:
                p.error("--variant-folder needs --model-dir")
            shutil.copytree(args.model_dir, args.variant_folder, dirs_exist_ok=True)
            shutil.copy(graphs["group-query"], args.variant_folder / graph_names(args.precision)["decoder"])
        nodes = {name: optimized_nodes(path) for name, path in graphs.items()}
        results = []
        for rows in args.rows:
            results.append(measure(graphs, Bucket(rows, args.slots, SOURCE), model.cfg, args.rounds))
            for name, v in results[-1]["variants"].items():
                print(f"{rows} rows, {name}: {v['ratio']:.2f}× the export's time, best tokens equal "
                      f"{v['best_token_equal']:.3f}", flush=True)
    data = {"command": command_line("bench.studies.decoding_attention", argv), "settings": settings_of(args),
            "environment": environment(["onnxruntime", "onnxruntime-gpu", "torch", "numpy"]), "nodes": nodes,
            "results": results}
    for path in write_results(args.out, args.name, data, report(results, str(args.checkpoint), args.precision, nodes)):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()

"""ONNX Runtime's fused decoding attention against our decoder step, on the CPU: behind the choice of the exported
step's self-attention (a ScatterND slot write and an ONNX Attention node, model.transformer.DecoderLayer).

    python -m bench.studies.decoding_attention [--checkpoint models/en-de/model.pt] [--rows 1 4 16 64]
                                               [--slots 24] [--rounds 8] [--precision fp32]
                                               [--variant-folder DIR --model-dir DIR]
                                               [--name decoding-attention] [--out bench/results]

The checkpoint's decoder step is exported twice: as `python -m export` exports it (export.graphs.DecoderGraph), and
with each self-attention as one com.microsoft GroupQueryAttention (GroupQueryStep): one Gemm for the packed query,
key and value, the slot written in place at each row's position, attention over positions 0..p alone, and no index
or mask built (--precision int8: both then quantized as export.quantize makes a folder's int8 graphs). Its
interface is the same, so either graph serves as a folder's decoder.onnx. Both run on the CPU
provider with one thread and the service's session options, the caches bound in place as
service.engine.decoder.OrtDecoder binds them, at each row count with `slots` cache slots (positions drawn below
it); reported are their agreement (logits, caches, best tokens) and the CPU time of one run, the median over
interleaved rounds of the least-noisy mean of many runs, and the variant's time over the export's.

ONNX Runtime 1.31 has GroupQueryAttention kernels on the CPU in fp32 and on CUDA in fp16 and bf16 only
(tests/data/ort-1.31-cuda-kernels.json): a folder's fp32 graphs, which also run on CUDA, could not use it.
--variant-folder writes a copy of --model-dir with the variant as its decoder of that precision, for
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
from core.folder import GraphIO
from export.__main__ import graph_names
from export.graphs import DecoderGraph, export_decoder, flatten, pairs
from export.quantize import quantize_int8
from model.checkpoint import load_model
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


class GroupQueryStep(DecoderGraph):
    """DecoderGraph's step with each self-attention one GroupQueryAttention; the rest as model.transformer has it."""

    def forward(
        self, tokens: Tensor, positions: Tensor, src_mask: Tensor, self_kv: list[Tensor], cross_kv: list[Tensor]
    ) -> tuple[Tensor, ...]:
        m = self.model
        x = m.embed_tokens(tokens, positions)
        slots = torch.tensor(self_kv[0].shape[2], dtype=torch.int32)  # the caches' length: a static cache
        key_mask = src_mask[:, None, None, :]
        new_kv = []
        for layer, (cache_k, cache_v), layer_cross_kv in zip(m.decoder, pairs(self_kv), pairs(cross_kv)):
            a = layer.self_attn
            weight = torch.cat([a.w_q.weight, a.w_k.weight, a.w_v.weight])
            bias = torch.cat([a.w_q.bias, a.w_k.bias, a.w_v.bias])
            qkv = F.linear(layer.res_self.input(x), weight, bias)[:, None, :]
            out, cache_k, cache_v = group_query_attention(qkv, cache_k, cache_v, positions, slots, a.n_heads)
            x = layer.res_self.output(x, a.w_o(out[:, 0, :]))
            x = layer.res_cross.output(x, layer.cross_attn(layer.res_cross.input(x), *layer_cross_kv, key_mask))
            x = layer.res_ffn.output(x, layer.ffn(layer.res_ffn.input(x)))
            new_kv.append((cache_k, cache_v))
        return m.project(x), *flatten(new_kv)


VARIANTS = {"export": DecoderGraph, "group-query": GroupQueryStep}  # the step graphs compared


class BoundStep:
    """One graph's session with random inputs of a shape bound, its self-attention caches written in place."""

    def __init__(self, path: Path, rows: int, slots: int, seed: int):
        self.session = ort.InferenceSession(str(path), session_options(1, "all", spin_threads=False),
                                            providers=["CPUExecutionProvider"], disabled_optimizers=CPU_UNFUSED)
        self.binding, self.values, self.outputs = self.session.io_binding(), {}, []  # outputs: in bound order
        rng, source = np.random.default_rng(seed), 14
        vocab = next(x.shape[1] for x in self.session.get_outputs() if x.name == GraphIO.LOGITS)
        for x in self.session.get_inputs():
            if x.name == GraphIO.WIDTH:
                array = np.array([8], dtype=np.int64)
            elif x.name == GraphIO.TOKENS:
                array = rng.integers(0, vocab, rows)
            elif x.name == GraphIO.POSITIONS:
                array = rng.integers(0, slots - 1, rows)
            elif x.name == GraphIO.SRC_MASK:
                array = np.ones((rows, source), dtype=bool)
                array[0, source - 3:] = False  # one padded source
            else:
                length = slots if x.name.startswith(f"{GraphIO.SELF}_") else source
                array = rng.standard_normal((rows, x.shape[1], length, x.shape[3])).astype(np.float32)
            self.values[x.name] = value = ort.OrtValue.ortvalue_from_numpy(array)
            self.binding.bind_ortvalue_input(x.name, value)
            if x.name.startswith(f"{GraphIO.SELF}_"):
                self.binding.bind_ortvalue_output(f"{GraphIO.NEW_SELF}_{x.name[len(GraphIO.SELF) + 1:]}", value)
        for x in self.session.get_outputs():
            if not x.name.startswith(f"{GraphIO.NEW_SELF}_"):
                self.binding.bind_output(x.name)
                self.outputs.append(x.name)

    def run(self) -> dict[str, np.ndarray]:
        """One run: its outputs and its caches after it."""
        self.session.run_with_iobinding(self.binding)
        caches = {name: v.numpy() for name, v in self.values.items() if name.startswith(f"{GraphIO.SELF}_")}
        bound = self.binding.get_outputs()[-len(self.outputs):]  # after the caches, bound first
        return {**caches, **{name: v.numpy() for name, v in zip(self.outputs, bound)}}

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
    }


def measure(graphs: dict[str, Path], rows: int, slots: int, rounds: int) -> dict:
    steps = {name: BoundStep(path, rows, slots, seed=rows) for name, path in graphs.items()}
    first, second = (step.run() for step in steps.values())
    runs = max(100, 4000 // rows)
    times: dict[str, list[float]] = {name: [] for name in steps}
    for round_ in range(rounds):
        for name in list(steps)[:: 1 if round_ % 2 == 0 else -1]:  # the first of the two alternates
            steps[name].microseconds(runs // 10)  # warm
            times[name].append(steps[name].microseconds(runs))
    base, variant = (median(t) for t in times.values())
    return {"rows": rows, "slots": slots, **agreement(first, second), "microseconds": times,
            "median_microseconds": [base, variant], "ratio": variant / base,
            "round_ratios": [b / a for a, b in zip(*times.values())]}


def report(results: list[dict], checkpoint: str, precision: str, nodes: dict[str, int]) -> str:
    rows = [[r["rows"], r["median_microseconds"][0], r["median_microseconds"][1], f"**{r['ratio']:.2f}×**",
             f"{min(r['round_ratios']):.2f}–{max(r['round_ratios']):.2f}", f"{r['logits_max_abs_diff']:.1e}",
             f"{r['best_token_equal']:.3f}"] for r in results]
    header = ["rows", "export (µs)", "group-query (µs)", "time ratio", "per round", "logits max diff",
              "best token equal"]
    return (f"# Decoding attention: the exported step against GroupQueryAttention ({checkpoint}, {precision})\n\n"
            f"Nodes after ONNX Runtime's optimizations: export {nodes['export']}, group-query "
            f"{nodes['group-query']}. One thread, CPU time of one decoder run, median of the rounds.\n\n"
            + markdown_table(header, rows))


def optimized_nodes(path: Path) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        options = session_options(1, "all", spin_threads=False)
        options.optimized_model_filepath = str(Path(tmp) / "optimized.onnx")
        ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"], disabled_optimizers=CPU_UNFUSED)
        return len(onnx.load(options.optimized_model_filepath).graph.node)


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
        if args.variant_folder:
            if not args.model_dir:
                p.error("--variant-folder needs --model-dir")
            shutil.copytree(args.model_dir, args.variant_folder, dirs_exist_ok=True)
            shutil.copy(graphs["group-query"], args.variant_folder / graph_names(args.precision)["decoder"])
        nodes = {name: optimized_nodes(path) for name, path in graphs.items()}
        results = []
        for rows in args.rows:
            results.append(measure(graphs, rows, args.slots, args.rounds))
            r = results[-1]
            print(f"{rows} rows: {r['median_microseconds'][0]:.0f} against {r['median_microseconds'][1]:.0f} µs, "
                  f"ratio {r['ratio']:.2f}, best tokens equal {r['best_token_equal']:.3f}", flush=True)
    data = {"command": command_line("bench.studies.decoding_attention", argv), "settings": settings_of(args),
            "environment": environment(["onnxruntime", "onnxruntime-gpu", "torch", "numpy"]), "nodes": nodes,
            "results": results}
    for path in write_results(args.out, args.name, data, report(results, str(args.checkpoint), args.precision, nodes)):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()

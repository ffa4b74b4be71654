"""`python -m bench.offline.gpu --check`: whether the GPU path does what it should, in one command of a few minutes on
one GPU, written to bench/results/gpu-check.json and gpu-check.md. Without a GPU it says so in one line and exits 2.

1. The contract (export.cuda_contract), from the graphs alone: every node of the encoder and the decoder (fp32 and
   fp16) and of the cache graphs has a kernel in the CUDA provider's table, as the service's GPU sessions load them
   (as_gpu_loads: the decoder step's residual sums fused, service.engine.cuda_step) and after the ONNX Runtime
   optimizations that a CPU session reproduces (optimized_like_cuda); at each bucket's shapes no shape is left to
   compute at run time.
2. Where the service's sessions (symbolic shapes, made as service.engine.sessions makes them) run each node, read
   from ONNX Runtime's profiler: wanted, no node off the GPU and no MemcpyToHost or MemcpyFromHost.
3. For each bucket, the decoder step and the beam reorder in sessions with the bucket's shapes fixed (ONNX
   Runtime's free dimension overrides: what capturing the step in a CUDA graph needs): where they run, ms per run
   beside the service's session, and the step's best tokens against the CPU provider's on the same inputs. Then the
   step as TRANSLATOR_CUDA_GRAPHS runs it (service.engine.graphed, the bucket's buffers at fixed addresses): on the
   GPU captured in a CUDA graph (or refused, the reason logged), on the CPU provider the same path uncaptured; its
   best tokens against the eager step's and the CPU's, and ms per step captured vs eager.
4. The GPU goals, translating the test set: greedy at batch 1 >= 250 sentences/s, at the best batch >= 20,000,
   beam 4 at batch 64 >= 2,200, and >= 99 % of outputs identical to the CPU provider's. The largest greedy batch is
   the test set BIG_BATCH_COPIES times over (4,000 sentences of the whole set in one batch).
The verdicts (each check met or not) head the report and are printed; the command exits 0 once the report is
written, whatever they say, so that `python -m bench` goes on to the next benchmark.

Buckets: the decoder rows and cache slots the engine runs. Rows from 1 by fours to the most a running batch holds
(TRANSLATOR_MAX_BATCH_SENTENCES and the newcomers' share, service.engine.admission, times
TRANSLATOR_MAX_BEAM_SIZE), and that most; slots from core.search's first cache_slots step by fours to the model's
max_len, and max_len; sources as long as the slots, at most TRANSLATOR_MAX_SENTENCE_TOKENS.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto

from bench.common.cli import command_line, settings_of
from bench.common.defaults import REPO
from bench.common.gpu import exit_without_gpu, gpu_environment, ort_engine, with_fp16
from bench.common.report import markdown_table, write_results
from core.corpus import load_test_set
from core.folder import NUMPY_TYPES, FolderConfig, GraphIO, ModelConfig, cache_names, fp32_io
from core.search import SearchOptions
from core.slots import CACHE_SLOTS
from core.tokenizer import load_tokenizer
from core.translate import source_ids
from export.cuda_contract import KernelTable, fix_dims, fold_constants, missing, runtime_shape_nodes, value_shaped_nodes
from service.engine.admission import Admission
from service.engine.cache_graphs import fit_graph, join_graph, select_graph
from service.engine.config import ModelOptions
from service.engine.cuda_step import with_skip_layer_norms
from service.engine.graphed import BucketStore, Shape
from service.engine.runner import ModelRunner
from service.engine.sessions import CPU_UNFUSED, ModelSessions, session_options
from service.settings import Settings

CUDA, CPU = "CUDAExecutionProvider", "CPUExecutionProvider"
T = TypeVar("T")
KERNEL_TABLE = REPO / "tests" / "data" / "ort-1.31-cuda-kernels.json"
PRECISIONS = ["fp32", "fp16"]
# the types of caches the service builds cache graphs for: fp32, and fp16 (an fp16 export's: core.folder.fp32_io)
CACHE_TYPES = {"fp32": TensorProto.FLOAT, "fp16": TensorProto.FLOAT16}
COPIES = {"MemcpyToHost", "MemcpyFromHost"}
# ONNX Runtime's graph transformers that rewrite only nodes placed on the CPU provider (its
# onnxruntime/core/optimizer/graph_transformer_utils.cc): a CUDA session never applies them, so the CPU session
# that stands in for it leaves them out.
CPU_ONLY_TRANSFORMERS = [
    "GemmActivationFusion", "MatMulIntegerToFloatFusion", "DynamicQuantizeMatMulFusion", "ConvActivationFusion",
    "QDQS8ToU8Transformer", "QDQSelectorActionTransformer", "MatMulNBitsFusion", "Avx2WeightS8ToU8Transformer",
    "NchwcTransformer", "NhwcTransformer", "ConvAddActivationFusion",
]
WIDTH = 8  # the top-k of a bucket's step: beam 4 asks for 2 x 4 (greedy for 1)
WARM_RUNS, TIMED_RUNS = 3, 20
ENCODER_TOLERANCE = 1e-2  # the captured encoder's keys/values against the eager one's (fp16 included)
BIG_BATCH_COPIES = 4  # the largest greedy run: one batch of the test set this many times over


@dataclass(frozen=True)
class Bucket:
    rows: int  # decoder rows: sentences x beam
    slots: int  # self-attention cache slots
    source: int  # source tokens, padding included


def main(args: argparse.Namespace, argv: list[str] | None) -> dict:
    """The check on the GPU; without one, a line saying so and exit status 2."""
    exit_without_gpu("bench.offline.gpu --check")
    return check(args, argv, CUDA)


def check(args: argparse.Namespace, argv: list[str] | None, provider: str) -> dict:
    """Parts 1 to 4 of the module's docstring on `provider` (the tests run it on the CPU provider), written out.
    The parts that need the device come first; a part that raises is reported with its error and the others still
    run; the report is written again after each part, so a run cut short keeps what it measured."""
    started = time.perf_counter()
    device = "cuda" if provider == CUDA else "cpu"
    with tempfile.TemporaryDirectory(prefix="bench-gpu-check-") as scratch:
        folder = with_fp16(args.model_dir, Path(scratch))
        config = FolderConfig.load(folder)
        cfg = config.model
        settings = Settings()
        max_rows = args.max_rows or engine_max_rows(settings)
        grid = buckets(max_rows, args.max_slots or cfg.max_len, settings.max_sentence_tokens)
        graphs = {p: {part: folder / name for part, name in config.graphs[p].items()} for p in PRECISIONS}
        table = KernelTable.load(KERNEL_TABLE)
        result = {
            "command": command_line("bench.offline.gpu", argv), "environment": gpu_environment(), "device": device,
            "settings": settings_of(args), "kernel_table": table.source, "buckets": [asdict(b) for b in grid],
            "cuda_graphs": {"memory_mb": settings.cuda_graphs_memory_mb,
                            "max_rows": args.graphs_max_rows or [settings.cuda_graphs_max_rows]},
            "errors": {},
        }

        def placement_and_buckets() -> dict:
            stores = {p: graph_store(folder, p, provider, args.threads) for p in PRECISIONS}
            sessions, steps = session_placement(graphs, stores, cfg, grid, provider, args.threads, Path(scratch))
            return {"sessions": sessions, "steps": steps}

        def translations() -> dict:
            texts, _ = load_test_set()
            tokenizer = load_tokenizer(folder, config.tokenizer, cfg.case_tags)
            sources = sorted(source_ids(tokenizer, cfg, texts[: args.sentences]), key=len)
            runs = goal_runs(folder, device, args.threads, sources, result["errors"], result["cuda_graphs"]["max_rows"])
            return {"sentences": len(sources), "runs": runs, "goals": goals(runs)}

        for name, compute in [("2, 3: sessions and buckets", placement_and_buckets), ("4: goals", translations),
                              ("1: contract", lambda: {"contract": contract(graphs, cfg, grid, table)})]:
            run_part(result, name, compute, args.out, started)
    for verdict in result["verdicts"]:
        print(f"{'met' if verdict['met'] else 'NOT MET'}: {verdict['check']}")
    return result


def run_part(result: dict, name: str, compute: Callable[[], dict], out: Path, started: float) -> None:
    """One part of the check into result (its figures, or its error), then the report written with what is in."""
    print(f"{time.perf_counter() - started:5.0f} s: part {name}", flush=True)
    result |= attempt(result["errors"], name, compute) or {}
    result |= {"verdicts": verdicts(result), "seconds": time.perf_counter() - started}
    for path in write_results(out, "gpu-check", result, markdown(result)):
        print(path, flush=True)


def attempt(errors: dict[str, str], name: str, compute: Callable[..., T], *args: object) -> T | None:
    """compute(*args), or None with its traceback in errors[name] (and printed): what fails on a machine met for the
    first time is reported, and the rest of the check still runs."""
    try:
        return compute(*args)
    except Exception:  # noqa: BLE001 - any failure, reported
        errors[name] = traceback.format_exc()
        print(errors[name], flush=True)
        return None


def engine_max_rows(settings: Settings) -> int:
    """The most decoder rows a running batch holds: its sentences with a newcomer's share more, times the largest
    beam."""
    admission = Admission(settings.max_batch_sentences, settings.max_batch_tokens, settings.max_queue)
    return admission.places(newcomer=True) * settings.max_beam_size


def buckets(max_rows: int, max_slots: int, max_source: int) -> list[Bucket]:
    """Rows by fours up to max_rows, slots by fours from CACHE_SLOTS up to max_slots, each bucket's source as long as
    its slots (at most max_source)."""
    return [Bucket(rows, slots, min(slots, max_source))
            for rows in by_fours(1, max_rows) for slots in by_fours(CACHE_SLOTS, max_slots)]


def by_fours(first: int, last: int) -> list[int]:
    """first, 4 x first, 16 x first, ... below last, then last."""
    values = []
    while first < last:
        values.append(first)
        first *= 4
    return [*values, last]


# --- 1. the contract, from the graphs -------------------------------------------------------------------------


def contract(graphs: dict[str, dict[str, Path]], cfg: ModelConfig, grid: list[Bucket],
             table: KernelTable) -> list[dict]:
    """Per graph: the nodes without a CUDA kernel as exported and as optimized, and, over the buckets, the nodes that
    compute shapes at run time and those whose output shape follows an input's values."""
    found = []
    cache_graphs = {f"{part} {precision}": onnx.load_from_string(graph) for precision, dtype in CACHE_TYPES.items()
                    for part, graph in service_graphs(2 * cfg.n_layers, dtype).items()}
    for name, model, optimized in [
        *[(f"{part} {precision}", as_gpu_loads(part, path),
           optimized_like_cuda(as_gpu_loads(part, graphs["fp32"][part]).SerializeToString(), precision == "fp16"))
          for precision in PRECISIONS for part, path in graphs[precision].items()],
        *[(f"{part} (service-built)", model, model) for part, model in cache_graphs.items()],
    ]:
        part = name.split()[0]
        fixed = [fold_constants(fix_dims(model, graph_dims(part, bucket, cfg))) for bucket in grid]
        found.append({
            "graph": name, "nodes": len(model.graph.node), "missing": missing(model, table),
            "missing_optimized": missing(optimized, table),
            "shape_nodes": sorted({n for bucket_model in fixed for n in runtime_shape_nodes(bucket_model)}),
            "value_shaped": sorted({n for bucket_model in fixed for n in value_shaped_nodes(bucket_model)}),
        })
    return found


def as_gpu_loads(part: str, path: Path) -> onnx.ModelProto:
    """A graph as the service's GPU sessions load it: the decoder step with its residual sums fused
    (service.engine.cuda_step), the encoder as exported."""
    model = onnx.load(path)
    return with_skip_layer_norms(model) if part == "decoder" else model


def optimized_like_cuda(fp32_graph: Path | bytes, fp16: bool) -> onnx.ModelProto:
    """The graph after the optimizations a CUDA session applies that a CPU session reproduces: ONNX Runtime's
    extended level (a CUDA session's "all" adds only CPU layout transformers) without CPU_ONLY_TRANSFORMERS, saved
    by the session. Not reproduced: the fusions for the CUDA provider alone (GroupQueryAttentionFusion,
    BiasDropoutFusion: their operators have CUDA kernels by construction); and the CPU provider's second
    TransposeOptimizer pass stays in (it shares its name with the first). A CPU session of an fp16 graph would first
    make it runnable on the CPU (inlining Softmax, inserting Casts), so fp16 is approximated: the fp32 graph
    optimized, then converted as `python -m export` converts."""
    with tempfile.TemporaryDirectory(prefix="optimized-") as scratch:
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        options.optimized_model_filepath = str(Path(scratch) / "optimized.onnx")
        ort.InferenceSession(fp32_graph if isinstance(fp32_graph, bytes) else str(fp32_graph), options,
                             providers=[CPU], disabled_optimizers=CPU_ONLY_TRANSFORMERS)
        model = onnx.load(options.optimized_model_filepath)
    if not fp16:
        return model
    from onnxruntime.transformers.float16 import convert_float_to_float16

    return convert_float_to_float16(model, keep_io_types=fp32_io(model.graph))


def graph_dims(part: str, bucket: Bucket, cfg: ModelConfig) -> dict[str, int]:
    """The named dimensions of a graph's inputs at a bucket, as export.graphs and service.engine.cache_graphs name
    them."""
    heads = {"H": cfg.n_heads, "Dh": cfg.d_head}
    return {
        "encoder": {"batch": bucket.rows, "src_len": bucket.source},
        "decoder": {"batch": bucket.rows, "src_len": bucket.source, "slots": bucket.slots},
        "select": {"N": bucket.rows, "M": bucket.rows, "L": bucket.slots, **heads},
        "join": {"N": bucket.rows, "M": 1, "L": bucket.slots, "L2": bucket.slots, **heads},
        "fit": {"N": bucket.rows, "M": bucket.rows, "L": bucket.slots, **heads},
    }[part]


def service_graphs(caches: int, dtype: int = TensorProto.FLOAT) -> dict[str, bytes]:
    """The cache graphs the service builds for a model of this many cache tensors of this type
    (service.engine.cache_graphs) and runs on the GPU: select and join (every decoder), fit (TRANSLATOR_CUDA_GRAPHS's
    buckets)."""
    return {"select": select_graph(caches, dtype), "join": join_graph(caches, dtype),
            "fit": fit_graph(caches, dtype)}


def cache_tensor_type(decoder: Path) -> int:
    """The tensor type of a decoder step's caches, as the service reads it from the step (ModelSessions.cache_type):
    fp32, or fp16 in an fp16 export (an fp16 folder exported before it kept them fp32)."""
    inputs = onnx.load(str(decoder), load_external_data=False).graph.input
    return next(x.type.tensor_type.elem_type for x in inputs if x.name.startswith(f"{GraphIO.SELF}_"))


def as_inputs_of(session: ort.InferenceSession, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The arrays in the types the session reads them (an fp16 graph's caches are fp16)."""
    types = {x.name: NUMPY_TYPES[x.type] for x in session.get_inputs()}
    return {name: array.astype(types[name], copy=False) if name in types else array for name, array in arrays.items()}


# --- 2 and 3. where the real sessions run each node, ms per step, outputs against the CPU ---------------------------


def session(graph: Path | bytes, provider: str, threads: int, dims: dict[str, int] | None = None,
            profile_dir: Path | None = None) -> ort.InferenceSession:
    """A session as the service makes one (service.engine.sessions), with the named dimensions fixed when dims are
    given and ONNX Runtime's profiler on when profile_dir is given."""
    options = session_options(threads, "all")
    for name, value in (dims or {}).items():
        options.add_free_dimension_override_by_name(name, value)
    if profile_dir is not None:  # a folder of its own: profiles of sessions started in the same millisecond collide
        options.enable_profiling = True
        options.profile_file_prefix = str(Path(tempfile.mkdtemp(dir=profile_dir)) / "profile")
    on_gpu = provider != CPU
    return ort.InferenceSession(graph if isinstance(graph, bytes) else str(graph), options,
                                providers=[provider, CPU] if on_gpu else [CPU],
                                disabled_optimizers=None if on_gpu else CPU_UNFUSED)


def placement(profiled: ort.InferenceSession, provider: str) -> dict:
    """From a profiled session's runs so far (its profiler then stops): the nodes run, those that ran on another
    provider than `provider`, and the copies ONNX Runtime inserted between providers."""
    events = json.loads(Path(profiled.end_profiling()).read_text())
    ran = {e["name"].removesuffix("_kernel_time"): e["args"] for e in events
           if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")}
    return {
        "nodes": len(ran),
        "off_provider": sorted(f"{a['op_name']} {name} ({a['provider']})" for name, a in ran.items()
                               if a["provider"] != provider),
        "copies": sorted(f"{a['op_name']} {name}" for name, a in ran.items() if a["op_name"] in COPIES),
    }


def graph_store(folder: Path, precision: str, provider: str, threads: int) -> BucketStore | None:
    """The buckets of TRANSLATOR_CUDA_GRAPHS's decoder: captured on the GPU (None where ONNX Runtime refuses, the
    reason logged), uncaptured on the CPU provider (with the step as exported, as a GPU runs it)."""
    on_gpu = provider == CUDA
    options = ModelOptions(precision, "cuda" if on_gpu else "cpu", threads, cuda_graphs=on_gpu, kernels=False)
    if on_gpu:
        return ModelRunner(folder, options).buckets
    model = ModelSessions(folder, options)
    return BucketStore(model, model.decoder, capture=False, encoder=model.encoder)


def session_placement(graphs: dict[str, dict[str, Path]], stores: dict[str, BucketStore | None], cfg: ModelConfig,
                      grid: list[Bucket], provider: str,
                      threads: int, scratch: Path) -> tuple[list[dict], list[dict]]:
    """Part 2 (each graph's service session) and part 3 (each bucket), for every precision."""
    device = "cuda" if provider == CUDA else "cpu"
    sample, rng = grid[len(grid) // 2], np.random.default_rng(0)
    reference = {part: session(path, CPU, threads) for part, path in graphs["fp32"].items()}
    caches = 2 * cfg.n_layers
    sessions, steps = [], []
    for precision in PRECISIONS:
        cache_type = cache_tensor_type(graphs[precision]["decoder"])
        sources = {**{part: as_gpu_loads(part, path).SerializeToString() for part, path in graphs[precision].items()},
                   **service_graphs(caches, cache_type)}
        service = {part: session(graph, provider, threads, profile_dir=scratch) for part, graph in sources.items()}
        feeds = sample_feeds(sample, cfg, rng)
        for part, served in service.items():
            outputs = served.run(None, as_inputs_of(served, feeds[part]))
            compared = reference.get(part)
            sessions.append({
                "graph": f"{part} {precision}", **placement(served, provider),
                "max_abs_diff_vs_cpu": None if compared is None else max_abs_diff(outputs[:3], compared.run(
                    None, feeds[part])[:3]),
            })
        for bucket in grid:
            started = time.perf_counter()
            steps.append({"precision": precision, **asdict(bucket), **bucket_step(
                bucket, sources["decoder"], cache_type, service, reference["decoder"], stores[precision],
                cfg, provider, device, threads, scratch, rng)})
            print(f"    {precision} {bucket}: {time.perf_counter() - started:.1f} s", flush=True)
    return sessions, steps


def bucket_step(bucket: Bucket, decoder: bytes, cache_type: int, service: dict[str, ort.InferenceSession],
                cpu_decoder: ort.InferenceSession, store: BucketStore | None, cfg: ModelConfig, provider: str,
                device: str, threads: int, scratch: Path, rng: np.random.Generator) -> dict:
    """One bucket: the decoder step and the beam reorder with the bucket's shapes fixed (where they run, ms per run),
    the service's sessions' ms per run, the step's best tokens against the CPU's on the same inputs, and the step
    of TRANSLATOR_CUDA_GRAPHS (None where its capture was refused)."""
    arrays = step_arrays(bucket, cfg, rng)
    fixed_decoder = session(decoder, provider, threads, graph_dims("decoder", bucket, cfg), scratch)
    fixed_select = session(select_graph(2 * cfg.n_layers, cache_type), provider, threads,
                           graph_dims("select", bucket, cfg), scratch)
    cpu_tokens, cpu_logp = run_step(cpu_decoder, *step_binding(cpu_decoder, arrays, "cpu"))
    found = {}
    for name, decoder_session, select_session in [("fixed", fixed_decoder, fixed_select),
                                                   ("service", service["decoder"], service["select"])]:
        binding, held = step_binding(decoder_session, as_inputs_of(decoder_session, arrays), device)
        tokens, logp = run_step(decoder_session, binding, held)
        reorder, _ = reorder_binding(select_session, as_inputs_of(decoder_session, arrays), device, rng)
        select_session.run_with_iobinding(reorder)
        if name == "fixed":
            found |= {"fixed_step": placement(decoder_session, provider),
                      "fixed_reorder": placement(select_session, provider)}
        found |= {
            f"{name}_ms_per_step": ms_per_run(decoder_session, binding),
            f"{name}_ms_per_reorder": ms_per_run(select_session, reorder),
            f"{name}_top1_same_as_cpu": float(np.mean(tokens[:, 0] == cpu_tokens[:, 0])),
            f"{name}_top1_max_abs_diff": float(np.abs(logp[:, 0] - cpu_logp[:, 0]).max()),
        }
    eager_tokens = tokens  # the service's step, the last one run
    found["captured_vs_eager"] = None if store is None else graphed_step(store, bucket, arrays, eager_tokens,
                                                                          cpu_tokens, cfg)
    found["encoder_captured_vs_eager"] = None if store is None or store.encoder is None else graphed_encoder(
        store, bucket, service["encoder"], cfg, device, rng)
    return found


def graphed_step(store: BucketStore, bucket: Bucket, arrays: dict[str, np.ndarray], eager_tokens: np.ndarray,
                 cpu_tokens: np.ndarray, cfg: ModelConfig) -> dict:
    """The bucket's step as service.engine.graphed runs it, over its buffers filled with the step's inputs: whether
    captured, its best tokens against the eager step's and the CPU's, ms per step."""
    graphed = store.bucket(Shape(bucket.rows, bucket.slots, bucket.source))
    for prefix, values in ((GraphIO.SELF, graphed.self_sets[0]), (GraphIO.CROSS, graphed.cross_sets[0])):
        for name, value in zip(cache_names(prefix, cfg.n_layers), values):
            value.update_inplace(arrays[name].astype(store.model.cache_type, copy=False))
    graphed.write(arrays[GraphIO.TOKENS], arrays[GraphIO.POSITIONS], arrays[GraphIO.SRC_MASK], np.arange(bucket.rows))
    step = graphed.step(0, 0, WIDTH)
    milliseconds = ms_per_run(store.decoder, step.binding, step.run_options)  # a graph id's first runs capture it
    tokens = store.run(step)[0]
    return {"captured": store.capture, "ms_per_step": milliseconds,
            "top1_same_as_eager": float(np.mean(tokens[:, 0] == eager_tokens[:, 0])),
            "top1_same_as_cpu": float(np.mean(tokens[:, 0] == cpu_tokens[:, 0]))}


def graphed_encoder(store: BucketStore, bucket: Bucket, eager: ort.InferenceSession, cfg: ModelConfig, device: str,
                    rng: np.random.Generator) -> dict:
    """The encoder as service.engine.graphed runs it for the bucket's rows of sentences of its source tokens (an
    encoder bucket, rows and source padded to powers of two): whether captured, ms per run against the service's
    eager session's on the same sentences, and the largest difference of their keys/values at real tokens."""
    mask = np.arange(bucket.source) < rng.integers(1, bucket.source + 1, bucket.rows)[:, None]
    src = np.where(mask, rng.integers(4, cfg.vocab_size, mask.shape), cfg.pad_id)
    graphed = store.encoder_bucket(*src.shape)
    ours = [v.numpy()[: bucket.rows, :, : bucket.source] for v in graphed.run(store.encoder, src, mask)]
    milliseconds = ms_per_run(store.encoder, graphed.binding, graphed.run_options)
    binding = eager.io_binding()
    binding.bind_cpu_input(GraphIO.SRC, src)
    binding.bind_cpu_input(GraphIO.SRC_MASK, mask)
    for name in store.model.cross_names:
        binding.bind_output(name, device)
    eager_milliseconds = ms_per_run(eager, binding)
    real = mask[:, None, :, None]
    diff = max(float(np.abs(np.where(real, a.astype(np.float32) - b.numpy().astype(np.float32), 0)).max())
               for a, b in zip(ours, binding.get_outputs()))
    return {"captured": store.capture, "ms_per_run": milliseconds, "eager_ms_per_run": eager_milliseconds,
            "max_abs_diff_vs_eager": diff}


def step_arrays(bucket: Bucket, cfg: ModelConfig, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A decoder step's inputs at a bucket's shapes: random tokens, each row at a random position below the slots,
    sources of random lengths, random caches."""
    rows, lengths = bucket.rows, rng.integers(1, bucket.source + 1, bucket.rows)
    arrays = {
        GraphIO.TOKENS: rng.integers(4, cfg.vocab_size, rows),
        GraphIO.POSITIONS: rng.integers(0, bucket.slots, rows),
        GraphIO.SRC_MASK: np.arange(bucket.source) < lengths[:, None],
    }
    for prefix, length in ((GraphIO.SELF, bucket.slots), (GraphIO.CROSS, bucket.source)):
        for name in cache_names(prefix, cfg.n_layers):
            arrays[name] = rng.standard_normal((rows, cfg.n_heads, length, cfg.d_head), dtype=np.float32)
    return arrays


def step_binding(decoder: ort.InferenceSession, arrays: dict[str, np.ndarray],
                 device: str) -> tuple[ort.IOBinding, list[ort.OrtValue]]:
    """A step bound as service.engine.decoder binds it: the caches copied onto the device (on the CPU too: an OrtValue
    there would share the array's memory), each self-attention output written into its input's buffer, the top-k
    into host buffers; and the values the binding holds."""
    binding, held = decoder.io_binding(), []
    for name, array in arrays.items():
        if not name.startswith((f"{GraphIO.SELF}_", f"{GraphIO.CROSS}_")):
            binding.bind_cpu_input(name, array)
            continue
        value = ort.OrtValue.ortvalue_from_numpy(array.copy() if device == "cpu" else array, device, 0)
        binding.bind_ortvalue_input(name, value)
        if name.startswith(f"{GraphIO.SELF}_"):
            binding.bind_ortvalue_output(GraphIO.NEW_SELF + name.removeprefix(GraphIO.SELF), value)
        held.append(value)
    rows = len(arrays[GraphIO.TOKENS])
    binding.bind_cpu_input(GraphIO.WIDTH, np.array([WIDTH]))
    for name, dtype in ((GraphIO.TOP_TOKENS, np.int64), (GraphIO.TOP_LOGP, np.float32)):
        held.append(ort.OrtValue.ortvalue_from_shape_and_type([rows, WIDTH], dtype))
        binding.bind_ortvalue_output(name, held[-1])
    return binding, held


def run_step(decoder: ort.InferenceSession, binding: ort.IOBinding,
             held: list[ort.OrtValue]) -> tuple[np.ndarray, np.ndarray]:
    """Run a bound step once: copies of its top tokens and their log-probabilities (step_binding's last values)."""
    decoder.run_with_iobinding(binding)
    return held[-2].numpy().copy(), held[-1].numpy().copy()


def reorder_binding(select: ort.InferenceSession, arrays: dict[str, np.ndarray], device: str,
                    rng: np.random.Generator) -> tuple[ort.IOBinding, list[ort.OrtValue]]:
    """A beam reorder bound as service.engine.decoder binds it: the self-attention caches on the device, a shuffle
    of their rows, written into spare buffers of their shapes."""
    binding, held = select.io_binding(), []
    caches = [arrays[name] for name in arrays if name.startswith(f"{GraphIO.SELF}_")]
    for i, array in enumerate(caches):
        held += [ort.OrtValue.ortvalue_from_numpy(array, device, 0),
                 ort.OrtValue.ortvalue_from_shape_and_type(array.shape, array.dtype, device, 0)]
        binding.bind_ortvalue_input(f"x_{i}", held[-2])
        binding.bind_ortvalue_output(f"y_{i}", held[-1])
    binding.bind_cpu_input("rows", rng.permutation(len(caches[0])))
    return binding, held


def ms_per_run(bound_session: ort.InferenceSession, binding: ort.IOBinding,
               run_options: ort.RunOptions | None = None) -> float:
    """The median milliseconds of a bound run, after a few untimed ones; outputs synchronised every run."""
    times = []
    for run in range(WARM_RUNS + TIMED_RUNS):
        started = time.perf_counter()
        bound_session.run_with_iobinding(binding, run_options)
        binding.synchronize_outputs()
        if run >= WARM_RUNS:
            times.append(time.perf_counter() - started)
    return 1000 * statistics.median(times)


def sample_feeds(bucket: Bucket, cfg: ModelConfig, rng: np.random.Generator) -> dict[str, dict[str, np.ndarray]]:
    """Host inputs of every graph at one bucket, for the runs that read where each node runs."""
    step = step_arrays(bucket, cfg, rng)
    self_caches = [step[name] for name in cache_names(GraphIO.SELF, cfg.n_layers)]
    step[GraphIO.WIDTH] = np.array([WIDTH])
    return {
        "encoder": {GraphIO.SRC: rng.integers(4, cfg.vocab_size, step[GraphIO.SRC_MASK].shape),
                    GraphIO.SRC_MASK: step[GraphIO.SRC_MASK]},
        "decoder": step,
        "select": {**{f"x_{i}": c for i, c in enumerate(self_caches)}, "rows": rng.permutation(bucket.rows)},
        "join": {**{f"a_{i}": c for i, c in enumerate(self_caches)}, **{f"b_{i}": c[:1] for i, c in
                                                                         enumerate(self_caches)},
                 "pads_b": np.zeros(8, dtype=np.int64)},
        "fit": {**{f"x_{i}": c for i, c in enumerate(self_caches)}, "rows": rng.permutation(bucket.rows),
                "pads": np.zeros(8, dtype=np.int64)},
    }


def max_abs_diff(ours: list[np.ndarray], cpu: list[np.ndarray]) -> float:
    """The largest difference between the float outputs of two runs (integer outputs, such as top tokens, left out)."""
    return max((float(np.abs(a - b).max()) for a, b in zip(ours, cpu) if a.dtype.kind == "f" and a.size), default=0.0)


# --- 4. the goals -------------------------------------------------------------------------------------------------


def goal_run_shapes(sentences: int) -> list[tuple[int, int]]:
    """(beam, batch size) of the translation runs behind the goals, for a test set of this many sentences: greedy at
    batch 1, 64, 256, 1024 and in one batch of the set BIG_BATCH_COPIES times over (its best batch is the fastest of
    these), beam 4 at batch 64."""
    return [(1, 1), (1, 64), (1, 256), (1, 1024), (1, BIG_BATCH_COPIES * sentences), (4, 64)]


def run_sources(sources: list[list[int]], batch_size: int) -> list[list[int]]:
    """The sentences a run translates: the test set, over again as many times as its batch holds it."""
    return sources * max(1, batch_size // len(sources))


def goal_runs(folder: Path, device: str, threads: int, sources: list[list[int]], errors: dict[str, str],
              graphs_max_rows: list[int]) -> list[dict]:
    """Every goal run (goal_run_shapes) of the device's fp32 and fp16 translators, eager and, on the GPU, with
    TRANSLATOR_CUDA_GRAPHS (one translator for each of graphs_max_rows, TRANSLATOR_CUDA_GRAPHS_MAX_ROWS values; a
    name says its value where several are run), with the share of outputs identical to the CPU provider's fp32
    translations of the same batches. Each run goes twice through the sentences: the first pass meets every shape
    for the first time (CUDA graphs are captured then), the second is the steady state a running server sees, and
    the figures the goals read. A translator that fails is left out, its error in `errors`."""
    reference = ort_engine(folder, "fp32", "cpu", threads)[0]
    expected = {(beam, batch_size): reference(run_sources(sources, batch_size), SearchOptions(beam_size=beam),
                                              batch_size)[0]
                for beam, batch_size in goal_run_shapes(len(sources))}
    translators: dict[str, tuple[str, int | None]] = {f"ort-{device}-{p}": (p, None) for p in PRECISIONS}
    if device == "cuda":
        translators |= {f"ort-cuda-{p}-graphs" + (f"-rows{rows}" if len(graphs_max_rows) > 1 else ""): (p, rows)
                        for rows in graphs_max_rows for p in PRECISIONS}
    runs = []
    for name, translator in translators.items():
        runs += attempt(errors, f"4: {name}", translator_runs, name, translator, folder, device, threads, sources,
                        expected) or []
    return runs


def translator_runs(name: str, translator: tuple[str, int | None], folder: Path, device: str, threads: int,
                    sources: list[list[int]], expected: dict[tuple[int, int], list[list[int]]]) -> list[dict]:
    """The goal runs of one translator (its precision, and its TRANSLATOR_CUDA_GRAPHS_MAX_ROWS with CUDA graphs,
    None without): two passes over the sentences each (goal_runs), against the expected outputs."""
    precision, graphs_max_rows = translator
    engine = ort_engine(folder, precision, device, threads, graphs_max_rows is not None, graphs_max_rows)[0]
    runs = []
    for (beam, batch_size), wanted in expected.items():
        opts, run = SearchOptions(beam_size=beam), run_sources(sources, batch_size)
        first_seconds = engine(run, opts, batch_size)[1]
        outputs, seconds, steps, step_seconds = engine(run, opts, batch_size)
        runs.append({
            "engine": name, "beam": beam, "batch_size": batch_size, "sentences": len(run),
            "sentences_per_s": len(run) / seconds, "first_pass_sentences_per_s": len(run) / first_seconds,
            "ms_per_step": 1000 * step_seconds / steps, "steps": steps,
            "ms_outside_steps_per_sentence": 1000 * (seconds - step_seconds) / len(run),
            "same_as_cpu": sum(a == b for a, b in zip(outputs, wanted)) / len(wanted),
        })
    return runs


def goals(runs: list[dict]) -> list[dict]:
    """The GPU goals, each measured for every translator of the runs."""
    found = []
    for engine in dict.fromkeys(r["engine"] for r in runs):
        mine = [r for r in runs if r["engine"] == engine]
        greedy = [r for r in mine if r["beam"] == 1]
        best = max(greedy, key=lambda r: r["sentences_per_s"])
        measured = [
            ("greedy, batch 1: sentences/s", 250, next(r for r in greedy if r["batch_size"] == 1)["sentences_per_s"]),
            (f"greedy, best batch ({best['batch_size']}): sentences/s", 20_000, best["sentences_per_s"]),
            ("beam 4, batch 64: sentences/s", 2_200,
             next(r for r in mine if (r["beam"], r["batch_size"]) == (4, 64))["sentences_per_s"]),
            ("outputs identical to the CPU's, every run", 0.99, min(r["same_as_cpu"] for r in mine)),
        ]
        found += [{"goal": goal, "want": want, "engine": engine, "measured": value, "met": value >= want}
                  for goal, want, value in measured]
    return found


# --- the report -------------------------------------------------------------------------------------------------


def verdicts(result: dict) -> list[dict]:
    """Each check of parts 1 to 4, met or not: not met where its part has not run (an error, a run cut short)."""
    contract_, sessions, steps = (result.get(key) for key in ("contract", "sessions", "steps"))
    fixed = [s[part] for s in steps or [] for part in ("fixed_step", "fixed_reorder")]
    checks = [
        ("every part of the check ran to its end",
         not result["errors"] and all(key in result for key in ("contract", "sessions", "goals"))),
        ("every node of every graph has a CUDA kernel, as exported and optimized",
         contract_ is not None and all(not c["missing"] and not c["missing_optimized"] for c in contract_)),
        ("no shape is computed at run time at any bucket's shapes",
         contract_ is not None and all(not c["shape_nodes"] for c in contract_)),
        ("the service's sessions: no node off the GPU, no copies",
         sessions is not None and all(not s["off_provider"] and not s["copies"] for s in sessions)),
        ("every bucket's step and reorder with fixed shapes: no node off the GPU, no copies",
         steps is not None and all(not f["off_provider"] and not f["copies"] for f in fixed)),
        ("every bucket's fp32 step: the CPU's best token in >= 99 % of rows",
         steps is not None and all(s[f"{kind}_top1_same_as_cpu"] >= 0.99 for s in steps if s["precision"] == "fp32"
                                   for kind in ("service", "fixed"))),
        ("CUDA graphs: every bucket's step captured, its top-1 the eager step's in >= 99 % of rows",
         steps is not None and all(s["captured_vs_eager"] and s["captured_vs_eager"]["captured"]
                                   and s["captured_vs_eager"]["top1_same_as_eager"] >= 0.99 for s in steps)),
        (f"CUDA graphs: every bucket's encoder run captured, its keys/values the eager encoder's within "
         f"{ENCODER_TOLERANCE:g}",
         steps is not None and all(s["encoder_captured_vs_eager"] and s["encoder_captured_vs_eager"]["captured"]
                                   and s["encoder_captured_vs_eager"]["max_abs_diff_vs_eager"] <= ENCODER_TOLERANCE
                                   for s in steps)),
    ]
    checks += [(f"{g['engine']} {g['goal']} >= {g['want']:,}", g["met"]) for g in result.get("goals", [])]
    return [{"check": check, "met": met} for check, met in checks]


def markdown(result: dict) -> str:
    """gpu-check.md: the verdicts, each part that ran as tables, and the errors of those that did not."""
    env = result["environment"]
    lines = [
        "# GPU check (bench.offline.gpu --check)\n",
        f"`{result['command']}`\n",
        f"Device: {result['device']} ({env.get('gpu') or env['cpu']}); {result['seconds']:.0f} s in all. Kernel table: "
        f"{result['kernel_table']['url']}. The CUDA-graph translators: TRANSLATOR_CUDA_GRAPHS_MAX_ROWS "
        f"{', '.join(map(str, result['cuda_graphs']['max_rows']))}, TRANSLATOR_CUDA_GRAPHS_MEMORY_MB "
        f"{result['cuda_graphs']['memory_mb']}.\n",
        markdown_table(["check", "met"], [[v["check"], "yes" if v["met"] else "NO"] for v in result["verdicts"]]),
    ]
    if "contract" in result:
        lines += [
            "## 1. The contract, from the graphs\n",
            markdown_table(["graph", "nodes", "without a CUDA kernel, as exported",
                            "after ONNX Runtime's optimizations", "shape computations at the buckets",
                            "shapes that follow input values"],
                           [[c["graph"], c["nodes"], listed(c["missing"]), listed(c["missing_optimized"]),
                             listed(c["shape_nodes"]), listed(c["value_shaped"])] for c in result["contract"]]),
        ]
    if "sessions" in result:
        lines += [
            "## 2. The service's sessions (symbolic shapes): where each node ran\n",
            markdown_table(["graph", "nodes run", "off the GPU", "copies", "max abs diff vs the CPU's fp32"],
                           [[s["graph"], s["nodes"], listed(s["off_provider"]), listed(s["copies"]),
                             "—" if s["max_abs_diff_vs_cpu"] is None else f"{s['max_abs_diff_vs_cpu']:.2g}"]
                            for s in result["sessions"]]),
            "## 3. Buckets: the step and the beam reorder with fixed shapes, beside the service's sessions\n",
            markdown_table(["precision", "rows", "slots", "source", "fixed: step off the GPU / copies",
                            "fixed: reorder off the GPU / copies", "ms per step: service / fixed",
                            "ms per reorder: service / fixed", "top-1 same as CPU: service / fixed",
                            "max abs diff of top-1 log-prob: service / fixed", "captured vs eager",
                            "encoder: captured vs eager"],
                           [[s["precision"], s["rows"], s["slots"], s["source"],
                             f"{len(s['fixed_step']['off_provider'])} / {len(s['fixed_step']['copies'])}",
                             f"{len(s['fixed_reorder']['off_provider'])} / {len(s['fixed_reorder']['copies'])}",
                             f"{s['service_ms_per_step']:.3f} / {s['fixed_ms_per_step']:.3f}",
                             f"{s['service_ms_per_reorder']:.3f} / {s['fixed_ms_per_reorder']:.3f}",
                             f"{100 * s['service_top1_same_as_cpu']:.1f} / {100 * s['fixed_top1_same_as_cpu']:.1f} %",
                             f"{s['service_top1_max_abs_diff']:.2g} / {s['fixed_top1_max_abs_diff']:.2g}",
                             captured_cell(s, "captured_vs_eager", step_figures),
                             captured_cell(s, "encoder_captured_vs_eager", encoder_figures)]
                            for s in result["steps"]]),
        ]
    if "goals" in result:
        lines += [
            f"## 4. Goals ({result['sentences']} test sentences)\n",
            markdown_table(["goal", "want", "engine", "measured", "met"],
                           [[g["goal"], f"≥ {g['want']:,}", g["engine"], f"{g['measured']:,.2f}",
                             "yes" if g["met"] else "NO"] for g in result["goals"]]),
            markdown_table(["engine", "beam", "batch", "sentences", "sentences/s", "first pass: sentences/s",
                            "ms per step", "steps", "ms a sentence outside the steps (encoder, joins)",
                            "same output as the CPU"],
                           [[r["engine"], r["beam"], r["batch_size"], r["sentences"], r["sentences_per_s"],
                             r["first_pass_sentences_per_s"], f"{r['ms_per_step']:.2f}", r["steps"],
                             f"{r['ms_outside_steps_per_sentence']:.2f}", f"{100 * r['same_as_cpu']:.1f} %"]
                            for r in result["runs"]]),
        ]
    for part, error in result["errors"].items():
        lines += [f"## Part {part}: failed\n", f"```\n{error}```\n"]
    return "\n".join(lines)


def captured_cell(step: dict, part: str, figures: Callable[[dict, dict], str]) -> str:
    """A table cell: a bucket's run in TRANSLATOR_CUDA_GRAPHS (step[part]: the step's or the encoder's), captured or
    not, and its figures against the service's eager run."""
    graphed = step[part]
    if graphed is None:
        return "capture refused (the reason is logged)"
    return f"{'captured' if graphed['captured'] else 'not captured (CPU provider)'}: {figures(graphed, step)}"


def step_figures(graphed: dict, step: dict) -> str:
    return (f"{graphed['ms_per_step']:.3f} vs {step['service_ms_per_step']:.3f} ms; top-1 same as eager "
            f"{100 * graphed['top1_same_as_eager']:.1f} %, as CPU {100 * graphed['top1_same_as_cpu']:.1f} %")


def encoder_figures(graphed: dict, step: dict) -> str:
    return (f"{graphed['ms_per_run']:.3f} vs {graphed['eager_ms_per_run']:.3f} ms; max abs diff "
            f"{graphed['max_abs_diff_vs_eager']:.2g}")


def listed(items: list[str]) -> str:
    """A table cell: none, or the items (the first five, and how many more)."""
    if not items:
        return "none"
    more = f"; {len(items) - 5} more" if len(items) > 5 else ""
    return f"{len(items)}: " + ", ".join(items[:5]) + more

"""The CUDA contract (export.cuda_contract) of every graph the GPU runs, checked without a GPU against ONNX Runtime's
CUDA kernel table (tests/data/ort-1.31-cuda-kernels.json, written by tests/data/cuda_kernels.py).

- Every node of the encoder and the decoder, fp32 and fp16, and of the cache graphs has a CUDA kernel for its
  operator, opset version and types: as the service's GPU sessions load them (the decoder step's residual sums
  fused, service.engine.cuda_step), and after the ONNX Runtime optimizations a CPU session reproduces
  (bench.offline.gpu_check.optimized_like_cuda: fp32 reproduced without the CPU-only transformers, fp16 approximated
  by converting the optimized fp32 graph; the CUDA-only fusions are not reproduced). The tiny model is pre-norm, the
  shipped ones post-norm: ONNX Runtime fuses them differently.
- With a bucket's shapes fixed and the constants folded, no shape is computed at run time. The known nodes whose
  output shape follows an input's values, not its shape: the decoder's TopK (K is the `width` input, 1 for greedy and
  2 x beam for beam search, so a captured bucket fixes it too) and the join's Pad (pads_b: how far newcomers' caches
  are padded; joins run when sentences join, not at every step).
- A node the table lacks, a type its kernel does not take, an opset version no kernel covers: each fails, and so do
  the shipped int8 graphs, which are for the CPU.
Where the real CUDA session places each node, and the copies it inserts, only a GPU shows: `python -m
bench.offline.gpu --check`.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from bench.offline.gpu_check import KERNEL_TABLE, Bucket, as_gpu_loads, graph_dims, optimized_like_cuda, service_graphs
from core.folder import IR_VERSION, OPSET, FolderConfig
from export.cuda_contract import (
    Kernel,
    KernelTable,
    fix_dims,
    fold_constants,
    missing,
    runtime_shape_nodes,
    value_shaped_nodes,
)

pytestmark = [
    pytest.mark.filterwarnings("ignore:.*LeafSpec.*:FutureWarning"),
    pytest.mark.filterwarnings("ignore:.*axis name.*:UserWarning"),
]

SHIPPED = sorted(p.parent for p in (Path(__file__).resolve().parent.parent / "models").glob("*/config.json"))
BUCKETS = [Bucket(rows=1, slots=8, source=8), Bucket(rows=72, slots=136, source=100)]
KNOWN_VALUE_SHAPED = {"decoder": ["TopK top_k"], "join": ["Pad (unnamed)"] * 6, "fit": ["Pad (unnamed)"] * 6}


@pytest.fixture(scope="module")
def table() -> KernelTable:
    return KernelTable.load(KERNEL_TABLE)


def graphs(folder: Path, precisions: tuple[str, ...]) -> list[tuple[str, str, Path]]:
    """(precision, part, path) of a folder's encoder and decoder graphs."""
    config = FolderConfig.load(folder)
    return [(p, part, folder / name) for p in precisions for part, name in config.graphs[p].items()]


def tiny_graphs(folder: Path) -> list[tuple[str, str, Path]]:
    return graphs(folder, ("fp32", "fp16"))


def cache_graphs() -> list[tuple[str, onnx.ModelProto]]:
    """The cache graphs as the service builds them for the shipped models' 3 layers (6 cache tensors), of fp32 and of
    fp16 caches (an fp16 export's)."""
    return [(part, onnx.load_from_string(graph)) for dtype in (TensorProto.FLOAT, TensorProto.FLOAT16)
            for part, graph in service_graphs(6, dtype).items()]


def test_every_node_of_the_tiny_models_graphs_has_a_cuda_kernel_as_exported_and_optimized(tiny_fp16_dir: Path,
                                                                                           table: KernelTable):
    for precision, part, path in tiny_graphs(tiny_fp16_dir):
        assert missing(as_gpu_loads(part, path), table) == [], (precision, part)
        fp32 = tiny_fp16_dir / FolderConfig.load(tiny_fp16_dir).graphs["fp32"][part]
        optimized = optimized_like_cuda(as_gpu_loads(part, fp32).SerializeToString(), precision == "fp16")
        assert missing(optimized, table) == [], (precision, part, "optimized")


@pytest.mark.parametrize("folder", SHIPPED, ids=[f.name for f in SHIPPED])
def test_every_node_of_the_shipped_graphs_has_a_cuda_kernel_as_exported_and_optimized(folder: Path,
                                                                                       table: KernelTable):
    for _, part, path in graphs(folder, ("fp32",)):
        loaded = as_gpu_loads(part, path)
        assert missing(loaded, table) == [], part
        for fp16 in (False, True):
            optimized = optimized_like_cuda(loaded.SerializeToString(), fp16)
            assert missing(optimized, table) == [], (part, fp16)
            # fused, by ONNX Runtime (the encoder) or by service.engine.cuda_step: the contract saw a contrib operator
            assert "SkipLayerNormalization" in {n.op_type for n in optimized.graph.node}, part


def test_the_cache_graphs_have_cuda_kernels(table: KernelTable):
    for name, model in cache_graphs():
        assert missing(model, table) == [], name


@pytest.mark.parametrize("bucket", BUCKETS, ids=str)
def test_no_shape_is_computed_at_run_time_once_a_bucket_fixes_the_shapes(tiny_fp16_dir: Path, bucket: Bucket):
    config = FolderConfig.load(tiny_fp16_dir).model
    models = [(part, as_gpu_loads(part, path)) for _, part, path in tiny_graphs(tiny_fp16_dir)]
    models += [(part, as_gpu_loads(part, path)) for folder in SHIPPED for _, part, path in graphs(folder, ("fp32",))]
    models += cache_graphs()
    for part, model in models:
        fixed = fold_constants(fix_dims(model, graph_dims(part, bucket, config)))
        assert runtime_shape_nodes(fixed) == [], part
        assert value_shaped_nodes(fixed) == KNOWN_VALUE_SHAPED.get(part, []), part


def test_with_symbolic_shapes_the_decoder_computes_shapes_at_run_time(tiny_model_dir: Path):
    """The check above would see shape chains: the service's graphs have them until a bucket fixes the shapes."""
    decoder = fold_constants(onnx.load(tiny_model_dir / "decoder.onnx"))
    found = runtime_shape_nodes(decoder)
    assert any(n.startswith("Shape ") for n in found) and any(n.startswith("Range ") for n in found)


def test_a_bucket_must_fix_every_dimension(tiny_model_dir: Path):
    with pytest.raises(ValueError, match="slots"):
        fix_dims(onnx.load(tiny_model_dir / "decoder.onnx"), {"batch": 1, "src_len": 8})


def model_of(nodes: list[onnx.NodeProto], inputs: list[tuple[str, int]], opsets: dict[str, int]) -> onnx.ModelProto:
    """A graph of these nodes, each input a (2, 4, 8) tensor of its element type, and every node output an output."""
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(name, dtype, [2, 4, 8]) for name, dtype in inputs],
        [helper.make_tensor_value_info(n.output[0], TensorProto.UNDEFINED, None) for n in nodes])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()],
                             ir_version=IR_VERSION)


def test_a_node_the_cuda_provider_has_no_kernel_for_fails(table: KernelTable):
    """FusedGemm is what ONNX Runtime's CPU-only GemmActivationFusion makes: the CUDA provider has no kernel."""
    node = helper.make_node("FusedGemm", ["a", "b"], ["y"], domain="com.microsoft", activation="Relu")
    found = missing(model_of([node], [("a", TensorProto.FLOAT), ("b", TensorProto.FLOAT)],
                             {"": OPSET, "com.microsoft": 1}), table)
    assert found == ["com.microsoft.FusedGemm (unnamed): the CUDA provider has no com.microsoft FusedGemm kernel"]


def test_an_operator_version_the_cuda_kernels_do_not_reach_fails(table: KernelTable):
    """Why the model graphs are opset 23 and the cache graphs 18: the CUDA provider's Reshape kernel of ONNX Runtime
    1.31 is registered from Reshape-23 on, open ended, which ONNX Runtime takes for Reshape-23 alone (opset 24 has
    Reshape-24); its Pad kernel likewise from Pad-18 (opset 23 has Pad-23)."""
    def graph(op: str, inputs: list[tuple[str, int]], opset: int) -> onnx.ModelProto:
        return model_of([helper.make_node(op, [name for name, _ in inputs], ["y"])], inputs, {"": opset})

    reshape = [("x", TensorProto.FLOAT), ("shape", TensorProto.INT64)]
    pad = [("x", TensorProto.FLOAT), ("pads", TensorProto.INT64)]
    assert missing(graph("Reshape", reshape, 23), table) == [] and missing(graph("Pad", pad, 18), table) == []
    (reshape_24,), (pad_23,) = missing(graph("Reshape", reshape, 24), table), missing(graph("Pad", pad, 23), table)
    assert "no CUDA kernel for version 24 of the operator" in reshape_24
    assert "no CUDA kernel for version 23 of the operator" in pad_23


def test_a_type_the_cuda_kernel_does_not_take_fails(table: KernelTable):
    """GroupQueryAttention (docs/decisions.md: tried on the CPU, not adopted without knowing this): fp16, bf16 only."""
    names = ["query", "key", "value", "past_key", "past_value", "seqlens_k", "total_sequence_length"]

    def attention(dtype: int) -> onnx.ModelProto:
        node = helper.make_node("GroupQueryAttention", names, ["y", "present_key", "present_value"],
                                domain="com.microsoft", num_heads=4, kv_num_heads=4)
        inputs = [(n, TensorProto.INT32 if n in names[5:] else dtype) for n in names]
        return model_of([node], inputs, {"": OPSET, "com.microsoft": 1})

    assert missing(attention(TensorProto.FLOAT16), table) == []
    (found,) = missing(attention(TensorProto.FLOAT), table)
    assert "T is tensor(float) (query); the CUDA kernel takes tensor(bfloat16), tensor(float16)" in found


def test_an_opset_version_no_cuda_kernel_covers_fails(table: KernelTable):
    """Upsample's schema of opset 10 (deprecated there): the CUDA kernels cover versions 7 to 9 only."""
    inputs = [("x", TensorProto.FLOAT), ("scales", TensorProto.FLOAT)]
    upsample = helper.make_node("Upsample", ["x", "scales"], ["y"])
    assert missing(model_of([upsample], inputs, {"": 9}), table) == []
    (found,) = missing(model_of([upsample], inputs, {"": 10}), table)
    assert "no CUDA kernel for version 10" in found


def test_the_shipped_int8_graphs_are_not_for_the_gpu(table: KernelTable):
    found = missing(onnx.load(SHIPPED[0] / "decoder.int8.onnx"), table)
    assert any("no ai.onnx DynamicQuantizeLinear kernel" in line for line in found)


def test_a_kernel_covers_a_node_as_onnx_runtime_matches_them():
    """KernelRegistry::VerifyKernelDef: the kernel starts at the node's since-version, or its closed range holds it."""
    latest, closed = Kernel(13, None, {}), Kernel(6, 12, {})
    assert latest.covers(13) and not latest.covers(14) and not latest.covers(12)
    assert closed.covers(6) and closed.covers(12) and not closed.covers(13)


def test_the_table_generator_reads_onnx_runtimes_markdown():
    spec = importlib.util.spec_from_file_location("cuda_kernels", KERNEL_TABLE.parent / "cuda_kernels.py")
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    markdown = "\n".join([
        '<a name="cpuexecutionprovider"/>', "|**Operator Domain:** *ai.onnx*||||", "|Abs|*in* X:**T**|1+|**T** = "
        "tensor(int8)|", '<a name="cudaexecutionprovider"/>', "| Op Name | Parameters | OpSet Version | Types |",
        "|---------|------------|---------------|-------|", "|**Operator Domain:** *ai.onnx*||||",
        "|TopK|*in* X:**T**<br> *in* K:**tensor(int64)**<br> *out* Values:**T**<br> *out* Indices:**I**<br><br>or"
        "<br><br>*in* X:**T**<br> *out* Values:**T**<br> *out* Indices:**I**|11+|**I** = tensor(int64)<br/> **T** = "
        "tensor(float), tensor(float16)|", "|||[1, 9]|**T** = tensor(float)|", "| |",
        "|**Operator Domain:** *com.ms.internal.nhwc*||||", "|Conv|*in* X:**T**<br> *out* Y:**T**|1+|**T** = "
        "tensor(float)|", '<a name="dmlexecutionprovider"/>', "|**Operator Domain:** *ai.onnx*||||",
        "|Abs|*in* X:**T**|1+|**T** = tensor(float)|",
    ])
    assert generator.cuda_operators(markdown) == {"ai.onnx:TopK": {
        "inputs": [["X", "T"], ["K", "tensor(int64)"]], "outputs": [["Values", "T"], ["Indices", "I"]],
        "kernels": [{"since": 11, "until": None, "types": {"I": ["tensor(int64)"], "T": ["tensor(float)",
                                                                                          "tensor(float16)"]}},
                    {"since": 1, "until": 9, "types": {"T": ["tensor(float)"]}}],
    }}


def test_the_kernel_table_names_its_source(table: KernelTable):
    assert len(table.source["commit"]) == 40 and table.source["commit"] in table.source["url"]
    assert {d for d, _ in table.operators} == {"ai.onnx", "com.microsoft"}
    assert np.mean([len(op.kernels) for op in table.operators.values()]) > 1

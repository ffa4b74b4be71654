"""The decoder step as a GPU session loads it (service.engine.cuda_step): each residual sum and its LayerNorm one
SkipLayerNormalization with the projection's bias inside. Checked on the CPU provider, which has the operator: the
step computes what the exported one does (post-LN with fp16-exact weights, pre-LN, fp16), every sub-layer's sum is
fused and what cannot be is left, the eager decoder and the buckets of TRANSLATOR_CUDA_GRAPHS translate with it as
with the exported step, and a GPU session falls back to the step as exported where ONNX Runtime refuses the fused
one."""

from __future__ import annotations

import collections
import logging
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from bench.offline.gpu_check import CPU, Bucket, as_inputs_of, optimized_like_cuda, session, step_arrays
from core.folder import IR_VERSION, OPSET, FolderConfig, GraphIO
from core.search import SearchOptions, search
from service.engine import cuda_step
from service.engine.config import ModelOptions
from service.engine.cuda_step import with_skip_layer_norms
from service.engine.decoder import ExportedDecoder
from service.engine.graphed import BucketedDecoder, BucketStore, tokens
from service.engine.sessions import ModelSessions

pytestmark = [
    pytest.mark.filterwarnings("ignore:.*LeafSpec.*:FutureWarning"),
    pytest.mark.filterwarnings("ignore:.*axis name.*:UserWarning"),
]

SHIPPED_EN_DE = Path(__file__).resolve().parent.parent / "models" / "en-de"


def counts(model: onnx.ModelProto) -> collections.Counter:
    return collections.Counter(node.op_type for node in model.graph.node)


@pytest.mark.parametrize("case", ["shipped post-LN fp32", "tiny pre-LN fp32", "tiny pre-LN fp16"])
def test_the_fused_step_computes_what_the_exported_one_does(case: str, tiny_model_dir: Path, tiny_fp16_dir: Path):
    folder = {"shipped": SHIPPED_EN_DE, "tiny": tiny_fp16_dir}[case.split()[0]]
    precision = case.split()[-1]
    config = FolderConfig.load(folder)
    path = folder / config.graphs[precision]["decoder"]
    exported, fused = (session(graph, CPU, threads=1)
                       for graph in (path, with_skip_layer_norms(onnx.load(path)).SerializeToString()))
    names = [x.name for x in exported.get_outputs()]
    for rows in (1, 16):
        arrays = step_arrays(Bucket(rows, 24, 16), config.model, np.random.default_rng(rows))
        feeds = as_inputs_of(exported, {**arrays, GraphIO.WIDTH: np.array([4], np.int64)})
        want, got = (dict(zip(names, step.run(names, feeds))) for step in (exported, fused))
        assert np.array_equal(got[GraphIO.TOP_TOKENS], want[GraphIO.TOP_TOKENS]), rows
        tolerance = 2e-2 if precision == "fp16" else 1e-4
        for name in names:
            np.testing.assert_allclose(got[name], want[name], atol=tolerance, rtol=tolerance, err_msg=name)


def test_every_sub_layers_sum_and_its_projections_bias_are_fused():
    path = SHIPPED_EN_DE / "decoder.onnx"
    layers = FolderConfig.load(SHIPPED_EN_DE).model.n_layers
    exported, fused = onnx.load(path), with_skip_layer_norms(onnx.load(path))
    before, after = counts(exported), counts(fused)
    sub_layers = 3 * layers  # self-attention, cross-attention, feed-forward
    assert before["LayerNormalization"] == sub_layers and after["LayerNormalization"] == 0
    assert after["SkipLayerNormalization"] == sub_layers
    assert before["Add"] - after["Add"] == sub_layers
    skips = [node for node in fused.graph.node if node.op_type == "SkipLayerNormalization"]
    assert all(len(node.input) == 5 and node.input[4].endswith(".bias") for node in skips)  # the projection's bias
    biased = [sum(len(n.input) == 3 for n in model.graph.node if n.op_type == "Gemm") for model in (exported, fused)]
    assert biased == [before["Gemm"], before["Gemm"] - sub_layers]  # a broadcast kernel fewer on CUDA, each
    # as a CUDA session runs them: ONNX Runtime leaves the step's 2-D sums unfused itself, a node more a sub-layer
    optimized = [counts(optimized_like_cuda(graph, fp16=False)) for graph in (path, fused.SerializeToString())]
    assert optimized[0]["LayerNormalization"] == sub_layers and optimized[1]["LayerNormalization"] == 0
    assert sum(optimized[0].values()) - sum(optimized[1].values()) == sub_layers


def test_a_pre_ln_sum_the_next_sub_layer_reads_too_is_the_fused_nodes_fourth_output(tiny_model_dir: Path):
    fused = with_skip_layer_norms(onnx.load(tiny_model_dir / "decoder.onnx"))
    assert counts(fused)["LayerNormalization"] == 0
    read = {name for node in fused.graph.node for name in node.input}
    for node in (n for n in fused.graph.node if n.op_type == "SkipLayerNormalization"):
        if len(node.output) == 4:
            assert node.output[3] in read
    assert sum(len(n.output) == 4 for n in fused.graph.node if n.op_type == "SkipLayerNormalization") >= 2


def small_graph(nodes: list[onnx.NodeProto], inputs: dict[str, list[int]], outputs: list[str]) -> onnx.ModelProto:
    """A float graph of these nodes, for the rewrite's edge cases."""
    d = 8
    weights = [helper.make_tensor(name, TensorProto.FLOAT, [d], np.linspace(0.5, 1.5, d).tolist())
               for name in ("gamma", "beta")]
    graph = helper.make_graph(
        nodes, "sums", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    return model


def test_sums_it_cannot_fuse_are_left_and_a_sum_read_as_an_output_is_kept():
    norm = helper.make_node("LayerNormalization", ["s", "gamma", "beta"], ["y"])
    broadcast = small_graph([helper.make_node("Add", ["x", "r"], ["s"]), norm], {"x": [4, 8], "r": [1, 8]}, ["y"])
    first_axis = small_graph([helper.make_node("Add", ["x", "r"], ["s"]),
                              helper.make_node("LayerNormalization", ["s", "gamma", "beta"], ["y"], axis=0)],
                             {"x": [4, 8], "r": [4, 8]}, ["y"])
    for model in (broadcast, first_axis):
        assert counts(with_skip_layer_norms(model))["SkipLayerNormalization"] == 0

    summed = small_graph([helper.make_node("Add", ["x", "r"], ["s"]), norm], {"x": [4, 8], "r": [4, 8]}, ["y", "s"])
    fused = with_skip_layer_norms(onnx.load_from_string(summed.SerializeToString()))
    assert [list(n.output) for n in fused.graph.node] == [["y", "", "", "s"]]
    feeds = {name: np.random.default_rng(0).standard_normal((4, 8), dtype=np.float32) for name in ("x", "r")}
    sessions_of = [session(model.SerializeToString(), CPU, threads=1) for model in (summed, fused)]
    for want, got in zip(*(s.run(None, feeds) for s in sessions_of)):
        np.testing.assert_allclose(got, want, atol=1e-5)


@pytest.mark.parametrize("beam_size", [1, 3])
def test_the_gpu_decoder_runs_the_rewritten_step_and_translates_as_the_exported_one_eager_and_in_buckets(
        tiny_model_dir: Path, beam_size: int):
    model = ModelSessions(tiny_model_dir, ModelOptions(provider="cpu", threads=1, kernels=False))
    rng = np.random.default_rng(beam_size)
    sources = [[*rng.integers(4, 90, rng.integers(3, 20)).tolist(), 2] for _ in range(6)]
    opts = SearchOptions(beam_size=beam_size, max_length=40)
    exported = search(ExportedDecoder(model), sources, opts, model.model_config)
    model.decoder = model._gpu_decoder(model.config.graphs["fp32"]["decoder"])  # what a GPU's ModelSessions does
    assert isinstance(model.step_graph, bytes)
    assert "SkipLayerNormalization" in counts(onnx.load_from_string(model.step_graph))
    eager = search(ExportedDecoder(model), sources, opts, model.model_config)
    bucketed = search(BucketedDecoder(model, BucketStore(model, model.decoder, capture=False)), sources, opts,
                      model.model_config)
    assert tokens(eager) == tokens(exported)
    assert tokens(bucketed) == tokens(exported)


def test_the_gpu_decoder_falls_back_to_the_exported_step_where_onnx_runtime_refuses_the_fused_one(
        tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture):
    def refused(graph: onnx.ModelProto) -> onnx.ModelProto:
        fused = with_skip_layer_norms(graph)
        for node in fused.graph.node:
            if node.op_type == "SkipLayerNormalization":
                del node.input[2:]  # no gamma: a node ONNX Runtime refuses
        return fused

    monkeypatch.setattr(cuda_step, "with_skip_layer_norms", refused)
    model = ModelSessions(tiny_model_dir, ModelOptions(provider="cpu", threads=1, kernels=False))
    name = model.config.graphs["fp32"]["decoder"]
    with caplog.at_level(logging.WARNING, logger="service.engine.sessions"):
        model.decoder = model._gpu_decoder(name)
    assert model.step_graph == name
    assert "residual sums unfused" in caplog.text
    assert search(ExportedDecoder(model), [[5, 9, 2]], SearchOptions(max_length=4), model.model_config)

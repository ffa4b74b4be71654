"""Our kernels (service.engine.kernels) compute the exported decoder step: the rewritten graph gives the export's
logits, caches, top tokens and their log-probabilities at rows of different positions, in fp32 and int8;
the service's sessions run them on the CPU and translate as the export does; a graph they do not fit, or a library
not built, leaves the step as exported, the reason logged. `make test` builds the library first
(python -m service.engine.kernels.build)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper

from bench.offline.gpu_check import Bucket, step_arrays
from bench.studies.decoding_attention import BoundStep, agreement
from core.folder import GraphIO
from core.search import SearchOptions
from export.__main__ import store_exact_weights_in_fp16
from export.graphs import export_decoder
from export.quantize import quantize_int8
from model.config import preset
from model.transformer import Transformer
from service.engine import sessions
from service.engine.cache_graphs import move_graph
from service.engine.decoder import SlotTableDecoder
from service.engine.kernels import built_library, half_weights
from service.engine.kernels.graph import CROSS_FROM, SLOT_ROWS, KernelsRefused, with_kernels
from service.engine.prepare import prepared_graphs
from service.engine.translator import Translator

pytestmark = [
    pytest.mark.filterwarnings("ignore:.*LeafSpec.*:FutureWarning"),
    pytest.mark.filterwarnings("ignore:.*axis name.*:UserWarning"),
]


@pytest.fixture(scope="module")
def library() -> Path:
    library = built_library()
    assert library is not None, "the kernels are not built: python -m service.engine.kernels.build (make test runs it)"
    return library


@pytest.fixture(scope="module", params=[16, 24, 64], ids=lambda size: f"head{size}")
def model(request) -> Transformer:
    """A tiny model of two heads of this size: 16 and 64 (the shipped models') take the kernels' code for the usual
    head sizes, 24 their code for any other."""
    torch.manual_seed(0)
    return Transformer(preset("tiny", vocab_size=90, n_layers=2, d_model=2 * request.param)).eval()


@pytest.fixture(scope="module", params=["fp32", "int8"])
def graphs(request, tmp_path_factory, model: Transformer) -> dict[str, Path]:
    """The exported step of one precision, and the same rewritten with our kernels."""
    folder = tmp_path_factory.mktemp(f"kernels-{request.param}")
    export, kernels = folder / "export.onnx", folder / "kernels.onnx"
    export_decoder(model, export)
    if request.param == "int8":
        quantize_int8(export, export)
    onnx.save(with_kernels(onnx.load(str(export))), str(kernels))
    return {"export": export, "kernels": kernels}


def test_each_attention_and_the_top_k_is_one_operator_of_ours(graphs):
    ops = [node.op_type for node in onnx.load(str(graphs["kernels"])).graph.node]
    assert ops.count("DecoderSelfAttention") == ops.count("DecoderCrossAttention") == 2
    assert ops.count("TopLogSoftmax") == 1
    assert ops.count("AddLayerNorm") == 2 * 3  # each post-LN sub-layer's residual sum and its LayerNorm
    assert not {"Attention", "ScatterND", "LogSoftmax", "TopK", "LayerNormalization"} & set(ops)
    exported = [node.op_type for node in onnx.load(str(graphs["export"])).graph.node]
    assert len(ops) < len(exported) - 20  # the slot index, the masks and the reshapes went with them


@pytest.mark.parametrize("rows", [1, 5, 16])
def test_the_kernels_compute_the_exported_step(library, graphs, model, rows):
    arrays = step_arrays(Bucket(rows, slots=16, source=11), model.cfg, np.random.default_rng(rows))
    export, kernels = BoundStep(graphs["export"], arrays), BoundStep(graphs["kernels"], arrays)
    same = agreement(export.run(), kernels.run())
    assert same["logits_max_abs_diff"] < 1e-4
    assert same["caches_max_abs_diff"] < 1e-6  # each row's slot written in place, the others left as they were
    assert same["top_tokens_equal"] == 1.0  # all of the top-k, in order
    assert same["top_logp_max_abs_diff"] < 1e-5


@pytest.mark.parametrize("rows", [1, 5])
def test_caches_with_room_after_the_rows_give_the_rows_the_same_step(library, graphs, model, rows):
    """Self-attention caches of more rows than the step's (the room sentences that left give to those that join):
    the rows read and write their own, and the step is the one over caches of exactly its rows; the room is left as
    it was. Caches of fewer rows than the step's are refused."""
    rng = np.random.default_rng(rows)
    arrays = step_arrays(Bucket(rows, slots=16, source=11), model.cfg, rng)
    names = [name for name in arrays if name.startswith(f"{GraphIO.SELF}_")]
    room = {name: rng.standard_normal((3, *arrays[name].shape[1:])).astype(np.float32) for name in names}
    roomy = {**arrays, **{name: np.concatenate([arrays[name], room[name]]) for name in names}}
    exact, with_room = BoundStep(graphs["kernels"], arrays).run(), BoundStep(graphs["kernels"], roomy).run()
    assert (exact[GraphIO.LOGITS] == with_room[GraphIO.LOGITS]).all()
    for name in names:
        np.testing.assert_array_equal(with_room[name][:rows], exact[name])
        np.testing.assert_array_equal(with_room[name][rows:], room[name])
    fewer = {**arrays, **{name: arrays[name][: rows - 1] for name in names}}
    with pytest.raises(RuntimeError, match="a row for each row"):
        BoundStep(graphs["kernels"], fewer).run()


@pytest.fixture(scope="module")
def half_graphs(tmp_path_factory, model: Transformer) -> dict[str, Path]:
    """The step of the model rounded to fp16 and exported as the shipped folders are (each weight that fp16 holds
    stored as fp16 and cast to float), rewritten with our kernels: with the fp16-weight projections and without."""
    folder = tmp_path_factory.mktemp("half")
    rounded = Transformer(model.cfg).eval()
    rounded.load_state_dict({name: value.half().float() if value.is_floating_point() else value
                             for name, value in model.state_dict().items()})
    export_decoder(rounded, folder / "export.onnx")
    store_exact_weights_in_fp16(folder / "export.onnx")
    for half in (False, True):
        onnx.save(with_kernels(onnx.load(str(folder / "export.onnx")), half), str(folder / f"half-{half}.onnx"))
    return {"export": folder / "export.onnx", "full": folder / "half-False.onnx", "half": folder / "half-True.onnx"}


@pytest.mark.parametrize("rows", [1, 5, 16])
def test_the_fp16_weight_projections_give_the_step_to_the_bit(library, half_graphs, model, rows):
    """Every projection (each layer's, the output's, a Relu after one in it) reads its weight in fp16, and the step
    gives the same logits, caches and top-k as ONNX Runtime's projections over the float weights, to the bit."""
    if not half_weights(library):
        pytest.skip("this CPU does not run ours.HalfGemm (AVX-512): the rewrite leaves the projections to ONNX Runtime")
    projections = [n for n in onnx.load(str(half_graphs["export"])).graph.node if n.op_type in ("Gemm", "MatMul")]
    ops = [n.op_type for n in onnx.load(str(half_graphs["half"])).graph.node]
    assert ops.count("HalfGemm") == len(projections) and not {"Gemm", "MatMul", "Relu"} & set(ops)
    arrays = step_arrays(Bucket(rows, slots=16, source=11), model.cfg, np.random.default_rng(rows))
    full, half = BoundStep(half_graphs["full"], arrays).run(), BoundStep(half_graphs["half"], arrays).run()
    assert full.keys() == half.keys()
    for name in full:
        np.testing.assert_array_equal(half[name], full[name], err_msg=name)


def test_the_encoders_fp16_weight_projections_give_its_outputs_to_the_bit(library, tiny_rounded_dir):
    """The encoder of a folder exported as the shipped ones are is prepared with every projection (each with the Add
    of its bias, the FFN's with its Relu) as ours.HalfGemm, and its keys and values are the exported encoder's to the
    bit, padding and all."""
    if not half_weights(library):
        pytest.skip("this CPU does not run ours.HalfGemm (AVX-512): the encoder runs as exported")
    exported = onnx.load(str(tiny_rounded_dir / "encoder.onnx"))
    prepared = prepared_graphs(tiny_rounded_dir, "decoder.onnx", "encoder.onnx", kernels=True)
    ops = [node.op_type for node in onnx.load_from_string(prepared.encoder).graph.node]
    assert ops.count("HalfGemm") == [n.op_type for n in exported.graph.node].count("MatMul") > 0
    assert not {"MatMul", "Relu"} & set(ops)
    options = ort.SessionOptions()
    options.register_custom_ops_library(str(library))
    encoders = [ort.InferenceSession(graph, options, providers=["CPUExecutionProvider"],
                                     disabled_optimizers=sessions.CPU_UNFUSED)  # as the service's CPU sessions
                for graph in (exported.SerializeToString(), prepared.encoder)]
    rng = np.random.default_rng(0)
    for rows, length in [(1, 7), (3, 12), (7, 5)]:
        src = rng.integers(4, 90, (rows, length))
        src_mask = np.arange(length) < rng.integers(1, length + 1, rows)[:, None]
        theirs, ours = (encoder.run(None, {GraphIO.SRC: src, GraphIO.SRC_MASK: src_mask}) for encoder in encoders)
        for a, b in zip(theirs, ours, strict=True):
            np.testing.assert_array_equal(b, a)


def test_a_rounded_models_translations_with_the_kernels_are_the_exports(tiny_rounded_dir, sentence_pairs):
    """A folder whose step and encoder read their weights in fp16 translates as the graphs as exported."""
    texts, opts = [source for source, _ in sentence_pairs], SearchOptions(beam_size=4, n_best=2)
    expected = Translator(tiny_rounded_dir, provider="cpu", threads=1, kernels=False).translate(texts, opts, 3)
    got = Translator(tiny_rounded_dir, provider="cpu", threads=2).translate(texts, opts, 3)
    assert [[t.text for t in n_best] for n_best in got] == [[t.text for t in n_best] for n_best in expected]
    np.testing.assert_allclose([[t.score for t in n_best] for n_best in got],
                               [[t.score for t in n_best] for n_best in expected], atol=1e-4)


def test_a_pre_ln_steps_sums_stay_as_they_are_and_it_computes_the_exported_step(library, tmp_path):
    """A pre-LN layer's residual sum is read by the next sum too, not by a LayerNorm alone: not fused. Only the last
    sum is, with the decoder's final LayerNorm."""
    torch.manual_seed(1)
    pre_ln = Transformer(preset("tiny", vocab_size=90, n_layers=2, pre_norm=True)).eval()
    export, kernels = tmp_path / "export.onnx", tmp_path / "kernels.onnx"
    export_decoder(pre_ln, export)
    onnx.save(with_kernels(onnx.load(str(export))), str(kernels))
    ops = [node.op_type for node in onnx.load(str(kernels)).graph.node]
    assert ops.count("AddLayerNorm") == 1 and ops.count("LayerNormalization") == 2 * 3
    arrays = step_arrays(Bucket(5, slots=16, source=11), pre_ln.cfg, np.random.default_rng(5))
    same = agreement(BoundStep(export, arrays).run(), BoundStep(kernels, arrays).run())
    assert same["logits_max_abs_diff"] < 1e-4 and same["top_tokens_equal"] == 1.0


def add_layer_norm_graph(ours: bool, size: int, epsilon: float) -> bytes:
    """LayerNormalization(x + skip) over the last axis: as exported (Add, LayerNormalization), or our AddLayerNorm."""
    rng = np.random.default_rng(size)
    weights = [onnx.numpy_helper.from_array(rng.standard_normal(size).astype(np.float32), name)
               for name in ("scale", "bias")]
    inputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, ["n", size]) for name in ("x", "skip")]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", size])]
    if ours:
        nodes = [helper.make_node("AddLayerNorm", ["x", "skip", "scale", "bias"], ["y"], domain="ours",
                                  epsilon=epsilon)]
    else:
        nodes = [helper.make_node("Add", ["x", "skip"], ["sum"]),
                 helper.make_node("LayerNormalization", ["sum", "scale", "bias"], ["y"], axis=-1, epsilon=epsilon)]
    graph = helper.make_graph(nodes, "add_layer_norm", inputs, outputs, weights)
    imports = [helper.make_opsetid("", 23), helper.make_opsetid("ours", 1)]
    return helper.make_model(graph, opset_imports=imports, ir_version=10).SerializeToString()


@pytest.mark.parametrize("size, epsilon", [(256, 1e-5), (37, 1e-2)])
def test_add_layer_norm_computes_the_sum_and_its_layer_norm(library, size, epsilon):
    rng = np.random.default_rng(size)
    x = (rng.standard_normal((9, size)) * 4 + 2).astype(np.float32)
    skip = rng.standard_normal((9, size)).astype(np.float32)
    x[0], skip[0] = 3.0, 0.5  # a row of equals: no variance, epsilon alone
    options = ort.SessionOptions()
    options.register_custom_ops_library(str(library))
    theirs, ours = (ort.InferenceSession(add_layer_norm_graph(mine, size, epsilon), options,
                                         providers=["CPUExecutionProvider"]).run(None, {"x": x, "skip": skip})[0]
                    for mine in (False, True))
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module")
def translators(library, tiny_model_dir: Path) -> dict[tuple[bool, int], Translator]:
    return {(kernels, threads): Translator(tiny_model_dir, provider="cpu", threads=threads, kernels=kernels)
            for kernels in (False, True) for threads in (1, 2)}


def test_the_cpu_sessions_run_the_kernels_unless_told_not_to(translators):
    assert {key: t.sessions.kernels for key, t in translators.items()} == {
        (False, 1): False, (False, 2): False, (True, 1): True, (True, 2): True}
    ops = {node.op_type for node in onnx.load(str(translators[True, 1].model_dir / "decoder.onnx")).graph.node}
    assert {"Attention", "TopK"} <= ops  # the folder's graph is left as exported: the rewrite is the session's


@pytest.mark.parametrize("beam_size", [1, 4])
def test_translations_with_the_kernels_are_the_exports(translators, sentence_pairs, beam_size):
    texts = [source for source, _ in sentence_pairs]
    opts = SearchOptions(beam_size=beam_size, n_best=beam_size)
    expected = translators[False, 1].translate(texts, opts, batch_size=3)
    for threads in (1, 2):
        got = translators[True, threads].translate(texts, opts, batch_size=3)
        assert [[t.text for t in n_best] for n_best in got] == [[t.text for t in n_best] for n_best in expected]
        scores = np.array([[t.score for t in n_best] for n_best in got])
        np.testing.assert_allclose(scores, [[t.score for t in n_best] for n_best in expected], atol=1e-4)


@pytest.mark.parametrize("beam_size", [1, 4])
def test_the_kernels_first_cache_is_never_read_before_it_is_written(translators, sentence_pairs, beam_size,
                                                                    monkeypatch):
    """The kernels' first self-attention cache is memory left as allocated: filled with NaN here, the translations
    (through growths, reorders and rows that leave) are still those of a clean one."""
    translator = translators[True, 1]
    texts, opts = [source for source, _ in sentence_pairs], SearchOptions(beam_size=beam_size, n_best=beam_size,
                                                                          max_length_extra=40)
    expected = translator.translate(texts, opts, batch_size=3)
    allocated = SlotTableDecoder._first_cache

    def poisoned(self, rows):
        values = allocated(self, rows)
        for value in values:
            value.update_inplace(np.full(value.shape(), np.nan, np.float32))
        return values

    monkeypatch.setattr(SlotTableDecoder, "_first_cache", poisoned)
    got = translator.translate(texts, opts, batch_size=3)
    assert [[t.text for t in n_best] for n_best in got] == [[t.text for t in n_best] for n_best in expected]
    assert np.isfinite([[t.score for t in n_best] for n_best in got]).all()


def test_a_graph_of_another_shape_is_refused(graphs):
    step = onnx.load(str(graphs["export"]))
    attention = next(node for node in step.graph.node if node.op_type == "Attention")
    attention.attribute.append(onnx.helper.make_attribute("is_causal", 1))
    with pytest.raises(KernelsRefused, match="not the exported attention"):
        with_kernels(step)
    step = onnx.load(str(graphs["export"]))
    attention = next(node for node in step.graph.node if node.op_type == "Attention")
    attention.input[1] = attention.input[0]  # keys that are not a cache's slot write
    with pytest.raises(KernelsRefused, match="slot write"):
        with_kernels(step)


@pytest.mark.parametrize("library", ["none", "not a library"])
def test_without_a_library_the_step_runs_as_exported(tiny_model_dir, tmp_path, monkeypatch, caplog, library):
    not_a_library = tmp_path / "libdecoder_step.so"
    not_a_library.write_text("not a shared object")
    monkeypatch.setattr(sessions, "built_library", lambda: None if library == "none" else not_a_library)
    with caplog.at_level(logging.WARNING, logger=sessions.__name__):
        translator = Translator(tiny_model_dir, provider="cpu", threads=1)
    assert not translator.sessions.kernels
    assert "our kernels not used" in caplog.text
    assert ("not built" if library == "none" else "Failed to load library") in caplog.text
    assert translator.translate(["Ein Hund läuft."])[0][0].text


def top_k_graph(ours: bool) -> bytes:
    """top_logp, top_tokens of (N, V) logits: ONNX's TopK(LogSoftmax) as exported, or our TopLogSoftmax."""
    inputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["n", "v"]),
              helper.make_tensor_value_info("width", TensorProto.INT64, [1])]
    outputs = [helper.make_tensor_value_info("top_logp", TensorProto.FLOAT, ["n", "k"]),
               helper.make_tensor_value_info("top_tokens", TensorProto.INT64, ["n", "k"])]
    if ours:
        nodes = [helper.make_node("TopLogSoftmax", ["logits", "width"], ["top_logp", "top_tokens"], domain="ours")]
    else:
        nodes = [helper.make_node("LogSoftmax", ["logits"], ["logp"], axis=-1),
                 helper.make_node("TopK", ["logp", "width"], ["top_logp", "top_tokens"], axis=-1)]
    graph = helper.make_graph(nodes, "top_k", inputs, outputs)
    imports = [helper.make_opsetid("", 23), helper.make_opsetid("ours", 1)]
    return helper.make_model(graph, opset_imports=imports, ir_version=10).SerializeToString()


@pytest.mark.parametrize("width", [1, 8, 50])
def test_the_top_k_orders_ties_and_banned_tokens_as_onnx_does(library, width):
    logits = np.random.default_rng(width).standard_normal((7, 50)).astype(np.float32).round(1)  # many ties
    logits[:, 3] = -np.inf  # a banned token (a Marian model's <pad>)
    logits[0] = 0.5  # a row of equals
    options = ort.SessionOptions()
    options.register_custom_ops_library(str(library))
    feeds = {"logits": logits, "width": np.array([width])}
    theirs, ours = (ort.InferenceSession(top_k_graph(mine), options, providers=["CPUExecutionProvider"])
                    .run(None, feeds) for mine in (False, True))
    np.testing.assert_array_equal(ours[1], theirs[1])
    np.testing.assert_allclose(ours[0], theirs[0], atol=1e-5)



@pytest.mark.parametrize("width", [1, 8])
def test_a_negative_width_gives_the_same_best_tokens_with_their_logits(library, width):
    """What a greedy step asks for (-width): the tokens TopK(LogSoftmax) gives, with the logits themselves in
    place of log-probabilities, whose log-sum-exp the kernel then leaves out."""
    logits = np.random.default_rng(width).standard_normal((7, 50)).astype(np.float32).round(1)
    logits[:, 3] = -np.inf
    options = ort.SessionOptions()
    options.register_custom_ops_library(str(library))
    theirs = ort.InferenceSession(top_k_graph(False), options, providers=["CPUExecutionProvider"])
    ours = ort.InferenceSession(top_k_graph(True), options, providers=["CPUExecutionProvider"])
    top_logp, top_tokens = theirs.run(None, {"logits": logits, "width": np.array([width])})
    top_logits, tokens = ours.run(None, {"logits": logits, "width": np.array([-width])})
    np.testing.assert_array_equal(tokens, top_tokens)
    np.testing.assert_array_equal(top_logits, np.take_along_axis(logits, tokens, axis=1))
    assert not np.allclose(top_logits, top_logp)

def moves(rng: np.random.Generator, n: int) -> list[np.ndarray]:
    """Row selections of every kind a search makes of n rows: beam reorders (rows repeated, cycles of rows that
    change places), sentences leaving (fewer rows, those after a hole moved into it), and both at once."""
    swap = np.arange(n)
    swap[[0, n - 1]] = swap[[n - 1, 0]]
    return [np.arange(n)[::-1].copy(), swap, np.sort(rng.integers(0, n, n)), rng.integers(0, n, n),
            rng.permutation(n), rng.choice(n, n - 3, replace=False), np.r_[np.arange(2), n - 1, np.arange(3, n - 1)],
            rng.integers(0, n, n // 2), np.roll(np.arange(n), 1)]


@pytest.mark.parametrize("n", [4, 9, 33])
@pytest.mark.parametrize("room", [0, 5])
def test_rows_moved_in_place_are_the_rows_gathered(library, n, room):
    """The move graph with each output bound to its input's memory, as the decoder runs it: each row has its
    source row's first `lengths` slots, whatever the order the rows must be written in, and the rows after those
    moved, and after the n with lengths (`room`, which no row is moved from but rows may be moved into), are left as
    they were."""
    rng = np.random.default_rng(n)
    options = ort.SessionOptions()
    options.register_custom_ops_library(str(library))
    session = ort.InferenceSession(move_graph(2), options, providers=["CPUExecutionProvider"])
    grown = [np.sort(rng.integers(0, n, n + room))] if room else []  # beams grown from first rows, into the room
    for rows in moves(rng, n) + grown:
        caches = [rng.standard_normal((n + room, 3, 6, 4)).astype(np.float32) for _ in range(2)]
        lengths = rng.integers(0, 7, n)
        expected = [cache[rows].copy() for cache in caches]
        untouched = [cache[len(rows):].copy() for cache in caches]
        values = [ort.OrtValue.ortvalue_from_numpy(cache) for cache in caches]
        binding = session.io_binding()
        for i, value in enumerate(values):
            binding.bind_ortvalue_input(f"x_{i}", value)
            binding.bind_ortvalue_output(f"y_{i}", value)
        binding.bind_cpu_input("rows", rows.astype(np.int64))
        binding.bind_cpu_input("lengths", lengths.astype(np.int64))
        session.run_with_iobinding(binding)
        for cache, want, kept in zip(caches, expected, untouched):
            for i, row in enumerate(rows):
                np.testing.assert_array_equal(cache[i, :, : lengths[row]], want[i, :, : lengths[row]])
                if row == i:  # a row that keeps its place keeps all of its slots
                    np.testing.assert_array_equal(cache[i], want[i])
            np.testing.assert_array_equal(cache[len(rows):], kept)


def test_rows_moved_into_another_buffer_are_the_input_with_the_rows_gathered(library):
    """The move graph with outputs of its own: y is x, its first rows those gathered."""
    options = ort.SessionOptions()
    options.register_custom_ops_library(str(library))
    session = ort.InferenceSession(move_graph(1), options, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal((5, 2, 3, 4)).astype(np.float32)
    rows, lengths = np.array([3, 0, 3]), np.full(4, 3)
    (y,) = session.run(None, {"x_0": x, "rows": rows, "lengths": lengths})
    np.testing.assert_array_equal(y, np.concatenate([x[rows], x[3:]]))


def test_a_move_to_a_row_out_of_range_is_refused(library):
    options = ort.SessionOptions()
    options.register_custom_ops_library(str(library))
    session = ort.InferenceSession(move_graph(1), options, providers=["CPUExecutionProvider"])
    feeds = {"x_0": np.zeros((2, 1, 1, 1), np.float32), "lengths": np.ones(2, np.int64)}
    with pytest.raises(ort.capi.onnxruntime_pybind11_state.RuntimeException, match="out of range"):
        session.run(None, {**feeds, "rows": np.array([2])})
    with pytest.raises(ort.capi.onnxruntime_pybind11_state.RuntimeException, match="out of range"):
        session.run(None, {**feeds, "rows": np.array([1]), "lengths": np.ones(1, np.int64)})  # no length of row 1
    with pytest.raises(ort.capi.onnxruntime_pybind11_state.RuntimeException, match="at most x's rows"):
        session.run(None, {**feeds, "rows": np.array([1]), "lengths": np.ones(3, np.int64)})


@pytest.mark.parametrize("rows", [3, 16])
def test_a_row_reads_its_slots_where_the_slot_table_says(library, graphs, model, rows):
    """With a slot table, row i reads its slot j < position from row slot_rows[i, j] of the caches (a beam reorder
    reorders the table, not the caches): the exported step over caches in which every row holds its own slots,
    gathered by the table, gives the same logits and top-k. As in beam search, the rows are sentences of 4 beams
    at one position, whose slots are in their sentence's rows (a row writes its slot at its position, which no row
    of its sentence reads yet)."""
    rng = np.random.default_rng(rows)
    arrays = step_arrays(Bucket(rows, slots=16, source=11), model.cfg, rng)
    sentence = np.arange(rows) // 4
    arrays[GraphIO.POSITIONS] = rng.integers(0, 16, rows)[sentence]
    table = 4 * sentence[:, None] + rng.integers(0, 4, (rows, 16))
    table = np.minimum(table, rows - 1)  # the last sentence may have fewer beams
    gathered = dict(arrays)
    for name in [n for n in arrays if n.startswith(f"{GraphIO.SELF}_")]:
        gathered[name] = arrays[name].copy()
        for row, position in enumerate(arrays[GraphIO.POSITIONS]):
            slots = np.arange(position)
            gathered[name][row, :, slots] = arrays[name][table[row, slots], :, slots]
    same = agreement(BoundStep(graphs["export"], gathered).run(),
                     BoundStep(graphs["kernels"], {**arrays, SLOT_ROWS: table}).run())
    assert same["logits_max_abs_diff"] < 1e-4
    assert same["top_tokens_equal"] == 1.0
    assert same["top_logp_max_abs_diff"] < 1e-5


@pytest.mark.parametrize("rows", [3, 16])
def test_a_row_reads_the_encoder_keys_values_of_the_row_cross_from_names(library, graphs, model, rows):
    """With cross_from, row i reads the encoder keys/values (and nothing else) of row cross_from[i], as a beam
    sentence's rows read its first row's: the exported step over caches gathered by cross_from gives the same logits
    and top-k. Here every row holds other keys/values, so a row that read its own would differ."""
    rng = np.random.default_rng(rows)
    arrays = step_arrays(Bucket(rows, slots=16, source=11), model.cfg, rng)
    cross_from = 4 * (np.arange(rows) // 4)  # each sentence of 4 beams from its first row
    arrays[GraphIO.SRC_MASK] = arrays[GraphIO.SRC_MASK][cross_from]  # a sentence's rows share its source
    gathered = {name: value[cross_from] if name.startswith(f"{GraphIO.CROSS}_") else value
                for name, value in arrays.items()}
    same = agreement(BoundStep(graphs["export"], gathered).run(),
                     BoundStep(graphs["kernels"], {**arrays, CROSS_FROM: cross_from}).run())
    assert same["logits_max_abs_diff"] < 1e-4
    assert same["top_tokens_equal"] == 1.0
    own = agreement(BoundStep(graphs["export"], gathered).run(), BoundStep(graphs["kernels"], arrays).run())
    assert own["logits_max_abs_diff"] > 1e-2  # the test can tell a row that read its own


def test_a_cross_from_that_names_no_row_is_refused(library, graphs, model):
    arrays = step_arrays(Bucket(4, slots=8, source=5), model.cfg, np.random.default_rng(0))
    with pytest.raises(RuntimeError, match="names no row"):
        BoundStep(graphs["kernels"], {**arrays, CROSS_FROM: np.array([0, 0, 4, 0])}).run()
    with pytest.raises(RuntimeError, match="a row for each row"):
        BoundStep(graphs["kernels"], {**arrays, CROSS_FROM: np.array([0, 0, 0])}).run()


def test_a_slot_table_that_names_no_row_is_refused(library, graphs, model):
    arrays = step_arrays(Bucket(4, slots=8, source=5), model.cfg, np.random.default_rng(0))
    arrays[GraphIO.POSITIONS] = np.full(4, 3)
    table = np.zeros((4, 8), dtype=np.int64)
    table[2, 1] = 4  # there are rows 0 to 3
    with pytest.raises(RuntimeError, match="names no row"):
        BoundStep(graphs["kernels"], {**arrays, SLOT_ROWS: table}).run()
    table[2, 1] = 0
    with pytest.raises(RuntimeError, match="a row for each row"):
        BoundStep(graphs["kernels"], {**arrays, SLOT_ROWS: table[:3]}).run()

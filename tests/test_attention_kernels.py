"""Our attention kernels (service.engine.kernels) compute the exported decoder step: the rewritten graph gives the
export's logits, caches and best tokens at rows of different positions, in fp32 and int8, on one thread and two;
the service's sessions run them on the CPU and translate as the export does; a graph they do not fit, or a library
not built, leaves the step as exported, the reason logged. `make test` builds the library first
(python -m service.engine.kernels.build)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from bench.offline.gpu_check import Bucket, step_arrays
from bench.studies.decoding_attention import BoundStep, agreement
from core.search import SearchOptions
from export.graphs import export_decoder
from export.quantize import quantize_int8
from model.config import preset
from model.transformer import Transformer
from service.engine import sessions
from service.engine.kernels import built_library
from service.engine.kernels.graph import KernelsRefused, with_attention_kernels
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


@pytest.fixture(scope="module")
def model() -> Transformer:
    torch.manual_seed(0)
    return Transformer(preset("tiny", vocab_size=90, n_layers=2)).eval()


@pytest.fixture(scope="module", params=["fp32", "int8"])
def graphs(request, tmp_path_factory, model: Transformer) -> dict[str, Path]:
    """The exported step of one precision, and the same rewritten with our kernels."""
    folder = tmp_path_factory.mktemp(f"kernels-{request.param}")
    export, kernels = folder / "export.onnx", folder / "kernels.onnx"
    export_decoder(model, export)
    if request.param == "int8":
        quantize_int8(export, export)
    onnx.save(with_attention_kernels(onnx.load(str(export))), str(kernels))
    return {"export": export, "kernels": kernels}


def test_each_attention_is_one_operator_of_ours(graphs):
    ops = [node.op_type for node in onnx.load(str(graphs["kernels"])).graph.node]
    assert ops.count("DecoderSelfAttention") == ops.count("DecoderCrossAttention") == 2
    assert not {"Attention", "ScatterND"} & set(ops)
    exported = [node.op_type for node in onnx.load(str(graphs["export"])).graph.node]
    assert len(ops) < len(exported) - 20  # the slot index, the masks and the reshapes went with them


@pytest.mark.parametrize("rows", [1, 5, 16])
def test_the_kernels_compute_the_exported_step(library, graphs, model, rows):
    arrays = step_arrays(Bucket(rows, slots=16, source=11), model.cfg, np.random.default_rng(rows))
    export, kernels = BoundStep(graphs["export"], arrays), BoundStep(graphs["kernels"], arrays)
    same = agreement(export.run(), kernels.run())
    assert same["logits_max_abs_diff"] < 1e-4
    assert same["caches_max_abs_diff"] < 1e-6  # each row's slot written in place, the others left as they were
    assert same["best_token_equal"] == 1.0


@pytest.fixture(scope="module")
def translators(library, tiny_model_dir: Path) -> dict[tuple[bool, int], Translator]:
    return {(kernels, threads): Translator(tiny_model_dir, provider="cpu", threads=threads, attention_kernels=kernels)
            for kernels in (False, True) for threads in (1, 2)}


def test_the_cpu_sessions_run_the_kernels_unless_told_not_to(translators):
    assert {key: t.attention for key, t in translators.items()} == {
        (False, 1): "onnx", (False, 2): "onnx", (True, 1): "kernels", (True, 2): "kernels"}
    ops = {node.op_type for node in onnx.load(str(translators[True, 1].model_dir / "decoder.onnx")).graph.node}
    assert "Attention" in ops  # the folder's graph is left as exported: the rewrite is the session's


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


def test_a_graph_of_another_shape_is_refused(graphs):
    step = onnx.load(str(graphs["export"]))
    attention = next(node for node in step.graph.node if node.op_type == "Attention")
    attention.attribute.append(onnx.helper.make_attribute("is_causal", 1))
    with pytest.raises(KernelsRefused, match="not the exported attention"):
        with_attention_kernels(step)
    step = onnx.load(str(graphs["export"]))
    attention = next(node for node in step.graph.node if node.op_type == "Attention")
    attention.input[1] = attention.input[0]  # keys that are not a cache's slot write
    with pytest.raises(KernelsRefused, match="slot write"):
        with_attention_kernels(step)


def test_without_the_library_the_step_runs_as_exported(tiny_model_dir, monkeypatch, caplog):
    monkeypatch.setattr(sessions, "built_library", lambda: None)
    with caplog.at_level(logging.WARNING, logger=sessions.__name__):
        translator = Translator(tiny_model_dir, provider="cpu", threads=1)
    assert translator.attention == "onnx"
    assert "attention kernels not used" in caplog.text and "not built" in caplog.text
    assert translator.translate(["Ein Hund läuft."])[0][0].text

"""bench.studies.decoding_attention compares like with like: its GroupQueryAttention step computes what the
exported step does (logits, the caches written in place, the best tokens), at rows of different positions. (Its
kernels variant is the service's: tests/test_attention_kernels.py.)"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from bench.offline.gpu_check import Bucket, step_arrays
from bench.studies.decoding_attention import SOURCE, VARIANTS, BoundStep, agreement
from export.graphs import export_decoder
from model.config import preset
from model.transformer import Transformer

COMPARED = ["export", "group-query"]
pytestmark = [
    pytest.mark.filterwarnings("ignore:.*LeafSpec.*:FutureWarning"),
    pytest.mark.filterwarnings("ignore:.*axis name.*:UserWarning"),
]


@pytest.fixture(scope="module")
def model() -> Transformer:
    torch.manual_seed(0)
    return Transformer(preset("tiny", vocab_size=90, n_layers=2)).eval()


@pytest.fixture(scope="module")
def graphs(tmp_path_factory, model: Transformer) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("decoding-attention")
    paths = {name: folder / f"{name}.onnx" for name in COMPARED}
    for name in COMPARED:
        export_decoder(model, paths[name], VARIANTS[name])
    return paths


def test_the_variant_writes_and_attends_in_one_node_per_layer(graphs):
    ops = [node.op_type for node in onnx.load(str(graphs["group-query"])).graph.node]
    assert ops.count("GroupQueryAttention") == 2
    assert "ScatterND" not in ops
    assert "ScatterND" in [node.op_type for node in onnx.load(str(graphs["export"])).graph.node]


@pytest.mark.parametrize("rows", [1, 5])
def test_the_variant_computes_the_exported_step(graphs, model, rows):
    arrays = step_arrays(Bucket(rows, slots=16, source=SOURCE), model.cfg, np.random.default_rng(rows))
    export, variant = (BoundStep(graphs[name], arrays) for name in COMPARED)
    same = agreement(export.run(), variant.run())
    assert same["logits_max_abs_diff"] < 1e-4
    assert same["caches_max_abs_diff"] < 1e-5  # each row's slot written, the others left as they were
    assert same["best_token_equal"] == 1.0

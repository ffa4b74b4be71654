"""Every shipped model folder: complete, and scoring on Multi30k test_2016_flickr what its model card says.

The model card's score table is the claim a user reads; this test translates the whole test set again (ONNX Runtime,
fp32, CPU) and fails if the claim and the model part ways, in either direction.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import onnx
import pytest

from core.corpus import load_test_set, multi30k_dir
from core.folder import FolderConfig
from core.search import SearchOptions
from export.quantize import weights_multiplied_in_float
from quality.bleu import score
from service.translator import Translator

REPO = Path(__file__).resolve().parents[1]
SHIPPED = sorted(config.parent for config in (REPO / "models").glob("*/config.json"))
TOLERANCE = 0.1  # BLEU points: the card has two decimals, and thread counts may move a last bit
MAX_FOLDER_MIB = 60  # issue 15: a shipped folder, every precision's graphs included


def card_bleu(model_dir: Path, split: str, search: str) -> float:
    """The cased BLEU the model card states for Multi30k `split` with `search` ("greedy", "beam 4")."""
    card = (model_dir / "README.md").read_text()
    row = re.search(rf"^\| multi30k \| {re.escape(split)} \| {search} \| ([\d.]+) \|", card, re.M)
    assert row, f"{model_dir}/README.md has no score row for multi30k {split} {search}"
    return float(row.group(1))


def test_both_directions_are_shipped():
    assert {path.name for path in SHIPPED} >= {"en-de", "de-en"}


@pytest.mark.parametrize("model_dir", SHIPPED, ids=lambda path: path.name)
def test_a_shipped_folder_holds_every_precision_within_its_size(model_dir: Path):
    config = FolderConfig.load(model_dir)
    assert set(config.graphs) >= {"fp32", "int8"}
    for graphs in config.graphs.values():
        assert all((model_dir / name).is_file() for name in graphs.values()), graphs
    size = sum(path.stat().st_size for path in model_dir.iterdir()) / 2**20
    assert size <= MAX_FOLDER_MIB, f"{model_dir.name}: {size:.1f} MiB"


@pytest.mark.parametrize("model_dir", SHIPPED, ids=lambda path: path.name)
def test_shipped_int8_graphs_multiply_every_weight_in_int8(model_dir: Path):
    for name in FolderConfig.load(model_dir).graphs["int8"].values():
        assert weights_multiplied_in_float(onnx.load(str(model_dir / name)).graph) == [], name


@pytest.mark.parametrize("model_dir", SHIPPED, ids=lambda path: path.name)
def test_the_model_card_states_what_the_model_scores(model_dir: Path):
    config = json.loads((model_dir / "config.json").read_text())
    source, target = config["source_language"], config["target_language"]
    try:
        sources, references = load_test_set(src=source, tgt=target)
    except FileNotFoundError as error:
        pytest.fail(f"Multi30k test_2016_flickr not found ({error}); set MULTI30K_DIR (now {multi30k_dir()})")
    translator = Translator(model_dir, provider="cpu")
    hyps = [t[0].text for t in translator.translate(sources, SearchOptions(beam_size=4))]
    measured = score(hyps, references)["bleu"]
    stated = card_bleu(model_dir, "test_2016_flickr", "beam 4")
    assert abs(measured - stated) <= TOLERANCE, f"{model_dir.name}: the card says {stated}, the model scores {measured}"

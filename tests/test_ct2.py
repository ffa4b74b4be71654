"""bench.common.ct2_convert: CTranslate2 runs a converted random model exactly as our PyTorch model does (greedy),
also with the options a converted Marian model has (swish, concatenated positions, an output bias)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import MIXED_SENTENCES

pytest.importorskip("ctranslate2")

from bench.common.ct2_convert import convert  # noqa: E402
from bench.common.ct2_engine import CASE_TAG_TOKENS, CT2Translator  # noqa: E402
from bench.offline.ct2_check import ct2_greedy_ids, torch_greedy_ids  # noqa: E402
from model.config import preset  # noqa: E402
from model.tokenizer import train_sentencepiece  # noqa: E402
from model.transformer import Transformer  # noqa: E402

SENTENCES = MIXED_SENTENCES * 20
VOCAB = 90


@pytest.fixture(scope="module")
def spm_model(tmp_path_factory) -> Path:
    return train_sentencepiece(SENTENCES, tmp_path_factory.mktemp("spm") / "spm", vocab_size=VOCAB)


def random_checkpoint(path: Path, pre_norm: bool, std: float, **options: object) -> Transformer:
    """A tiny model whose every weight (LayerNorms and biases too) is random, saved as a checkpoint.

    Weights drawn at this scale make greedy outputs depend on the source and on the prefix, instead of
    repeating the input token as a freshly initialised model with tied embeddings does.
    """
    torch.manual_seed(0)
    cfg = preset("tiny", **{"vocab_size": VOCAB, "pre_norm": pre_norm, **options})
    model = Transformer(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * std)
        if model.output_bias is not None:  # as a converted Marian model's: a constant, and <pad> banned
            model.output_bias.copy_(torch.randn_like(model.output_bias))
            model.output_bias[cfg.pad_id] = float("-inf")
    torch.save({"config": cfg.to_dict(), "model": model.state_dict()}, path)
    return model


MARIAN_OPTIONS = {"activation": "silu", "position_layout": "concatenated", "output_bias": True}


@pytest.mark.parametrize(
    "pre_norm,std,options",
    [(False, 0.3, {}), (True, 0.1, {}), (False, 0.3, MARIAN_OPTIONS)],
    ids=["post-ln", "pre-ln", "marian-options"],
)
def test_ct2_greedy_equals_ours(tmp_path: Path, spm_model: Path, pre_norm: bool, std: float, options: dict):
    model = random_checkpoint(tmp_path / "model.pt", pre_norm, std, **options)
    ct2_dir = convert(tmp_path / "model.pt", spm_model, tmp_path / "ct2")
    translator = CT2Translator(ct2_dir, compute_type="float32")
    sources = translator.tokenizer.encode(SENTENCES[:10])

    ours = torch_greedy_ids(model, sources, batch_size=4)
    assert len({tuple(ids) for ids in ours}) > 1, "outputs do not depend on the source: a weak test"
    assert ct2_greedy_ids(translator, sources, batch_size=4) == ours


def torch_log_probs(model: Transformer, source: list[int], target: list[int]) -> list[float]:
    """Our model's log-probability of each target token and of the closing </s>, teacher-forced."""
    cfg = model.cfg
    src = torch.tensor([source + [cfg.eos_id]])
    tgt_in = torch.tensor([[cfg.bos_id] + target])
    with torch.no_grad():
        logits = model(src, src != cfg.pad_id, tgt_in, torch.ones_like(tgt_in, dtype=torch.bool))
    gold = torch.tensor([target + [cfg.eos_id]])
    return logits.log_softmax(-1).gather(-1, gold[..., None])[0, :, 0].tolist()


@pytest.mark.parametrize("pre_norm", [False, True])
def test_ct2_scores_equal_ours(tmp_path: Path, spm_model: Path, pre_norm: bool):
    """Every weight and option in the mapping shows in the log-probabilities, not only in an argmax."""
    model = random_checkpoint(tmp_path / "model.pt", pre_norm, std=0.3)
    translator = CT2Translator(convert(tmp_path / "model.pt", spm_model, tmp_path / "ct2"))
    sources, targets = translator.tokenizer.encode(SENTENCES[:5]), translator.tokenizer.encode(SENTENCES[6:11])
    pieces = [[translator.tokens[i] for i in ids] for ids in (*sources, *targets)]
    results = translator.translator.score_batch(pieces[:5], pieces[5:])
    for source, target, result in zip(sources, targets, results):
        assert result.log_probs == pytest.approx(torch_log_probs(model, source, target), abs=1e-3)


def test_vocabulary_lines_up_with_sentencepiece_ids(tmp_path: Path, spm_model: Path):
    random_checkpoint(tmp_path / "model.pt", pre_norm=False, std=0.1)
    ct2_dir = convert(tmp_path / "model.pt", spm_model, tmp_path / "ct2")
    translator = CT2Translator(ct2_dir)
    vocabulary = json.loads((ct2_dir / "shared_vocabulary.json").read_text())
    sp = translator.tokenizer.sp
    assert vocabulary == translator.tokens == [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    config = json.loads((ct2_dir / "config.json").read_text())
    assert (config["unk_token"], config["bos_token"], config["eos_token"]) == ("<unk>", "<s>", "</s>")
    assert config["add_source_eos"] is True


def test_a_model_with_case_tags_reads_them_in_ct2_too(tmp_path: Path, spm_model: Path):
    """The case tags (core.tokenizer) are two tokens after the pieces, and CTranslate2 translates the tagged sources
    as our model does."""
    model = random_checkpoint(tmp_path / "model.pt", False, 0.3, vocab_size=VOCAB + 2, case_tags=True)
    ct2_dir = convert(tmp_path / "model.pt", spm_model, tmp_path / "ct2")
    translator = CT2Translator(ct2_dir, compute_type="float32")
    assert translator.tokens[-2:] == CASE_TAG_TOKENS and translator.tokenizer.case_tags
    sources = translator.tokenizer.encode([text.upper() for text in SENTENCES[:10]])
    assert all(VOCAB in ids for ids in sources), "UPPER CASE words come with their tag"
    ours = torch_greedy_ids(model, sources, batch_size=4)
    assert len({tuple(ids) for ids in ours}) > 1
    assert ct2_greedy_ids(translator, sources, batch_size=4) == ours

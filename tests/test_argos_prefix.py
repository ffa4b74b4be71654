"""Argos Translate packages whose translations start with a target prefix (metadata.json's target_prefix, a token
of the vocabulary that Argos Translate gives CTranslate2 as target_prefix and drops from the translation), converted
into ours: decoding is forced to begin with it, and translations leave it out.

The package is tests/test_argos.py's (random weights, int8, pre-norm) with a token "__de__" added to its
vocabulary; ours against ctranslate2.Translator given the same pieces and target prefix, greedy and beam 4,
length_penalty 0, float32.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

ctranslate2 = pytest.importorskip("ctranslate2")

from test_argos import LIMIT, TEXTS, agreement, sentencepiece_model  # noqa: E402, F401 (a fixture)

from bench.common.argos_package import opennmt_vocabulary, random_spec, write_package  # noqa: E402
from core.search import SearchOptions  # noqa: E402
from core.translate import pair_options  # noqa: E402
from model.convert import main as convert_main  # noqa: E402
from service.translator import Translator  # noqa: E402

torch.set_num_threads(1)
PREFIX = "__de__"


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory, sentencepiece_model: Path) -> Path:  # noqa: F811
    vocabulary = opennmt_vocabulary(sentencepiece_model) + [PREFIX]
    return write_package(tmp_path_factory.mktemp("prefix") / "translate-en_de-1_0", random_spec(vocabulary),
                         sentencepiece_model, target_prefix=PREFIX)


@pytest.fixture(scope="module")
def translator(tmp_path_factory: pytest.TempPathFactory, package: Path) -> Translator:
    out = tmp_path_factory.mktemp("converted") / "en-de"
    convert_main([str(package), "--out", str(out), "--export", "fp32"])
    return Translator(out, provider="cpu", threads=1)


def test_decoding_begins_with_the_prefix_which_translations_leave_out(translator: Translator):
    cfg, tokenizer = translator.model_config, translator.tokenizer
    assert cfg.target_prefix == tokenizer.tokens.index(PREFIX) and cfg.forced_token(None) == cfg.target_prefix
    texts = [hyps[0].text for hyps in translator.translate(TEXTS[:8], SearchOptions(max_length=LIMIT))]
    assert all(PREFIX not in text for text in texts) and any(texts)


@pytest.mark.parametrize("beam_size", [1, 4])
def test_translations_equal_ctranslate2_s_with_the_target_prefix(translator: Translator, package: Path,
                                                                 beam_size: int):
    tokenizer, cfg = translator.tokenizer, translator.model_config
    opts = pair_options(cfg, SearchOptions(beam_size=beam_size, length_penalty=0.0, max_length_ratio=0.0,
                                           max_length_extra=LIMIT, max_length=LIMIT), None)
    hypotheses = translator.translate_ids(cfg.source_ids(tokenizer.encode(TEXTS)), opts).hypotheses
    ours = [[tokenizer.tokens[i] for i in hyps[0].tokens] for hyps in hypotheses]
    pieces = [tokenizer.sp.encode(text, out_type=str) for text in TEXTS]
    ct2 = ctranslate2.Translator(str(package / "model"), compute_type="float32", intra_threads=1)
    results = ct2.translate_batch(pieces, target_prefix=[[PREFIX]] * len(TEXTS), beam_size=beam_size,
                                  length_penalty=0.0, max_decoding_length=LIMIT, min_decoding_length=0)
    theirs = [result.hypotheses[0] for result in results]
    assert {t[0] for t in theirs} == {PREFIX}
    assert agreement(ours, theirs) == 1.0, (ours[0], theirs[0])

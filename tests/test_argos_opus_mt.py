"""Argos Translate packages made from OPUS-MT models, as LibreTranslate's trainer Locomotive makes them
(opus_mt_convert.py: CTranslate2's converter of a Marian model), converted into ours: against CTranslate2 on the
package, and against transformers on the Marian model it came from.

CTranslate2's Marian models start the decoder from a zero embedding (start_from_zero_embedding) and drop Marian's
<pad> from the vocabulary; model.ctranslate2_model.zero_start gives ours that start back as an appended token. The
Marian model is tests/test_convert.py's (tiny, trained a little); the package holds its CTranslate2 conversion
(float32), its source SentencePiece model as sentencepiece.model, and metadata.json.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import transformers

ctranslate2 = pytest.importorskip("ctranslate2")

from test_convert import MAX_TOKENS, assert_all_equal, marian_translations, write_marian, write_tokenizer  # noqa: E402
from test_convert import TEXTS as MARIAN_TEXTS  # noqa: E402

from core.search import SearchOptions  # noqa: E402
from model.checkpoint import load_model  # noqa: E402
from model.convert import main as convert_main  # noqa: E402
from service.translator import Translator  # noqa: E402

torch.set_num_threads(1)
pytestmark = [pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")]


@pytest.fixture(scope="module")
def marian_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tokenizer = tmp_path_factory.mktemp("tokenizer")
    write_tokenizer(tokenizer)
    folder = write_marian(tmp_path_factory.mktemp("opus-mt") / "opus-mt-en-de", tokenizer, train=True)
    marian = transformers.MarianMTModel.from_pretrained(folder)
    with torch.no_grad():  # <pad>, the start token, has a zero embedding in OPUS-MT's models (training moved it)
        marian.get_input_embeddings().weight[marian.config.pad_token_id] = 0.0
    marian.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory, marian_dir: Path) -> Path:
    """The installed package of the Marian model, as Locomotive's opus_mt_convert.py writes one."""
    folder = tmp_path_factory.mktemp("package") / "translate-en_de-1_0"
    folder.mkdir()
    ctranslate2.converters.TransformersConverter(str(marian_dir)).convert(str(folder / "model"))
    shutil.copy(marian_dir / "source.spm", folder / "sentencepiece.model")
    (folder / "metadata.json").write_text(json.dumps({"package_version": "1.0", "from_code": "en", "to_code": "de"}))
    return folder


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory, package: Path) -> Path:
    out = tmp_path_factory.mktemp("converted") / "en-de"
    convert_main([str(package), "--out", str(out), "--export", "fp32"])
    return out


@pytest.fixture(scope="module")
def translator(model_dir: Path) -> Translator:
    return Translator(model_dir, provider="cpu", threads=1)


def test_the_start_is_a_zero_embedding_never_generated(model_dir: Path, package: Path):
    ct2_config = json.loads((package / "model" / "config.json").read_text())
    vocabulary = json.loads((package / "model" / "shared_vocabulary.json").read_text())
    model = load_model(model_dir / "model.pt")
    cfg = model.cfg
    assert "<pad>" not in vocabulary and cfg.vocab_size == len(vocabulary) + 1
    assert cfg.bos_id == cfg.pad_id == len(vocabulary) and cfg.eos_id == vocabulary.index(ct2_config["eos_token"])
    state = model.state_dict()
    assert not state["embed.weight"][cfg.bos_id].any() and state["output_bias"][cfg.bos_id] == -torch.inf


@pytest.mark.parametrize("beam_size", [1, 4])
def test_translations_equal_ctranslate2_s(translator: Translator, package: Path, beam_size: int):
    """CTranslate2 on the package's model, given the SentencePiece pieces as Argos Translate gives them (no </s>),
    length_penalty 0, float32."""
    tokenizer = translator.tokenizer
    sources = [tokenizer.sp.encode(text, out_type=str) for text in MARIAN_TEXTS]
    ct2 = ctranslate2.Translator(str(package / "model"), compute_type="float32", intra_threads=1)
    results = ct2.translate_batch(sources, beam_size=beam_size, length_penalty=0.0, max_decoding_length=MAX_TOKENS,
                                  min_decoding_length=0)
    theirs = [[tokenizer.tokens.index(token) for token in result.hypotheses[0]] for result in results]
    opts = SearchOptions(beam_size=beam_size, length_penalty=0.0, max_length_ratio=0.0, max_length_extra=MAX_TOKENS)
    ours = translator.translate_ids(translator.encode_texts(MARIAN_TEXTS), opts).hypotheses
    assert_all_equal([hyps[0].tokens for hyps in ours], theirs)


@pytest.fixture(scope="module")
def hf_tokenizer(marian_dir: Path) -> transformers.MarianTokenizer:
    return transformers.MarianTokenizer.from_pretrained(marian_dir)


@pytest.mark.parametrize("beam_size", [1, 4])
def test_translations_equal_those_of_the_marian_model_it_came_from(
    translator: Translator, marian_dir: Path, hf_tokenizer: transformers.MarianTokenizer, beam_size: int
):
    """transformers' sources end with </s>, which Argos Translate leaves out: ours get it too here. Beam settings as
    tests/test_convert.py's, which says why."""
    marian = transformers.MarianMTModel.from_pretrained(marian_dir).eval()
    sources = [hf_tokenizer(text)["input_ids"] for text in MARIAN_TEXTS]
    eos = translator.model_config.eos_id
    assert sources == [ids + [eos] for ids in translator.encode_texts(MARIAN_TEXTS)]
    opts = SearchOptions(beam_size=beam_size, length_penalty=0.0, max_length_ratio=0.0, max_length_extra=MAX_TOKENS)
    ours = [hyps[0].tokens for hyps in translator.translate_ids(sources, opts).hypotheses]
    beam = dict(num_beams=4, length_penalty=0.0, early_stopping="never", renormalize_logits=True)
    expected = marian_translations(marian, hf_tokenizer, MARIAN_TEXTS, forced_eos_token_id=None,
                                   **(beam if beam_size == 4 else {"num_beams": 1}))
    assert_all_equal(ours, expected)

"""Argos Translate packages of a BPE tokenizer (bpe.model: subword-nmt's merges over Moses's tokens; Locomotive
packages OPUS-MT's older models so), converted into ours and tokenized as Argos Translate tokenizes them.

The reference is argostranslate's own BPETokenizer (argos-translate-lt, which LibreTranslate installs; make test
installs it without its translation dependencies): our tokens are the ones it gives CTranslate2, and our texts the
ones it makes of CTranslate2's tokens. The BPE model is learnt by subword-nmt on Moses's tokens of the sentences
below; the vocabulary is OpenNMT-py's (its special tokens, then the BPE tokens, two of them left out, so that they
are <unk>); the weights are random (bench.common.argos_package). Two packages: int8 and zipped as argos-train makes
them, and a float32 one whose decoder starts from a zero embedding as CTranslate2's Marian conversion writes it
(OPUS-MT's, with </s> after each source). Ours against ctranslate2.Translator given argostranslate's tokens,
greedy and beam 4, length_penalty 0, float32.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import MIXED_SENTENCES

ctranslate2 = pytest.importorskip("ctranslate2")

import test_argos_opus_mt  # noqa: E402
from argostranslate.tokenizer import BPETokenizer  # noqa: E402
from sacremoses import MosesPunctNormalizer, MosesTokenizer  # noqa: E402
from subword_nmt.learn_bpe import learn_bpe  # noqa: E402
from test_argos import LIMIT, agreement  # noqa: E402

from bench.common.argos_package import SPECIALS, random_spec, write_package, zip_package  # noqa: E402
from core.search import SearchOptions  # noqa: E402
from core.tokenizer import ARGOS_BPE_FILES, ArgosBpeTokenizer  # noqa: E402
from service.translator import Translator  # noqa: E402

torch.set_num_threads(1)

# Moses normalizes and escapes these: quotes, an apostrophe, &, brackets, a dash, a non-breaking space
PUNCTUATED = [
    "The dog's ball & the cat's toy are \u201cred\u201d.",
    "A man (in a hat) is \u2013 again \u2013 looking at [something] <here>.",
    "\u201eZwei Hunde\u201c rennen auf dem Gras\u00a0!",
    "People's houses | roofs: 5 % of them, 12,5 \u20ac each...",
]
SENTENCES = MIXED_SENTENCES + PUNCTUATED
WORDS = sorted({word for sentence in SENTENCES for word in sentence.split()})
# 120 sources of 3 to 12 of those words: new sentences of known tokens, of many lengths
TEXTS = [" ".join(np.random.default_rng(i).choice(WORDS, 3 + i % 10)) for i in range(120)]
END_BIAS = 0.0  # the end token's output bias: with this vocabulary, some translations end, some reach the limit


@pytest.fixture(scope="module")
def bpe_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """subword-nmt's merges learnt on Moses's tokens of the sentences, as OPUS-MT's BPE models are."""
    normalizer, moses = MosesPunctNormalizer("en"), MosesTokenizer("en")
    lines = [" ".join(moses.tokenize(normalizer.normalize(sentence))) + "\n" for sentence in SENTENCES * 5]
    learn_bpe(lines, codes := io.StringIO(), 120, min_frequency=2)
    path = tmp_path_factory.mktemp("bpe") / "bpe.model"
    path.write_text(codes.getvalue(), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def argos(bpe_model: Path) -> BPETokenizer:
    return BPETokenizer(bpe_model, "en", "de")


@pytest.fixture(scope="module")
def vocabulary(argos: BPETokenizer) -> list[str]:
    """OpenNMT-py's vocabulary of the BPE tokens: its special tokens, then the tokens, two of them left out."""
    tokens = sorted({token for text in SENTENCES + TEXTS for token in argos.encode(text)})
    assert any(token.endswith("@@") for token in tokens) and any(token.startswith("&") for token in tokens)
    return SPECIALS + tokens[2:]


# fixtures: `package` converted and exported (`python -m model.convert --export fp32`), and served
model_dir, translator = test_argos_opus_mt.model_dir, test_argos_opus_mt.translator

VARIANTS = {  # how each package is built
    "argos-train": dict(quantization="int8", zipped=True),
    "zero-start": dict(quantization=None, zipped=False, zero_start=True),
}


@pytest.fixture(scope="module", params=list(VARIANTS))
def package(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, bpe_model: Path,
            vocabulary: list[str]) -> Path:
    variant = VARIANTS[request.param]
    spec = random_spec(vocabulary, end_bias=END_BIAS)
    if variant.get("zero_start"):
        spec.decoder.start_from_zero_embedding = True
        spec.config.add_source_eos = True
    folder = write_package(tmp_path_factory.mktemp(request.param) / "translate-en_de-1_0", spec, bpe_model,
                           variant["quantization"], tokenizer_file="bpe.model")
    return zip_package(folder) if variant["zipped"] else folder


@pytest.fixture(scope="module")
def ct2(tmp_path_factory: pytest.TempPathFactory, package: Path) -> ctranslate2.Translator:
    folder = package
    if package.is_file():
        import zipfile

        zipfile.ZipFile(package).extractall(folder := tmp_path_factory.mktemp("unzipped"))
        folder = folder / "translate-en_de-1_0"
    return ctranslate2.Translator(str(folder / "model"), compute_type="float32", intra_threads=1)


def test_the_model_folder_reads_the_bpe_model_and_names_moses_s_languages(model_dir: Path, bpe_model: Path):
    config = json.loads((model_dir / "config.json").read_text())
    assert config["tokenizer"] == ARGOS_BPE_FILES
    assert (model_dir / "bpe.model").read_bytes() == bpe_model.read_bytes()
    assert json.loads((model_dir / "vocabulary.json").read_text())["languages"] == ["en", "de"]


def test_tokens_are_argos_translate_s(translator: Translator, argos: BPETokenizer):
    """Each source's tokens are those argostranslate's BPETokenizer gives CTranslate2 (normalized, Moses's tokens
    escaped, BPE-segmented), by the vocabulary's ids (tokens it lacks: <unk>)."""
    tokenizer = translator.tokenizer
    assert isinstance(tokenizer, ArgosBpeTokenizer)
    unk = tokenizer.tokens.index("<unk>")
    ids = tokenizer.encode(SENTENCES + TEXTS)
    assert any(unk in sequence for sequence in ids), "two tokens are not in the vocabulary"
    for sequence, text in zip(ids, SENTENCES + TEXTS):
        expected = [token if token in tokenizer.tokens else None for token in argos.encode(text)]
        assert [tokenizer.tokens[i] if i != unk else None for i in sequence] == expected, text


def test_texts_are_argos_translate_s(translator: Translator, argos: BPETokenizer):
    """Tokens back to text as argostranslate's BPETokenizer makes it (joined at @@, Moses's detokenization of the
    target language, entities unescaped); special tokens leave nothing."""
    tokenizer = translator.tokenizer
    known = [sequence for sequence in tokenizer.encode(SENTENCES) if tokenizer.unk_id not in sequence]
    assert len(known) > len(SENTENCES) // 2
    assert tokenizer.decode(known) == [argos.decode([tokenizer.tokens[i] for i in sequence]) for sequence in known]
    texts = "".join(tokenizer.decode(known))
    assert '"' in texts and "&" in texts and not any(escaped in texts for escaped in ("@@", "&quot;", "&amp;"))
    assert tokenizer.decode([[tokenizer.tokens.index(t) for t in SPECIALS]]) == [""]


def translations(translator: Translator, ct2: ctranslate2.Translator, argos: BPETokenizer,
                 beam_size: int) -> tuple[list[list[str]], list[list[str]]]:
    """Ours and CTranslate2's best translation of each of TEXTS, as tokens: ours from the exported graphs, theirs
    from argostranslate's tokens, at the same limit."""
    tokenizer, cfg = translator.tokenizer, translator.model_config
    opts = SearchOptions(beam_size=beam_size, length_penalty=0.0, max_length_ratio=0.0, max_length_extra=LIMIT,
                         max_length=LIMIT)
    hypotheses = translator.translate_ids(cfg.source_ids(tokenizer.encode(TEXTS)), opts).hypotheses
    ours = [[tokenizer.tokens[i] for i in hyps[0].tokens] for hyps in hypotheses]
    results = ct2.translate_batch([argos.encode(text) for text in TEXTS], beam_size=beam_size, length_penalty=0.0,
                                  max_decoding_length=LIMIT, min_decoding_length=0)
    return ours, [result.hypotheses[0] for result in results]


@pytest.mark.parametrize("beam_size", [1, 4])
def test_translations_equal_ctranslate2_s(translator: Translator, ct2: ctranslate2.Translator, argos: BPETokenizer,
                                          beam_size: int):
    ours, theirs = translations(translator, ct2, argos, beam_size)
    assert agreement(ours, theirs) == 1.0, next((a, b) for a, b in zip(ours, theirs) if a != b)
    # and the texts are argostranslate's of CTranslate2's tokens: those without special tokens (argostranslate
    # replaces <unk> with a source token, and writes <blank> as it is; ours leaves both out)
    texts = [hyps[0].text for hyps in translator.translate(TEXTS, SearchOptions(
        beam_size=beam_size, length_penalty=0.0, max_length_ratio=0.0, max_length_extra=LIMIT, max_length=LIMIT))]
    known = [(text, tokens) for text, tokens in zip(texts, theirs) if not set(tokens) & set(SPECIALS)]
    assert len(known) > len(TEXTS) // 2
    assert [text for text, _ in known] == [argos.decode(tokens) for _, tokens in known]

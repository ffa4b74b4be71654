"""Argos Translate packages (model.argos, model.ctranslate2_model) converted into ours, against CTranslate2 itself.

No download: the tests build packages as argos-train and LibreTranslate's Locomotive make them. A SentencePiece
model trained on the sentences below with SentencePiece's defaults; OpenNMT-py's vocabulary (<unk>, <blank>, <s>,
</s>, then the pieces in another order than SentencePiece's ids, two of them left out, so that they are <unk>); and
a TransformerSpec with random weights, written by ctranslate2's own spec writer as its OpenNMT-py converter fills it
(bench.common.argos_package, which bench.offline.argos_model builds a full-size package with): pre-norm, one
embedding for source, target and output, the generator's bias, OpenNMT-py's sinusoids stored, int8 weights. With a
metadata.json, zipped as an .argosmodel. A second package, installed (a folder), holds a post-norm model without a
position table (CTranslate2's own sinusoids) whose sources take <s> and </s>. Converted with `python -m
model.convert` and exported (export_model), the ONNX model's greedy and beam translations are
ctranslate2.Translator's of the same pieces.
"""

from __future__ import annotations

import io
import json
import shutil
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm
import torch
from conftest import MIXED_SENTENCES as SENTENCES

ctranslate2 = pytest.importorskip("ctranslate2")

from ctranslate2.specs import common_spec  # noqa: E402

from bench.common.argos_package import (  # noqa: E402
    SPECIALS,
    opennmt_vocabulary,
    random_spec,
    write_package,
    zip_package,
)
from core.search import SearchOptions  # noqa: E402
from core.tokenizer import ARGOS_FILES, load_tokenizer  # noqa: E402
from export.__main__ import export_model  # noqa: E402
from model.argos import convert_packages  # noqa: E402
from model.checkpoint import load_model  # noqa: E402
from model.convert import main as convert_main  # noqa: E402
from model.ctranslate2_model import read_model, read_model_bin, to_transformer  # noqa: E402
from service.translator import Translator  # noqa: E402

torch.set_num_threads(1)

WORDS = sorted({word for sentence in SENTENCES for word in sentence.split()})
# 120 sources of 3 to 12 of those words: new sentences of known pieces, of many lengths
TEXTS = [" ".join(np.random.default_rng(i).choice(WORDS, 3 + i % 10)) for i in range(120)]
LIMIT = 24  # every search's limit on generated tokens (</s> included)


# --- the package ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sentencepiece_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SentencePiece model as argos-train trains one: SentencePiece's defaults (<unk> 0, <s> 1, </s> 2)."""
    path = tmp_path_factory.mktemp("sentencepiece") / "sentencepiece.model"
    spm.SentencePieceTrainer.train(sentence_iterator=iter(SENTENCES * 20), model_writer=(buffer := io.BytesIO()),
                                   vocab_size=90, character_coverage=1.0, minloglevel=2)
    path.write_bytes(buffer.getvalue())
    return path


VARIANTS = {  # how each package of the translation tests is built
    # as Argos Translate's packages: pre-norm, ReLU, OpenNMT-py's sinusoids stored, int8, from an .argosmodel
    "argos": dict(spec={}, quantization="int8", zipped=True),
    # post-norm, gelu, no table (CTranslate2's own sinusoids), float32, sources between <s> and </s>, installed
    "post-norm": dict(spec=dict(table=False, pre_norm=False, activation=common_spec.Activation.GELU, end_bias=1.0),
                      quantization=None, zipped=False, source_specials=True),
}


@pytest.fixture(scope="module", params=list(VARIANTS))
def package(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
            sentencepiece_model: Path) -> Path:
    variant = VARIANTS[request.param]
    spec = random_spec(opennmt_vocabulary(sentencepiece_model), **variant["spec"])
    spec.config.add_source_bos = spec.config.add_source_eos = variant.get("source_specials", False)
    folder = write_package(tmp_path_factory.mktemp(request.param) / "translate-en_de-1_0", spec, sentencepiece_model,
                           variant["quantization"])
    return zip_package(folder) if variant["zipped"] else folder


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory, package: Path) -> Path:
    """The converted and exported model folder, as a user makes it."""
    out = tmp_path_factory.mktemp("converted") / "en-de"
    convert_main([str(package), "--out", str(out)])
    export_model(out / "model.pt", out, None, ["fp32"])
    return out


@pytest.fixture(scope="module")
def ct2_model(tmp_path_factory: pytest.TempPathFactory, package: Path) -> Path:
    """The package's CTranslate2 model directory."""
    if package.is_dir():
        return package / "model"
    folder = tmp_path_factory.mktemp("unzipped")
    zipfile.ZipFile(package).extractall(folder)
    return folder / "translate-en_de-1_0" / "model"


@pytest.fixture(scope="module")
def translator(model_dir: Path) -> Translator:
    return Translator(model_dir, provider="cpu", threads=1)


# --- the conversion -----------------------------------------------------------------------------------------------


def test_the_model_folder_is_complete(model_dir: Path, ct2_model: Path):
    config = json.loads((model_dir / "config.json").read_text())
    assert config["name"] == "en-de" and config["tokenizer"] == ARGOS_FILES
    for name in [*ARGOS_FILES.values(), "encoder.onnx", "decoder.onnx"]:
        assert (model_dir / name).is_file(), name
    cfg = config["model"]
    ct2_config = json.loads((ct2_model / "config.json").read_text())
    assert (cfg["position_layout"], cfg["output_bias"]) == ("table", True)
    assert (cfg["source_bos"], cfg["source_eos"]) == (ct2_config["add_source_bos"], ct2_config["add_source_eos"])
    assert (cfg["pad_id"], cfg["unk_id"], cfg["bos_id"], cfg["eos_id"]) == (1, 0, 2, 3)  # OpenNMT-py's ids


def test_weights_are_the_dequantized_ones(ct2_model: Path, model_dir: Path):
    """Each weight is model.bin's, int8 ones times 1 / scale row by row as CTranslate2 dequantizes them."""
    _, _, _, variables, _ = read_model_bin(ct2_model / "model.bin")
    weight = variables["decoder/layer_1/attention/linear_1/weight"]
    expected = weight.astype(np.float32)
    if weight.dtype == np.int8:
        expected = expected * (np.float32(1) / variables["decoder/layer_1/attention/linear_1/weight_scale"])[:, None]
    ours = load_model(model_dir / "model.pt").state_dict()
    got = torch.cat([ours["decoder.1.cross_attn.w_k.weight"], ours["decoder.1.cross_attn.w_v.weight"]]).numpy()
    np.testing.assert_array_equal(got, expected)


def teacher_forced_log_probs(model_dir: Path, sources: list[list[int]], targets: list[list[int]]) -> list[list[float]]:
    """Our PyTorch model's log-probability of each target token and of the closing </s>."""
    model = load_model(model_dir / "model.pt")
    cfg = model.cfg
    result = []
    for source, target in zip(sources, targets):
        src, tgt_in = torch.tensor([source]), torch.tensor([[cfg.bos_id, *target]])
        with torch.no_grad():
            logits = model(src, src >= 0, tgt_in, tgt_in >= 0)  # one sentence, no padding: every position is real
        gold = torch.tensor([[*target, cfg.eos_id]])
        result.append(logits.log_softmax(-1).gather(-1, gold[..., None])[0, :, 0].tolist())
    return result


def test_log_probabilities_equal_ctranslate2_s(model_dir: Path, ct2_model: Path, translator: Translator):
    """Every weight and option shows in the scores of whole sentences, not only in an argmax."""
    tokenizer, cfg = translator.tokenizer, translator.model_config
    sources, targets = cfg.source_ids(tokenizer.encode(TEXTS[:8])), tokenizer.encode(TEXTS[8:16])
    pieces = [[tokenizer.tokens[i] for i in ids] for ids in tokenizer.encode(TEXTS[:16])]
    theirs = ctranslate2.Translator(str(ct2_model), compute_type="float32", intra_threads=1).score_batch(
        pieces[:8], pieces[8:]
    )
    # a wrong weight or option moves them by 0.01 and more; the two libraries' fp32 kernels differ by up to 1.6e-4
    # on an AMD EPYC (both within 1e-4 on an Intel Xeon)
    for ours, result in zip(teacher_forced_log_probs(model_dir, sources, targets), theirs):
        assert result.log_probs == pytest.approx(ours, abs=5e-4)


def test_the_tokenizer_is_argos_translate_s(translator: Translator, sentencepiece_model: Path):
    """Sources are the SentencePiece pieces as argostranslate gives them to CTranslate2, by the vocabulary's ids
    (pieces it lacks: <unk>), and pieces decode to the text argostranslate 1.9 makes of them."""
    sp = spm.SentencePieceProcessor(model_file=str(sentencepiece_model))
    tokenizer = translator.tokenizer
    ids = tokenizer.encode(SENTENCES)
    unk = tokenizer.tokens.index("<unk>")
    assert any(unk in sequence for sequence in ids), "two pieces are not in the vocabulary"
    for sequence, sentence in zip(ids, SENTENCES):
        pieces = sp.encode(sentence, out_type=str)
        assert [tokenizer.tokens[i] if i != unk else None for i in sequence] == [
            p if p in tokenizer.tokens else None for p in pieces
        ]
    known = [sequence for sequence in ids if unk not in sequence]
    argos_1_9 = ["".join(tokenizer.tokens[i] for i in sequence).replace("▁", " ")[1:] for sequence in known]
    assert tokenizer.decode(known) == argos_1_9
    assert tokenizer.decode([[tokenizer.tokens.index(t) for t in SPECIALS]]) == [""]


# --- translations: ONNX Runtime against CTranslate2 ---------------------------------------------------------------


def translations(translator: Translator, ct2_model: Path, beam_size: int) -> tuple[list[list[str]], list[list[str]]]:
    """Ours and CTranslate2's best translation of each of TEXTS, as tokens: ours from the exported graphs, theirs
    from the package's SentencePiece pieces (what Argos Translate gives it), at the same limit."""
    tokenizer, cfg = translator.tokenizer, translator.model_config
    opts = SearchOptions(beam_size=beam_size, length_penalty=0.0, max_length_ratio=0.0, max_length_extra=LIMIT,
                         max_length=LIMIT)
    hypotheses = translator.translate_ids(cfg.source_ids(tokenizer.encode(TEXTS)), opts).hypotheses
    ours = [[tokenizer.tokens[i] for i in hyps[0].tokens] for hyps in hypotheses]
    pieces = [tokenizer.sp.encode(text, out_type=str) for text in TEXTS]
    ct2 = ctranslate2.Translator(str(ct2_model), compute_type="float32", intra_threads=1)
    results = ct2.translate_batch(pieces, beam_size=beam_size, length_penalty=0.0, max_decoding_length=LIMIT,
                                  min_decoding_length=0)  # ours may end at the first step
    return ours, [result.hypotheses[0] for result in results]


def agreement(ours: list[list[str]], theirs: list[list[str]]) -> float:
    assert len({tuple(t) for t in theirs}) > len(TEXTS) // 2, "the model should not translate everything alike"
    lengths = {len(t) for t in theirs}
    assert min(lengths) < LIMIT and LIMIT in lengths, "some translations should end, some reach the limit"
    return sum(a == b for a, b in zip(ours, theirs)) / len(theirs)


def test_greedy_translations_equal_ctranslate2_s(translator: Translator, ct2_model: Path):
    assert agreement(*translations(translator, ct2_model, beam_size=1)) == 1.0


def test_beam_translations_equal_ctranslate2_s(translator: Translator, ct2_model: Path):
    """Beam 4 with length_penalty 0 in both: the sum of log-probabilities ranks hypotheses, and a sentence ends once
    its best candidate ends (CTranslate2's rule, ours too)."""
    assert agreement(*translations(translator, ct2_model, beam_size=4)) == 1.0


# --- a folder of installed packages -------------------------------------------------------------------------------


def test_a_folder_of_installed_packages_converts_in_one_command(tmp_path: Path, sentencepiece_model: Path,
                                                                capsys: pytest.CaptureFixture):
    """Every translation package of the folder into a model folder named by its pair; a package that ours cannot
    run is refused with its reason (exit status 2) while the others convert; a package of another kind is skipped."""
    installed = tmp_path / "argos-translate" / "packages"
    vocabulary = opennmt_vocabulary(sentencepiece_model)
    for seed, (source, target) in enumerate([("en", "de"), ("de", "en")]):
        write_package(installed / f"translate-{source}_{target}-1_0", random_spec(vocabulary, seed),
                      sentencepiece_model, from_code=source, to_code=target)
    write_package(installed / "translate-en_mul-1_0", random_spec(vocabulary), sentencepiece_model, to_code="fr",
                  target_prefix="__fr__")
    (installed / "sbd-en-1_0").mkdir()
    (installed / "sbd-en-1_0" / "metadata.json").write_text(json.dumps({"type": "sbd", "from_code": "en"}))

    assert convert_packages(installed, tmp_path / "models") == 2
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["de-en", "en-de"]
    for name in ("de-en", "en-de"):
        assert load_model(tmp_path / "models" / name / "model.pt").cfg.src_lang == name[:2]
        tokenizer = load_tokenizer(tmp_path / "models" / name, ARGOS_FILES)
        assert tokenizer.tokens == vocabulary
    out, err = capsys.readouterr()
    assert "a target prefix '__fr__' that is not a token of its vocabulary" in err
    assert "skipped, a package of type 'sbd'" in out


# --- what ours cannot run ---------------------------------------------------------------------------------------

REFUSED = {
    "separate source and target embeddings": dict(separate_target_embedding=True),
    "relative positions": dict(with_relative_position=True, table=False),
    "activation gelu \\(tanh\\)": dict(activation=common_spec.Activation.GELUTanh),
    "embeddings scaled by None": dict(scale_embeddings=False),
    "LayerNorm epsilon 1e-06": dict(layer_norm_epsilon=1e-6),
}


@pytest.mark.parametrize("reason", list(REFUSED))
def test_models_that_ours_cannot_run_are_refused(tmp_path: Path, sentencepiece_model: Path, reason: str):
    options = dict(REFUSED[reason])
    scale, epsilon = options.pop("scale_embeddings", True), options.pop("layer_norm_epsilon", None)
    spec = random_spec(opennmt_vocabulary(sentencepiece_model), **options)
    spec.encoder.scale_embeddings = spec.decoder.scale_embeddings = scale
    spec.config.layer_norm_epsilon = epsilon
    package = write_package(tmp_path / "translate-en_de-1_0", spec, sentencepiece_model)
    with pytest.raises(SystemExit) as exit_:
        convert_main([str(package), "--out", str(tmp_path / "ours")])
    assert exit_.value.code == 2
    with pytest.raises(ValueError, match=f"cannot be converted: it has .*{reason}"):
        to_transformer(read_model(package / "model"), "en", "de")
    assert not (tmp_path / "ours").exists()


# --- model.bin of older CTranslate2 versions --------------------------------------------------------------------


def write_binary_version_3(ct2_model: Path, out: Path) -> None:
    """ct2_model re-written as CTranslate2 2.x wrote models (binary version 3): item sizes instead of type ids, and
    config.json's tokens and flags as attributes (with_source_eos, ...), without config.json."""
    version, spec, revision, variables, aliases = read_model_bin(ct2_model / "model.bin")
    config = json.loads((ct2_model / "config.json").read_text())
    variables = variables | {"with_source_bos": np.int8(config["add_source_bos"]),
                             "with_source_eos": np.int8(config["add_source_eos"]), "with_target_bos": np.int8(1),
                             "unk_token": np.frombuffer(b"<unk>", np.int8)}

    def string(text: str) -> bytes:
        return struct.pack("<H", len(text) + 1) + text.encode() + b"\0"

    data = struct.pack("<I", 3) + string(spec) + struct.pack("<II", revision, len(variables))
    for name, value in variables.items():
        value = np.asarray(value)
        data += string(name) + struct.pack(f"<B{value.ndim}I", value.ndim, *value.shape)
        data += struct.pack("<BI", value.itemsize, value.size) + value.tobytes()
    data += struct.pack("<I", len(aliases)) + b"".join(string(a) + string(v) for a, v in aliases.items())
    out.mkdir()
    (out / "model.bin").write_bytes(data)
    shutil.copy(ct2_model / "shared_vocabulary.json", out / "shared_vocabulary.json")


def test_older_model_bins_convert_alike(tmp_path: Path, ct2_model: Path):
    """A model.bin of binary version 3 gives the same model as version 6; CTranslate2 reads it as the same model."""
    write_binary_version_3(ct2_model, tmp_path / "v3")
    old, new = (to_transformer(read_model(folder), "en", "de") for folder in (tmp_path / "v3", ct2_model))
    assert old.cfg == new.cfg
    for name, value in new.state_dict().items():
        torch.testing.assert_close(old.state_dict()[name], value, rtol=0, atol=0)
    pieces = [text.split() for text in TEXTS[:4]]  # any tokens: unknown ones are <unk> to both
    results = [ctranslate2.Translator(str(folder), compute_type="float32").translate_batch(pieces, beam_size=1)
               for folder in (tmp_path / "v3", ct2_model)]
    assert [r.hypotheses for r in results[0]] == [r.hypotheses for r in results[1]]

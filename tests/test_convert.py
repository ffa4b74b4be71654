"""Marian / OPUS-MT models converted into ours (model.convert), against transformers' MarianMTModel.

No download: the test builds a tiny OPUS-MT-like folder itself. Two SentencePiece models (English, German) trained
on the sentences below give source.spm, target.spm and a vocab.json shared by both sides, laid out as OPUS-MT's
(</s> 0, <unk> 1, the pieces of both models, <pad> last; two source pieces left out, so that they encode as <unk>).
The MarianMTModel has OPUS-MT's options (swish, shared and tied embeddings, a final_logits_bias) and a few Adam
steps on the sentences: untrained, a model repeats one token to the length limit whatever the source. Its folder is
converted with `python -m model.convert`, exported with `python -m export` and served by service.translator. Models
with other options, for the conversion alone, have random weights scaled up (std 0.3).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import httpx
import numpy as np
import pytest
import sentencepiece as spm
import torch
import transformers
from client import TIMEOUT
from transformers import MarianConfig, MarianMTModel

from core.search import SearchOptions, pad_batch
from core.tokenizer import MARIAN_FILES, load_tokenizer
from export.__main__ import main as export_main
from model.checkpoint import load_model
from model.convert import convert, target_token
from model.convert import main as convert_main
from model.tokenizer import train_sentencepiece
from model.transformer import Transformer, sinusoidal_positions
from service.launch import running_service
from service.translator import Translator

torch.set_num_threads(1)

pytestmark = [
    pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses"),
    pytest.mark.filterwarnings("ignore:.*LeafSpec.*:FutureWarning"),
    pytest.mark.filterwarnings("ignore:.*axis name.*:UserWarning"),
]

# Written for these tests: the SentencePiece models and the model learn them, the translation tests translate them.
PAIRS = [
    ("The old man feeds the pigeons in the park.", "Der alte Mann füttert die Tauben im Park."),
    ("A boy kicks a ball against the wall.", "Ein Junge schießt einen Ball gegen die Wand."),
    ("Two women are drinking coffee.", "Zwei Frauen trinken Kaffee."),
    ("The train leaves at nine.", "Der Zug fährt um neun ab."),
    ("Is the museum open today?", "Ist das Museum heute geöffnet?"),
    ("My sister paints a yellow house.", "Meine Schwester malt ein gelbes Haus."),
    ("The children swim in the lake.", "Die Kinder schwimmen im See."),
    ("A cat sleeps on the warm roof.", "Eine Katze schläft auf dem warmen Dach."),
    ("We cook soup for our friends.", "Wir kochen Suppe für unsere Freunde."),
    ("Where did you buy these shoes?", "Wo hast du diese Schuhe gekauft?"),
]
ENGLISH, GERMAN = [en for en, _ in PAIRS], [de for _, de in PAIRS]
TEXTS = ENGLISH + GERMAN  # the model learns both directions
MAX_TOKENS = 30  # every search's limit on generated tokens (</s> included); the model's max_len is 64
TINY = dict(  # OPUS-MT's options at a tiny size; vocabulary and special ids come from vocab.json
    d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
    encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64, activation_function="swish",
    scale_embedding=True, share_encoder_decoder_embeddings=True, dropout=0.0,
)


# --- the Marian folder -----------------------------------------------------------------------------------------


def write_tokenizer(folder: Path, language_tokens: tuple[str, ...] = (), target_lang: str = "de") -> None:
    """source.spm, target.spm and vocab.json as OPUS-MT lays them out, and transformers' tokenizer_config.json;
    language_tokens (">>deu<<", ...) after <unk>, as a model with several target languages has them."""
    pieces = {}
    for name, texts in (("source", ENGLISH), ("target", GERMAN)):
        path = train_sentencepiece(texts * 10, folder / name, vocab_size=60).rename(folder / f"{name}.spm")
        sp = spm.SentencePieceProcessor(model_file=str(path))
        special = [i for i in range(sp.get_piece_size()) if sp.is_control(i) or sp.is_unknown(i)]
        pieces[name] = [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if i not in special]
    left_out = [p for p in pieces["source"] if p not in pieces["target"]][-2:]  # these source pieces become <unk>
    shared = dict.fromkeys(p for p in pieces["source"] + pieces["target"] if p not in left_out)
    vocab = {piece: i for i, piece in enumerate(["</s>", "<unk>", *language_tokens, *shared, "<pad>"])}
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    transformers.MarianTokenizer(*(str(folder / name) for name in MARIAN_FILES.values()), source_lang="en",
                                 target_lang=target_lang).save_pretrained(folder)


def marian_config(vocab: dict[str, int], **overrides) -> MarianConfig:
    pad = vocab["<pad>"]
    ids = dict(vocab_size=len(vocab), pad_token_id=pad, decoder_start_token_id=pad, eos_token_id=0,
               forced_eos_token_id=0)
    return MarianConfig(**{**TINY, **ids, **overrides})


def half_trained(model: MarianMTModel, tokenizer: transformers.MarianTokenizer, steps: int = 80) -> MarianMTModel:
    """The model after a few Adam steps on PAIRS, both ways; its outputs then differ from sentence to sentence and
    end at different steps, some not before the limit. Some 5 seconds on one thread."""
    batch = tokenizer(ENGLISH + GERMAN, text_target=GERMAN + ENGLISH, return_tensors="pt", padding=True)
    batch["labels"][batch["labels"] == model.config.pad_token_id] = -100  # not learned
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model.train()
    for _ in range(steps):
        loss = model(**batch).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


def scaled(model: MarianMTModel) -> MarianMTModel:
    """The model with random weights of std 0.3: with transformers' 0.02 every logit is nearly the same, whatever
    the input. <pad>'s embedding stays 0, as in OPUS-MT."""
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:  # not the sinusoids
                p.normal_(0.0, 0.3)
        model.get_input_embeddings().weight[model.config.pad_token_id] = 0.0
    return model


def write_marian(folder: Path, tokenizer_folder: Path, train: bool = False, **overrides) -> Path:
    """A MarianMTModel folder (save_pretrained) with the tokenizer files of tokenizer_folder: random weights, either
    scaled or trained a little, and a random final_logits_bias (OPUS-MT's is not 0 either)."""
    folder.mkdir()
    for name in [*MARIAN_FILES.values(), "tokenizer_config.json"]:
        shutil.copy(tokenizer_folder / name, folder / name)
    torch.manual_seed(0)
    model = MarianMTModel(marian_config(json.loads((folder / "vocab.json").read_text()), **overrides))
    with torch.no_grad():
        model.final_logits_bias.normal_(0.0, 0.5)
    model = half_trained(model, transformers.MarianTokenizer.from_pretrained(folder)) if train else scaled(model)
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("marian-tokenizer")
    write_tokenizer(folder)
    return folder


@pytest.fixture(scope="module")
def marian_dir(tmp_path_factory: pytest.TempPathFactory, tokenizer_dir: Path) -> Path:
    return write_marian(tmp_path_factory.mktemp("opus-mt") / "opus-mt-en-de", tokenizer_dir, train=True)


@pytest.fixture(scope="module")
def marian(marian_dir: Path) -> MarianMTModel:
    return MarianMTModel.from_pretrained(marian_dir).eval()


@pytest.fixture(scope="module")
def hf_tokenizer(marian_dir: Path) -> transformers.MarianTokenizer:
    return transformers.MarianTokenizer.from_pretrained(marian_dir)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory, marian_dir: Path) -> Path:
    """The converted and exported model folder, as a user makes it: two commands."""
    out = tmp_path_factory.mktemp("converted") / "en-de"
    convert_main([str(marian_dir), "--out", str(out)])
    export_main([str(out / "model.pt"), "--out", str(out), "--variants", "fp32", "int8", "fp16"])
    return out


@pytest.fixture(scope="module")
def translator(model_dir: Path) -> Translator:
    return Translator(model_dir, provider="cpu", threads=1)


# --- the conversion --------------------------------------------------------------------------------------------


def test_the_model_folder_is_complete(model_dir: Path):
    config = json.loads((model_dir / "config.json").read_text())
    assert config["tokenizer"] == MARIAN_FILES
    assert config["name"] == "en-de"
    for name in [*MARIAN_FILES.values(), *(g for p in config["graphs"].values() for g in p.values())]:
        assert (model_dir / name).is_file(), name
    cfg = config["model"]
    assert (cfg["activation"], cfg["position_layout"], cfg["output_bias"]) == ("silu", "concatenated", True)
    assert cfg["bos_id"] == cfg["pad_id"] != cfg["eos_id"] == 0


def test_positions_are_marian_s(marian: MarianMTModel):
    """Marian's sinusoids are ours, concatenated rather than interleaved, from position 0 on both sides."""
    positions = sinusoidal_positions(64, 32, "concatenated")
    for stack in (marian.model.encoder, marian.model.decoder):
        torch.testing.assert_close(stack.embed_positions.weight, positions, atol=1e-6, rtol=0)


@torch.inference_mode()
def assert_logits_equal(ours: Transformer, marian: MarianMTModel, hf_tokenizer: transformers.MarianTokenizer):
    """Teacher-forced logits of a padded batch, both ways; <pad>'s column is -inf in ours, where Marian's generate
    bans it."""
    batch = hf_tokenizer(ENGLISH + GERMAN, text_target=GERMAN + ENGLISH, return_tensors="pt", padding=True)
    pad = marian.config.pad_token_id
    tgt_in = torch.cat([torch.full_like(batch["labels"][:, :1], pad), batch["labels"][:, :-1]], dim=1)
    tgt_mask = torch.cat([torch.ones_like(tgt_in[:, :1]), batch["labels"][:, :-1] != pad], dim=1).bool()
    theirs = marian(**batch, decoder_input_ids=tgt_in, decoder_attention_mask=tgt_mask).logits
    logits = ours(batch["input_ids"], batch["attention_mask"].bool(), tgt_in, tgt_mask)
    assert torch.isneginf(logits[..., pad]).all()
    assert not batch["attention_mask"].all() and not tgt_mask.all(), "the batch should be padded on both sides"
    diff = (logits - theirs)[tgt_mask][:, torch.arange(logits.size(-1)) != pad].abs().max().item()
    assert diff < 1e-4, f"max abs logit difference {diff:.3g}"


def test_logits_equal_marian_s(model_dir: Path, marian: MarianMTModel, hf_tokenizer: transformers.MarianTokenizer):
    assert_logits_equal(load_model(model_dir / "model.pt"), marian, hf_tokenizer)


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_other_activations_convert(tmp_path: Path, tokenizer_dir: Path, activation: str):
    folder = write_marian(tmp_path / "marian", tokenizer_dir, activation_function=activation)
    ours = convert(folder, tmp_path / "ours")
    assert ours.cfg.activation == activation
    hf_tokenizer = transformers.MarianTokenizer.from_pretrained(folder)
    assert_logits_equal(ours, MarianMTModel.from_pretrained(folder).eval(), hf_tokenizer)


REFUSED = [
    ({"share_encoder_decoder_embeddings": False}, "share_encoder_decoder_embeddings=False"),
    ({"normalize_before": True}, "normalize_before=True"),
    ({"scale_embedding": False}, "scale_embedding=False"),
    ({"decoder_layers": 1}, r"an encoder \(2, 4, 64\) unlike its decoder \(1, 4, 64\)"),
]


@pytest.mark.parametrize("overrides,reason", REFUSED, ids=[next(iter(o)) for o, _ in REFUSED])
def test_models_that_do_not_fit_are_refused(tmp_path: Path, tokenizer_dir: Path, overrides: dict, reason: str):
    folder = write_marian(tmp_path / "marian", tokenizer_dir, **overrides)
    with pytest.raises(ValueError, match=f"cannot be converted: it has .*{reason}"):
        convert(folder, tmp_path / "ours")
    assert not (tmp_path / "ours").exists()


# --- the tokenizer ---------------------------------------------------------------------------------------------


def test_tokenizer_is_marian_s(model_dir: Path, hf_tokenizer: transformers.MarianTokenizer):
    config = json.loads((model_dir / "config.json").read_text())
    ours = load_tokenizer(model_dir, config["tokenizer"])
    texts = TEXTS + ["", "  Two   spaces ", "Ünbekannte Zeichen: Ω, 42 ¿?", "the THE tHe"]
    ids = [seq + [ours.eos_id] for seq in ours.encode(texts)]
    assert ids == [hf_tokenizer(text)["input_ids"] for text in texts]
    assert any(ours.unk_id in seq for seq in ids[: len(TEXTS)]), "vocab.json leaves out source pieces: <unk>"
    targets = [hf_tokenizer(text_target=text)["input_ids"] for text in GERMAN]
    assert ours.decode(targets) == GERMAN
    rng = np.random.default_rng(0)  # any ids: special ones, and pieces that only the source model has
    sequences = [rng.integers(0, ours.vocab_size, 12).tolist() for _ in range(50)]
    assert ours.decode(sequences) == hf_tokenizer.batch_decode(sequences, skip_special_tokens=True)


# --- serving: ONNX Runtime against transformers' generate ------------------------------------------------------


def marian_translations(
    marian: MarianMTModel, hf_tokenizer: transformers.MarianTokenizer, texts: list[str] = TEXTS, **settings
) -> list[list[int]]:
    """transformers' translations of texts, without the start token and from </s> on."""
    pad, eos = marian.config.pad_token_id, marian.config.eos_token_id
    batch = hf_tokenizer(texts, return_tensors="pt", padding=True)
    with torch.inference_mode():
        out = marian.generate(**batch, do_sample=False, max_new_tokens=MAX_TOKENS, bad_words_ids=[[pad]], **settings)
    sequences = [row[1:].tolist() for row in out]  # <pad> fills them after </s>
    return [seq[: seq.index(eos)] if eos in seq else seq for seq in sequences]


def our_translations(
    translator: Translator, hf_tokenizer: transformers.MarianTokenizer, beam_size: int
) -> list[list[int]]:
    sources = translator.encode_texts(TEXTS)
    assert sources == [hf_tokenizer(text)["input_ids"] for text in TEXTS]
    # the same limit for every sentence: ratio 0 and MAX_TOKENS extra tokens, as transformers' max_new_tokens
    opts = SearchOptions(beam_size=beam_size, length_penalty=0.0, max_length_ratio=0.0, max_length_extra=MAX_TOKENS)
    return [hyps[0].tokens for hyps in translator.translate_ids(sources, opts).hypotheses]


def assert_all_equal(got: list[list[int]], expected: list[list[int]]) -> None:
    assert len({tuple(t) for t in expected}) > len(TEXTS) // 2, "the model should not translate everything alike"
    lengths = {len(t) for t in expected}
    assert min(lengths) < MAX_TOKENS and MAX_TOKENS in lengths, "some translations should end, some reach the limit"
    mismatches = [(TEXTS[i], e, g) for i, (e, g) in enumerate(zip(expected, got)) if e != g]
    assert not mismatches, f"{len(mismatches)} of {len(TEXTS)} differ, e.g. {mismatches[0]}"


def test_greedy_translations_equal_generate_s(
    translator: Translator, marian: MarianMTModel, hf_tokenizer: transformers.MarianTokenizer
):
    # forced_eos_token_id=None: Marian's config makes the last token at the limit </s>; our search keeps the token
    expected = marian_translations(marian, hf_tokenizer, num_beams=1, forced_eos_token_id=None)
    assert_all_equal(our_translations(translator, hf_tokenizer, beam_size=1), expected)
    texts = [hyps[0].text for hyps in translator.translate(TEXTS, SearchOptions(max_length_ratio=0.0,
                                                                                 max_length_extra=MAX_TOKENS))]
    assert texts == hf_tokenizer.batch_decode(expected, skip_special_tokens=True)


def test_beam_translations_equal_generate_s(
    translator: Translator, marian: MarianMTModel, hf_tokenizer: transformers.MarianTokenizer
):
    # transformers' beam search is ours with these settings:
    # - length_penalty=0.0, and our alpha 0: both rank hypotheses by their sum of log-probabilities (transformers
    #   divides it by length ** length_penalty, we by GNMT's ((5 + length) / 6) ** alpha: they agree only at 0);
    # - early_stopping="never": with length_penalty 0 a sentence is done once its num_beams best finished
    #   hypotheses score at least as well as its best live one (True stops at num_beams finished ones). We stop
    #   sooner, once the best candidate ends (CTranslate2's rule), but with length_penalty 0 that hypothesis
    #   out-scores every live one, whose scores only fall: the best translation is the same;
    # - both take the 2 * num_beams best continuations, finish those of the best num_beams that end with </s>,
    #   and go on with the best num_beams that do not; at the limit the num_beams best finish as they are, which
    #   is why Marian's forced_eos_token_id (</s> as the last token at the limit) is off;
    # - bad_words_ids=[[pad]] then renormalize_logits=True: <pad> banned and the log-probabilities normalized again
    #   over the other tokens, as our -inf output bias at <pad> before the log-softmax does (without renormalizing,
    #   transformers' scores would keep <pad>'s share of the probability out of every step's sum).
    expected = marian_translations(marian, hf_tokenizer, num_beams=4, length_penalty=0.0, early_stopping="never",
                                   forced_eos_token_id=None, renormalize_logits=True)
    assert_all_equal(our_translations(translator, hf_tokenizer, beam_size=4), expected)


@pytest.mark.parametrize("precision", ["fp32", "int8", "fp16"])
def test_pad_is_banned_in_every_precision(model_dir: Path, precision: str):
    """The -inf at <pad> survives export, quantization and fp16: a decoder step gives it log-probability -inf, and
    every other token a finite one."""
    translator = Translator(model_dir, precision=precision, provider="cpu", threads=1)
    cfg = translator.model_config
    src, src_mask = pad_batch(translator.encode_texts(TEXTS[:3]), cfg.pad_id)
    decoder = translator.new_decoder()
    decoder.add(src, src_mask)
    tokens, logp = decoder.step(np.full(3, cfg.bos_id), width=cfg.vocab_size)
    assert (tokens[:, -1] == cfg.pad_id).all() and np.isneginf(logp[:, -1]).all()
    assert np.isfinite(logp[:, :-1]).all()


# --- a model with several target languages ---------------------------------------------------------------------

LANGUAGE_TOKENS = (">>deu<<", ">>fra<<", ">>pt<<", ">>pt_br<<", ">>cmn_Hans<<", ">>cmn_Hant<<")


@pytest.mark.parametrize(
    "tgt_lang,chosen,token",
    [
        ("de", None, ">>deu<<"),  # OPUS-MT's ISO 639-3 code for the 639-1 code that clients send
        ("fra", None, ">>fra<<"),  # the code itself
        ("pt", None, ">>pt<<"),  # the code itself before other tokens of the language (pt_br)
        ("pt_br", None, ">>pt_br<<"),
        ("zh", ">>cmn_Hant<<", ">>cmn_Hant<<"),  # chosen, where the language has two tokens
    ],
)
def test_the_target_language_picks_its_token(tgt_lang: str, chosen: str | None, token: str):
    vocab = {piece: i for i, piece in enumerate(["</s>", "<unk>", *LANGUAGE_TOKENS, "▁a", "<pad>"])}
    assert target_token(vocab, tgt_lang, chosen) == token


@pytest.mark.parametrize(
    "tgt_lang,chosen,message",
    [
        ("zh", None, "'zh' matches >>cmn_Hans<<, >>cmn_Hant<<: give --tgt"),  # two scripts
        ("it", None, "'it' matches none of them"),
        ("ROMANCE", None, "matches none of them"),  # a group's name, as some tokenizer configs give it
        ("de", ">>ita<<", "'>>ita<<' is not a target-language token of this model"),
    ],
)
def test_a_target_language_without_one_token_is_refused(tgt_lang: str, chosen: str | None, message: str):
    vocab = {piece: i for i, piece in enumerate(["</s>", "<unk>", *LANGUAGE_TOKENS, "▁a", "<pad>"])}
    with pytest.raises(ValueError, match=re.escape(message)):
        target_token(vocab, tgt_lang, chosen)


def test_a_model_of_one_target_language_has_no_target_tokens(model_dir: Path):
    assert target_token({"</s>": 0, "<unk>": 1, "<pad>": 2}, "de") is None
    assert json.loads((model_dir / "config.json").read_text())["model"]["target_tokens"] == {}


@pytest.fixture(scope="module")
def multi_target_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A MarianMTModel with target-language tokens in its vocabulary, trained a little; tokenizer_config.json names
    its targets "mul", as OPUS-MT's multi-target models name a group."""
    folder = tmp_path_factory.mktemp("opus-mt-en-mul")
    (folder / "tokenizer").mkdir()
    write_tokenizer(folder / "tokenizer", LANGUAGE_TOKENS, target_lang="mul")
    return write_marian(folder / "marian", folder / "tokenizer", train=True)


def test_a_multi_target_model_needs_its_targets_named(tmp_path: Path, multi_target_dir: Path):
    with pytest.raises(ValueError, match="'mul' matches none of them"):  # the group is no language of one token
        convert(multi_target_dir, tmp_path / "refused")
    with pytest.raises(ValueError, match="--target-token names the token of one target language"):
        convert(multi_target_dir, tmp_path / "refused", tgt_langs=["de", "fr"], language_token=">>deu<<")
    assert not (tmp_path / "refused").exists()


def test_a_multi_target_model_serves_each_target_with_its_token(
    tmp_path_factory: pytest.TempPathFactory, multi_target_dir: Path
):
    """Converted for German and French, one folder serves en-de and en-fr: each pair's sources start with its
    token, as transformers' tokenizer puts >>deu<< or >>fra<< before the text, and the translations are generate's
    of those texts, through Translator and through the service."""
    out = tmp_path_factory.mktemp("converted") / "en-mul"
    convert_main([str(multi_target_dir), "--out", str(out), "--tgt", "de", "fr"])
    export_main([str(out / "model.pt"), "--out", str(out), "--variants", "fp32"])
    translator = Translator(out, provider="cpu", threads=1)
    assert translator.name == "en-mul" and translator.config.pairs == [("en", "de"), ("en", "fr")]
    hf_tokenizer = transformers.MarianTokenizer.from_pretrained(multi_target_dir)
    marian = MarianMTModel.from_pretrained(multi_target_dir).eval()
    opts = SearchOptions(length_penalty=0.0, max_length_ratio=0.0, max_length_extra=MAX_TOKENS)
    expected, beams = {}, {}
    for target, token in (("de", ">>deu<<"), ("fr", ">>fra<<")):
        prefixed = [f"{token} {text}" for text in TEXTS]
        sources = translator.encode_texts(TEXTS, target=target)
        assert sources == [hf_tokenizer(text)["input_ids"] for text in prefixed]
        assert {ids[0] for ids in sources} == {hf_tokenizer.convert_tokens_to_ids(token)}
        generated = marian_translations(marian, hf_tokenizer, prefixed, num_beams=1, forced_eos_token_id=None)
        assert [hyps[0].tokens for hyps in translator.translate_ids(sources, opts).hypotheses] == generated
        expected[target] = [t[0].text for t in translator.translate(TEXTS, SearchOptions(), target=target)]
        beams[target] = [(h[0].tokens, round(h[0].score, 4))
                         for h in translator.translate_ids(sources, SearchOptions(beam_size=2)).hypotheses]
    # the random model's greedy translations may well agree; what it makes of each token, with its score, does not
    assert beams["de"] != beams["fr"], "the language token should change the translations"
    with pytest.raises(ValueError, match="translates en into de, fr, not en into es"):
        translator.encode_texts(TEXTS, target="es")

    log = tmp_path_factory.mktemp("multi-target") / "service.log"
    # the repetition guards off: a random model loops, and Translator, the parity reference, runs without them
    with running_service(out, log, threads=1, log_level="warning", no_repeat_ngram_size=0) as service:
        languages = httpx.get(service.url + "/languages", timeout=TIMEOUT).json()
        # each language also "into itself" (given back as it is), as LibreTranslate lists them
        assert {x["code"]: x["targets"] for x in languages} == {"en": ["de", "en", "fr"], "de": ["de"], "fr": ["fr"]}
        for target in ("de", "fr"):
            response = httpx.post(service.url + "/translate", timeout=TIMEOUT,
                                  json={"q": TEXTS, "source": "en", "target": target, "beam_size": 1})
            assert response.status_code == 200, response.text
            assert response.json()["translatedText"] == expected[target]

"""M2M100 and NLLB-200 models converted into ours (model.convert), against transformers' M2M100ForConditionalGeneration.

No download: the tests build tiny models of both kinds themselves. One SentencePiece BPE model, trained on the
English, German and French sentences below, is the tokenizer of both, laid out as each has it: NLLB-200's fast
NllbTokenizer numbers SentencePiece's pieces from 4 on (fairseq's offset) and has the language codes (eng_Latn, ...)
as tokens; M2M100Tokenizer reads a vocab.json of its own order (here the pieces' reversed) and puts __en__, ... after
it. transformers 5 builds neither tokenizer's language codes from a bare SentencePiece model, so they are added.
Each M2M100ForConditionalGeneration has a few Adam steps on the six directions between the three languages (an
untrained model repeats one token whatever the source). Each folder is converted for en, de and fr with
`python -m model.convert --languages`, exported with `python -m export`, and its translations between several of its
pairs are checked against transformers' generate with the target language's token forced (forced_bos_token_id),
through Translator and through the service.
"""

from __future__ import annotations

import io
import json
import shutil
from itertools import permutations
from pathlib import Path

import httpx
import pytest
import sentencepiece as spm
import torch
import transformers
from client import TIMEOUT
from torch.nn.utils.rnn import pad_sequence
from transformers import M2M100Config, M2M100ForConditionalGeneration
from transformers.models.m2m_100.modeling_m2m_100 import M2M100SinusoidalPositionalEmbedding
from transformers.models.m2m_100.tokenization_m2m_100 import FAIRSEQ_LANGUAGE_CODES as M2M100_CODES
from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES as NLLB_CODES

from core.search import SearchOptions
from core.tokenizer import FAIRSEQ_FILES, load_tokenizer
from core.translate import pair_options
from export.__main__ import main as export_main
from model.checkpoint import load_model
from model.convert import client_codes, convert_many_to_many
from model.convert import main as convert_main
from model.transformer import Transformer, sinusoidal_positions
from service.launch import running_service
from service.translator import Translator

torch.set_num_threads(1)

pytestmark = [
    pytest.mark.filterwarnings("ignore:.*LeafSpec.*:FutureWarning"),
    pytest.mark.filterwarnings("ignore:.*axis name.*:UserWarning"),
]

# Written for these tests: the SentencePiece model and the models learn them, the translation tests translate them.
SENTENCES = {
    "en": [
        "The old man feeds the pigeons in the park.", "A boy kicks a ball against the wall.",
        "Two women are drinking coffee.", "The train leaves at nine.", "Is the museum open today?",
        "My sister paints a yellow house.", "The children swim in the lake.", "A cat sleeps on the warm roof.",
        "We cook soup for our friends.", "Where did you buy these shoes?", "The baker sells fresh bread.",
        "It is raining in the mountains.",
    ],
    "de": [
        "Der alte Mann füttert die Tauben im Park.", "Ein Junge schießt einen Ball gegen die Wand.",
        "Zwei Frauen trinken Kaffee.", "Der Zug fährt um neun ab.", "Ist das Museum heute geöffnet?",
        "Meine Schwester malt ein gelbes Haus.", "Die Kinder schwimmen im See.",
        "Eine Katze schläft auf dem warmen Dach.", "Wir kochen Suppe für unsere Freunde.",
        "Wo hast du diese Schuhe gekauft?", "Der Bäcker verkauft frisches Brot.", "In den Bergen regnet es.",
    ],
    "fr": [
        "Le vieil homme nourrit les pigeons dans le parc.", "Un garçon frappe un ballon contre le mur.",
        "Deux femmes boivent du café.", "Le train part à neuf heures.", "Le musée est-il ouvert aujourd'hui ?",
        "Ma sœur peint une maison jaune.", "Les enfants nagent dans le lac.",
        "Un chat dort sur le toit chaud.", "Nous cuisinons de la soupe pour nos amis.",
        "Où as-tu acheté ces chaussures ?", "Le boulanger vend du pain frais.", "Il pleut dans les montagnes.",
    ],
}
LANGUAGES = list(SENTENCES)  # the client codes served
PAIRS = list(permutations(LANGUAGES, 2))
MAX_TOKENS = 20  # every search's limit on generated tokens (the forced one and </s> included); max_len is 64
TINY = dict(
    d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
    encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64, dropout=0.0, attention_dropout=0.0,
    activation_dropout=0.0, encoder_layerdrop=0.0, decoder_layerdrop=0.0, scale_embedding=True,
)
# each kind's code of en, de, fr, and its language tokens' spelling
CODES = {"nllb": {"en": "eng_Latn", "de": "deu_Latn", "fr": "fra_Latn"}, "m2m100": {"en": "en", "de": "de", "fr": "fr"}}
LANGUAGE_TOKEN = {"nllb": "{}", "m2m100": "__{}__"}
M2M100_MADEUP_WORDS = 8  # M2M100Tokenizer's num_madeup_words, after the language tokens


# --- the Hugging Face folders ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sentencepiece_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A BPE model as fairseq's: <unk> 0, <s> 1, </s> 2 (SentencePiece's defaults), no <pad>."""
    folder = tmp_path_factory.mktemp("sentencepiece")
    texts = [text for texts in SENTENCES.values() for text in texts] * 10
    spm.SentencePieceTrainer.train(sentence_iterator=iter(texts), model_writer=(buffer := io.BytesIO()),
                                   model_type="bpe", vocab_size=150, character_coverage=1.0, minloglevel=2)
    (path := folder / FAIRSEQ_FILES["sentencepiece"]).write_bytes(buffer.getvalue())
    return path


def nllb_tokenizer(folder: Path, sentencepiece_model: Path) -> transformers.PreTrainedTokenizerBase:
    """NLLB-200's: transformers' NllbTokenizer from the SentencePiece model, with the language codes as tokens."""
    shutil.copy(sentencepiece_model, folder)
    tokenizer = transformers.NllbTokenizer.from_pretrained(folder)
    tokenizer.add_tokens(NLLB_CODES, special_tokens=True)
    return tokenizer


def m2m100_tokenizer(folder: Path, sentencepiece_model: Path) -> transformers.PreTrainedTokenizerBase:
    """M2M100's: transformers' M2M100Tokenizer, its vocab.json the pieces in reverse order after fairseq's four."""
    sp = spm.SentencePieceProcessor(model_file=str(sentencepiece_model))
    pieces = [sp.id_to_piece(i) for i in reversed(range(3, sp.get_piece_size()))]
    vocab = {piece: i for i, piece in enumerate(["<s>", "<pad>", "</s>", "<unk>", *pieces])}
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    tokens = [f"__{code}__" for code in M2M100_CODES["m2m100"]]
    return transformers.M2M100Tokenizer(str(folder / "vocab.json"), str(sentencepiece_model),
                                        additional_special_tokens=tokens)


def encoded(tokenizer: transformers.PreTrainedTokenizerBase, kind: str, source: str, target: str,
            texts: list[str], **kwargs) -> transformers.BatchEncoding:
    """transformers' encoding of texts in `source` (its language's token first) to translate into `target`."""
    tokenizer.src_lang, tokenizer.tgt_lang = CODES[kind][source], CODES[kind][target]
    return tokenizer(texts, **kwargs)


def language_id(tokenizer: transformers.PreTrainedTokenizerBase, kind: str, language: str) -> int:
    return tokenizer.convert_tokens_to_ids(LANGUAGE_TOKEN[kind].format(CODES[kind][language]))


def half_trained(model: M2M100ForConditionalGeneration, tokenizer: transformers.PreTrainedTokenizerBase, kind: str,
                 steps: int = 100) -> M2M100ForConditionalGeneration:
    """The model after a few Adam steps on the six directions; its outputs then differ from sentence to sentence and
    from target to target, and end at different steps, some not before the limit. Some seconds on one thread."""
    pad = model.config.pad_token_id
    sources, targets = [], []
    for source, target in PAIRS:
        batch = encoded(tokenizer, kind, source, target, SENTENCES[source], text_target=SENTENCES[target])
        sources += [torch.tensor(ids) for ids in batch["input_ids"]]
        targets += [torch.tensor(ids) for ids in batch["labels"]]
    src = pad_sequence(sources, batch_first=True, padding_value=pad)
    labels = pad_sequence(targets, batch_first=True, padding_value=-100)  # not learned
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(steps):
        loss = model(input_ids=src, attention_mask=src != pad, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


@pytest.fixture(scope="module", params=["nllb", "m2m100"])
def kind(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory: pytest.TempPathFactory, sentencepiece_model: Path, kind: str) -> Path:
    """The Hugging Face folder (save_pretrained) of a model of this kind, trained a little, with its tokenizer files:
    NLLB-200's tokenizer.json and sentencepiece.bpe.model, M2M100's vocab.json and sentencepiece.bpe.model."""
    folder = tmp_path_factory.mktemp(kind)
    tokenizer = (nllb_tokenizer if kind == "nllb" else m2m100_tokenizer)(folder, sentencepiece_model)
    tokenizer.save_pretrained(folder)
    vocab_size = len(tokenizer) + (0 if kind == "nllb" else len(M2M100_CODES["m2m100"]) + M2M100_MADEUP_WORDS)
    torch.manual_seed(0)
    model = M2M100ForConditionalGeneration(M2M100Config(vocab_size=vocab_size, **TINY))
    half_trained(model, tokenizer, kind).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def hf_model(hf_dir: Path) -> M2M100ForConditionalGeneration:
    return M2M100ForConditionalGeneration.from_pretrained(hf_dir).eval()


@pytest.fixture(scope="module")
def hf_tokenizer(hf_dir: Path) -> transformers.PreTrainedTokenizerBase:
    return transformers.AutoTokenizer.from_pretrained(hf_dir)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory, hf_dir: Path) -> Path:
    """The converted and exported model folder of en, de and fr, as a user makes it: two commands."""
    out = tmp_path_factory.mktemp("converted") / "en-de-fr"
    convert_main([str(hf_dir), "--out", str(out), "--languages", *LANGUAGES])
    export_main([str(out / "model.pt"), "--out", str(out), "--variants", "fp32"])
    return out


@pytest.fixture(scope="module")
def translator(model_dir: Path) -> Translator:
    return Translator(model_dir, provider="cpu", threads=1)


# --- the language codes ----------------------------------------------------------------------------------------


def test_clients_name_nllb_s_languages_by_libretranslate_s_codes():
    clients = client_codes(NLLB_CODES)
    assert len(set(clients.values())) == len(NLLB_CODES) == 202
    by_client = {client: code for code, client in clients.items()}
    expected = {"en": "eng_Latn", "de": "deu_Latn", "zh": "zho_Hans", "zt": "zho_Hant", "pt": "por_Latn",
                "ar": "arb_Arab", "fa": "pes_Arab", "tl": "tgl_Latn", "nb": "nob_Latn", "ko": "kor_Hang",
                "ks": "kas_Arab", "ks-Deva": "kas_Deva", "ast": "ast_Latn"}
    assert {client: by_client[client] for client in expected} == expected


def test_clients_name_m2m100_s_languages_by_their_codes():
    clients = client_codes(M2M100_CODES["m2m100"])
    assert {code: client for code, client in clients.items() if code != client} == {}


# --- the conversion --------------------------------------------------------------------------------------------


def test_the_model_folder_serves_every_pair_among_its_languages(model_dir: Path, hf_tokenizer, kind: str):
    config = json.loads((model_dir / "config.json").read_text())
    assert config["tokenizer"] == (FAIRSEQ_FILES if kind == "m2m100" else {"sentencepiece": "sentencepiece.bpe.model"})
    for name in [*config["tokenizer"].values(), *config["graphs"]["fp32"].values()]:
        assert (model_dir / name).is_file(), name
    cfg = config["model"]
    assert cfg["language_tokens"] == {language: language_id(hf_tokenizer, kind, language) for language in LANGUAGES}
    assert (cfg["pre_norm"], cfg["position_layout"], cfg["activation"]) == (True, "fairseq", "relu")
    assert cfg["bos_id"] == cfg["eos_id"] == 2 and cfg["pad_id"] == 1
    assert Translator(model_dir, provider="cpu", threads=1).config.pairs == PAIRS


def test_languages_are_chosen_by_client_codes_or_the_model_s(tmp_path: Path, hf_dir: Path, kind: str):
    model = convert_many_to_many(hf_dir, tmp_path / "by-model-code", [CODES[kind]["fr"], "de"])
    assert list(model.cfg.language_tokens) == ["fr", "de"]
    with pytest.raises(ValueError, match="the model has no language xx; it has .*, zh"):
        convert_many_to_many(hf_dir, tmp_path / "refused", ["en", "xx"])
    with pytest.raises(ValueError, match="a pair needs two languages"):
        convert_many_to_many(hf_dir, tmp_path / "refused", ["en", CODES[kind]["en"]])
    assert not (tmp_path / "refused").exists()


def test_positions_are_fairseq_s():
    """fairseq's sinusoids (offset past the padding id, frequencies over d_model/2 - 1), in our table from 0."""
    theirs = M2M100SinusoidalPositionalEmbedding.get_embedding(64 + 2, 32, padding_idx=1)[2:]
    torch.testing.assert_close(sinusoidal_positions(64, 32, "fairseq", pad_id=1), theirs, atol=1e-5, rtol=0)


@torch.inference_mode()
def test_logits_equal_transformers_s(model_dir: Path, hf_model, hf_tokenizer, kind: str):
    """Teacher-forced logits of a padded batch of every pair; <pad>'s column is -inf in ours, which never
    generates it."""
    ours: Transformer = load_model(model_dir / "model.pt")
    pad = hf_model.config.pad_token_id
    for source, target in PAIRS:
        batch = encoded(hf_tokenizer, kind, source, target, SENTENCES[source], text_target=SENTENCES[target],
                        return_tensors="pt", padding=True)
        tgt_in = torch.cat([torch.full_like(batch["labels"][:, :1], 2), batch["labels"][:, :-1]], dim=1)
        tgt_mask = torch.cat([torch.ones_like(tgt_in[:, :1]), batch["labels"][:, :-1] != pad], dim=1).bool()
        theirs = hf_model(**batch, decoder_input_ids=tgt_in, decoder_attention_mask=tgt_mask).logits
        logits = ours(batch["input_ids"], batch["attention_mask"].bool(), tgt_in, tgt_mask)
        assert torch.isneginf(logits[..., pad]).all()
        assert not batch["attention_mask"].all() and not tgt_mask.all(), "the batch should be padded on both sides"
        diff = (logits - theirs)[tgt_mask][:, torch.arange(logits.size(-1)) != pad].abs().max().item()
        assert diff < 1e-4, f"{source}-{target}: max abs logit difference {diff:.3g}"


def test_tokenizer_is_transformers_s(model_dir: Path, hf_tokenizer, kind: str):
    config = json.loads((model_dir / "config.json").read_text())
    ours = load_tokenizer(model_dir, config["tokenizer"])
    # no trailing space: transformers' fast NllbTokenizer makes it a piece ▁, SentencePiece (fairseq's, ours) drops it
    texts = [*SENTENCES["en"], "", "  Two   spaces", "Ünbekannte Zeichen: Ω, 42 ¿?", "the THE tHe"]
    expected = encoded(hf_tokenizer, kind, "en", "de", texts)["input_ids"]
    assert [[language_id(hf_tokenizer, kind, "en"), *ids, 2] for ids in ours.encode(texts)] == expected
    assert any(3 in ids for ids in expected), "characters the SentencePiece model lacks should be <unk>"
    generator = torch.Generator().manual_seed(0)  # any ids: special ones, language tokens, pieces
    sequences = torch.randint(0, hf_tokenizer.convert_tokens_to_ids(LANGUAGE_TOKEN[kind].format(CODES[kind]["fr"]))
                              + 5, (50, 12), generator=generator).tolist()
    assert ours.decode(sequences) == hf_tokenizer.batch_decode(sequences, skip_special_tokens=True)


# --- serving: ONNX Runtime against transformers' generate, the target forced -----------------------------------


def generated(hf_model, hf_tokenizer, kind: str, source: str, target: str, **settings) -> list[list[int]]:
    """transformers' translations of SENTENCES[source] into `target`, decoding forced to begin with the target's token
    (as NllbTokenizer's and M2M100Tokenizer's translation inputs say), <pad> banned; without the start token (</s>)
    and from </s> on."""
    pad, eos = hf_model.config.pad_token_id, hf_model.config.eos_token_id
    batch = encoded(hf_tokenizer, kind, source, target, SENTENCES[source], return_tensors="pt", padding=True)
    with torch.inference_mode():
        out = hf_model.generate(**batch, forced_bos_token_id=language_id(hf_tokenizer, kind, target), do_sample=False,
                                max_new_tokens=MAX_TOKENS, bad_words_ids=[[pad]], **settings)
    sequences = [row[1:].tolist() for row in out]  # <pad> fills them after </s>
    return [seq[: seq.index(eos)] if eos in seq else seq for seq in sequences]


def ours(translator: Translator, hf_tokenizer, kind: str, source: str, target: str, beam_size: int) -> list[list[int]]:
    sources = translator.encode_texts(SENTENCES[source], source=source, target=target)
    assert sources == encoded(hf_tokenizer, kind, source, target, SENTENCES[source])["input_ids"]
    # the same limit for every sentence: ratio 0 and MAX_TOKENS extra tokens, as transformers' max_new_tokens
    opts = SearchOptions(beam_size=beam_size, length_penalty=0.0, max_length_ratio=0.0, max_length_extra=MAX_TOKENS)
    opts = pair_options(translator.model_config, opts, target)
    return [hyps[0].tokens for hyps in translator.translate_ids(sources, opts).hypotheses]


def agreement(translator: Translator, hf_model, hf_tokenizer, kind: str, beam_size: int, **settings) -> float:
    """The share of translations of every pair that are transformers' own, token for token."""
    equal, total, translations = 0, 0, {}
    for source, target in PAIRS:
        expected = generated(hf_model, hf_tokenizer, kind, source, target, num_beams=beam_size, **settings)
        got = ours(translator, hf_tokenizer, kind, source, target, beam_size)
        assert {t[0] for t in got} == {language_id(hf_tokenizer, kind, target)}, "the target's token comes first"
        equal += sum(e == g for e, g in zip(expected, got))
        total += len(expected)
        translations[source, target] = expected
    for (source, target), texts in translations.items():
        assert len({tuple(t) for t in texts}) > len(texts) // 3, "the model should not translate everything alike"
        other = next(t for s, t in translations if s == source and t != target)
        assert texts != translations[source, other], "the target's token should change the translations"
    lengths = {len(t) for pair in translations.values() for t in pair}
    assert min(lengths) < MAX_TOKENS and MAX_TOKENS in lengths, "some translations should end, some reach the limit"
    return equal / total


def test_greedy_translations_equal_generate_s(translator: Translator, hf_model, hf_tokenizer, kind: str):
    assert agreement(translator, hf_model, hf_tokenizer, kind, beam_size=1) == 1.0


def test_beam_translations_equal_generate_s(translator: Translator, hf_model, hf_tokenizer, kind: str):
    # as tests/test_convert.py's Marian beams: length_penalty 0 both ways, early_stopping="never", and <pad> banned
    # then the log-probabilities normalized again (renormalize_logits), as our -inf output bias at <pad> does; the
    # forced token adds 0 to the score both ways (ForcedBOSTokenLogitsProcessor, SearchOptions.forced_token)
    share = agreement(translator, hf_model, hf_tokenizer, kind, beam_size=4, length_penalty=0.0,
                      early_stopping="never", renormalize_logits=True)
    assert share >= 0.99


def test_translator_translates_each_pair_of_one_folder(translator: Translator, hf_model, hf_tokenizer, kind: str):
    """Translator.translate(texts, opts, source=, target=): generate's translations, decoded by transformers."""
    opts = SearchOptions(max_length_ratio=0.0, max_length_extra=MAX_TOKENS)
    for source, target in (("en", "de"), ("de", "fr"), ("fr", "en")):
        texts = [t[0].text for t in translator.translate(SENTENCES[source], opts, source=source, target=target)]
        expected = generated(hf_model, hf_tokenizer, kind, source, target)
        assert texts == hf_tokenizer.batch_decode(expected, skip_special_tokens=True)
    with pytest.raises(ValueError, match="translates between any two of en, de, fr, not en into en"):
        translator.translate(SENTENCES["en"], opts, source="en", target="en")


def test_the_service_translates_between_the_folder_s_pairs(
    tmp_path_factory: pytest.TempPathFactory, model_dir: Path, translator: Translator
):
    """One folder serves the six pairs: /languages lists them, /translate translates as Translator does, and
    /detect and source "auto" choose among the three languages."""
    expected = {(source, target): [t[0].text for t in translator.translate(SENTENCES[source], source=source,
                                                                             target=target)]
                for source, target in (("en", "de"), ("de", "fr"))}
    log = tmp_path_factory.mktemp("many-to-many") / "service.log"
    with running_service(model_dir, log, threads=1, log_level="warning") as service:
        languages = httpx.get(service.url + "/languages", timeout=TIMEOUT).json()
        assert {x["code"]: x["targets"] for x in languages} == {code: sorted(LANGUAGES) for code in LANGUAGES}
        for (source, target), texts in expected.items():
            response = httpx.post(service.url + "/translate", timeout=TIMEOUT,
                                  json={"q": SENTENCES[source], "source": source, "target": target, "beam_size": 1})
            assert response.status_code == 200, response.text
            assert response.json()["translatedText"] == texts
        detected = httpx.post(service.url + "/detect", timeout=TIMEOUT, json={"q": SENTENCES["de"][0]}).json()
        assert detected[0]["language"] == "de" and {x["language"] for x in detected} == set(LANGUAGES)
        response = httpx.post(service.url + "/translate", timeout=TIMEOUT,
                              json={"q": SENTENCES["de"], "source": "auto", "target": "fr", "beam_size": 1})
        assert response.status_code == 200, response.text
        assert response.json()["translatedText"] == expected["de", "fr"]

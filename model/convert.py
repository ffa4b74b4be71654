"""Convert a Marian / OPUS-MT model, or an M2M100 / NLLB-200 model (folders of Hugging Face's MarianMTModel and
M2M100ForConditionalGeneration), into a model folder of ours.

    python -m model.convert OPUS_MT_FOLDER --out MODEL_DIR [--src en] [--tgt de [fr ...]] [--target-token '>>deu<<']
    python -m model.convert NLLB_FOLDER --out MODEL_DIR [--languages en de fr ...]
    python -m export MODEL_DIR/model.pt --out MODEL_DIR      or, in one: model.convert ... --export fp32 int8
    python -m model.convert ARGOS_PACKAGE --out MODEL_DIR     an Argos Translate package (LibreTranslate's models:
                                                              an .argosmodel file or an installed folder), or a
                                                              folder of them: model.argos

Writes MODEL_DIR/model.pt (our config and weights) and the tokenizer files (core.tokenizer): Marian's source.spm,
target.spm and vocab.json (MARIAN_FILES), or fairseq's sentencepiece.bpe.model, with M2M100's vocab.json
(FAIRSEQ_FILES). Both are our Transformer with one embedding shared by source, target and output, scaled by
sqrt(d_model), with biased attention and feed-forward layers and LayerNorm eps 1e-5; they differ in options of our
config:
    activation        "swish" (SiLU) in OPUS-MT, ReLU in ours and in M2M100 / NLLB-200
    position_layout   Marian's sinusoids are [sin | cos], ours interleave them (the same angles, positions from 0);
                      fairseq's (M2M100, NLLB-200) are [sin | cos] of other angles, positions from pad_id + 1
    pre_norm          M2M100 / NLLB-200 normalize before each sub-layer, and after each stack
    output_bias       Marian's final_logits_bias; -inf at <pad> in both: neither ever generates <pad>
    bos_id            decoding starts with the decoder_start_token_id: Marian's <pad>, M2M100's </s>
    target_tokens     a Marian model that translates into several languages (en-ROMANCE, en-mul, en-zh, ...) has a
                      token per target language in its vocabulary (>>fra<<, >>spa<<, ...) and reads the wanted one
                      before the source; the folder serves the target languages asked for (--tgt fr es), each with its
                      token
    language_tokens   M2M100 / NLLB-200 translate between any two of their languages, each with its token
                      (__fr__, fra_Latn): a source starts with its language's, and decoding is forced to begin with
                      the target's (transformers' forced_bos_token_id); the folder serves every pair among the
                      languages asked for (--languages en de fr), by the codes that clients send (en, zh, zt)
A model that does not fit (separate embeddings, unscaled embeddings, ...) is refused with the reason, and so is an
--out folder that holds files already (another model), unless --force replaces it.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import langcodes
import torch
from transformers import (
    AutoTokenizer,
    M2M100Config,
    M2M100ForConditionalGeneration,
    MarianConfig,
    MarianMTModel,
    PretrainedConfig,
    PreTrainedTokenizerBase,
)

from core.folder import ModelConfig
from core.model_cache import replacing
from core.tokenizer import FAIRSEQ_FILES, MARIAN_FILES, FairseqTokenizer
from model.argos import convert_packages, package_paths
from model.out_folder import export as export_graphs
from model.transformer import Transformer

ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "swish": "silu", "silu": "silu"}  # transformers' name -> ours

ATTENTION = {"w_q": "q_proj", "w_k": "k_proj", "w_v": "v_proj", "w_o": "out_proj"}
LAYER_PARTS = {  # our module names inside a layer -> transformers' (Marian's and M2M100's alike)
    **{f"self_attn.{ours}": f"self_attn.{theirs}" for ours, theirs in ATTENTION.items()},
    **{f"cross_attn.{ours}": f"encoder_attn.{theirs}" for ours, theirs in ATTENTION.items()},
    "ffn.w_1": "fc1",
    "ffn.w_2": "fc2",
    "res_attn.norm": "self_attn_layer_norm",  # encoder
    "res_self.norm": "self_attn_layer_norm",  # decoder
    "res_cross.norm": "encoder_attn_layer_norm",
    "res_ffn.norm": "final_layer_norm",
}
# Their weights that are not ours under a name of their own: the copies of the shared embedding, and Marian's
# sinusoids, which our Transformer computes.
TIED_OR_COMPUTED = {
    "model.encoder.embed_tokens.weight",
    "model.decoder.embed_tokens.weight",
    "lm_head.weight",
    "model.encoder.embed_positions.weight",
    "model.decoder.embed_positions.weight",
}


def unsupported(hf: PretrainedConfig, folder: Path) -> list[str]:
    """Why our Transformer cannot run this Marian or M2M100 model as transformers runs it; empty if it can."""
    encoder = (hf.encoder_layers, hf.encoder_attention_heads, hf.encoder_ffn_dim)
    decoder = (hf.decoder_layers, hf.decoder_attention_heads, hf.decoder_ffn_dim)
    checks = {
        "an output projection of its own (tie_word_embeddings=False): ours is the shared embedding": (
            not hf.tie_word_embeddings
        ),
        "unscaled embeddings (scale_embedding=False): ours are scaled by sqrt(d_model)": not hf.scale_embedding,
        f"an encoder {encoder} unlike its decoder {decoder} (layers, heads, d_ff): ours are alike": encoder != decoder,
        f"activation {hf.activation_function!r}: ours are {sorted(ACTIVATIONS)}": (
            hf.activation_function not in ACTIVATIONS
        ),
        f"several end tokens (eos_token_id={hf.eos_token_id})": not isinstance(hf.eos_token_id, int),
    }
    if hf.model_type == "marian":
        checks |= {
            "separate source and target embeddings (share_encoder_decoder_embeddings=False): ours shares one": (
                not hf.share_encoder_decoder_embeddings
            ),
            "pre-norm layers (normalize_before=True): transformers' MarianMTModel is post-norm, and the checkpoint "
            "lacks the final LayerNorms of a pre-norm stack": getattr(hf, "normalize_before", False),
            "separate source and target vocabularies (target_vocab.json)": (folder / "target_vocab.json").exists(),
        }
    else:
        checks |= {
            f"no {FAIRSEQ_FILES['sentencepiece']}: the service tokenizes with it": (
                not (folder / FAIRSEQ_FILES["sentencepiece"]).is_file()
            ),
        }
    return [reason for reason, applies in checks.items() if applies]


def dimensions(hf: PretrainedConfig) -> dict:
    """What our ModelConfig takes from any transformers encoder-decoder config."""
    return dict(
        vocab_size=hf.vocab_size,
        d_model=hf.d_model,
        n_heads=hf.encoder_attention_heads,
        n_layers=hf.encoder_layers,
        d_ff=hf.encoder_ffn_dim,
        dropout=hf.dropout,  # for training only; they also have attention_dropout and activation_dropout
        max_len=hf.max_position_embeddings,
        activation=ACTIVATIONS[hf.activation_function],
        pad_id=hf.pad_token_id,
        bos_id=hf.decoder_start_token_id,
        eos_id=hf.eos_token_id,
    )


LANGUAGE_TOKEN = re.compile(r">>(.+)<<")  # as transformers' MarianTokenizer recognizes them


def language_of(code: str) -> str | None:
    """The language of an OPUS-MT code or a LibreTranslate one, in ISO 639-1 where it has one: fra -> fr,
    pt_br -> pt, cmn_Hans -> zh (a macrolanguage rather than its members); None for a code that names none."""
    try:
        return langcodes.Language.get(code.replace("_", "-")).prefer_macrolanguage().language
    except (langcodes.LanguageTagError, ValueError):
        return None


def target_token(vocab: dict[str, int], tgt_lang: str, chosen: str | None = None) -> str | None:
    """The target-language token (>>fra<<) that the sources of tgt_lang start with: `chosen`, or else the one whose
    code is tgt_lang, or else the only one of tgt_lang's language. None for a model that has no such tokens (one
    target language)."""
    tokens = [piece for piece in vocab if LANGUAGE_TOKEN.fullmatch(piece)]
    if chosen is not None:
        if chosen not in tokens:
            raise ValueError(f"{chosen!r} is not a target-language token of this model; it has {tokens or 'none'}")
        return chosen
    if not tokens:
        return None
    codes = {token: LANGUAGE_TOKEN.fullmatch(token)[1] for token in tokens}
    matches = [token for token, code in codes.items() if code == tgt_lang]
    if not matches and (language := language_of(tgt_lang)):
        matches = [token for token, code in codes.items() if language_of(code) == language]
    if len(matches) != 1:
        shown = ", ".join(tokens[:30]) + (f" and {len(tokens) - 30} more" if len(tokens) > 30 else "")
        raise ValueError(
            f"the model translates into several languages, one per token: {shown}; target language {tgt_lang!r} "
            f"matches {', '.join(matches) or 'none of them'}: give --tgt (the code clients ask for, e.g. fr) and, "
            "where that is not enough, --target-token"
        )
    return matches[0]


def model_config(
    marian: MarianConfig, vocab: dict[str, int], src_lang: str, tgt_lang: str, target_tokens: dict[str, int]
) -> ModelConfig:
    """Our config of a Marian model whose vocabulary (vocab.json) agrees with its special ids."""
    found = (len(vocab), vocab.get("<pad>"), vocab.get("</s>"), "<unk>" in vocab)
    wanted = (marian.vocab_size, marian.pad_token_id, marian.eos_token_id, True)
    if found != wanted:
        raise ValueError(f"vocab.json does not agree with config.json: (size, <pad>, </s>, has <unk>) {found}, "
                         f"not {wanted}")
    return ModelConfig(
        **dimensions(marian),
        unk_id=vocab["<unk>"],
        src_lang=src_lang,
        tgt_lang=tgt_lang,
        position_layout="concatenated",
        output_bias=True,
        target_tokens=target_tokens,
    )


def hf_name(ours: str) -> str:
    """transformers' name of one of our weights, e.g. decoder.0.cross_attn.w_q.weight ->
    model.decoder.layers.0.encoder_attn.q_proj.weight, decoder_norm.weight -> model.decoder.layer_norm.weight."""
    if ours == "embed.weight":
        return "model.shared.weight"
    if ours == "output_bias":
        return "final_logits_bias"
    if ours.startswith(("encoder_norm.", "decoder_norm.")):
        norm, parameter = ours.split(".")
        return f"model.{norm.removesuffix('_norm')}.layer_norm.{parameter}"
    stack, layer, rest = ours.split(".", 2)
    module, parameter = rest.rsplit(".", 1)
    return f"model.{stack}.layers.{layer}.{LAYER_PARTS[module]}.{parameter}"


def with_weights(cfg: ModelConfig, theirs: dict[str, torch.Tensor], folder: Path) -> Transformer:
    """Our Transformer with the weights of a transformers model (its state dict); the output bias is theirs where
    they have one (Marian's final_logits_bias), and -inf at <pad> either way, which neither ever generates
    (transformers' generate bans it for Marian, fairseq's search for M2M100 and NLLB-200)."""
    model = Transformer(cfg).eval()
    state = {name: theirs[hf_name(name)].reshape(like.shape) for name, like in model.state_dict().items()
             if name != "output_bias"}
    if unknown := set(theirs) - {hf_name(name) for name in model.state_dict()} - TIED_OR_COMPUTED:
        raise ValueError(f"{folder} has weights that this converter does not know: {sorted(unknown)}")
    state["output_bias"] = theirs.get("final_logits_bias", torch.zeros(cfg.vocab_size)).reshape(-1).clone()
    state["output_bias"][cfg.pad_id] = -torch.inf
    model.load_state_dict(state)
    return model


def save(model: Transformer, folder: Path, tokenizer_files: list[str], out: Path) -> None:
    """out/model.pt, and the tokenizer files copied from folder."""
    out.mkdir(parents=True, exist_ok=True)
    torch.save({"config": model.cfg.to_dict(), "model": model.state_dict()}, out / "model.pt")
    for name in tokenizer_files:
        shutil.copy(folder / name, out / name)


def target_tokens(vocab: dict[str, int], tgt_langs: list[str], chosen: str | None) -> dict[str, int]:
    """The id of each target language's token (target_token); empty for a model of one target language."""
    if chosen and len(tgt_langs) > 1:
        raise ValueError(f"--target-token names the token of one target language, not of {', '.join(tgt_langs)}")
    tokens = {tgt: target_token(vocab, tgt, chosen) for tgt in tgt_langs}
    if None in tokens.values():
        if len(tgt_langs) > 1:
            raise ValueError(f"the model has no target-language tokens: it translates into one language, not into "
                             f"{', '.join(tgt_langs)}")
        return {}
    return {tgt: vocab[token] for tgt, token in tokens.items()}


def model_type(folder: Path) -> str | None:
    """The model_type that a transformers folder's config.json names: "marian", "m2m_100" (NLLB-200 too), ..."""
    config_file = folder / "config.json"
    return json.loads(config_file.read_text()).get("model_type") if config_file.is_file() else None


def convert(
    folder: Path,
    out: Path,
    src_lang: str | None = None,
    tgt_langs: list[str] | None = None,
    language_token: str | None = None,
) -> Transformer:
    """Write out/model.pt and the tokenizer files of the MarianMTModel in `folder`; returns our model. A model with
    target-language tokens serves the languages of tgt_langs (model.convert.target_token)."""
    if model_type(folder) != "marian":
        raise ValueError(f"{folder} is not the folder of a MarianMTModel (its config.json says model_type marian)")
    marian_config = MarianConfig.from_pretrained(folder, local_files_only=True)
    if problems := unsupported(marian_config, folder):
        raise ValueError(f"{folder} cannot be converted: it has " + "; ".join(problems))
    tokenizer_config = folder / "tokenizer_config.json"
    languages = json.loads(tokenizer_config.read_text()) if tokenizer_config.exists() else {}
    src_lang = src_lang or languages.get("source_lang")
    tgt_langs = tgt_langs or ([languages["target_lang"]] if languages.get("target_lang") else [])
    if not (src_lang and tgt_langs):
        raise ValueError(f"{tokenizer_config} names no source_lang and target_lang: give --src and --tgt")
    vocab = json.loads((folder / MARIAN_FILES["vocab"]).read_text(encoding="utf-8"))
    # the folder's name: its one target language, or the group a multi-target model's tokenizer names ("mul")
    tgt_lang = tgt_langs[0] if len(tgt_langs) == 1 else languages.get("target_lang") or "mul"
    cfg = model_config(marian_config, vocab, src_lang, tgt_lang, target_tokens(vocab, tgt_langs, language_token))

    marian = MarianMTModel.from_pretrained(folder, local_files_only=True, dtype=torch.float32).eval()
    model = with_weights(cfg, marian.state_dict(), folder)
    save(model, folder, list(MARIAN_FILES.values()), out)
    return model


# --- M2M100 and NLLB-200 ---------------------------------------------------------------------------------------

NLLB_CODE = re.compile(r"[a-z]{3}_[A-Z][a-z]{3}")  # NLLB-200's language tokens: eng_Latn, zho_Hant
LIBRETRANSLATE_CODES = {"zh-Hant": "zt", "fil": "tl"}  # LibreTranslate's codes where langcodes' differ


def model_languages(tokenizer: PreTrainedTokenizerBase) -> dict[str, int]:
    """The model's language codes and the ids of their tokens: M2M100's (en, its token __en__), or NLLB-200's, whose
    tokens are the codes (eng_Latn)."""
    if hasattr(tokenizer, "lang_code_to_id"):  # M2M100Tokenizer
        return dict(tokenizer.lang_code_to_id)
    return {token: i for token, i in tokenizer.get_vocab().items() if NLLB_CODE.fullmatch(token)}


def client_codes(codes: list[str]) -> dict[str, str]:
    """The code that clients send for each of the model's language codes, as LibreTranslate's: ISO 639-1 where the
    language has one, its macrolanguage preferred (eng_Latn -> en, arb_Arab -> ar), else ISO 639-3 (ast_Latn ->
    ast); with the script where the model has the language in several, but for its usual one (zho_Hans -> zh,
    zho_Hant -> zh-Hant); then LibreTranslate's own codes (zh-Hant -> zt). A code that langcodes cannot read, or
    whose client code an earlier one took (twi_Latn, Akan like aka_Latn), stays as the model writes it."""
    tags = {}
    for code in codes:
        try:
            tags[code] = langcodes.Language.get(code.replace("_", "-")).prefer_macrolanguage()
        except (langcodes.LanguageTagError, ValueError):
            continue
    scripts = Counter(tag.language for tag in tags.values())  # codes per language
    clients: dict[str, str] = {}
    for code in codes:
        if (tag := tags.get(code)) is None:
            clients[code] = code
            continue
        usual_script = langcodes.Language.get(tag.language).maximize().script
        client = tag.language if scripts[tag.language] == 1 or tag.script in (None, usual_script) else str(tag)
        client = LIBRETRANSLATE_CODES.get(client, client)
        clients[code] = code if client in clients.values() else client
    return clients


def chosen_languages(clients: dict[str, str], wanted: list[str] | None) -> list[str]:
    """The model's codes of the languages asked for, each by its client code or the model's own (en or eng_Latn);
    all of them when none are asked for."""
    if not wanted:
        return list(clients)
    named = {client: code for code, client in clients.items()} | {code: code for code in clients}
    if unknown := [name for name in wanted if name not in named]:
        raise ValueError(f"the model has no language {', '.join(unknown)}; it has (as clients name them) "
                         f"{', '.join(sorted(clients.values()))}")
    chosen = list(dict.fromkeys(named[name] for name in wanted))
    if len(chosen) < 2:
        raise ValueError("a pair needs two languages: give --languages two or more")
    return chosen


def fairseq_files(folder: Path, tokenizer: PreTrainedTokenizerBase) -> list[str]:
    """The tokenizer files of an M2M100 or NLLB-200 folder that ours reads (FAIRSEQ_FILES): the SentencePiece model,
    and M2M100's vocab.json where there is one. Without it, the folder's tokenizer must number the pieces as
    FairseqTokenizer does (NLLB-200's: SentencePiece's ids moved up by one); a ValueError says where it does not."""
    files = [name for name in FAIRSEQ_FILES.values() if (folder / name).is_file()]
    if FAIRSEQ_FILES["vocab"] in files:
        return files
    sp, vocab = FairseqTokenizer(folder / FAIRSEQ_FILES["sentencepiece"]).sp, tokenizer.get_vocab()
    specials = {piece: i for i, piece in enumerate(FairseqTokenizer.SPECIALS)}
    pieces = {sp.id_to_piece(i): i + FairseqTokenizer.OFFSET for i in range(3, sp.get_piece_size())}
    if moved := [piece for piece, i in (specials | pieces).items() if vocab.get(piece) != i]:
        raise ValueError(f"{folder}'s tokenizer numbers {len(moved)} pieces otherwise than its "
                         f"{FAIRSEQ_FILES['sentencepiece']} moved up by one, e.g. {moved[:5]}")
    return files


def convert_many_to_many(folder: Path, out: Path, languages: list[str] | None = None) -> Transformer:
    """Write out/model.pt and the tokenizer files of the M2M100 or NLLB-200 model in `folder`, to serve every pair
    among `languages` (model.convert.chosen_languages); returns our model."""
    if model_type(folder) != "m2m_100":
        raise ValueError(f"{folder} is not the folder of an M2M100 or NLLB-200 model (its config.json says "
                         "model_type m2m_100)")
    hf_config = M2M100Config.from_pretrained(folder, local_files_only=True)
    if problems := unsupported(hf_config, folder):
        raise ValueError(f"{folder} cannot be converted: it has " + "; ".join(problems))
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    files = fairseq_files(folder, tokenizer)
    tokens = model_languages(tokenizer)
    clients = client_codes(list(tokens))
    cfg = ModelConfig(
        **dimensions(hf_config),
        unk_id=tokenizer.unk_token_id,
        pre_norm=True,
        position_layout="fairseq",
        output_bias=True,
        src_lang="mul",
        tgt_lang="mul",
        language_tokens={clients[code]: tokens[code] for code in chosen_languages(clients, languages)},
    )
    hf_model = M2M100ForConditionalGeneration.from_pretrained(folder, local_files_only=True, dtype=torch.float32)
    model = with_weights(cfg, hf_model.state_dict(), folder)
    save(model, folder, files, out)
    return model


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folder", type=Path, help="a MarianMTModel or M2M100ForConditionalGeneration folder: config.json, "
                   "weights, tokenizer files")
    p.add_argument("--out", type=Path, required=True, help="the model folder to write")
    marian = p.add_argument_group("Marian / OPUS-MT")
    marian.add_argument("--src", help="source language code (default: tokenizer_config.json's source_lang)")
    marian.add_argument("--tgt", nargs="+", help="target language code (default: tokenizer_config.json's "
                        "target_lang); a model with several target languages: each one to serve")
    marian.add_argument("--target-token", help="a model with several target languages: the token of the one --tgt, "
                        "e.g. '>>cmn_Hans<<' (default: the token of --tgt's language, when there is exactly one)")
    m2m100 = p.add_argument_group("M2M100 / NLLB-200")
    m2m100.add_argument("--languages", nargs="+", help="the languages to serve, every pair among them: the codes "
                        "that clients send (en de zt) or the model's (eng_Latn) (default: all of the model's)")
    p.add_argument("--force", action="store_true", help="replace the model in --out (without it, a folder that "
                   "holds files is refused)")
    p.add_argument("--export", nargs="+", choices=["fp32", "int8", "fp16"], metavar="PRECISION",
                   help="also export the graphs (fp32 int8 fp16), as `python -m export` does: the folder is then "
                   "ready to serve")
    args = p.parse_args(argv)
    export = list(dict.fromkeys(["fp32", *args.export])) if args.export else None
    if package_paths(args.folder):  # LibreTranslate's models (model.argos)
        if args.src or args.tgt or args.target_token or args.languages:
            p.error("an Argos Translate package names its languages in metadata.json: give no language options")
        if status := convert_packages(args.folder, args.out, args.force, export):
            p.exit(status)
        return
    many_to_many = model_type(args.folder) == "m2m_100"
    if many_to_many and (args.src or args.tgt or args.target_token) or not many_to_many and args.languages:
        p.error("--src, --tgt and --target-token are for a Marian model, --languages for an M2M100 or NLLB-200 model")
    try:
        with replacing(args.out, args.force) as partial:
            if many_to_many:
                model = convert_many_to_many(args.folder, partial, args.languages)
            else:
                model = convert(args.folder, partial, args.src, args.tgt, args.target_token)
            if export:
                export_graphs(partial, export)
    except ValueError as e:
        p.exit(2, f"model.convert: {e}\n")
    except subprocess.CalledProcessError:
        p.exit(2, "model.convert: the export failed (the lines above say why)\n")
    print(f"{args.out / 'model.pt'}: {model.num_parameters():,} parameters, {model.cfg}")
    if export:
        print(f"{args.out}: ready to serve ({' '.join(export)})")
    else:
        print(f"next: python -m export {args.out / 'model.pt'} --out {args.out}")


if __name__ == "__main__":
    main()

"""Convert a Marian / OPUS-MT model (a folder of a Hugging Face MarianMTModel) into a model folder of ours.

    python -m model.convert OPUS_MT_FOLDER --out MODEL_DIR [--src en] [--tgt de [fr ...]] [--target-token '>>deu<<']
    python -m export MODEL_DIR/model.pt --out MODEL_DIR

Writes MODEL_DIR/model.pt (our config and weights) and Marian's tokenizer files (source.spm, target.spm, vocab.json,
core.tokenizer.MARIAN_FILES). Marian is our post-LN Transformer with one embedding shared by source, target and
output, scaled by sqrt(d_model), with biased attention and feed-forward layers and LayerNorm eps 1e-5; it differs in
options of our config:
    activation        "swish" (SiLU) in OPUS-MT, ReLU in ours
    position_layout   its sinusoids are [sin | cos], ours interleave them (the same angles, positions from 0)
    output_bias       its final_logits_bias, with -inf at <pad>: Marian never generates <pad>
    bos_id            decoding starts with its decoder_start_token_id (<pad>)
    target_tokens     a model that translates into several languages (en-ROMANCE, en-mul, en-zh, ...) has a token per
                      target language in its vocabulary (>>fra<<, >>spa<<, ...) and reads the wanted one before the
                      source; the folder serves the target languages asked for (--tgt fr es), each with its token
A model that does not fit (separate embeddings, pre-norm, ...) is refused with the reason.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
from pathlib import Path

import langcodes
import torch
from transformers import MarianConfig, MarianMTModel

from core.folder import ModelConfig
from core.tokenizer import MARIAN_FILES
from model.transformer import Transformer

MARIAN_ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "swish": "silu", "silu": "silu"}  # transformers' name -> ours

ATTENTION = {"w_q": "q_proj", "w_k": "k_proj", "w_v": "v_proj", "w_o": "out_proj"}
LAYER_PARTS = {  # our module names inside a layer -> Marian's
    **{f"self_attn.{ours}": f"self_attn.{theirs}" for ours, theirs in ATTENTION.items()},
    **{f"cross_attn.{ours}": f"encoder_attn.{theirs}" for ours, theirs in ATTENTION.items()},
    "ffn.w_1": "fc1",
    "ffn.w_2": "fc2",
    "res_attn.norm": "self_attn_layer_norm",  # encoder
    "res_self.norm": "self_attn_layer_norm",  # decoder
    "res_cross.norm": "encoder_attn_layer_norm",
    "res_ffn.norm": "final_layer_norm",
}
# Marian's weights that are not ours under a name of their own: the copies of the shared embedding, and the
# sinusoids, which our Transformer computes.
TIED_OR_COMPUTED = {
    "model.encoder.embed_tokens.weight",
    "model.decoder.embed_tokens.weight",
    "lm_head.weight",
    "model.encoder.embed_positions.weight",
    "model.decoder.embed_positions.weight",
}


def unsupported(marian: MarianConfig, folder: Path) -> list[str]:
    """Why our Transformer cannot run this Marian model as transformers runs it; empty if it can."""
    encoder = (marian.encoder_layers, marian.encoder_attention_heads, marian.encoder_ffn_dim)
    decoder = (marian.decoder_layers, marian.decoder_attention_heads, marian.decoder_ffn_dim)
    checks = {
        "separate source and target embeddings (share_encoder_decoder_embeddings=False): ours shares one": (
            not marian.share_encoder_decoder_embeddings
        ),
        "an output projection of its own (tie_word_embeddings=False): ours is the shared embedding": (
            not marian.tie_word_embeddings
        ),
        "pre-norm layers (normalize_before=True): transformers' MarianMTModel is post-norm, and the checkpoint lacks "
        "the final LayerNorms of a pre-norm stack": getattr(marian, "normalize_before", False),
        "unscaled embeddings (scale_embedding=False): ours are scaled by sqrt(d_model)": not marian.scale_embedding,
        f"an encoder {encoder} unlike its decoder {decoder} (layers, heads, d_ff): ours are alike": encoder != decoder,
        f"activation {marian.activation_function!r}: ours are {sorted(MARIAN_ACTIVATIONS)}": (
            marian.activation_function not in MARIAN_ACTIVATIONS
        ),
        f"several end tokens (eos_token_id={marian.eos_token_id})": not isinstance(marian.eos_token_id, int),
        "separate source and target vocabularies (target_vocab.json)": (folder / "target_vocab.json").exists(),
    }
    return [reason for reason, applies in checks.items() if applies]


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
        vocab_size=marian.vocab_size,
        d_model=marian.d_model,
        n_heads=marian.encoder_attention_heads,
        n_layers=marian.encoder_layers,
        d_ff=marian.encoder_ffn_dim,
        dropout=marian.dropout,  # for training only; Marian also has attention_dropout and activation_dropout
        max_len=marian.max_position_embeddings,
        pad_id=marian.pad_token_id,
        unk_id=vocab["<unk>"],
        bos_id=marian.decoder_start_token_id,
        eos_id=marian.eos_token_id,
        src_lang=src_lang,
        tgt_lang=tgt_lang,
        activation=MARIAN_ACTIVATIONS[marian.activation_function],
        position_layout="concatenated",
        output_bias=True,
        target_tokens=target_tokens,
    )


def marian_name(ours: str) -> str:
    """MarianMTModel's name of one of our weights, e.g. decoder.0.cross_attn.w_q.weight ->
    model.decoder.layers.0.encoder_attn.q_proj.weight."""
    if ours == "embed.weight":
        return "model.shared.weight"
    if ours == "output_bias":
        return "final_logits_bias"
    stack, layer, rest = ours.split(".", 2)
    module, parameter = rest.rsplit(".", 1)
    return f"model.{stack}.layers.{layer}.{LAYER_PARTS[module]}.{parameter}"


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


def convert(
    folder: Path,
    out: Path,
    src_lang: str | None = None,
    tgt_langs: list[str] | None = None,
    language_token: str | None = None,
) -> Transformer:
    """Write out/model.pt and the tokenizer files of the MarianMTModel in `folder`; returns our model. A model with
    target-language tokens serves the languages of tgt_langs (model.convert.target_token)."""
    config_file = folder / "config.json"
    if not config_file.is_file() or json.loads(config_file.read_text()).get("model_type") != "marian":
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
    theirs = marian.state_dict()
    model = Transformer(cfg).eval()
    state = {name: theirs[marian_name(name)].reshape(like.shape) for name, like in model.state_dict().items()}
    if unknown := set(theirs) - {marian_name(name) for name in state} - TIED_OR_COMPUTED:
        raise ValueError(f"{folder} has weights that this converter does not know: {sorted(unknown)}")
    model.load_state_dict(state)
    model.output_bias[cfg.pad_id] = -torch.inf  # as transformers' generate bans <pad> (bad_words_ids)

    out.mkdir(parents=True, exist_ok=True)
    torch.save({"config": cfg.to_dict(), "model": model.state_dict()}, out / "model.pt")
    for name in MARIAN_FILES.values():
        shutil.copy(folder / name, out / name)
    return model


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folder", type=Path, help="a MarianMTModel folder: config.json, weights, source.spm, ...")
    p.add_argument("--out", type=Path, required=True, help="the model folder to write")
    p.add_argument("--src", help="source language code (default: tokenizer_config.json's source_lang)")
    p.add_argument("--tgt", nargs="+", help="target language code (default: tokenizer_config.json's target_lang); "
                   "a model with several target languages: each one to serve")
    p.add_argument("--target-token", help="a model with several target languages: the token of the one --tgt, "
                   "e.g. '>>cmn_Hans<<' (default: the token of --tgt's language, when there is exactly one)")
    args = p.parse_args(argv)
    try:
        model = convert(args.folder, args.out, args.src, args.tgt, args.target_token)
    except ValueError as e:
        p.exit(2, f"model.convert: {e}\n")
    print(f"{args.out / 'model.pt'}: {model.num_parameters():,} parameters, {model.cfg}")
    print(f"next: python -m export {args.out / 'model.pt'} --out {args.out}")


if __name__ == "__main__":
    main()

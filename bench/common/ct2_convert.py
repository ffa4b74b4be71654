"""Convert one of our checkpoints into a CTranslate2 model directory, through `ctranslate2.specs`.

    python -m bench.common.ct2_convert CHECKPOINT --spm SPM --out DIR [--quantization int8]

How our Transformer maps onto CTranslate2's TransformerSpec:
- one embedding matrix is the source embedding, the target embedding and the output projection (no bias);
  both stacks multiply it by sqrt(d_model) (`scale_embeddings`);
- the position table is ours, written out (`position_encodings.encodings`): CTranslate2's own sinusoids put
  all sines before all cosines, ours interleave them;
- post-LN (`pre_norm=False`: LayerNorm(x + sublayer(x)), no final norm) or pre-LN with a final LayerNorm,
  epsilon 1e-5 as torch's nn.LayerNorm;
- the feed-forward activation (relu, gelu, or silu: CTranslate2's SWISH), and the constant output bias of a
  converted Marian model (`projection.bias`, its -inf at <pad> included); the position table is written out
  whatever its layout;
- separate w_q, w_k, w_v are fused: [q;k;v] in self-attention, q and [k;v] in cross-attention;
- the vocabulary is the SentencePiece pieces in id order, so CTranslate2 token i is our id i; its
  unk/bos/eos tokens are the pieces at our unk/bos/eos ids, and it appends </s> to the source itself
  (`add_source_eos`) as our tokenizer pipeline does, so plain SentencePiece pieces (Argos Translate) work;
- the SentencePiece model is copied into the directory as `spm.model`, which makes it self-contained.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import ctranslate2
import numpy as np
import sentencepiece as spm
from ctranslate2.specs import common_spec, transformer_spec
from torch import nn

from bench.common.ct2_engine import CASE_TAG_TOKENS, SPM_FILE
from core.folder import ModelConfig
from model.checkpoint import load_model
from model.transformer import MultiHeadAttention, Residual, Transformer

LAYER_NORM_EPSILON = 1e-5  # torch.nn.LayerNorm's default, which our model uses


def array(tensor) -> np.ndarray:
    return tensor.detach().float().cpu().numpy()


def set_linear(spec: common_spec.LinearSpec, *layers: nn.Linear) -> None:
    """One linear layer, or several fused along the output dimension (their outputs concatenated)."""
    spec.weight = np.concatenate([array(layer.weight) for layer in layers])
    spec.bias = np.concatenate([array(layer.bias) for layer in layers])


def set_layer_norm(spec: common_spec.LayerNormSpec, norm: nn.LayerNorm) -> None:
    spec.gamma = array(norm.weight)
    spec.beta = array(norm.bias)


def set_attention(spec, attn: MultiHeadAttention, residual: Residual, self_attention: bool) -> None:
    if self_attention:
        set_linear(spec.linear[0], attn.w_q, attn.w_k, attn.w_v)
    else:
        set_linear(spec.linear[0], attn.w_q)
        set_linear(spec.linear[1], attn.w_k, attn.w_v)
    set_linear(spec.linear[-1], attn.w_o)
    set_layer_norm(spec.layer_norm, residual.norm)


def set_ffn(spec: transformer_spec.FeedForwardSpec, layer, residual: Residual) -> None:
    set_linear(spec.linear_0, layer.ffn.w_1)
    set_linear(spec.linear_1, layer.ffn.w_2)
    set_layer_norm(spec.layer_norm, residual.norm)


ACTIVATIONS = {"relu": common_spec.Activation.RELU, "gelu": common_spec.Activation.GELU,
               "silu": common_spec.Activation.SWISH}


def set_inputs(spec, embeddings: common_spec.EmbeddingsSpec, model: Transformer) -> None:
    """Shared embedding scaled by sqrt(d_model), plus our (interleaved) sinusoidal position table."""
    embeddings.weight = array(model.embed.weight)
    spec.scale_embeddings = math.sqrt(model.cfg.d_model)
    spec.position_encodings.encodings = array(model.positions)


def transformer_spec_of(model: Transformer) -> transformer_spec.TransformerSpec:
    """The CTranslate2 spec of our model, with every weight set."""
    cfg = model.cfg
    spec = transformer_spec.TransformerSpec.from_config(
        cfg.n_layers, cfg.n_heads, pre_norm=cfg.pre_norm, activation=ACTIVATIONS[cfg.activation]
    )
    set_inputs(spec.encoder, spec.encoder.embeddings[0], model)
    for layer_spec, layer in zip(spec.encoder.layer, model.encoder):
        set_attention(layer_spec.self_attention, layer.self_attn, layer.res_attn, self_attention=True)
        set_ffn(layer_spec.ffn, layer, layer.res_ffn)
    set_inputs(spec.decoder, spec.decoder.embeddings, model)
    for layer_spec, layer in zip(spec.decoder.layer, model.decoder):
        set_attention(layer_spec.self_attention, layer.self_attn, layer.res_self, self_attention=True)
        set_attention(layer_spec.attention, layer.cross_attn, layer.res_cross, self_attention=False)
        set_ffn(layer_spec.ffn, layer, layer.res_ffn)
    spec.decoder.projection.weight = array(model.embed.weight)  # tied output projection
    if model.output_bias is not None:
        spec.decoder.projection.bias = array(model.output_bias)
    if cfg.pre_norm:
        set_layer_norm(spec.encoder.layer_norm, model.encoder_norm)
        set_layer_norm(spec.decoder.layer_norm, model.decoder_norm)
    return spec


def vocabulary(spm_model: Path, case_tags: bool = False) -> list[str]:
    """The SentencePiece pieces in id order, then the case tags of a model that has them: CTranslate2's token i is
    our id i."""
    sp = spm.SentencePieceProcessor(model_file=str(spm_model))
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size())] + (CASE_TAG_TOKENS if case_tags else [])


def configure(spec: transformer_spec.TransformerSpec, cfg: ModelConfig, pieces: list[str]) -> None:
    """Special tokens by our ids, the source </s> appended by CTranslate2, our LayerNorm epsilon."""
    if len(pieces) != cfg.vocab_size:
        raise ValueError(f"the vocabulary has {len(pieces)} tokens, the checkpoint {cfg.vocab_size}")
    spec.config.unk_token = pieces[cfg.unk_id]
    spec.config.bos_token = pieces[cfg.bos_id]
    spec.config.eos_token = pieces[cfg.eos_id]
    spec.config.decoder_start_token = pieces[cfg.bos_id]
    spec.config.add_source_eos = True
    spec.config.layer_norm_epsilon = LAYER_NORM_EPSILON
    spec.register_source_vocabulary(pieces)
    spec.register_target_vocabulary(pieces)


class CheckpointConverter(ctranslate2.converters.Converter):
    """A CTranslate2 converter for our checkpoints (training checkpoints and the shipped model.pt)."""

    def __init__(self, checkpoint: Path, spm_model: Path):
        self.checkpoint = Path(checkpoint)
        self.spm_model = Path(spm_model)

    def _load(self) -> transformer_spec.TransformerSpec:
        model = load_model(self.checkpoint)
        spec = transformer_spec_of(model)
        configure(spec, model.cfg, vocabulary(self.spm_model, model.cfg.case_tags))
        spec.register_file(str(self.spm_model), SPM_FILE)
        return spec


def convert(checkpoint: Path, spm_model: Path, out: Path, quantization: str | None = None) -> Path:
    """Write the CTranslate2 model directory `out` (replacing it); returns it."""
    CheckpointConverter(checkpoint, spm_model).convert(str(out), quantization=quantization, force=True)
    return Path(out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("checkpoint", type=Path, help="our checkpoint or shipped model.pt")
    parser.add_argument("--spm", type=Path, required=True, help="its SentencePiece model")
    parser.add_argument("--out", type=Path, required=True, help="the CTranslate2 model directory to write")
    parser.add_argument("--quantization", default=None, help="CTranslate2 weight type: int8, float16, ...")
    args = parser.parse_args(argv)
    print(convert(args.checkpoint, args.spm, args.out, args.quantization))


if __name__ == "__main__":
    main()

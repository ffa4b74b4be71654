"""Argos Translate packages built without a download, as argos-train and LibreTranslate's Locomotive make them:
tests/test_argos.py checks our conversion on small ones, bench.offline.argos_model measures a full-size one.

OpenNMT-py's vocabulary of a SentencePiece model (<unk>, <blank>, <s>, </s>, then the pieces), a TransformerSpec
with random weights filled as ctranslate2's OpenNMT-py converter fills it (pre-norm by default, one embedding for
source, target and output, the generator's bias, OpenNMT-py's sinusoids stored), written by ctranslate2's own spec
writer (int8 weights by default) into an installed package's folder with its metadata.json, and zipped as an
.argosmodel.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import sentencepiece as spm
from ctranslate2.specs import common_spec, transformer_spec

SPECIALS = ["<unk>", "<blank>", "<s>", "</s>"]  # OpenNMT-py's, first in its vocabulary
METADATA = {"package_version": "1.0", "argos_version": "1.9.0", "from_code": "en", "from_name": "English",
            "to_code": "de", "to_name": "German"}
POSITIONS = 5000  # OpenNMT-py's position table


@dataclass(frozen=True)
class Shape:
    layers: int  # of the encoder, and of the decoder
    d_model: int
    heads: int
    d_ff: int


TINY = Shape(layers=2, d_model=32, heads=4, d_ff=64)  # the tests'
# Locomotive's train.py (onmt_config): enc_layers, dec_layers 6, heads 8, hidden_size 512, transformer_ff 2048
LOCOMOTIVE = Shape(layers=6, d_model=512, heads=8, d_ff=2048)


def opennmt_vocabulary(sentencepiece_model: Path) -> list[str]:
    """OpenNMT-py's vocabulary of the SentencePiece pieces: its special tokens, then the pieces in reverse (not in
    SentencePiece's order, as onmt_build_vocab counts them), two left out."""
    sp = spm.SentencePieceProcessor(model_file=str(sentencepiece_model))
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if not (sp.is_control(i) or sp.is_unknown(i))]
    return SPECIALS + pieces[::-1][:-2]


def opennmt_sinusoids(length: int, depth: int) -> np.ndarray:
    """OpenNMT-py's position table (onmt/modules/embeddings.py): sin and cos interleaved, positions from 0."""
    angles = np.arange(length, dtype=np.float32)[:, None] * np.exp(
        np.arange(0, depth, 2, dtype=np.float32) * -(np.log(np.float32(10000)) / depth)
    )
    return np.stack([np.sin(angles), np.cos(angles)], axis=-1).reshape(length, depth).astype(np.float32)


def random_spec(vocabulary: list[str], seed: int = 0, table: bool = True, separate_target_embedding: bool = False,
                end_bias: float = 1.5, shape: Shape = TINY, std: float = 0.8,
                **options) -> transformer_spec.TransformerSpec:
    """A TransformerSpec filled as ctranslate2's OpenNMT-py converter fills it, with random weights: projections at
    `std` (the tests' 0.8, large against small embeddings, makes translations depend on the source; else the decoder
    repeats a token whatever the source), `end_bias` added to the end token's output bias (positive: some
    translations end before the limit; very negative: none ever ends)."""
    rng = np.random.default_rng(seed)
    d_model = shape.d_model
    spec = transformer_spec.TransformerSpec.from_config(shape.layers, shape.heads, **options)

    def normal(*dims: int, std: float = std, mean: float = 0.0) -> np.ndarray:
        return (mean + std * rng.standard_normal(dims)).astype(np.float32)

    def linear(layer: common_spec.LinearSpec, rows: int, columns: int) -> None:
        layer.weight, layer.bias = normal(rows, columns), normal(rows)

    def norm(layer: common_spec.LayerNormSpec) -> None:
        layer.gamma, layer.beta = normal(d_model, std=0.1, mean=1.0), normal(d_model, std=0.1)

    embedding = normal(len(vocabulary), d_model, std=0.2)
    for stack in (spec.encoder, spec.decoder):
        if table:
            stack.position_encodings.encodings = opennmt_sinusoids(POSITIONS, d_model)
        if hasattr(stack, "layer_norm"):
            norm(stack.layer_norm)
        for layer in stack.layer:
            linear(layer.self_attention.linear[0], 3 * d_model, d_model)
            linear(layer.self_attention.linear[1], d_model, d_model)
            norm(layer.self_attention.layer_norm)
            if hasattr(layer, "attention"):
                linear(layer.attention.linear[0], d_model, d_model)
                linear(layer.attention.linear[1], 2 * d_model, d_model)
                linear(layer.attention.linear[2], d_model, d_model)
                norm(layer.attention.layer_norm)
            if hasattr(layer.self_attention, "relative_position_keys"):
                layer.self_attention.relative_position_keys = normal(41, d_model // shape.heads)
                layer.self_attention.relative_position_values = normal(41, d_model // shape.heads)
            linear(layer.ffn.linear_0, shape.d_ff, d_model)
            linear(layer.ffn.linear_1, d_model, shape.d_ff)
            norm(layer.ffn.layer_norm)
    spec.encoder.embeddings[0].weight = embedding
    spec.decoder.embeddings.weight = normal(*embedding.shape, std=0.2) if separate_target_embedding else embedding
    spec.decoder.projection.weight = spec.decoder.embeddings.weight
    spec.decoder.projection.bias = normal(len(vocabulary), std=0.3)
    spec.decoder.projection.bias[vocabulary.index("</s>")] += end_bias
    spec.register_source_vocabulary(vocabulary)
    spec.register_target_vocabulary(vocabulary)
    return spec


def write_package(folder: Path, spec: transformer_spec.TransformerSpec, sentencepiece_model: Path,
                  quantization: str | None = "int8", tokenizer_file: str = "sentencepiece.model",
                  **metadata) -> Path:
    """An installed package: metadata.json, model/ (as ctranslate2's Converter.convert saves a spec), and the
    tokenizer's model as tokenizer_file (sentencepiece.model; or bpe.model, subword-nmt's merges)."""
    folder.mkdir(parents=True)
    spec.validate()
    spec.optimize(quantization=quantization)
    (folder / "model").mkdir()
    spec.save(str(folder / "model"))
    shutil.copy(sentencepiece_model, folder / tokenizer_file)
    (folder / "metadata.json").write_text(json.dumps(METADATA | metadata))
    return folder


def zip_package(folder: Path) -> Path:
    """The .argosmodel of an installed package: a zip of its folder, as argos-train makes it."""
    archive = shutil.make_archive(str(folder.parent / folder.name), "zip", root_dir=folder.parent, base_dir=folder.name)
    return Path(archive).rename(folder.parent / f"{folder.name}.argosmodel")

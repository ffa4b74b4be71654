"""A CTranslate2 model directory read without ctranslate2, and the Transformer of ours that runs it.

    ct2 = read_model(Path("translate-en_de-1_9/model"))   # model.bin, config.json, the vocabularies
    model = to_transformer(ct2, "en", "de")                 # refuses, with the reasons, what ours cannot run

model.bin, as ctranslate2/specs/model_spec.py writes it (ModelSpec._serialize) and CTranslate2's
src/models/model.cc reads it, little-endian:
    u32 binary version (1 to 6)
    string spec name, u32 spec revision                  from binary version 2 (before: no name, revision 1)
    u32 count, then per variable:
        string name, u8 rank, u32 dimension × rank
        u8 type id (TYPES), u32 bytes                     from binary version 4 (before: u8 item size, u32 items)
        the values, row-major
    u32 count, then per alias: string name, string name of the variable it stands for    from binary version 3
A string is a u16 length (its closing NUL counted), its UTF-8 bytes and the NUL. A variable is a weight or an
attribute: a flag or a number (num_heads, pre_norm, activation, ...), or a string as int8 bytes. A quantized weight
has a `<name>_scale` beside it, one per output row (int8) or one for all (int16); CTranslate2 multiplies the
integers back by 1 / scale, as CTranslate2Model.weight does. Models of binary versions before 6 hold config.json's
tokens and flags as attributes (legacy_config).

How a TransformerSpec maps onto our Transformer (to_transformer):
- one embedding matrix is the source embedding, the target embedding and the output projection, scaled by
  sqrt(d_model) on both sides; the projection's bias, where it has one, is our output_bias;
- encoder and decoder alike: as many layers and heads, both pre-norm (a pre-norm stack ending in a LayerNorm) or
  both post-norm, one activation (relu, gelu, swish), LayerNorm epsilon 1e-5 (CTranslate2's when config.json
  sets none);
- positions: the table stored in model.bin (OpenNMT-py's sinusoids), or else the sinusoids CTranslate2 computes
  for a model without one ([sin | cos] of positions from 1), both kept as our position table ("table");
- fused projections are split: self-attention's [q; k; v], cross-attention's q and [k; v];
- special tokens by config.json: the decoder starts from decoder_start_token, sources take the bos and eos tokens
  as add_source_bos and add_source_eos say; <blank> or <pad> pads the sources; a decoder that starts from a zero
  embedding (start_from_zero_embedding: models converted from Marian, OPUS-MT's) starts from a <pad> appended to
  the vocabulary, with a zero embedding, never generated (zero_start);
- the vocabulary: one for both sides (shared_vocabulary, or equal source and target vocabularies), with the unknown
  token appended where it lacks one, as CTranslate2 does.
Anything else in model.bin (relative positions, source features, gated feed-forward layers, ...) is refused.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from core.folder import ModelConfig
from model.transformer import Transformer

BINARY_VERSION = 6  # the newest model.bin layout read here (CTranslate2 3.0 to 4.x)
SPEC_REVISION = 7  # the newest TransformerSpec naming read here (CTranslate2 4.x)
HEADS = {"": 8, "TransformerBase": 8, "TransformerBig": 16, "TransformerSpec": 8}  # spec names -> default heads
TYPES = [np.float32, np.int8, np.int16, np.int32, np.float16, "bfloat16"]  # model.bin's type ids, in order
ITEM_TYPES = {4: np.float32, 2: np.int16, 1: np.int8}  # before binary version 4 the item size said the type
ACTIVATIONS = {0: "relu", 2: "silu", 3: "gelu"}  # CTranslate2's (common_spec.Activation) -> ours
ACTIVATION_NAMES = {0: "relu", 1: "gelu (tanh)", 2: "swish", 3: "gelu", 4: "gelu (sigmoid)", 5: "tanh", 6: "sigmoid"}
LAYER_NORM_EPSILON = 1e-5  # ours (torch.nn.LayerNorm's), and CTranslate2's when config.json sets none
PAD_TOKENS = ("<blank>", "<pad>")  # OpenNMT's padding token, and fairseq's and Marian's
ZERO_START = "<pad>"  # the token appended for a decoder that starts from a zero embedding (zero_start)
GENERATED_POSITIONS = 1024  # rows of CTranslate2's own sinusoids kept: it reads sources of 1024 tokens at most
# Parts of variable names that ours has no place for, and what they are
UNKNOWN_PARTS = {
    "relative_position": "relative positions (OpenNMT-py's max_relative_positions): ours are absolute",
    "rotary": "rotary position embeddings: ours are absolute",
    "embeddings_1": "several source embeddings (source features)",
    "linear_0_noact": "gated feed-forward layers (GLU)",
    "layernorm_embedding": "a LayerNorm after the embeddings",
}
# Attributes that change nothing for a model of one source embedding translated without alignments
IGNORED = {"alignment_layer", "alignment_heads", "embeddings_merge", "alibi_use_positive_positions", "scale_alibi"}

# Our modules in encoder.{i} and decoder.{i} of each CTranslate2 scope in encoder/layer_{i} and decoder/layer_{i}; a
# fused projection is split into the modules listed, in order.
ENCODER_LAYER = {
    "self_attention/linear_0": ["self_attn.w_q", "self_attn.w_k", "self_attn.w_v"],
    "self_attention/linear_1": ["self_attn.w_o"],
    "self_attention/layer_norm": ["res_attn.norm"],
    "ffn/linear_0": ["ffn.w_1"],
    "ffn/linear_1": ["ffn.w_2"],
    "ffn/layer_norm": ["res_ffn.norm"],
}
DECODER_LAYER = {
    "self_attention/linear_0": ["self_attn.w_q", "self_attn.w_k", "self_attn.w_v"],
    "self_attention/linear_1": ["self_attn.w_o"],
    "self_attention/layer_norm": ["res_self.norm"],
    "attention/linear_0": ["cross_attn.w_q"],
    "attention/linear_1": ["cross_attn.w_k", "cross_attn.w_v"],
    "attention/linear_2": ["cross_attn.w_o"],
    "attention/layer_norm": ["res_cross.norm"],
    "ffn/linear_0": ["ffn.w_1"],
    "ffn/linear_1": ["ffn.w_2"],
    "ffn/layer_norm": ["res_ffn.norm"],
}


# --- model.bin ----------------------------------------------------------------------------------------------------


class BinaryReader:
    """model.bin's values, one after the other."""

    def __init__(self, data: bytes):
        self.data = memoryview(data)
        self.offset = 0

    def take(self, count: int) -> memoryview:
        if self.offset + count > len(self.data):
            raise ValueError(f"model.bin ends early: {count} bytes wanted at byte {self.offset} of {len(self.data)}")
        self.offset += count
        return self.data[self.offset - count : self.offset]

    def number(self, fmt: str) -> int:
        """One little-endian integer of struct's format fmt ("B", "H", "I")."""
        return struct.unpack("<" + fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        return bytes(self.take(self.number("H"))[:-1]).decode("utf-8")

    def array(self, dtype: type | str, shape: tuple[int, ...], size: int) -> np.ndarray:
        """`size` bytes of values; bfloat16 ones become float32 (the upper half of a float32's bits)."""
        raw = self.take(size)
        if dtype == "bfloat16":
            return (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32).reshape(shape)
        values = np.frombuffer(raw, dtype)
        if values.size != math.prod(shape):
            raise ValueError(f"model.bin: {size} bytes of {np.dtype(dtype).name} do not fill a {shape} array")
        return values.reshape(shape)


def v1_name(name: str) -> str:
    """A variable's name in revision 1, which kept OpenNMT-tf's names, as CTranslate2 maps it (map_v1_variable_name
    of src/models/transformer.cc: the first occurrence of each part replaced)."""
    for old, new in [("transformer/", ""), (":0", ""), ("w_embs", "embeddings/weight"), ("kernel", "weight"),
                     ("LayerNorm", "layer_norm"), ("dense", "projection"), ("conv1d_", "linear_"),
                     ("conv1d", "linear_0")]:
        name = name.replace(old, new, 1)
    if "encoder" in name:
        return name.replace("multi_head", "self_attention", 1)
    return name.replace("masked_multi_head", "self_attention", 1).replace("multi_head", "attention", 1)


def read_model_bin(path: Path) -> tuple[int, str, int, dict[str, np.ndarray], dict[str, str]]:
    """model.bin's binary version, spec name, spec revision, variables and aliases (name -> variable name)."""
    reader = BinaryReader(path.read_bytes())
    version = reader.number("I")
    if not 1 <= version <= BINARY_VERSION:
        raise ValueError(f"{path} has binary version {version}: this reader knows 1 to {BINARY_VERSION} "
                         "(a newer CTranslate2 wrote it, or it is no CTranslate2 model)")
    spec, revision = (reader.string(), reader.number("I")) if version >= 2 else ("", 1)
    rename = v1_name if revision == 1 else str
    variables = {}
    for _ in range(reader.number("I")):
        name = rename(reader.string())
        shape = tuple(reader.number("I") for _ in range(reader.number("B")))
        if version >= 4:
            dtype, size = TYPES[reader.number("B")], reader.number("I")
        else:
            item_size = reader.number("B")
            dtype, size = ITEM_TYPES[item_size], reader.number("I") * item_size
        variables[name] = reader.array(dtype, shape, size)
    aliases = {}
    for _ in range(reader.number("I") if version >= 3 else 0):
        alias = rename(reader.string())
        aliases[alias] = rename(reader.string())
    return version, spec, revision, variables, aliases


# --- the model directory ------------------------------------------------------------------------------------------


@dataclass
class CTranslate2Model:
    """A CTranslate2 model directory: model.bin's variables, config.json, the vocabularies.

    Every lookup notes the name looked up, so that to_transformer can refuse a model with variables it never read.
    """

    directory: Path
    binary_version: int
    spec: str
    revision: int
    variables: dict[str, np.ndarray]
    aliases: dict[str, str]
    config: dict = field(default_factory=dict)
    source_vocabulary: list[str] = field(default_factory=list)
    target_vocabulary: list[str] = field(default_factory=list)
    looked_up: set[str] = field(default_factory=set)

    def value(self, name: str) -> np.ndarray | None:
        """A variable as stored, through its alias; None if the model has none of that name."""
        self.looked_up.add(name)
        return self.variables.get(self.aliases.get(name, name))

    def has(self, name: str) -> bool:
        return self.aliases.get(name, name) in self.variables

    def attribute(self, name: str, default: int | float | None = None) -> int | float | None:
        """A scalar attribute (a flag or a number); `default` where the model has none."""
        value = self.value(name)
        return default if value is None else value.item()

    def stack_attribute(self, stack: str, name: str, default: int | float) -> int | float:
        """An attribute of the encoder or the decoder; before revision 5 one attribute held both (as CTranslate2's
        TransformerModel::initialize aliases them)."""
        value = self.attribute(f"{stack}/{name}")
        if value is None and self.revision < 5:
            value = self.attribute(name)
        return default if value is None else value

    def string(self, name: str, default: str) -> str:
        value = self.value(name)
        return default if value is None else value.tobytes().decode("utf-8")

    def weight(self, name: str) -> np.ndarray:
        """A weight in float32, dequantized as CTranslate2 does: integers times 1 / scale, per row or for all."""
        value = self.value(name)
        if value is None:
            raise ValueError(f"{self.directory / 'model.bin'} has no {name}: not a Transformer laid out as this "
                             "converter knows")
        scale = self.value(self.aliases.get(name, name) + "_scale")
        if scale is None:
            return value.astype(np.float32)
        inverse = np.float32(1) / scale.astype(np.float32)
        return value.astype(np.float32) * (inverse if inverse.ndim == 0 else inverse[:, None])

    def unread(self) -> list[str]:
        """The variables and aliases never looked up, but for those that change nothing here (IGNORED)."""
        names = set(self.variables) | set(self.aliases)
        return sorted(name for name in names - self.looked_up if name.rsplit("/", 1)[-1] not in IGNORED)


def legacy_config(ct2: CTranslate2Model) -> dict:
    """config.json's tokens and flags as attributes of model.bin, before binary version 6 (CTranslate2's
    SequenceToSequenceModel::initialize)."""
    bos, eos = ct2.string("bos_token", "<s>"), ct2.string("eos_token", "</s>")
    if ct2.attribute("user_decoder_start_tokens", 0):
        start = None
    else:
        start = bos if ct2.attribute("with_target_bos", 1) else eos
    return {
        "unk_token": ct2.string("unk_token", "<unk>"),
        "bos_token": bos,
        "eos_token": eos,
        "add_source_bos": bool(ct2.attribute("with_source_bos", 0)),
        "add_source_eos": bool(ct2.attribute("with_source_eos", 0)),
        "decoder_start_token": start,
    }


def read_vocabulary(directory: Path, name: str) -> list[str] | None:
    """<name>.json (a list of tokens) or <name>.txt (a token a line), as CTranslate2 looks for them; None if neither.
    A text file whose every line ends in a carriage return loses them."""
    if (directory / f"{name}.json").is_file():
        return json.loads((directory / f"{name}.json").read_text(encoding="utf-8"))
    if not (directory / f"{name}.txt").is_file():
        return None
    lines = (directory / f"{name}.txt").read_text(encoding="utf-8").split("\n")
    if lines[-1] == "":  # the newline that ends the last line
        lines.pop()
    if lines and all(line.endswith("\r") for line in lines):
        lines = [line[:-1] for line in lines]
    return lines


def read_model(directory: Path) -> CTranslate2Model:
    """The CTranslate2 model in `directory` (model.bin, config.json, shared_vocabulary or source and target
    vocabularies)."""
    if not (directory / "model.bin").is_file():
        raise ValueError(f"{directory} is not a CTranslate2 model directory: no model.bin")
    ct2 = CTranslate2Model(directory, *read_model_bin(directory / "model.bin"))
    if (directory / "config.json").is_file():
        ct2.config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    if ct2.binary_version < 6:
        ct2.config |= legacy_config(ct2)
    shared = read_vocabulary(directory, "shared_vocabulary")
    source = (shared or read_vocabulary(directory, "source_vocabulary")
              or read_vocabulary(directory, "source_1_vocabulary"))
    target = shared or read_vocabulary(directory, "target_vocabulary")
    if source is None or target is None:
        raise ValueError(f"{directory} has no vocabulary: neither shared_vocabulary nor source_vocabulary and "
                         "target_vocabulary (.json or .txt)")
    unk = ct2.config.get("unk_token", "<unk>")
    ct2.source_vocabulary, ct2.target_vocabulary = [tokens + [unk] * (unk not in tokens) for tokens in (source, target)]
    if zero_start(ct2) and ZERO_START not in ct2.target_vocabulary:
        ct2.source_vocabulary, ct2.target_vocabulary = (ct2.source_vocabulary + [ZERO_START],
                                                        ct2.target_vocabulary + [ZERO_START])
    return ct2


def zero_start(ct2: CTranslate2Model) -> bool:
    """Whether the decoder's first step reads a zero embedding whatever the start token (start_from_zero_embedding:
    CTranslate2's models converted from Marian, whose <pad> start token has a zero embedding). Ours starts from the
    token ZERO_START appended to the vocabulary (read_model) with a zero embedding and an output bias of -inf, so
    that it is never generated: the start and every other logit are CTranslate2's, as is Marian's own <pad>."""
    return bool(ct2.attribute("decoder/start_from_zero_embedding", 0))


# --- our Transformer ----------------------------------------------------------------------------------------------


def ctranslate2_sinusoids(length: int, depth: int) -> np.ndarray:
    """CTranslate2's own position encodings, for a model without a table (src/layers/common.cc): [sin | cos] of
    positions from 1 with tensor2tensor's timescales, in float32 as it computes them."""
    half = depth // 2
    increment = np.log(np.float32(10000)) / np.float32(half - 1)
    timescales = np.exp(-increment * np.arange(half, dtype=np.float32))
    angles = np.arange(1, length + 1, dtype=np.float32)[:, None] * timescales
    return np.concatenate([np.sin(angles), np.cos(angles)], axis=1)


def layer_count(ct2: CTranslate2Model, stack: str) -> int:
    names = set(ct2.variables) | set(ct2.aliases)
    return next(i for i in range(len(names) + 1) if not any(n.startswith(f"{stack}/layer_{i}/") for n in names))


def encoder_embedding(ct2: CTranslate2Model) -> str:
    """The encoder embedding's name: encoder/embeddings_0 (one per source input) since revision 2 of the spec."""
    return next((n for n in ("encoder/embeddings_0/weight", "encoder/embeddings/weight") if ct2.has(n)),
                "encoder/embeddings_0/weight")


def embedding_scale(ct2: CTranslate2Model, stack: str, d_model: int) -> float | None:
    """What a stack multiplies its embeddings by (src/layers/transformer.cc): scale_embeddings, a flag for sqrt(d)
    or the factor itself, or the older embeddings/multiply_by_sqrt_depth; sqrt(d) where neither is set; None: 1."""
    value = ct2.value(f"{stack}/scale_embeddings")
    if value is None:
        value = ct2.value(f"{stack}/embeddings/multiply_by_sqrt_depth")
    if value is None or (value.dtype == np.int8 and value.item()):
        return float(np.float32(math.sqrt(d_model)))
    if value.dtype != np.int8 and value.item() != 1:
        return value.item()
    return None


def same_weight(ct2: CTranslate2Model, a: str, b: str) -> bool:
    """Whether two weights are equal (one may be an alias of the other)."""
    return np.array_equal(ct2.weight(a), ct2.weight(b))


def position_table(ct2: CTranslate2Model, d_model: int) -> np.ndarray | None:
    """The positions of both stacks: model.bin's one table, or CTranslate2's sinusoids where neither stack has one;
    None where the stacks differ."""
    encoder, decoder = "encoder/position_encodings/encodings", "decoder/position_encodings/encodings"
    if not ct2.has(encoder) and not ct2.has(decoder):
        return ctranslate2_sinusoids(GENERATED_POSITIONS, d_model)
    if ct2.has(encoder) and ct2.has(decoder) and same_weight(ct2, encoder, decoder):
        return ct2.weight(decoder)
    return None


def unsupported(ct2: CTranslate2Model) -> list[str]:
    """Why our Transformer cannot run this CTranslate2 model as CTranslate2 runs it; empty if it can."""
    if ct2.spec not in HEADS:
        return [f"a {ct2.spec} model, not an encoder-decoder Transformer (TransformerSpec)"]
    if ct2.revision > SPEC_REVISION:
        return [f"TransformerSpec revision {ct2.revision}: this converter knows revisions up to {SPEC_REVISION} "
                "(a newer CTranslate2 wrote it)"]
    rows, d_model = ct2.weight("decoder/embeddings/weight").shape
    layers = {stack: layer_count(ct2, stack) for stack in ("encoder", "decoder")}
    heads = {stack: ct2.stack_attribute(stack, "num_heads", HEADS[ct2.spec]) for stack in layers}
    pre_norm = {stack: bool(ct2.stack_attribute(stack, "pre_norm", 1)) for stack in layers}
    activation = {stack: ct2.stack_attribute(stack, "activation", 0) for stack in layers}
    scales = {stack: embedding_scale(ct2, stack, d_model) for stack in layers}
    sqrt_d = float(np.float32(math.sqrt(d_model)))
    config = ct2.config
    vocabulary = ct2.target_vocabulary
    start, bos = config.get("decoder_start_token"), config.get("bos_token")
    epsilon = config.get("layer_norm_epsilon")
    missing = [token for token in (start, config.get("eos_token")) if token is not None and token not in vocabulary]
    checks = {
        f"an encoder of {layers['encoder']} layers and a decoder of {layers['decoder']}: ours has as many of each": (
            layers["encoder"] != layers["decoder"]
        ),
        f"{heads['encoder']} encoder heads and {heads['decoder']} decoder heads: ours has as many": (
            heads["encoder"] != heads["decoder"]
        ),
        f"{heads['decoder']} heads that do not divide d_model {d_model}": d_model % heads["decoder"] != 0,
        "a pre-norm stack and a post-norm one: ours are both alike": pre_norm["encoder"] != pre_norm["decoder"],
        "pre-norm stacks without their final LayerNorm: ours ends each with one": pre_norm["decoder"] and not (
            ct2.has("encoder/layer_norm/gamma") and ct2.has("decoder/layer_norm/gamma")
        ),
        f"activation {', '.join(sorted({ACTIVATION_NAMES.get(a, str(a)) for a in activation.values()}))}: ours are "
        "relu, gelu and swish, one for both stacks": (
            activation["encoder"] != activation["decoder"] or activation["decoder"] not in ACTIVATIONS
        ),
        f"embeddings scaled by {scales['encoder']} and {scales['decoder']} (None: not scaled): ours by "
        f"sqrt(d_model) = {sqrt_d:g}": scales["encoder"] != sqrt_d or scales["decoder"] != sqrt_d,
        "separate source and target vocabularies: ours shares one": ct2.source_vocabulary != vocabulary,
        f"a vocabulary of {len(vocabulary)} tokens for {rows} embeddings": len(vocabulary) != rows + zero_start(ct2),
        f"a zero embedding at the first decoder step (start_from_zero_embedding) and a {ZERO_START} token of its "
        "own": zero_start(ct2) and len(vocabulary) == rows,
        "separate source and target embeddings: ours shares one": not same_weight(
            ct2, encoder_embedding(ct2), "decoder/embeddings/weight"
        ),
        "an output projection of its own: ours is the shared embedding": not same_weight(
            ct2, "decoder/projection/weight", "decoder/embeddings/weight"
        ),
        "encoder and decoder positions that differ: ours shares one table": position_table(ct2, d_model) is None,
        "multi-query attention": bool(ct2.attribute("encoder/multi_query_attention", 0)),
        "ALiBi attention biases": bool(ct2.attribute("decoder/alibi", 0)),
        f"LayerNorm epsilon {epsilon}: ours is {LAYER_NORM_EPSILON}": epsilon not in (None, LAYER_NORM_EPSILON),
        f"weights quantized as {config.get('quantization_type')} (quantization_type)": bool(
            config.get("quantization_type")
        ),
        "no decoder start token (decoder_start_token null: the caller gives every translation's first token)": (
            start is None
        ),
        f"special tokens missing from the vocabulary: {', '.join(missing)}": bool(missing),
        f"sources that start with {bos!r}, not with the decoder start token {start!r}: ours start with that": (
            bool(config.get("add_source_bos")) and bos != start
        ),
        f"no padding token ({' or '.join(PAD_TOKENS)}) in the vocabulary": not set(PAD_TOKENS) & set(vocabulary),
    }
    return [reason for reason, applies in checks.items() if applies]


def model_config(ct2: CTranslate2Model, src_lang: str, tgt_lang: str) -> ModelConfig:
    """Our config of a CTranslate2 model that unsupported() lets through."""
    vocabulary, config = ct2.target_vocabulary, ct2.config
    embedding = ct2.weight("decoder/embeddings/weight")
    return ModelConfig(
        vocab_size=len(vocabulary),
        d_model=embedding.shape[1],
        n_heads=ct2.stack_attribute("decoder", "num_heads", HEADS[ct2.spec]),
        n_layers=layer_count(ct2, "decoder"),
        d_ff=ct2.weight("decoder/layer_0/ffn/linear_0/weight").shape[0],
        max_len=len(position_table(ct2, embedding.shape[1])),
        pre_norm=bool(ct2.stack_attribute("decoder", "pre_norm", 1)),
        activation=ACTIVATIONS[ct2.stack_attribute("decoder", "activation", 0)],
        position_layout="table",
        output_bias=ct2.has("decoder/projection/bias") or zero_start(ct2),
        pad_id=vocabulary.index(next(t for t in PAD_TOKENS if t in vocabulary)),
        unk_id=vocabulary.index(config.get("unk_token", "<unk>")),
        bos_id=len(vocabulary) - 1 if zero_start(ct2) else vocabulary.index(config["decoder_start_token"]),
        eos_id=vocabulary.index(config["eos_token"]),
        src_lang=src_lang,
        tgt_lang=tgt_lang,
        source_bos=bool(config.get("add_source_bos")),
        source_eos=bool(config.get("add_source_eos")),
    )


def module_weights(ct2: CTranslate2Model, scope: str, modules: list[str]) -> dict[str, np.ndarray]:
    """Our weights of the modules of one CTranslate2 layer norm or linear layer (split in as many parts as modules,
    along the output rows); a linear layer without a bias gets zeros."""
    if scope.endswith("layer_norm"):
        return {f"{modules[0]}.weight": ct2.weight(f"{scope}/gamma"), f"{modules[0]}.bias": ct2.weight(f"{scope}/beta")}
    weight = ct2.weight(f"{scope}/weight")
    bias = ct2.weight(f"{scope}/bias") if ct2.has(f"{scope}/bias") else np.zeros(len(weight), np.float32)
    parts = zip(modules, np.split(weight, len(modules)), np.split(bias, len(modules)))
    return {name: value for module, w, b in parts for name, value in ((f"{module}.weight", w), (f"{module}.bias", b))}


def state_dict(ct2: CTranslate2Model, cfg: ModelConfig) -> dict[str, np.ndarray]:
    """Our weights, by our names, of a CTranslate2 model."""
    embedding = ct2.weight("decoder/embeddings/weight")
    state = {"embed.weight": embedding, "positions": position_table(ct2, cfg.d_model)}
    if cfg.output_bias:
        has_bias = ct2.has("decoder/projection/bias")
        state["output_bias"] = ct2.weight("decoder/projection/bias") if has_bias else np.zeros(len(embedding),
                                                                                                 np.float32)
    if zero_start(ct2):  # ZERO_START's row: a zero embedding, never generated
        state["embed.weight"] = np.concatenate([embedding, np.zeros((1, cfg.d_model), np.float32)])
        state["output_bias"] = np.append(state["output_bias"], np.float32(-np.inf))
    for stack, parts in (("encoder", ENCODER_LAYER), ("decoder", DECODER_LAYER)):
        for i in range(cfg.n_layers):
            for scope, modules in parts.items():
                state |= module_weights(ct2, f"{stack}/layer_{i}/{scope}", [f"{stack}.{i}.{m}" for m in modules])
        if cfg.pre_norm:
            state |= module_weights(ct2, f"{stack}/layer_norm", [f"{stack}_norm"])
    return state


def to_transformer(ct2: CTranslate2Model, src_lang: str, tgt_lang: str) -> Transformer:
    """Our Transformer with the weights of a CTranslate2 model, in eval mode; a model that ours cannot run as
    CTranslate2 runs it is refused with the reasons (ValueError)."""
    where = ct2.directory
    if problems := unsupported(ct2):
        raise ValueError(f"{where} cannot be converted: it has " + "; ".join(problems))
    cfg = model_config(ct2, src_lang, tgt_lang)
    state = state_dict(ct2, cfg)
    if unread := ct2.unread():
        known = [reason for part, reason in UNKNOWN_PARTS.items() if any(part in name for name in unread)]
        raise ValueError(f"{where} cannot be converted: it has " + "; ".join(
            known or [f"variables that this converter does not know: {', '.join(unread[:10])}"]))
    model = Transformer(cfg).eval()
    ours = model.state_dict()
    for name, value in state.items():
        if value.shape != tuple(ours[name].shape):
            raise ValueError(f"{where} cannot be converted: its {name} is {value.shape}, where a Transformer of "
                             f"its size has {tuple(ours[name].shape)} (layers of different sizes?)")
    model.load_state_dict({name: torch.from_numpy(np.ascontiguousarray(value)) for name, value in state.items()})
    return model

"""The model folder's format, defined once: what `python -m export` writes and every reader loads.

    models/en-de/
        config.json       FolderConfig below: the pairs, the model's dimensions and special ids, the files
        spm.model         the tokenizer (core.tokenizer), or Marian's source.spm, target.spm and vocab.json, or
                          fairseq's sentencepiece.bpe.model (NLLB-200; and vocab.json: M2M100)
        encoder.onnx ...  one encoder and one decoder graph per precision
        model.pt          the PyTorch weights (training, evaluation and export read it; serving does not)

Torch-free and ONNX-Runtime-free, so that model/, export/ and service/ all read it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import onnx

CONFIG_FILE = "config.json"
OPSET = 23  # of the model's graphs (python -m export): the first with an Attention operator
IR_VERSION = 10  # ONNX Runtime 1.31 reads IR versions up to 13; onnx's helpers would write 14
# the NumPy types of the tensor types that ONNX Runtime names a graph's inputs by
NUMPY_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(int64)": np.int64,
               "tensor(bool)": np.bool_}
# The special tokens of our SentencePiece models; a converted Marian model has its own ids in ModelConfig.
PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3


class GraphIO:
    """The names of the graphs' inputs and outputs: export/graphs.py writes them, the engine binds them.

    encoder   SRC, SRC_MASK -> MEMORY, the cross-attention cache (cache_names(CROSS, layers))
    decoder   TOKENS, POSITIONS, WIDTH, SRC_MASK, the self- and cross-attention caches
              -> LOGITS, TOP_LOGP, TOP_TOKENS, the self-attention cache written (cache_names(NEW_SELF, layers))
    The caches are fp32, fp16 in an fp16 export (fp32_io); the other floats fp32 in every precision.
    """

    SRC, SRC_MASK, MEMORY = "src", "src_mask", "memory"
    TOKENS, POSITIONS, WIDTH = "tokens", "positions", "width"
    LOGITS, TOP_LOGP, TOP_TOKENS = "logits", "top_logp", "top_tokens"
    CROSS, SELF, NEW_SELF = "cross", "self", "new_self"  # the caches' prefixes


def pair_name(source: str, target: str) -> str:
    """A language pair's name, as folders, metrics, logs and the engine's routes say it: "en-de"."""
    return f"{source}-{target}"


def cache_names(prefix: str, n_layers: int) -> list[str]:
    """The names of a cache's tensors in graph order: prefix_k_0, prefix_v_0, prefix_k_1, ..."""
    return [f"{prefix}_{kv}_{layer}" for layer in range(n_layers) for kv in "kv"]


def fp32_io(graph: onnx.GraphProto) -> list[str]:
    """The inputs and outputs of a graph that its fp16 version keeps in fp32: all but the caches (cache_names'
    prefixes), which the engine keeps in the type the step reads, so that no step casts them."""
    caches = tuple(f"{prefix}_" for prefix in (GraphIO.CROSS, GraphIO.SELF, GraphIO.NEW_SELF))
    return [x.name for x in [*graph.input, *graph.output] if not x.name.startswith(caches)]


@dataclass
class ModelConfig:
    """The Transformer's dimensions and the ids of its special tokens."""

    vocab_size: int = 8000
    d_model: int = 512
    n_heads: int = 8
    n_layers: int = 6  # encoder layers; the decoder has as many
    d_ff: int = 2048
    dropout: float = 0.1
    max_len: int = 512  # longest sequence the positional table covers
    pre_norm: bool = False  # False: post-LN as in the paper; True: pre-LN (Xiong et al., 2020)
    activation: str = "relu"  # of the feed-forward layers: "relu" as in the paper, "gelu", or "silu" (swish)
    # of the sinusoids (model.transformer.sinusoidal_positions): "interleaved" as in the paper, "concatenated"
    # (Marian), "fairseq" (M2M100, NLLB-200); or "table": the model's own table, a weight of its model.pt (a
    # converted CTranslate2 model: model.ctranslate2_model)
    position_layout: str = "interleaved"
    output_bias: bool = False  # a constant added to the logits (Marian's final_logits_bias, with its bans)
    pad_id: int = PAD_ID
    unk_id: int = UNK_ID
    bos_id: int = BOS_ID
    eos_id: int = EOS_ID
    src_lang: str = "en"
    tgt_lang: str = "de"
    case_tags: bool = False  # sources read case-folded, each UPPER or Title Case word after a tag (core.tokenizer)
    # A Marian model that translates into several languages reads the token of the one wanted (">>fra<<") before
    # every source: the id of that token for each target language served. Empty for a model of one target (ours).
    target_tokens: dict[str, int] = field(default_factory=dict)
    # A many-to-many model (NLLB-200, M2M100) has a token per language: a source starts with its language's, and
    # decoding is forced to begin with the target's (forced_token). The id of each language served; src_lang and
    # tgt_lang are then "mul". Empty for other models.
    language_tokens: dict[str, int] = field(default_factory=dict)
    # Whether sources start with bos_id and end with eos_id: a converted CTranslate2 model says so (add_source_bos,
    # add_source_eos); OpenNMT-py's, as Argos Translate's, read their sources without either.
    source_bos: bool = False
    source_eos: bool = True
    # An Argos Translate package whose translations start with a target prefix (a token that CTranslate2 is given
    # as target_prefix, and Argos Translate drops): decoding is forced to begin with its id. None for other models.
    target_prefix: int | None = None

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> ModelConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names})

    @property
    def targets(self) -> list[str]:
        """The languages it translates into."""
        return list(self.language_tokens or self.target_tokens) or [self.tgt_lang]

    @property
    def pairs(self) -> list[tuple[str, str]]:
        """The (source, target) pairs it translates: every two of a many-to-many model's languages, else src_lang
        into each of targets."""
        if self.language_tokens:
            return [(source, target) for source in self.language_tokens for target in self.language_tokens
                    if source != target]
        return [(self.src_lang, target) for target in self.targets]

    def translates(self, source: str, target: str) -> bool:
        """Whether (source, target) is one of `pairs` (without listing them: NLLB-200 has 40,602)."""
        if self.language_tokens:
            return source != target and source in self.language_tokens and target in self.language_tokens
        return source == self.src_lang and target in self.targets

    def source_ids(
        self, token_ids: Sequence[Sequence[int]], source: str | None = None, target: str | None = None
    ) -> list[list[int]]:
        """What the encoder reads for a pair (by default src_lang into the first of targets): each sentence's token
        ids, cut to what the positions cover, and its </s>; after the source language's token in a many-to-many
        model, after the target language's in a multi-target Marian model; after <s> and without </s> where
        source_bos and source_eos say so."""
        source, target = source or self.src_lang, target or self.targets[0]
        if not self.translates(source, target):
            served = (f"between any two of {', '.join(self.language_tokens)}" if self.language_tokens
                      else f"{self.src_lang} into {', '.join(self.targets)}")
            raise ValueError(f"the model translates {served}, not {source} into {target}")
        if self.language_tokens:
            prefix = [self.language_tokens[source]]
        else:
            prefix = [self.target_tokens[target]] if self.target_tokens else []
        prefix, suffix = [self.bos_id] * self.source_bos + prefix, [self.eos_id] * self.source_eos
        return [[*prefix, *ids[: self.max_len - len(prefix) - len(suffix)], *suffix] for ids in token_ids]

    def forced_token(self, target: str | None) -> int | None:
        """The token that decoding is forced to begin with after bos_id (core.search.SearchOptions.forced_token): a
        many-to-many model's token of the target language asked for, as transformers' forced_bos_token_id, or a
        target prefix; None for other models."""
        if self.language_tokens:
            return self.language_tokens[target] if target else None
        return self.target_prefix


@dataclass
class FolderConfig:
    """config.json: the language pair (its name; the pairs of a multi-target or many-to-many model are
    ModelConfig.pairs), the model, and the folder's files."""

    model: ModelConfig
    tokenizer: str | dict[str, str]  # core.tokenizer.Layout
    graphs: dict[str, dict[str, str]]  # precision -> {"encoder": file, "decoder": file}
    opset: int = 0
    versions: dict[str, str] = field(default_factory=dict)  # of the libraries that wrote the graphs
    parameters: int = 0

    @property
    def source_language(self) -> str:
        return self.model.src_lang

    @property
    def target_language(self) -> str:
        return self.model.tgt_lang

    @property
    def name(self) -> str:
        return pair_name(self.source_language, self.target_language)

    @property
    def pairs(self) -> list[tuple[str, str]]:
        """The (source, target) pairs it serves (ModelConfig.pairs)."""
        return self.model.pairs

    def save(self, folder: Path) -> None:
        values = {"name": self.name, "source_language": self.source_language, "target_language": self.target_language}
        values |= dataclasses.asdict(self)
        (Path(folder) / CONFIG_FILE).write_text(json.dumps(values, indent=2) + "\n")

    @classmethod
    def load(cls, folder: Path) -> FolderConfig:
        path = Path(folder) / CONFIG_FILE
        if not path.is_file():
            raise FileNotFoundError(f"{folder} is not a model folder: no {CONFIG_FILE} (`python -m export` writes it)")
        values = json.loads(path.read_text())
        names = {f.name for f in dataclasses.fields(cls)}
        fields = {k: v for k, v in values.items() if k in names}
        return cls(**fields | {"model": ModelConfig.from_dict(values["model"])})


def is_model_folder(path: Path) -> bool:
    return (Path(path) / CONFIG_FILE).is_file()


def model_folders(path: Path) -> list[Path]:
    """`path` itself when it is a model folder, else the model folders directly in it (every pair is served)."""
    path = Path(path)
    if is_model_folder(path):
        return [path]
    folders = sorted(folder for folder in path.iterdir() if is_model_folder(folder)) if path.is_dir() else []
    if not folders:
        raise FileNotFoundError(f"no model folder (a folder with {CONFIG_FILE}, from `python -m export`) in {path}")
    return folders

"""Model configuration: the dimensions of the Transformer and the ids of its special tokens."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path


@dataclass
class ModelConfig:
    vocab_size: int = 8000
    d_model: int = 512
    n_heads: int = 8
    n_layers: int = 6  # encoder layers; the decoder has as many
    d_ff: int = 2048
    dropout: float = 0.1
    max_len: int = 512  # longest sequence the positional table covers
    pre_norm: bool = False  # False: post-LN as in the paper; True: pre-LN (Xiong et al., 2020)
    activation: str = "relu"  # of the feed-forward layers: "relu" as in the paper, "gelu", or "silu" (swish)
    position_layout: str = "interleaved"  # of the sinusoids: "interleaved" as in the paper, "concatenated" (Marian)
    output_bias: bool = False  # a constant added to the logits (Marian's final_logits_bias, with its bans)
    pad_id: int = 0
    unk_id: int = 1
    bos_id: int = 2
    eos_id: int = 3
    src_lang: str = "en"
    tgt_lang: str = "de"

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> ModelConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names})

    def save(self, path: Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: Path) -> ModelConfig:
        return cls.from_dict(json.loads(Path(path).read_text()))


# The paper's base model, and a small one sized for Multi30k + Tatoeba on a 2-core CPU:
# d_model 256 and 3+3 layers keep one training step under a second at 6k tokens per batch,
# while 4 heads of 64 dimensions keep the per-head size of the base model.
PRESETS: dict[str, dict] = {
    "base": dict(d_model=512, n_heads=8, n_layers=6, d_ff=2048, dropout=0.1),
    "small": dict(d_model=256, n_heads=4, n_layers=3, d_ff=1024, dropout=0.1),
    "tiny": dict(d_model=32, n_heads=2, n_layers=1, d_ff=64, dropout=0.0),  # for tests
}


def preset(name: str, **overrides) -> ModelConfig:
    return ModelConfig(**{**PRESETS[name], **overrides})

"""Model presets: the paper's base model and smaller ones. The configuration itself is core.folder.ModelConfig."""

from __future__ import annotations

from core.folder import ModelConfig

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

"""Saving, loading and averaging checkpoints."""

from __future__ import annotations

from pathlib import Path

import torch

from core.folder import ModelConfig
from model.transformer import Transformer


def load_model(path: Path, device: str = "cpu") -> Transformer:
    """A model in eval mode, in fp32, from a training checkpoint or a shipped model.pt."""
    state = torch.load(path, map_location=device, weights_only=False)
    model = Transformer(ModelConfig.from_dict(state["config"])).to(device)
    model.load_state_dict({k: v.float() for k, v in state["model"].items()})
    return model.eval()


def average_weights(paths: list[Path]) -> dict:
    """The element-wise mean of the weights of several checkpoints of one run; keeps the last one's config."""
    states = [torch.load(p, map_location="cpu", weights_only=False) for p in paths]
    mean = {k: sum(s["model"][k].double() for s in states) / len(states) for k in states[-1]["model"]}
    return {"config": states[-1]["config"], "model": {k: v.float() for k, v in mean.items()}}


def step_checkpoints(directory: Path) -> list[Path]:
    """The step checkpoints of a run, oldest first."""
    return sorted(Path(directory).glob("step_*.pt"))

"""model.package: the shipped model.pt is the mean of a run's last checkpoints, and of the --also ones."""

from __future__ import annotations

from pathlib import Path

import torch

from model.package import package


def save_step(folder: Path, step: int, value: float) -> Path:
    path = folder / f"step_{step:07d}.pt"
    torch.save({"config": {"step": step}, "model": {"w": torch.full((2,), value)}}, path)
    return path


def test_the_last_checkpoints_and_the_also_ones_are_averaged_in_fp16(tmp_path: Path):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "spm.model").write_bytes(b"spm")
    for step, value in [(100, 100.0), (200, 2.0), (300, 4.0)]:
        save_step(run / "checkpoints", step, value)
    start = save_step(tmp_path, 0, 6.0)  # the model the fine-tune started from

    used = package(run, tmp_path / "out", average=2, also=[start])

    state = torch.load(tmp_path / "out" / "model.pt", weights_only=False)
    assert [p.name for p in used] == ["step_0000000.pt", "step_0000200.pt", "step_0000300.pt"]
    assert state["model"]["w"].dtype == torch.float16 and state["model"]["w"].tolist() == [4.0, 4.0]
    assert state["config"] == {"step": 300}  # the run's newest
    assert (tmp_path / "out" / "spm.model").read_bytes() == b"spm"

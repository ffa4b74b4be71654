"""bench.offline.gpu on the CPU provider (no GPU here): every engine, beam and batch size gets a row with its figures,
and the reference engine's outputs are its own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.offline.gpu import main

pytestmark = [
    pytest.mark.filterwarnings("ignore:.*LeafSpec.*:FutureWarning"),
    pytest.mark.filterwarnings("ignore:.*axis name.*:UserWarning"),
]


def test_bench_gpu_runs_every_engine_on_the_cpu_provider(tiny_model_dir: Path, tmp_path: Path):
    argv = ["--model-dir", str(tiny_model_dir), "--batch-sizes", "1", "4", "--beams", "1", "2", "--sentences", "8",
            "--rounds", "1", "--threads", "1", "--out", str(tmp_path)]
    result = main(argv)
    assert result["device"] == "cpu"
    rows = {(r["engine"], r["beam"], r["batch_size"]): r for r in result["summary"]}
    engines = {"ort-cpu-fp32", "ort-cpu-fp16", "pytorch-cpu"}
    assert set(rows) == {(e, beam, batch) for e in engines for beam in (1, 2) for batch in (1, 4)}
    assert all(r["sentences_per_s"] > 0 for r in rows.values())
    assert all(r["ms_per_step"] > 0 for (e, *_), r in rows.items() if e.startswith("ort"))
    assert all(r["same_as_cpu"] == 1.0 for (e, *_), r in rows.items() if e == "ort-cpu-fp32")
    assert all(r["same_as_cpu"] >= 0.5 for (e, *_), r in rows.items() if e == "pytorch-cpu")  # the same model
    assert json.loads((tmp_path / "gpu.json").read_text())["summary"] == result["summary"]
    assert "ort-cpu-fp16" in (tmp_path / "gpu.md").read_text()

"""bench.offline.gpu on the CPU provider (no GPU here): every engine, beam and batch size gets a row with its figures,
and the reference engine's outputs are its own. Its --check exits 2 without a GPU, and its code runs here on the CPU
provider. bench.offline.gpu_kernels exits 2 without a GPU too; what it reads from a profiler's trace is checked on a
trace of our own."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto
from onnxruntime.transformers.float16 import convert_float_to_float16

from bench.common.defaults import REPO
from bench.offline import gpu_check, gpu_kernels
from bench.offline.gpu import main, parse_args
from core.folder import FolderConfig
from service.settings import Settings

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


def test_check_without_a_gpu_says_so_in_one_line_and_exits_2(tiny_model_dir: Path):
    done = subprocess.run([sys.executable, "-m", "bench.offline.gpu", "--check", "--model-dir", str(tiny_model_dir)],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert (done.stdout + done.stderr).splitlines() == [
        "bench.offline.gpu --check needs a GPU: CUDA is not usable here, ONNX Runtime runs on CPUExecutionProvider"]


def test_check_runs_every_part_on_the_cpu_provider(tiny_model_dir: Path, tmp_path: Path):
    """--check's code on the CPU provider (what a GPU adds is the provider): the contract, where each session's nodes
    ran, every bucket with TRANSLATOR_CUDA_GRAPHS's step (uncaptured here) beside the eager one, and the goals; one
    report."""
    argv = ["--check", "--model-dir", str(tiny_model_dir), "--sentences", "8", "--threads", "1", "--max-rows", "4",
            "--max-slots", "16", "--out", str(tmp_path)]
    result = gpu_check.check(parse_args(argv), argv, gpu_check.CPU)
    assert [c["graph"] for c in result["contract"]] == [
        "encoder fp32", "decoder fp32", "encoder fp16", "decoder fp16",
        *[f"{part} {p} (service-built)" for p in ("fp32", "fp16") for part in ("select", "join", "fit")]]
    assert all(c["missing"] == c["missing_optimized"] == c["shape_nodes"] == [] for c in result["contract"])
    assert all(s["nodes"] > 0 and s["off_provider"] == s["copies"] == [] for s in result["sessions"])
    assert {(s["precision"], s["rows"], s["slots"]) for s in result["steps"]} == {
        (p, rows, slots) for p in ("fp32", "fp16") for rows in (1, 4) for slots in (8, 16)}
    for step in result["steps"]:
        graphed = step["captured_vs_eager"]
        assert step["fixed_step"]["off_provider"] == [] and not graphed["captured"]
        assert step["service_ms_per_step"] > 0 and step["fixed_ms_per_reorder"] > 0 and graphed["ms_per_step"] > 0
        assert graphed["top1_same_as_eager"] == 1.0
        encoder = step["encoder_captured_vs_eager"]  # the bucket's sentences padded to 16 tokens, as the eager's
        assert not encoder["captured"] and encoder["ms_per_run"] > 0 and encoder["eager_ms_per_run"] > 0
        tolerance = 1e-5 if step["precision"] == "fp32" else gpu_check.ENCODER_TOLERANCE
        assert encoder["max_abs_diff_vs_eager"] <= tolerance
        if step["precision"] == "fp32":
            assert step["service_top1_same_as_cpu"] == step["fixed_top1_same_as_cpu"] == 1.0
            assert graphed["top1_same_as_cpu"] == 1.0
    assert {(g["goal"].split(":")[0].split(" (")[0], g["engine"]) for g in result["goals"]} == {
        (goal, f"ort-cpu-{p}") for goal in ("greedy, batch 1", "greedy, best batch", "beam 4, batch 64",
                                            "outputs identical to the CPU's, every run") for p in ("fp32", "fp16")}
    assert all(r["sentences_per_s"] > 0 and r["first_pass_sentences_per_s"] > 0 and r["steps"] > 0
               and r["ms_outside_steps_per_sentence"] > 0 for r in result["runs"])
    # every part ran; on the CPU provider nothing is off it, and nothing is captured
    assert result["errors"] == {}
    assert [v["met"] for v in result["verdicts"][:8]] == [True] * 6 + [False, False]
    assert len(result["verdicts"]) == 8 + len(result["goals"])
    assert json.loads((tmp_path / "gpu-check.json").read_text())["goals"] == result["goals"]
    assert "not captured (CPU provider)" in (tmp_path / "gpu-check.md").read_text()


def test_check_reports_a_part_that_fails_and_runs_the_others(tiny_model_dir: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch):
    """A part that raises (as one may on a GPU met for the first time) is in the report with its error, its checks
    are not met, and the other parts' figures are there."""

    def refused(*args, **kwargs):
        raise RuntimeError("no kernel for this node")

    monkeypatch.setattr(gpu_check, "session_placement", refused)
    argv = ["--check", "--model-dir", str(tiny_model_dir), "--sentences", "4", "--threads", "1", "--max-rows", "1",
            "--max-slots", "8", "--out", str(tmp_path)]
    result = gpu_check.check(parse_args(argv), argv, gpu_check.CPU)
    assert list(result["errors"]) == ["2, 3: sessions and buckets"]
    assert "RuntimeError: no kernel for this node" in result["errors"]["2, 3: sessions and buckets"]
    assert "steps" not in result and result["contract"] and result["goals"]
    met = {v["check"]: v["met"] for v in result["verdicts"]}
    assert not met["every part of the check ran to its end"]
    assert not met["the service's sessions: no node off the GPU, no copies"]
    assert met["every node of every graph has a CUDA kernel, as exported and optimized"]
    report = (tmp_path / "gpu-check.md").read_text()
    assert "## Part 2, 3: sessions and buckets: failed" in report and "## 4. Goals" in report


def test_the_goals_run_a_cuda_graph_translator_for_each_most_rows_asked_for(tiny_model_dir: Path, monkeypatch):
    """--graphs-max-rows 256 4096: on a GPU, the goal runs' CUDA-graph translators are one per precision and value,
    named by it; the eager ones as ever."""
    asked = {}
    monkeypatch.setattr(gpu_check, "translator_runs", lambda name, translator, *args: asked.update({name: translator})
                        or [])
    sources = [[5, 6, 2], [7, 2]]
    gpu_check.goal_runs(tiny_model_dir, "cuda", 1, sources, {}, [256, 4096])
    assert asked == {"ort-cuda-fp32": ("fp32", None), "ort-cuda-fp16": ("fp16", None),
                     "ort-cuda-fp32-graphs-rows256": ("fp32", 256), "ort-cuda-fp16-graphs-rows256": ("fp16", 256),
                     "ort-cuda-fp32-graphs-rows4096": ("fp32", 4096), "ort-cuda-fp16-graphs-rows4096": ("fp16", 4096)}
    asked.clear()
    gpu_check.goal_runs(tiny_model_dir, "cuda", 1, sources, {}, [256])
    assert set(asked) == {"ort-cuda-fp32", "ort-cuda-fp16", "ort-cuda-fp32-graphs", "ort-cuda-fp16-graphs"}


def test_buckets_span_the_engines_rows_and_cache_slots():
    assert gpu_check.by_fours(1, 576) == [1, 4, 16, 64, 256, 576]
    assert gpu_check.buckets(4, 512, 250)[-1] == gpu_check.Bucket(rows=4, slots=512, source=250)
    assert gpu_check.engine_max_rows(Settings(max_batch_sentences=64, max_beam_size=8)) == 72 * 8


def test_gpu_kernels_without_a_gpu_says_so_in_one_line_and_exits_2(tiny_model_dir: Path):
    done = subprocess.run([sys.executable, "-m", "bench.offline.gpu_kernels", "--model-dir", str(tiny_model_dir)],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert (done.stdout + done.stderr).splitlines() == [
        "bench.offline.gpu_kernels needs a GPU: CUDA is not usable here, ONNX Runtime runs on CPUExecutionProvider"]


def test_gpu_kernels_reads_the_busy_time_per_step_from_a_trace():
    """Overlapping kernels count once, gaps not at all; copies are the GPU's work too; the host's events are not."""
    assert gpu_kernels.busy_seconds([(0.0, 2.0), (1.0, 3.0), (5.0, 6.0), (5.5, 5.7)]) == 4.0
    events = [
        {"cat": "kernel", "name": "gemm", "ts": 0.0, "dur": 400.0},
        {"cat": "kernel", "name": "softmax", "ts": 300.0, "dur": 200.0},  # overlaps the gemm by 100 µs
        {"cat": "gpu_memcpy", "name": "Memcpy DtoH", "ts": 1000.0, "dur": 100.0},
        {"cat": "kernel", "name": "gemm", "ts": 2000.0, "dur": 400.0},
        {"cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 0.0, "dur": 5000.0},  # the host's, left out
    ]
    work = gpu_kernels.device_work(events, steps=2, seconds=0.005)
    assert work["busy_ms_per_step"] == pytest.approx(1.0 / 2)  # 500 + 100 + 400 µs busy, over 2 steps
    assert work["busy_share"] == pytest.approx(1.0 / 5)
    assert work["ms_per_step"] == pytest.approx(2.5)
    assert (work["kernels_per_step"], work["copies_per_step"]) == (1.5, 0.5)
    assert [(t["name"], t["per_step"], t["us_each"]) for t in work["top"]] == [
        ("gemm", 1.0, 400.0), ("softmax", 0.5, 200.0), ("Memcpy DtoH", 0.5, 100.0)]
    assert gpu_kernels.run_shape("4x64") == (4, 64)


def test_the_check_reads_each_folders_cache_type_as_the_service_does(tiny_fp16_dir: Path, tmp_path: Path):
    """fp32 caches in an fp32 step, fp16 in an fp16 export's, fp32 in an fp16 step exported before the caches were
    (its inputs and outputs all fp32): the check builds its cache graphs for the type the step reads."""
    graphs = FolderConfig.load(tiny_fp16_dir).graphs
    fp32 = tiny_fp16_dir / graphs["fp32"]["decoder"]
    assert gpu_check.cache_tensor_type(fp32) == TensorProto.FLOAT
    assert gpu_check.cache_tensor_type(tiny_fp16_dir / graphs["fp16"]["decoder"]) == TensorProto.FLOAT16
    onnx.save(convert_float_to_float16(str(fp32), keep_io_types=True), str(tmp_path / "older.onnx"))
    assert gpu_check.cache_tensor_type(tmp_path / "older.onnx") == TensorProto.FLOAT

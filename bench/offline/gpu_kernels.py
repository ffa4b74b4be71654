"""Where a translation's time goes on the GPU: every kernel and copy of the run, read through CUPTI (torch.profiler,
in this process), against the run's wall time.

    python -m bench.offline.gpu_kernels [--model-dir models/en-de] [--precision fp32] [--runs 1x1 1x1024 4x64]
                                        [--sentences 1000] [--threads N] [--out bench/results]

Each run (beam x batch size; at batch 1 every SHORT_RUN-th sentence) with the eager decoder and with
TRANSLATOR_CUDA_GRAPHS (its settings from the environment): one untimed pass (every shape met, every graph
captured), then one under the profiler. Per decoder step: the run's wall time (the encoder included), the time the
GPU ran at least one kernel or copy, and the share of the wall time that is; kernels and copies; and the kernels
that took the most time. A busy share well under 1 means the host, not the GPU, bounds the step. Needs a GPU and
torch with CUDA (for CUPTI); without them it says so in one line and exits 2. Writes gpu-kernels.json and .md.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from bench.common.cli import command_line, settings_of
from bench.common.defaults import MODEL_DIR, RESULTS
from bench.common.gpu import Engine, exit_without_gpu, gpu_environment, ort_engine, with_fp16
from bench.common.report import markdown_table, write_results
from core.corpus import load_test_set
from core.folder import FolderConfig
from core.search import SearchOptions
from core.tokenizer import load_tokenizer
from core.translate import source_ids

SHORT_RUN = 20  # batch 1 translates every this-many-th sentence
TOP = 10  # the kernels listed per run
DEVICE_WORK = ("kernel", "gpu_memcpy", "gpu_memset")  # the trace's categories of what the GPU ran


def busy_seconds(intervals: list[tuple[float, float]]) -> float:
    """The length of the union of (start, end) intervals: how long at least one of them ran."""
    busy, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop > end:
            busy += stop - max(start, end)
            end = stop
    return busy


def device_work(events: list[dict], steps: int, seconds: float) -> dict:
    """Per decoder step, what the GPU ran in a run of `steps` steps and `seconds` seconds, from the events of
    torch.profiler's Chrome trace (times in µs)."""
    work = [e for e in events if e.get("cat") in DEVICE_WORK]
    kernels = sum(e["cat"] == "kernel" for e in work)
    busy = busy_seconds([(e["ts"] / 1e6, (e["ts"] + e["dur"]) / 1e6) for e in work])
    by_name: dict[str, list[float]] = {}
    for e in work:
        count_and_us = by_name.setdefault(e["name"], [0, 0.0])
        count_and_us[0] += 1
        count_and_us[1] += e["dur"]
    top = sorted(by_name.items(), key=lambda item: -item[1][1])[:TOP]
    return {
        "ms_per_step": 1000 * seconds / steps, "busy_ms_per_step": 1000 * busy / steps, "busy_share": busy / seconds,
        "kernels_per_step": kernels / steps, "copies_per_step": (len(work) - kernels) / steps,
        "top": [{"name": name, "per_step": count / steps, "us_each": us / count} for name, (count, us) in top],
    }


def profiled_run(engine: Engine, sources: list[list[int]], beam: int, batch_size: int) -> dict:
    """One untimed pass, then device_work of a pass under the profiler."""
    from torch.profiler import ProfilerActivity, profile

    opts = SearchOptions(beam_size=beam)
    engine(sources, opts, batch_size)
    with profile(activities=[ProfilerActivity.CUDA]) as profiler:
        _, seconds, steps, _ = engine(sources, opts, batch_size)
    with tempfile.TemporaryDirectory(prefix="bench-gpu-kernels-") as scratch:
        trace = Path(scratch) / "trace.json"
        profiler.export_chrome_trace(str(trace))
        events = json.loads(trace.read_text())["traceEvents"]
    return device_work(events, steps, seconds)


def run_shape(text: str) -> tuple[int, int]:
    """'4x64' -> (beam 4, batch size 64)."""
    beam, batch_size = text.lower().split("x")
    return int(beam), int(batch_size)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", type=Path, default=MODEL_DIR)
    p.add_argument("--precision", default="fp32", choices=["fp32", "fp16"])
    p.add_argument("--runs", type=run_shape, nargs="+", default=[(1, 1), (1, 1024), (4, 64)],
                   help="beam x batch size of each run")
    p.add_argument("--sentences", type=int, default=1000, help="test sentences (test_2016_flickr has 1000)")
    p.add_argument("--threads", type=int, default=0, help="ONNX Runtime's CPU threads")
    p.add_argument("--out", type=Path, default=RESULTS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    exit_without_gpu("bench.offline.gpu_kernels", profiler=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-gpu-kernels-") as scratch:
        folder = with_fp16(args.model_dir, Path(scratch)) if args.precision == "fp16" else args.model_dir
        config = FolderConfig.load(folder)
        texts, _ = load_test_set()
        tokenizer = load_tokenizer(folder, config.tokenizer, config.model.case_tags)
        sources = sorted(source_ids(tokenizer, config.model, texts[: args.sentences]), key=len)
        for cuda_graphs in (False, True):
            engine = ort_engine(folder, args.precision, "cuda", args.threads, cuda_graphs)[0]
            for beam, batch_size in args.runs:
                run = sources[::SHORT_RUN] if batch_size == 1 else sources
                rows.append({"decoder": "CUDA graphs" if cuda_graphs else "eager", "beam": beam,
                             "batch_size": batch_size, "sentences": len(run),
                             **profiled_run(engine, run, beam, batch_size)})
                print(json.dumps({k: v for k, v in rows[-1].items() if k != "top"}), flush=True)
    result = {"command": command_line("bench.offline.gpu_kernels", argv), "environment": gpu_environment(),
              "settings": settings_of(args), "runs": rows}
    for path in write_results(args.out, "gpu-kernels", result, markdown(result)):
        print(path)
    return result


def markdown(result: dict) -> str:
    lines = [
        "# Where a translation's time goes on the GPU (bench.offline.gpu_kernels)\n",
        f"`{result['command']}`; {result['environment'].get('gpu')}\n",
        markdown_table(["decoder", "beam", "batch", "sentences", "ms a step (wall)", "GPU busy, ms a step",
                        "busy share", "kernels a step", "copies a step"],
                       [[r["decoder"], r["beam"], r["batch_size"], r["sentences"], f"{r['ms_per_step']:.3f}",
                         f"{r['busy_ms_per_step']:.3f}", f"{100 * r['busy_share']:.0f} %",
                         f"{r['kernels_per_step']:.1f}", f"{r['copies_per_step']:.1f}"] for r in result["runs"]]),
    ]
    for r in result["runs"]:
        lines += [f"## {r['decoder']}, beam {r['beam']}, batch {r['batch_size']}: the largest kernels\n",
                  markdown_table(["kernel or copy", "a step", "µs each"],
                                 [[t["name"][:100], f"{t['per_step']:.1f}", f"{t['us_each']:.2f}"]
                                  for t in r["top"]])]
    return "\n".join(lines)


if __name__ == "__main__":
    main()

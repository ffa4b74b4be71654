"""Offline decoding on the GPU, or on the CPU provider where there is none: the GPU's figures in one command.

    python -m bench.offline.gpu [--model-dir models/en-de] [--batch-sizes 1 16 64 256 1024] [--beams 1 4]
                                [--sentences 1024] [--rounds 3] [--threads N] [--out bench/results]
    python -m bench.offline.gpu --check [--max-rows N] [--max-slots N]   (bench.offline.gpu_check: GPU only)

Engines, in this process, each translating the same first --sentences test sentences (sorted by length, cut into
batches of the batch size, each batch one running batch):
    ort-DEVICE-fp32, ort-DEVICE-fp16  service.translator.Translator on the CUDA provider (DEVICE cuda), or on the CPU
                                      provider where CUDA is not usable (DEVICE cpu)
    ort-cpu-fp32                      the reference: ONNX Runtime on the CPU (only once when DEVICE is cpu)
    pytorch-DEVICE                    model.decode's KV-cached decoder, on CUDA when torch sees a GPU
The fp16 graphs are exported from MODEL_DIR/model.pt into a temporary copy of the folder when it has none (that
needs the export's dependencies, onnxscript among them; elsewhere export them first:
`python -m export MODEL_DIR/model.pt --out FOLDER --variants fp32 fp16`, and pass --model-dir FOLDER).
Per engine, beam and batch size: sentences/s, milliseconds per decoder step (the ONNX Runtime engines: the time
after encoding over the steps, search included) and the share of outputs identical to ort-cpu-fp32's. Each round
goes through every engine once per row, one untimed batch first; medians over the rounds. Writes gpu.json and
gpu.md under --out.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from bench.common.cli import command_line, settings_of
from bench.common.defaults import MODEL_DIR, RESULTS, THREADS
from bench.common.gpu import Engine, Run, gpu_environment, ort_engine, with_fp16
from bench.common.report import markdown_table, median, write_results
from bench.common.sentences import batches
from bench.common.timing import rotation
from core.corpus import load_test_set
from core.folder import FolderConfig
from core.search import SearchOptions
from core.tokenizer import load_tokenizer
from core.translate import source_ids

BATCH_SIZES = [1, 16, 64, 256, 1024]


def pytorch_engine(folder: Path, device: str, threads: int) -> Engine:
    import torch

    from model.checkpoint import load_model
    from model.decode import translate_ids

    torch.set_num_threads(threads)
    model = load_model(folder / "model.pt").to(device).eval()

    def run(sources: list[list[int]], opts: SearchOptions, batch_size: int) -> Run:
        started, outputs = time.perf_counter(), []
        for batch in batches(sources, batch_size):
            outputs += [h[0].tokens for h in translate_ids(model, batch, opts)]
        if device == "cuda":
            torch.cuda.synchronize()
        return outputs, time.perf_counter() - started, 0, 0.0

    return run


def load_engines(folder: Path, threads: int) -> tuple[dict[str, Engine], str]:
    """Every engine of the module's docstring, and DEVICE."""
    import torch

    auto, provider = ort_engine(folder, "fp32", "auto", threads)
    device = "cuda" if provider == "CUDAExecutionProvider" else "cpu"
    engines = {"ort-cpu-fp32": auto if device == "cpu" else ort_engine(folder, "fp32", "cpu", threads)[0]}
    if device == "cuda":
        engines["ort-cuda-fp32"] = auto
    engines[f"ort-{device}-fp16"] = ort_engine(folder, "fp16", device, threads)[0]
    torch_device = "cuda" if torch.cuda.is_available() else "cpu"
    engines[f"pytorch-{torch_device}"] = pytorch_engine(folder, torch_device, threads)
    return engines, device


def measure(engines: dict[str, Engine], sources: list[list[int]], args: argparse.Namespace) -> list[dict]:
    runs = []
    for round_ in range(args.rounds):
        for beam in args.beams:
            for batch_size in args.batch_sizes:
                opts = SearchOptions(beam_size=beam)
                for name in rotation(list(engines), round_):
                    engines[name](sources[:batch_size], opts, batch_size)  # untimed: kernels, arenas
                    outputs, seconds, steps, step_seconds = engines[name](sources, opts, batch_size)
                    runs.append({"round": round_, "engine": name, "beam": beam, "batch_size": batch_size,
                                 "seconds": seconds, "steps": steps, "step_seconds": step_seconds,
                                 "outputs": outputs})
    return runs


def summarize(runs: list[dict], sentences: int) -> list[dict]:
    reference = {(r["beam"], r["batch_size"]): r["outputs"] for r in runs
                 if r["engine"] == "ort-cpu-fp32" and r["round"] == 0}
    rows = []
    for key in dict.fromkeys((r["engine"], r["beam"], r["batch_size"]) for r in runs):
        mine = [r for r in runs if (r["engine"], r["beam"], r["batch_size"]) == key]
        engine, beam, batch_size = key
        first, expected = mine[0]["outputs"], reference[(beam, batch_size)]
        rows.append({
            "engine": engine, "beam": beam, "batch_size": batch_size,
            "sentences_per_s": median([sentences / r["seconds"] for r in mine]),
            "ms_per_step": median([1000 * r["step_seconds"] / r["steps"] for r in mine]) if mine[0]["steps"] else None,
            "same_as_cpu": sum(a == b for a, b in zip(first, expected)) / len(expected),
        })
    return rows


def markdown(result: dict) -> str:
    header = ["engine", "beam", "batch", "sentences/s", "ms per step", "same output as ort-cpu-fp32"]
    rows = [[r["engine"], r["beam"], r["batch_size"], r["sentences_per_s"],
             "—" if r["ms_per_step"] is None else f"{r['ms_per_step']:.2f}", f"{100 * r['same_as_cpu']:.1f} %"]
            for r in result["summary"]]
    env = result["environment"]
    intro = (f"`{result['command']}`\n\nDevice: {result['device']} ({env.get('gpu') or env['cpu']}); "
             f"{result['sentences']} test sentences; medians over rounds: {result['settings']['rounds']}.\n\n")
    return intro + markdown_table(header, rows)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", type=Path, default=MODEL_DIR)
    p.add_argument("--batch-sizes", type=int, nargs="+", default=BATCH_SIZES)
    p.add_argument("--beams", type=int, nargs="+", default=[1, 4])
    p.add_argument("--sentences", type=int, default=1024, help="test sentences (test_2016_flickr has 1000)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=THREADS, help="ONNX Runtime and PyTorch CPU threads")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--check", action="store_true",
                   help="instead: the GPU path's checks and goals (bench.offline.gpu_check); exits 2 without a GPU")
    p.add_argument("--max-rows", type=int, help="--check: the most decoder rows of a bucket (default: the engine's)")
    p.add_argument("--max-slots", type=int, help="--check: the most cache slots of a bucket (default: max_len)")
    p.add_argument("--graphs-max-rows", type=int, nargs="+",
                   help="--check: the goals' CUDA-graph translators, one per TRANSLATOR_CUDA_GRAPHS_MAX_ROWS given "
                        "(default: the setting's alone)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.check:
        from bench.offline import gpu_check

        return gpu_check.main(args, argv)
    with tempfile.TemporaryDirectory(prefix="bench-gpu-") as scratch:
        folder = with_fp16(args.model_dir, Path(scratch))
        engines, device = load_engines(folder, args.threads)
        config = FolderConfig.load(folder)
        texts, _ = load_test_set()
        tokenizer = load_tokenizer(folder, config.tokenizer, config.model.case_tags)
        sources = sorted(source_ids(tokenizer, config.model, texts[: args.sentences]), key=len)
        runs = measure(engines, sources, args)
    result = {
        "command": command_line("bench.offline.gpu", argv), "environment": gpu_environment(), "device": device,
        "settings": settings_of(args), "sentences": len(sources), "summary": summarize(runs, len(sources)),
    }
    for path in write_results(args.out, "gpu", result, markdown(result)):
        print(path)
    return result


if __name__ == "__main__":
    main()

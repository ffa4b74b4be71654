"""What the GPU benchmarks share: a Translator as an engine to time, fp16 graphs where a folder has none, and the
machine's description with its GPU."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

from bench.common.machine import environment
from bench.common.sentences import batches
from core.folder import FolderConfig
from core.search import SearchOptions
from service.engine.cache_graphs import select_graph
from service.engine.sessions import running_provider
from service.settings import Settings

PACKAGES = ["onnxruntime", "onnxruntime-gpu", "torch", "numpy"]
# An engine translates source ids in batches of a size: its outputs (token ids), seconds, and decoder steps and the
# seconds they took (0 and 0.0 where the engine does not say).
Run = tuple[list[list[int]], float, int, float]
Engine = Callable[[list[list[int]], SearchOptions, int], Run]


def ort_engine(folder: Path, precision: str, provider: str, threads: int, cuda_graphs: bool = False,
               cuda_graphs_max_rows: int | None = None) -> tuple[Engine, str]:
    """A Translator as an Engine, and the provider it really runs on; with CUDA graphs, the buckets' budget and most
    rows as the environment's TRANSLATOR_ settings say (the most rows as told, where told)."""
    from service.translator import Translator

    s = Settings()
    translator = Translator(folder, precision=precision, provider=provider, threads=threads, cuda_graphs=cuda_graphs,
                            cuda_graphs_memory_mb=s.cuda_graphs_memory_mb,
                            cuda_graphs_max_rows=cuda_graphs_max_rows or s.cuda_graphs_max_rows)

    def run(sources: list[list[int]], opts: SearchOptions, batch_size: int) -> Run:
        outputs, steps, step_seconds, started = [], 0, 0.0, time.perf_counter()
        for batch in batches(sources, batch_size):
            result = translator.translate_ids(batch, opts)
            outputs += [h[0].tokens for h in result.hypotheses]
            steps, step_seconds = steps + result.steps, step_seconds + result.decode_seconds
        return outputs, time.perf_counter() - started, steps, step_seconds

    return run, translator.provider


def with_fp16(folder: Path, scratch: Path) -> Path:
    """The model folder, or a copy of it with fp16 graphs exported from its model.pt."""
    config = FolderConfig.load(folder)
    if "fp16" in config.graphs:
        return folder
    from export.__main__ import export_model

    copy = scratch / folder.name
    shutil.copytree(folder, copy)
    spm = copy / config.tokenizer if isinstance(config.tokenizer, str) else None
    export_model(copy / "model.pt", copy, spm, ["fp32", "fp16"])
    return copy


def exit_without_gpu(command: str, profiler: bool = False) -> None:
    """Where ONNX Runtime's CUDA provider is not usable (or, with `profiler`, torch sees no GPU, whose CUPTI its
    profiler reads): one line saying that `command` needs a GPU and why, then exit status 2."""
    provider = running_provider("auto", select_graph(1))
    why = None if provider == "CUDAExecutionProvider" else f"CUDA is not usable here, ONNX Runtime runs on {provider}"
    if why is None and profiler:
        import torch

        why = None if torch.cuda.is_available() else "torch sees no GPU (its profiler reads the kernels through CUPTI)"
    if why:
        print(f"{command} needs a GPU: {why}")
        raise SystemExit(2)


def gpu_environment() -> dict:
    """environment(), with the GPU's name when torch sees one."""
    import torch

    env = environment(PACKAGES)
    env["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return env

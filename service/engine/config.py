"""How the engine runs a model folder (ModelOptions) and batches its sentences (BatchLimits), typed: the service
reads them from its settings in one place (service.engine.engine.engine_config).

ModelOptions' defaults are the offline Translator's; the batcher's limits are the service's settings alone. Nothing
here imports the settings, so that the offline Translator loads no settings machinery.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from service.engine.admission import Admission

Provider = Literal["auto", "cuda", "cpu"]
Optimization = Literal["disable", "basic", "extended", "all"]
# When the decoder step's idle intra-op threads spin for work rather than sleep: never, within a step only (they
# stop when its run returns, so the search and the HTTP workers have the cores between steps), or always
Spin = Literal["never", "step", "always"]

CUDA_GRAPHS_MEMORY_MB = 2048  # TRANSLATOR_CUDA_GRAPHS_MEMORY_MB's default too
CUDA_GRAPHS_MAX_ROWS = 256  # TRANSLATOR_CUDA_GRAPHS_MAX_ROWS's default too


@dataclass(frozen=True)
class ModelOptions:
    """How ONNX Runtime runs one model folder, and which decoder steps it (TRANSLATOR_* settings of the same names)."""

    precision: str = "fp32"  # which graphs of the folder: fp32, int8, fp16
    provider: Provider = "auto"  # asked for; the sessions say what really runs
    threads: int = 0  # intra-op threads, 0: one per core
    optimization: Optimization = "all"
    spin_threads: Spin = "always"  # the offline translator's default; the service's is "step"
    kernels: bool = True  # the CPU's decoder step with our kernels, where built
    cuda_graphs: bool = True  # the GPU's decoder step in captured buckets
    cuda_graphs_memory_mb: int = CUDA_GRAPHS_MEMORY_MB  # the buckets' budget
    cuda_graphs_max_rows: int = CUDA_GRAPHS_MAX_ROWS  # a larger running batch steps eagerly


@dataclass(frozen=True)
class BatchLimits:
    """What the batcher allows: its admission policy (service.engine.admission), how long an empty batch's first
    sentence waits for company, and the idle time after which memory goes back to the system."""

    admission: Admission
    max_wait_ms: float
    release_memory_after_s: float


@dataclass(frozen=True)
class EngineConfig:
    """Everything the engine process reads of the settings to run and batch every model folder."""

    model: ModelOptions
    batch: BatchLimits

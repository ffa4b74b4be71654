"""Kernels of our own for the decoder step on the CPU provider (decoder_step.cc).

The exported decoder step (export.graphs) writes each row's new keys and values into its cache slot with ScatterND
and attends with ONNX's Attention node, building an index and a mask for them, and ends in LogSoftmax and TopK:
portable, and what CUDA runs. On the CPU, ModelSessions instead registers the library built from decoder_step.cc
(service.engine.kernels.build) and runs the same step with operators of ours in their place
(service.engine.kernels.graph): each attention one kernel (the slot write, the dot products, the softmax and the
weighted sum), a residual sum and its LayerNorm one kernel, the best tokens' log-probabilities found without
writing the vocabulary's, and, on CPUs with AVX-512, each projection of a weight exported in fp16 reading it in fp16,
summed in ONNX Runtime's order: the step's, and the encoder's (docs/decisions.md).
"""

from __future__ import annotations

import ctypes
from pathlib import Path

SOURCE = Path(__file__).with_name("decoder_step.cc")
LIBRARY = Path(__file__).with_name("libdecoder_step.so")
DOMAIN = "ours"  # the operators' domain
SLOT_ROWS = "slot_rows"  # the inputs that the rewrite adds to the step (service.engine.kernels.graph)
CROSS_FROM = "cross_from"


class KernelsRefused(ValueError):
    """The kernels cannot run this step: the library is not built, or the graph is not the exported step whose
    attention they replace (service.engine.kernels.graph)."""


def half_weights(library: Path) -> bool:
    """Whether this CPU runs the library's fp16-weight projections (ours.HalfGemm: AVX-512), as the library says."""
    return bool(ctypes.CDLL(str(library)).HalfWeights())


def built_library() -> Path | None:
    """The kernels' library when it has been built (and is not older than its source), else None."""
    if LIBRARY.exists() and LIBRARY.stat().st_mtime >= SOURCE.stat().st_mtime:
        return LIBRARY
    return None

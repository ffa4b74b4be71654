"""Attention kernels of our own for the decoder step on the CPU provider (decoding_attention.cc).

The exported decoder step (export.graphs) writes each row's new keys and values into its cache slot with ScatterND
and attends with ONNX's Attention node, building an index and a mask for them: portable, and what CUDA runs. On the
CPU, ModelSessions instead registers the library built from decoding_attention.cc (service.engine.kernels.build) and
runs the same step with each attention one operator of ours (service.engine.kernels.graph): the slot write, the dot
products, the softmax and the weighted sum in one kernel, nothing else to dispatch. The micro model's step takes
about 0.6x the time (BENCHMARKS.md, "Attention kernels of our own").
"""

from __future__ import annotations

from pathlib import Path

SOURCE = Path(__file__).with_name("decoding_attention.cc")
LIBRARY = Path(__file__).with_name("libdecoding_attention.so")


def built_library() -> Path | None:
    """The kernels' library when it has been built (and is not older than its source), else None."""
    if LIBRARY.exists() and LIBRARY.stat().st_mtime >= SOURCE.stat().st_mtime:
        return LIBRARY
    return None

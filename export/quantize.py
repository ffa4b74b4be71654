"""The int8 graphs of a model folder, for CPUs: dynamic quantization of every weight, made from the fp32 graphs.

Each weight matrix and the embedding table are stored in int8 with one scale per tensor; each product quantizes its
activations per call (ONNX Runtime's quantize_dynamic). Its quantizer takes only weights that are initializers of a
MatMul or Gemm, so the graph is rewritten first: the output projection multiplies by the embedding through a
Transpose (weights tied), which stayed fp32 and was the largest product of a decoder step (8,000 × 256 a row).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper


def quantize_int8(src: Path, dst: Path) -> None:
    """Dynamic int8 quantization of every product with a weight (activations quantized on the fly) and of the
    embedding table (Gather)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    model = onnx.load(str(src))
    fold_weight_transposes(model.graph)
    onnx.save(model, str(dst))
    quantize_dynamic(dst, dst, weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul", "Gemm", "Gather"])


def fold_weight_transposes(graph: onnx.GraphProto) -> None:
    """Replace each Transpose of an initializer by the transposed initializer (as ONNX Runtime folds it at load)."""
    weights = {w.name: w for w in graph.initializer}
    folded = []
    for node in graph.node:
        if node.op_type == "Transpose" and node.input[0] in weights:
            perm = next((helper.get_attribute_value(a) for a in node.attribute if a.name == "perm"), None)
            value = np.transpose(numpy_helper.to_array(weights[node.input[0]]), perm)
            graph.initializer.append(numpy_helper.from_array(np.ascontiguousarray(value), node.output[0]))
            folded.append(node)
    for node in folded:
        graph.node.remove(node)
    used = {name for node in graph.node for name in node.input} | {out.name for out in graph.output}
    kept = [w for w in graph.initializer if w.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept)

"""The int8 graphs of a model folder, for CPUs: dynamic quantization of every weight, made from the fp32 graphs.

Each weight matrix and the embedding table are stored in int8 with one scale per tensor; each product quantizes its
activations per call (ONNX Runtime's quantize_dynamic). Its quantizer takes only weights that are initializers of a
MatMul or Gemm, so the graph is rewritten first: the output projection multiplies by the embedding through a
Transpose (weights tied), which stayed fp32 and was the largest product of a decoder step (8,000 × 256 a row).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import onnx

from export import onnx_files
from export.graphs import fold_weights


def quantize_int8(src: Path, dst: Path) -> None:
    """Dynamic int8 quantization of every product with a weight (activations quantized on the fly) and of the
    embedding table (Gather)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    model = onnx.load(str(src))
    fold_weights(model.graph, {"Transpose"})
    with tempfile.TemporaryDirectory(dir=dst.parent) as tmp:
        folded, quantized = Path(tmp) / "folded.onnx", Path(tmp) / dst.name
        onnx_files.save(model, folded)  # given a file, the quantizer does not copy the graph in memory
        del model
        quantize_dynamic(folded, quantized, weight_type=QuantType.QInt8,
                         op_types_to_quantize=["MatMul", "Gemm", "Gather"], use_external_data_format=True)
        onnx_files.save(onnx.load(str(quantized)), dst)


def weights_multiplied_in_float(graph: onnx.GraphProto) -> list[str]:
    """The float MatMul and Gemm nodes that read a tensor computed from initializers alone: the products with a
    weight that an int8 graph should not have."""
    constant = {w.name for w in graph.initializer}
    for node in graph.node:  # in topological order
        if node.input and all(name in constant for name in node.input if name):
            constant.update(node.output)
    return [n.name for n in graph.node if n.op_type in ("MatMul", "Gemm") and set(n.input) & constant]

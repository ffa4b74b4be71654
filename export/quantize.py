"""The int8 graphs of a model folder, for CPUs: dynamic quantization of every weight, made from the fp32 graphs.

Each weight matrix and the embedding table are stored in int8 with one scale per tensor; each product quantizes its
activations per call (ONNX Runtime's quantize_dynamic). Its quantizer takes only weights that are initializers of a
MatMul or Gemm, so the graph is rewritten first: the output projection multiplies by the embedding through a
Transpose (weights tied), which stayed fp32 and was the largest product of a decoder step (8,000 × 256 a row).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from export import onnx_files


def quantize_int8(src: Path, dst: Path) -> None:
    """Dynamic int8 quantization of every product with a weight (activations quantized on the fly) and of the
    embedding table (Gather)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    model = onnx.load(str(src))
    fold_weight_transposes(model.graph)
    with tempfile.TemporaryDirectory(dir=dst.parent) as tmp:
        folded, quantized = Path(tmp) / "folded.onnx", Path(tmp) / dst.name
        onnx_files.save(model, folded)  # given a file, the quantizer does not copy the graph in memory
        del model
        quantize_dynamic(folded, quantized, weight_type=QuantType.QInt8,
                         op_types_to_quantize=["MatMul", "Gemm", "Gather"], use_external_data_format=True)
        onnx_files.save(onnx.load(str(quantized)), dst)


def fold_weight_transposes(graph: onnx.GraphProto) -> None:
    """Replace each Transpose of an initializer by the transposed initializer (as ONNX Runtime folds it at load); a
    weight that nothing else reads is then dropped."""
    weights = {w.name: w for w in graph.initializer}
    folds = [node for node in graph.node if node.op_type == "Transpose" and node.input[0] in weights]
    for node in folds:
        perm = next((helper.get_attribute_value(a) for a in node.attribute if a.name == "perm"), None)
        value = np.transpose(numpy_helper.to_array(weights[node.input[0]]), perm)
        graph.initializer.append(numpy_helper.from_array(np.ascontiguousarray(value), node.output[0]))
        graph.node.remove(node)
    read = names_read(graph)
    for name in {node.input[0] for node in folds} - read:
        graph.initializer.remove(weights[name])


def names_read(graph: onnx.GraphProto) -> set[str]:
    """Every name the graph's nodes read, its subgraphs' (If, Loop, Scan) included, and its outputs."""
    read = {output.name for output in graph.output}
    for node in graph.node:
        read.update(node.input)
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                read |= names_read(attribute.g)
            elif attribute.type == onnx.AttributeProto.GRAPHS:
                for subgraph in attribute.graphs:
                    read |= names_read(subgraph)
    return read


def weights_multiplied_in_float(graph: onnx.GraphProto) -> list[str]:
    """The float MatMul and Gemm nodes that read a tensor computed from initializers alone: the products with a
    weight that an int8 graph should not have."""
    constant = {w.name for w in graph.initializer}
    for node in graph.node:  # in topological order
        if node.input and all(name in constant for name in node.input if name):
            constant.update(node.output)
    return [n.name for n in graph.node if n.op_type in ("MatMul", "Gemm") and set(n.input) & constant]

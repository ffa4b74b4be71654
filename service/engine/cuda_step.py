"""The decoder step as the CUDA provider runs it: each residual sum and its LayerNorm one SkipLayerNormalization, the
bias of the projection before the sum inside it too. A rewrite of the exported graph, made when a GPU session loads
it, for fewer kernels a step: a greedy step at batch 1 is many kernels of a few microseconds each, and their
number bounds the GPU's speed at small batches (BENCHMARKS.md#the-gpu-one-h200).

The exported step (model.transformer.DecoderLayer, post-LN) ends each of its sub-layers in
    y = Gemm(h, W, b)          two kernels on CUDA: b broadcast into y (a rank-1 cuBLAS product), then y += h W^T
    s = Add(x, y)              one
    x' = LayerNormalization(s) one
ONNX Runtime fuses an Add and its LayerNormalization into its SkipLayerNormalization (com.microsoft) only over 3-D
inputs (its SkipLayerNormFusion), so the encoder's are fused and the step's, whose rows are 2-D (N, D), are not. The
rewrite writes them as
    y = Gemm(h, W)                                    one kernel
    x' = SkipLayerNormalization(y, x, gamma, beta, b) one
two kernels a sub-layer instead of four. A pre-LN model's sum, which the next sub-layer reads too, is the fused
node's fourth output.
The CPU provider runs the step as exported or with our kernels (its SkipLayerNormalization kernel is slower than the
two it replaces: service.engine.sessions.CPU_UNFUSED); the tests run the rewritten step there to check that it
computes what the exported one does. That onnxruntime-gpu 1.31.1's CUDA provider takes SkipLayerNormalization over
2-D inputs is read from its library (its "input is expected to have 3 or 2 dimensions"); a session that refuses the
rewrite falls back to the step as exported (service.engine.sessions).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import NodeProto, helper, shape_inference

from core.folder import NUMPY_TYPES, GraphIO
from core.graph_edits import attribute_value, node_producers, node_readers

MS_DOMAIN = "com.microsoft"
DEFAULT_EPSILON = 1e-5  # LayerNormalization's


def with_skip_layer_norms(model: onnx.ModelProto) -> onnx.ModelProto:
    """The graph `model`, rewritten in place: every Add of two same-shaped tensors read by a LayerNormalization over
    their last axis becomes one SkipLayerNormalization, taking in the bias of a Gemm that made one of them (read by
    that Add alone). Weights stay where they are (in the graph, or beside it in external data)."""
    graph = model.graph
    shapes = tensor_shapes(model)
    weights = {w.name: w for w in graph.initializer}
    producer = node_producers(graph)
    readers = node_readers(graph)
    outputs = {x.name for x in graph.output}

    fused: dict[str, NodeProto | None] = {}  # a node, by its first output -> its replacement, None where it goes
    for norm in graph.node:
        add = producer.get(norm.input[0]) if is_op(norm, "LayerNormalization") and len(norm.output) == 1 else None
        if (add is None or not is_op(add, "Add")
                or attribute_value(norm, "axis") not in (None, -1, len(shapes.get(add.output[0], [])) - 1)
                or any(weight(name, weights, producer) is not None for name in add.input)
                or not known_and_equal(shapes.get(add.input[0]), shapes.get(add.input[1]))):
            continue
        x, skip = add.input
        bias = []
        gemm = next((producer[name] for name in add.input
                     if name in producer and biased_gemm(producer[name], weights, producer, readers, outputs)), None)
        if gemm is not None:  # its bias into the fused node, the Gemm left without one
            x, skip = gemm.output[0], next(name for name in add.input if name != gemm.output[0])
            bias = [gemm.input[2]]
            fused[gemm.output[0]] = helper.make_node("Gemm", list(gemm.input[:2]), list(gemm.output), name=gemm.name,
                                                     transB=attribute_value(gemm, "transB") or 0)
        gamma, beta = norm.input[1], norm.input[2] if len(norm.input) > 2 else ""
        sum_read = add.output[0] in outputs or len(readers[add.output[0]]) > 1  # read by more than its LayerNorm
        fused[add.output[0]] = helper.make_node(
            "SkipLayerNormalization", [x, skip, gamma, beta, *bias] if bias or beta else [x, skip, gamma],
            [norm.output[0], "", "", add.output[0]] if sum_read else [norm.output[0]],
            domain=MS_DOMAIN, name=f"{norm.name}_skip", epsilon=attribute_value(norm, "epsilon") or DEFAULT_EPSILON)
        fused[norm.output[0]] = None
    if not fused:
        return model
    # each fused node where its Add was, after every node it reads
    nodes = [fused.get(node.output[0], node) for node in graph.node]
    del graph.node[:]
    graph.node.extend(node for node in nodes if node is not None)
    if not any(opset.domain == MS_DOMAIN for opset in model.opset_import):
        model.opset_import.append(helper.make_opsetid(MS_DOMAIN, 1))
    return model


def biased_gemm(node: NodeProto, weights: dict[str, onnx.TensorProto], producer: dict[str, NodeProto],
                readers: dict[str, list[NodeProto]], outputs: set[str]) -> bool:
    """Whether `node` is a Gemm with a bias (a 1-D weight, alpha and beta 1) whose output one node reads, not the
    graph's outputs."""
    return (is_op(node, "Gemm") and len(node.input) == 3
            and (bias := weight(node.input[2], weights, producer)) is not None and len(bias.dims) == 1
            and all(attribute_value(node, name) in (None, 1.0) for name in ("alpha", "beta"))
            and not attribute_value(node, "transA")
            and len(readers.get(node.output[0], [])) == 1 and node.output[0] not in outputs)


def is_op(node: NodeProto, op_type: str) -> bool:
    """Whether the node is this operator of ONNX's own domain."""
    return node.op_type == op_type and node.domain in ("", "ai.onnx")


def weight(name: str, weights: dict[str, onnx.TensorProto], producer: dict[str, NodeProto]) -> onnx.TensorProto | None:
    """The weight a tensor is, directly or through a Cast (export stores weights exact in fp16 and casts them to
    fp32 in the graph); None where it is computed."""
    node = producer.get(name)
    if node is not None and node.op_type == "Cast" and node.input[0] in weights:
        return weights[node.input[0]]
    return weights.get(name)


def known_and_equal(a: list[int | str] | None, b: list[int | str] | None) -> bool:
    """Whether two shapes are known (every dimension a number or a name) and the same."""
    return a is not None and a == b and all(a)


def tensor_shapes(model: onnx.ModelProto) -> dict[str, list[int | str]]:
    """Every tensor's shape that ONNX's shape inference finds (a symbolic dimension by its name, an unknown one as
    ''), the weights' left out."""
    inferred = shape_inference.infer_shapes(model)
    values = [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]
    return {value.name: [d.dim_value or d.dim_param for d in value.type.tensor_type.shape.dim]
            for value in values if value.type.tensor_type.HasField("shape")}


def probe_feeds(session: ort.InferenceSession) -> dict[str, np.ndarray]:
    """Inputs of one row for a session of the step: every named dimension 1, zeros, a source mask of one real token
    and a width of 1."""
    feeds = {x.name: np.zeros([d if isinstance(d, int) else 1 for d in x.shape], NUMPY_TYPES[x.type])
             for x in session.get_inputs()}
    feeds[GraphIO.SRC_MASK][:] = True
    feeds[GraphIO.WIDTH][:] = 1
    return feeds

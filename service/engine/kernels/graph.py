"""The exported decoder step with operators of decoder_step.cc in place of its attention and its top-k: a rewrite of
its graph.

export.graphs' step computes each attention as (model.transformer.DecoderLayer):
    self:   new_k = ScatterND(self_k, index, Reshape(k))   new_v likewise          (the slot write)
            out = Reshape(Attention(Reshape(q), new_k, new_v, mask from positions))
    cross:  out = Reshape(Attention(Reshape(q), cross_k, cross_v, mask from src_mask))
with q, k, v the (N, D) projections, and ends in top_logp, top_tokens = TopK(LogSoftmax(logits), width). The rewrite
puts in their place
    ours.DecoderSelfAttention(q, k, v, self_k, self_v, positions, slot_rows) -> out, new_k, new_v
    ours.DecoderCrossAttention(q, cross_k, cross_v, src_mask, cross_from) -> out
    ours.TopLogSoftmax(logits, width) -> top_logp, top_tokens
and each residual sum that a LayerNormalization alone reads (a post-LN sub-layer's) with that LayerNormalization as
    ours.AddLayerNorm(x, skip, scale, bias; epsilon) -> y
and, where this CPU runs it (half_weights), each projection whose weight is exported as fp16 and cast to float
(Gemm, or MatMul by that weight or its transpose, with the Add of its bias), with a Relu that alone reads it, as
    ours.HalfGemm(x, packed weight, bias; columns, relu, bias_last) -> y
reading the weight packed in fp16 (packed_half) at half the bytes, to the bit what ONNX Runtime's projection gives;
and drops what nothing reads any more (the index, the masks, the reshapes, the casts). slot_rows is an input the
rewrite adds (SLOT_ROWS: which row of the caches holds each slot of a row, decoder_step.cc; an empty (0, 0) table:
every row's slots its own, as the exported step reads them); so is cross_from (CROSS_FROM: the row of the encoder's
keys and values each row reads, its sentence's first; empty (0,): its own). Every name the rest of the graph reads
stays, so the int8 graphs, whose projections differ, rewrite alike. A graph of another shape is refused with the
reason (KernelsRefused), and its session runs the step as exported. The encoder's fp16 projections are rewritten the
same way (with_half_weights).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import NodeProto, helper, numpy_helper

from core.folder import GraphIO
from core.graph_edits import attribute_value, node_producers, node_readers
from service.engine.kernels import CROSS_FROM, DOMAIN, SLOT_ROWS, KernelsRefused

DEFAULT_EPSILON = 1e-5  # LayerNormalization's, where the node names none


def with_kernels(model: onnx.ModelProto, half_weights: bool = False) -> onnx.ModelProto:
    """The decoder step `model`, rewritten in place, with ours in place of every Attention node, the slot writes
    before it, and the top-k; with `half_weights` (this CPU runs ours.HalfGemm), its fp16 projections too. Its other
    weights are left where they are (in the graph, or beside it in external data)."""
    graph = model.graph
    producer = node_producers(graph)
    inputs = {x.name for x in graph.input}
    replaced: dict[str, NodeProto | None] = {}  # a node, by its first output -> its replacement, None where it goes

    attentions = [node for node in graph.node if node.op_type == "Attention" and node.domain in ("", "ai.onnx")]
    if not attentions:
        raise KernelsRefused("the step has no Attention node (a graph of an older export?)")
    caches = [x for x in graph.input if x.name.startswith(f"{GraphIO.SELF}_")]
    if any(x.type.tensor_type.elem_type != onnx.TensorProto.FLOAT for x in caches):
        raise KernelsRefused("the kernels are fp32; this step's caches are not")
    for attention in attentions:
        if attention.attribute or len(attention.input) != 4:
            raise KernelsRefused(f"{attention.name} is not the exported attention (attributes, or inputs other than "
                                 "query, keys, values and mask)")
        query, keys, values = attention.input[:3]
        out = single_reader(graph, attention.output[0], "Reshape")
        q = reshaped(producer, query)
        if keys in inputs and values in inputs:  # cross-attention over the encoder's keys and values
            ours = helper.make_node("DecoderCrossAttention", [q, keys, values, GraphIO.SRC_MASK, CROSS_FROM],
                                    [out.output[0]], domain=DOMAIN, name=f"{attention.name}_ours")
        else:
            k_write, v_write = slot_write(producer, keys, inputs), slot_write(producer, values, inputs)
            ours = helper.make_node(
                "DecoderSelfAttention",
                [q, reshaped(producer, k_write.input[2]), reshaped(producer, v_write.input[2]), k_write.input[0],
                 v_write.input[0], GraphIO.POSITIONS, SLOT_ROWS],
                [out.output[0], keys, values], domain=DOMAIN, name=f"{attention.name}_ours")
            replaced[k_write.output[0]] = replaced[v_write.output[0]] = None
        replaced[attention.output[0]], replaced[out.output[0]] = ours, None
    top_k = producer.get(GraphIO.TOP_TOKENS)
    log_softmax = producer.get(top_k.input[0]) if top_k is not None else None
    last_axis = {"axis": -1, "largest": 1, "sorted": 1}
    if (log_softmax is None or log_softmax.op_type != "LogSoftmax" or top_k.op_type != "TopK"
            or not attributes(log_softmax, {"axis": -1}) or not attributes(top_k, last_axis)):
        raise KernelsRefused("the step's top-k is not TopK(LogSoftmax(logits), width) over the vocabulary")
    replaced[log_softmax.output[0]] = None
    replaced[top_k.output[0]] = helper.make_node("TopLogSoftmax", [log_softmax.input[0], top_k.input[1]],
                                                 list(top_k.output), domain=DOMAIN, name="top_log_softmax_ours")
    replaced.update(residual_norms(graph, producer))
    if half_weights:
        replaced.update(half_projections(graph, producer))

    replace(model, replaced)
    graph.input.append(helper.make_tensor_value_info(SLOT_ROWS, onnx.TensorProto.INT64, ["N", "W"]))
    graph.input.append(helper.make_tensor_value_info(CROSS_FROM, onnx.TensorProto.INT64, ["R"]))
    return model


def with_half_weights(model: onnx.ModelProto) -> onnx.ModelProto | None:
    """A graph (the encoder) rewritten in place with its fp16 projections as ours.HalfGemm (half_projections), or
    None where it has none."""
    replaced = half_projections(model.graph, node_producers(model.graph))
    if not replaced:
        return None
    replace(model, replaced)
    return model


def replace(model: onnx.ModelProto, replaced: dict[str, NodeProto | None]) -> None:
    """Put each replacement in place of the node whose first output it is keyed by (None: the node goes), drop
    the nodes and the initializers that nothing reads any more, and import our operators' domain."""
    graph = model.graph
    nodes = [replaced.get(node.output[0], node) for node in graph.node]
    del graph.node[:]
    graph.node.extend(live([node for node in nodes if node is not None], graph))
    used = {name for node in graph.node for name in node.input}
    kept = [weight for weight in graph.initializer if weight.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    model.opset_import.append(helper.make_opsetid(DOMAIN, 1))


def residual_norms(graph: onnx.GraphProto, producer: dict[str, NodeProto]) -> dict[str, NodeProto | None]:
    """Each residual sum read by a LayerNormalization alone (a post-LN layer's), and that LayerNormalization, as one
    ours.AddLayerNorm: replacements by first output, as with_kernels keeps them. A sum that something else reads too
    (a pre-LN layer's, which the next sum reads) and a sum with a weight (a bias) stay as they are."""
    weights = {w.name for w in graph.initializer}
    readers: dict[str, int] = {x.name: 1 for x in graph.output}  # a graph's output is read by its caller
    for node in graph.node:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    fused: dict[str, NodeProto | None] = {}
    for norm in graph.node:
        add = producer.get(norm.input[0]) if norm.op_type == "LayerNormalization" else None
        if (add is None or add.op_type != "Add" or len(norm.input) != 3 or len(norm.output) != 1
                or readers[add.output[0]] != 1 or weights.intersection(add.input)):
            continue
        epsilon = next((helper.get_attribute_value(a) for a in norm.attribute if a.name == "epsilon"),
                       DEFAULT_EPSILON)
        if not attributes(norm, {"axis": -1, "epsilon": epsilon, "stash_type": 1}):  # over the last axis, in float
            continue
        fused[add.output[0]] = None
        fused[norm.output[0]] = helper.make_node("AddLayerNorm", [*add.input, *norm.input[1:]], list(norm.output),
                                                 domain=DOMAIN, name=f"{norm.name}_ours", epsilon=epsilon)
    return fused


def half_projections(graph: onnx.GraphProto, producer: dict[str, NodeProto]) -> dict[str, NodeProto | None]:
    """Each projection whose weight is an fp16 initializer in the graph cast to float (projection), with the Add of a
    bias that alone reads a MatMul's product and the Relu that alone reads what comes of it, as one ours.HalfGemm:
    replacements by first output, as with_kernels keeps them. Its packed weight and its bias (padded to the strips;
    empty for none) join the graph's initializers."""
    weights, readers = {w.name: w for w in graph.initializer}, node_readers(graph)
    outputs = {x.name for x in graph.output}

    def alone_after(node: NodeProto, op_type: str) -> NodeProto | None:
        """The node of this type that alone reads `node`'s output (which the graph does not give out)."""
        after = readers.get(node.output[0], [])
        alone = len(after) == 1 and after[0].op_type == op_type and node.output[0] not in outputs
        return after[0] if alone else None

    fused: dict[str, NodeProto | None] = {}
    for node in graph.node:
        found = projection(node, producer, weights)
        if found is None:
            continue
        weight, bias = found
        last, bias_last = node, False  # the node whose output the kernel's is; a MatMul's bias after its sum
        add = alone_after(node, "Add") if node.op_type == "MatMul" else None
        if add is not None:
            other = add.input[1] if add.input[0] == node.output[0] else add.input[0]
            added = float_values(other, producer, weights)
            if added is not None and added.shape == (weight.shape[1],):
                last, bias, bias_last = add, added, True
        relu = alone_after(last, "Relu")
        last = relu or last
        packed, padded = f"{node.output[0]}_half_weight", f"{node.output[0]}_half_bias"  # outputs' names are unique
        graph.initializer.extend([numpy_helper.from_array(packed_half(weight), packed),
                                  numpy_helper.from_array(padded_bias(bias, weight.shape[1]), padded)])
        half = helper.make_node("HalfGemm", [node.input[0], packed, padded], [last.output[0]], domain=DOMAIN,
                                name=f"{node.output[0]}_half", columns=weight.shape[1], relu=int(relu is not None),
                                bias_last=int(bias_last))
        for gone in {node.output[0], add.output[0] if bias_last else None, last.output[0]} - {None}:
            fused[gone] = None
        fused[last.output[0]] = half
    return fused


def projection(node: NodeProto, producer: dict[str, NodeProto],
               weights: dict[str, onnx.TensorProto]) -> tuple[np.ndarray, np.ndarray] | None:
    """A Gemm's (x W + b, W maybe transposed) or a MatMul's (x W, W maybe a Transpose's output) weight as (K, N) fp16
    values and its (N,) bias (empty for none), where W is an fp16 initializer cast to float; else None."""
    if node.op_type == "Gemm" and len(node.input) in (2, 3):
        transposed = attribute_value(node, "transB") or 0
        if not attributes(node, {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": transposed}):
            return None
        weight = fp16_cast(node.input[1], producer, weights)
        bias = float_values(node.input[2], producer, weights) if len(node.input) == 3 else np.zeros(0, np.float32)
    elif node.op_type == "MatMul":
        source = producer.get(node.input[1])
        transposed = source is not None and source.op_type == "Transpose" and attributes(source, {"perm": [1, 0]})
        weight = fp16_cast(source.input[0] if transposed else node.input[1], producer, weights)
        bias = np.zeros(0, np.float32)
    else:
        return None
    if weight is None or weight.ndim != 2 or bias is None:
        return None
    weight = weight.T if transposed else weight
    return (weight, bias) if bias.size in (0, weight.shape[1]) else None


def fp16_cast(name: str, producer: dict[str, NodeProto], weights: dict[str, onnx.TensorProto]) -> np.ndarray | None:
    """The fp16 values of the initializer in the graph that `name` is the float cast of; None where it is not one."""
    cast = producer.get(name)
    if cast is None or cast.op_type != "Cast" or not attributes(cast, {"to": onnx.TensorProto.FLOAT}):
        return None
    weight = weights.get(cast.input[0])
    if (weight is None or weight.data_type != onnx.TensorProto.FLOAT16
            or weight.data_location == onnx.TensorProto.EXTERNAL):
        return None
    return numpy_helper.to_array(weight)


def float_values(name: str, producer: dict[str, NodeProto], weights: dict[str, onnx.TensorProto]) -> np.ndarray | None:
    """The values of a float initializer in the graph, or of an fp16 one's float cast, flat; None for anything else."""
    half = fp16_cast(name, producer, weights)
    if half is not None:
        return half.astype(np.float32).reshape(-1)
    weight = weights.get(name)
    if (weight is None or weight.data_type != onnx.TensorProto.FLOAT
            or weight.data_location == onnx.TensorProto.EXTERNAL):
        return None
    return numpy_helper.to_array(weight).reshape(-1)


STRIP = 64  # HalfGemm's strip of output columns (decoder_step.cc)


def packed_half(weight: np.ndarray) -> np.ndarray:
    """A (K, N) fp16 weight as HalfGemm reads it: (ceil(N / 64), K, 64), strip s holding columns 64 s to 64 s + 63
    (the last strip's past N zeros), each strip's K rows of 64 side by side."""
    k, n = weight.shape
    strips = -(-n // STRIP)
    padded = np.zeros((k, strips * STRIP), dtype=np.float16)
    padded[:, :n] = weight
    return np.ascontiguousarray(padded.reshape(k, strips, STRIP).transpose(1, 0, 2))


def padded_bias(bias: np.ndarray, columns: int) -> np.ndarray:
    """HalfGemm's bias: the (N,) float bias padded with zeros to the strips, or empty for none."""
    if not bias.size:
        return np.zeros(0, dtype=np.float32)
    return np.concatenate([bias.astype(np.float32), np.zeros(-columns % STRIP, dtype=np.float32)])


def attributes(node: NodeProto, wanted: dict[str, int]) -> bool:
    """Whether the node's attributes are these (the value given where it has none), and no others."""
    found = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    return set(found) <= set(wanted) and all(found.get(name, value) == value for name, value in wanted.items())


def single_reader(graph: onnx.GraphProto, name: str, op_type: str) -> NodeProto:
    readers = [node for node in graph.node if name in node.input]
    if len(readers) != 1 or readers[0].op_type != op_type:
        raise KernelsRefused(f"{name} is read by {[node.op_type for node in readers]}, not by one {op_type}")
    return readers[0]


def reshaped(producer: dict[str, NodeProto], name: str) -> str:
    """What the Reshape that made `name` reshaped: a projection (N, D)."""
    node = producer.get(name)
    if node is None or node.op_type != "Reshape":
        raise KernelsRefused(f"{name} is not a Reshape's output")
    return node.input[0]


def slot_write(producer: dict[str, NodeProto], name: str, inputs: set[str]) -> NodeProto:
    """The ScatterND that wrote a row's keys or values into a cache given as the graph's input."""
    node = producer.get(name)
    if node is None or node.op_type != "ScatterND" or node.input[0] not in inputs:
        raise KernelsRefused(f"{name} is not a cache input's slot write (ScatterND)")
    return node


def live(nodes: list[NodeProto], graph: onnx.GraphProto) -> list[NodeProto]:
    """The nodes that the graph's outputs need, in their order."""
    needed = {x.name for x in graph.output}
    kept = []
    for node in reversed(nodes):
        if needed.intersection(node.output):
            kept.append(node)
            needed.update(node.input)
    return kept[::-1]

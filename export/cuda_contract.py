"""The contract of the graphs the GPU runs: every node has a kernel of ONNX Runtime's CUDA provider, and once a
bucket fixes the input shapes no shape is left to compute at run time.

ONNX Runtime runs a node on the CPU, with copies to and from the GPU around it, when the CUDA provider has no
kernel for its operator, opset version and types; and it keeps small shape computations (Shape, Gather, Concat,
...) on the CPU. Both cost a copy and a synchronisation per step, and both rule out capturing the step in a CUDA
graph. This module checks both from a graph alone, without a GPU:

    table, model = KernelTable.load("tests/data/ort-1.31-cuda-kernels.json"), onnx.load("decoder.onnx")
    missing(model, table)                                       # [] when the CUDA provider has every kernel
    bucket = fold_constants(fix_dims(model, {"batch": 64, "src_len": 32, "slots": 32}))
    runtime_shape_nodes(bucket)                                 # [] when no shape is computed at run time

The table is ONNX Runtime's own list of CUDA kernels (docs/OperatorKernels.md, made into JSON by
tests/data/cuda_kernels.py). A kernel fits a node as ONNX Runtime's KernelRegistry::VerifyKernelDef decides: its
versions hold the node's since-version (the version of the operator's schema in the model's opset), and each of its
type constraints allows the type of the first input or output bound to that constraint. onnx only, no ONNX Runtime:
tests/test_cuda_contract.py and `python -m bench.offline.gpu --check` apply ONNX Runtime's optimizations first.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper, shape_inference
from onnx.reference import ReferenceEvaluator

DEFAULT_DOMAIN = "ai.onnx"
# ONNX Runtime's contrib operators (docs/ContribOperators.md) are all "available since version 1 of the
# 'com.microsoft' operator set", and onnx has no schema for them: their since-version is 1.
CONTRIB_SINCE = 1
SHAPE_OPS = {"Shape", "Size"}
RANDOM_OPS = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli"}
# The shapes of contrib operators' outputs, which onnx's shape inference does not know: output -> the input whose
# shape it has (service.engine.cuda_step writes SkipLayerNormalization: its output and its sum are its input's shape)
CONTRIB_SHAPES = {"SkipLayerNormalization": {0: 0, 3: 0}}


@dataclass(frozen=True)
class Kernel:
    """One CUDA kernel of an operator: the opset versions it covers and the types each constraint allows."""

    since: int
    until: int | None  # None: every later version too ("13+")
    types: dict[str, list[str]]  # type constraint (or formal parameter name) -> "tensor(float)", ...

    def __str__(self) -> str:
        """Its versions as OperatorKernels.md writes them: 13+, [6, 12], 13."""
        if self.until is None:
            return f"{self.since}+"
        return str(self.since) if self.until == self.since else f"[{self.since}, {self.until}]"

    def covers(self, since_version: int) -> bool:
        """Whether ONNX Runtime takes this kernel for a node whose schema dates from since_version: the kernel starts
        there, or its closed range holds it (an open-ended kernel starting earlier does not count)."""
        return self.since == since_version or (
            self.since < since_version and self.until is not None and self.until >= since_version
        )


@dataclass(frozen=True)
class Formal:
    """A formal input or output of an operator: its name and its type constraint (or a fixed type)."""

    name: str
    type_str: str


@dataclass(frozen=True)
class Operator:
    inputs: list[Formal]  # of the operator's latest schema, as the table lists them
    outputs: list[Formal]
    kernels: list[Kernel]


@dataclass(frozen=True)
class KernelTable:
    """The CUDA provider's kernels by (domain, operator), and where the table was read."""

    operators: dict[tuple[str, str], Operator]
    source: dict

    @classmethod
    def load(cls, path: str | Path) -> KernelTable:
        data = json.loads(Path(path).read_text())
        operators = {}
        for key, entry in data["operators"].items():
            domain, op = key.split(":")
            operators[domain, op] = Operator(
                [Formal(*p) for p in entry["inputs"]],
                [Formal(*p) for p in entry["outputs"]],
                [Kernel(k["since"], k["until"], k["types"]) for k in entry["kernels"]],
            )
        return cls(operators, data["source"])


def missing(model: onnx.ModelProto, table: KernelTable) -> list[str]:
    """The nodes the CUDA provider has no kernel for, one line each saying why; [] when every node has one."""
    types = value_types(model)
    opsets = {o.domain or DEFAULT_DOMAIN: o.version for o in model.opset_import}
    found = []
    for node in model.graph.node:
        reason = kernel_mismatch(node, opsets, types, table)
        if reason:
            found.append(f"{describe(node)}: {reason}")
    return found


def kernel_mismatch(node: onnx.NodeProto, opsets: dict[str, int], types: dict[str, str | None],
                    table: KernelTable) -> str | None:
    """Why the CUDA provider has no kernel for this node, or None when it has one."""
    domain = node.domain or DEFAULT_DOMAIN
    operator = table.operators.get((domain, node.op_type))
    if operator is None:
        return f"the CUDA provider has no {domain} {node.op_type} kernel"
    inputs, outputs, since = formal_parameters(node, domain, opsets.get(domain, 1), operator)
    kernels = [k for k in operator.kernels if k.covers(since)]
    if not kernels:
        return f"no CUDA kernel for version {since} of the operator (kernels: {', '.join(map(str, operator.kernels))})"
    reasons = [type_mismatch(kernel, node, inputs, outputs, types) for kernel in kernels]
    return None if None in reasons else reasons[0]


def formal_parameters(node: onnx.NodeProto, domain: str, opset: int,
                      operator: Operator) -> tuple[list[Formal], list[Formal], int]:
    """The node's formal inputs and outputs and its since-version: from onnx's schema for the model's opset where
    onnx has one, else the table's parameters (ONNX Runtime's contrib operators)."""
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, "" if domain == DEFAULT_DOMAIN else domain)
    except onnx.defs.SchemaError:
        return operator.inputs, operator.outputs, CONTRIB_SINCE
    inputs = [Formal(p.name, p.type_str) for p in schema.inputs]
    outputs = [Formal(p.name, p.type_str) for p in schema.outputs]
    return inputs, outputs, schema.since_version


def type_mismatch(kernel: Kernel, node: onnx.NodeProto, inputs: list[Formal], outputs: list[Formal],
                  types: dict[str, str | None]) -> str | None:
    """Why the kernel does not take the node's types, or None. Each constraint is checked on the first input, else
    output, bound to it (by type constraint or by parameter name), as ONNX Runtime checks it; a variadic parameter's
    first value stands for all of them."""
    for constraint, allowed in kernel.types.items():
        bound = [name for formal, name in [*zip(inputs, node.input), *zip(outputs, node.output)]
                 if constraint in (formal.type_str, formal.name) and name]
        if not bound:
            continue
        actual = types.get(bound[0])
        if actual is None:
            return f"the type of {bound[0]} is unknown, so its CUDA kernel cannot be told"
        if actual not in allowed:
            return f"{constraint} is {actual} ({bound[0]}); the CUDA kernel takes {', '.join(allowed)}"
    return None


def value_types(model: onnx.ModelProto) -> dict[str, str | None]:
    """The type of every value of the graph ("tensor(float)"), after onnx's type inference."""
    inferred = shape_inference.infer_shapes(model)
    graph = inferred.graph
    types: dict[str, str | None] = {w.name: f"tensor({element_type(w.data_type)})" for w in graph.initializer}
    for info in [*graph.input, *graph.value_info, *graph.output]:
        if (found := type_string(info.type)) or info.name not in types:
            types[info.name] = found
    return types


def type_string(type_proto: onnx.TypeProto) -> str | None:
    """As OperatorKernels.md writes a type: tensor(float16), seq(tensor(int64)); None if not known."""
    kind = type_proto.WhichOneof("value")
    if kind == "tensor_type" and type_proto.tensor_type.elem_type:
        return f"tensor({element_type(type_proto.tensor_type.elem_type)})"
    if kind == "sequence_type":
        inner = type_string(type_proto.sequence_type.elem_type)
        return inner and f"seq({inner})"
    return None


def element_type(data_type: int) -> str:
    return TensorProto.DataType.Name(data_type).lower()


def fix_dims(model: onnx.ModelProto, dims: dict[str, int]) -> onnx.ModelProto:
    """A copy of the model whose inputs have the shapes of a bucket: each named dimension set from dims (every one
    must be there), the inferred shapes of other values dropped."""
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    for value in fixed.graph.input:
        for dim in value.type.tensor_type.shape.dim:
            if dim.HasField("dim_param"):
                if dim.dim_param not in dims:
                    raise ValueError(f"input {value.name} has a dimension {dim.dim_param!r} that {dims} does not fix")
                dim.dim_value = dims[dim.dim_param]
    del fixed.graph.value_info[:]
    return fixed


def fold_constants(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with every node whose outputs are known before it runs made an initializer, as ONNX Runtime's
    constant folding does when a session starts: a Shape or Size of a tensor whose shape is static, a node of constant
    inputs; again until nothing more folds. What is left runs at every step."""
    while True:
        static = static_shapes(model)
        values = {w.name: numpy_helper.to_array(w) for w in model.graph.initializer}
        kept, folded = [], {}
        for node in model.graph.node:
            outputs = folded_outputs(node, values, static, model)
            if outputs is None:
                kept.append(node)
            else:
                values.update(outputs)
                folded.update(outputs)
        if not folded:
            return model
        model = with_nodes(model, kept, folded)


def folded_outputs(node: onnx.NodeProto, values: dict[str, np.ndarray], static: dict[str, list[int]],
                   model: onnx.ModelProto) -> dict[str, np.ndarray] | None:
    """The node's outputs if they are known before it runs, else None."""
    if node.op_type in SHAPE_OPS and node.input[0] in static and (node.domain or DEFAULT_DOMAIN) == DEFAULT_DOMAIN:
        shape = np.array(static[node.input[0]], dtype=np.int64)
        if node.op_type == "Size":
            return {node.output[0]: np.array(shape.prod(), dtype=np.int64)}
        attributes = {a.name: a.i for a in node.attribute}
        return {node.output[0]: shape[attributes.get("start", 0) : attributes.get("end", len(shape))]}
    inputs = [name for name in node.input if name]
    if (node.domain or DEFAULT_DOMAIN) != DEFAULT_DOMAIN or node.op_type in RANDOM_OPS or any(
        a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute
    ) or not all(name in values for name in inputs):
        return None
    opset = {o.domain: o.version for o in model.opset_import}.get("", 1)
    results = ReferenceEvaluator(node, opsets={"": opset}).run(None, {name: values[name] for name in inputs})
    return dict(zip(node.output, (np.asarray(r) for r in results)))


def static_shapes(model: onnx.ModelProto) -> dict[str, list[int]]:
    """The values whose shape onnx's shape inference (with data propagation) knows in full, and their shapes; each
    contrib operator of CONTRIB_SHAPES read as the Identities of the inputs whose shapes its outputs have."""
    readable = onnx.ModelProto()
    readable.CopyFrom(model)
    nodes = []
    for node in readable.graph.node:
        outputs = CONTRIB_SHAPES.get(node.op_type, {})
        nodes += [onnx.helper.make_node("Identity", [node.input[source]], [node.output[out]])
                  for out, source in outputs.items() if out < len(node.output) and node.output[out]] or [node]
    del readable.graph.node[:]
    readable.graph.node.extend(nodes)
    graph = shape_inference.infer_shapes(readable, data_prop=True).graph
    shapes = {w.name: list(w.dims) for w in graph.initializer}
    for info in [*graph.input, *graph.value_info, *graph.output]:
        tensor = info.type.tensor_type
        if tensor.HasField("shape") and all(d.HasField("dim_value") for d in tensor.shape.dim):
            shapes[info.name] = [d.dim_value for d in tensor.shape.dim]
    return shapes


def with_nodes(model: onnx.ModelProto, nodes: list[onnx.NodeProto], folded: dict[str, np.ndarray]) -> onnx.ModelProto:
    """A copy of the model with these nodes only, and as initializers the folded values that they or the outputs
    read."""
    read = {name for node in nodes for name in node.input} | {o.name for o in model.graph.output}
    initializers = [w for w in model.graph.initializer if w.name in read]
    initializers += [numpy_helper.from_array(value, name) for name, value in folded.items() if name in read]
    result = onnx.ModelProto()
    result.CopyFrom(model)
    for field, items in (("node", nodes), ("initializer", initializers), ("value_info", [])):
        del getattr(result.graph, field)[:]
        getattr(result.graph, field).extend(items)
    return result


def runtime_shape_nodes(model: onnx.ModelProto) -> list[str]:
    """The nodes that compute shapes at run time, one line each: every Shape and Size node (after fold_constants,
    those of tensors whose shape is not static), and every node that computes only from their outputs and
    constants. ONNX Runtime's CUDA provider hands such chains to the CPU."""
    constants = {w.name for w in model.graph.initializer}
    shape_values: set[str] = set()
    found = []
    for node in model.graph.node:
        inputs = [name for name in node.input if name and name not in constants]
        if node.op_type in SHAPE_OPS or (inputs and all(name in shape_values for name in inputs)):
            shape_values.update(node.output)
            found.append(describe(node))
    return found


def value_shaped_nodes(model: onnx.ModelProto) -> list[str]:
    """The nodes whose output shape depends on an input's values, not its shape (TopK's K, a Range's limit): all
    their input shapes are static, and an output shape is not. After fold_constants, one line each."""
    static = static_shapes(model)
    return [describe(node) for node in model.graph.node
            if all(name in static for name in node.input if name)
            and not all(name in static for name in node.output if name)]


def describe(node: onnx.NodeProto) -> str:
    domain = f"{node.domain}." if node.domain and node.domain != DEFAULT_DOMAIN else ""
    return f"{domain}{node.op_type} {node.name or '(unnamed)'}"

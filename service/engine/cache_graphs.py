"""Small ONNX graphs that move a decoder's cache tensors where ONNX Runtime keeps them (GPU memory on CUDA).

select   x_0, x_1, ... (each (N, H, L, Dh)), rows (M,) int64 -> y_i = x_i[rows]
         keeps and reorders rows (beam search, sentences that leave)
join     a_0, ..., b_0, ... , pads_b (8,) int64 -> y_i = concat(a_i, pad(b_i, pads_b))
         appends rows (sentences that join: zero self-attention caches, or encoder keys/values padded to the
         longest source); with no rows in a, grows or cuts the caches' slots. pads_b is ONNX Pad's (begins of the
         4 axes, then ends). a is never padded: a Pad by zero would copy the running batch's caches once more
fit      x_0, ..., rows (M,) int64, pads (8,) int64 -> y_i = pad(x_i[rows], pads)
         rows into a bucket's buffers (service.engine.graphed): a batch into a bucket of other shapes (slots or
         source grown or cut), or the joining sentences' encoder keys/values with the running rows'
move     x_0, ..., rows (M,) int64, lengths (K,) int64 -> y_i = x_i with y_i[:M] = x_i[rows], of each row its first
         lengths[row] slots: our kernel (service.engine.kernels, ours.MoveRows) with y_i bound to x_i's own memory,
         rows moved in place, on the CPU where the step runs our kernels (which read no slot of a row past its
         position)
Built here, for the number of cache tensors and their type, rather than stored in the model folder, by the process
that prepares a model's graphs (service.engine.prepare).
"""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from core.folder import IR_VERSION
from service.engine.kernels import DOMAIN as KERNELS_DOMAIN

# Not the model graphs' opset (core.folder.OPSET): the CUDA provider registers its Pad kernel from Pad-18 on, open
# ended, which ONNX Runtime takes for Pad-18 alone, so a later opset's Pad would run on the CPU (export.cuda_contract)
OPSET = 18
SHAPE = ["N", "H", "L", "Dh"]


def select_graph(count: int, dtype: int = TensorProto.FLOAT) -> bytes:
    rows = helper.make_tensor_value_info("rows", TensorProto.INT64, ["M"])
    xs = [helper.make_tensor_value_info(f"x_{i}", dtype, SHAPE) for i in range(count)]
    ys = [helper.make_tensor_value_info(f"y_{i}", dtype, ["M", *SHAPE[1:]]) for i in range(count)]
    nodes = [helper.make_node("Gather", [f"x_{i}", "rows"], [f"y_{i}"], axis=0) for i in range(count)]
    return _model(helper.make_graph(nodes, "select", [*xs, rows], ys))


def join_graph(count: int, dtype: int = TensorProto.FLOAT) -> bytes:
    pads = helper.make_tensor_value_info("pads_b", TensorProto.INT64, [8])
    a = [helper.make_tensor_value_info(f"a_{i}", dtype, SHAPE) for i in range(count)]
    b = [helper.make_tensor_value_info(f"b_{i}", dtype, ["M", "H", "L2", "Dh"]) for i in range(count)]
    ys = [helper.make_tensor_value_info(f"y_{i}", dtype, ["N2", "H", "L3", "Dh"]) for i in range(count)]
    nodes = []
    for i in range(count):
        nodes += [
            helper.make_node("Pad", [f"b_{i}", "pads_b"], [f"pb_{i}"]),
            helper.make_node("Concat", [f"a_{i}", f"pb_{i}"], [f"y_{i}"], axis=0),
        ]
    return _model(helper.make_graph(nodes, "join", [*a, *b, pads], ys))


def fit_graph(count: int, dtype: int = TensorProto.FLOAT) -> bytes:
    rows = helper.make_tensor_value_info("rows", TensorProto.INT64, ["M"])
    pads = helper.make_tensor_value_info("pads", TensorProto.INT64, [8])
    xs = [helper.make_tensor_value_info(f"x_{i}", dtype, SHAPE) for i in range(count)]
    ys = [helper.make_tensor_value_info(f"y_{i}", dtype, ["M", "H", "L2", "Dh"]) for i in range(count)]
    nodes = []
    for i in range(count):
        nodes += [
            helper.make_node("Gather", [f"x_{i}", "rows"], [f"g_{i}"], axis=0),
            helper.make_node("Pad", [f"g_{i}", "pads"], [f"y_{i}"]),
        ]
    return _model(helper.make_graph(nodes, "fit", [*xs, rows, pads], ys))


def move_graph(count: int) -> bytes:
    rows = helper.make_tensor_value_info("rows", TensorProto.INT64, ["M"])
    lengths = helper.make_tensor_value_info("lengths", TensorProto.INT64, ["K"])
    xs = [helper.make_tensor_value_info(f"x_{i}", TensorProto.FLOAT, SHAPE) for i in range(count)]
    ys = [helper.make_tensor_value_info(f"y_{i}", TensorProto.FLOAT, SHAPE) for i in range(count)]
    nodes = [helper.make_node("MoveRows", [f"x_{i}", "rows", "lengths"], [f"y_{i}"], domain=KERNELS_DOMAIN)
             for i in range(count)]
    return _model(helper.make_graph(nodes, "move", [*xs, rows, lengths], ys), kernels=True)


def _model(graph: onnx.GraphProto, kernels: bool = False) -> bytes:
    opsets = [helper.make_opsetid("", OPSET), *([helper.make_opsetid(KERNELS_DOMAIN, 1)] if kernels else [])]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=IR_VERSION)
    if not kernels:  # the checker knows no operator of ours
        onnx.checker.check_model(model)
    return model.SerializeToString()

"""The ONNX graphs of a model folder: encoder, one-step decoder with KV cache, and a row gather.

encoder.onnx   src (N, S) int64, src_mask (N, S) bool
               -> memory (N, S, D), cross_k_0, cross_v_0, cross_k_1, ... (each (N, H, S, Dh))
decoder.onnx   tokens (N,) int64, positions (N,) int64, width (1,) int64, src_mask,
               self_k_0, self_v_0, ... (each (N, H, L, Dh): L slots, L > every position), cross_k_0, cross_v_0, ...
               -> logits (N, V), top_logp (N, width), top_tokens (N, width),
                  new_self_k_0, new_self_v_0, ... (each (N, H, L, Dh): slot positions[i] of row i written)
               Row i reads tokens[i] at positions[i] and attends to slots 0..positions[i]: rows at different
               positions share a step.
Every cache tensor is an input of its own (model.transformer.KVCache): slicing one stacked tensor would copy it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper
from torch import Tensor, nn

from core.folder import IR_VERSION, OPSET, GraphIO, cache_names
from core.graph_edits import attribute_value, names_read
from export import onnx_files
from model.transformer import KVCache, Transformer


def flatten(cache: KVCache) -> list[Tensor]:
    return [t for kv in cache for t in kv]


def pairs(tensors: list[Tensor]) -> KVCache:
    return list(zip(tensors[0::2], tensors[1::2]))


class EncoderGraph(nn.Module):
    def __init__(self, model: Transformer):
        super().__init__()
        self.model = model

    def forward(self, src: Tensor, src_mask: Tensor) -> tuple[Tensor, ...]:
        memory = self.model.encode(src, src_mask)
        return memory, *flatten(self.model.cross_keys_values(memory))


class DecoderGraph(nn.Module):
    """One decoding step; its log-softmax and top-k are appended to the exported graph by append_top_k."""

    def __init__(self, model: Transformer):
        super().__init__()
        self.model = model

    def forward(
        self, tokens: Tensor, positions: Tensor, src_mask: Tensor, self_kv: list[Tensor], cross_kv: list[Tensor]
    ) -> tuple[Tensor, ...]:
        logits, new_self_kv = self.model.decode_step(tokens, positions, pairs(cross_kv), src_mask, pairs(self_kv))
        return logits, *flatten(new_self_kv)


def example_inputs(model: Transformer, batch: int = 2, src_len: int = 5, slots: int = 6) -> dict:
    """Inputs of both graphs with a padded source, used for tracing and for parity checks."""
    cfg = model.cfg
    src = torch.randint(4, cfg.vocab_size, (batch, src_len))
    src_mask = torch.ones(batch, src_len, dtype=torch.bool)
    src_mask[0, src_len - 2 :] = False
    src = src.masked_fill(~src_mask, cfg.pad_id)
    with torch.no_grad():
        _, *cross_kv = EncoderGraph(model)(src, src_mask)
    self_kv = [torch.randn(batch, cfg.n_heads, slots, cfg.d_head) for _ in range(2 * cfg.n_layers)]
    tokens = torch.randint(4, cfg.vocab_size, (batch,))
    positions = torch.arange(batch) + 1
    return {"src": src, "src_mask": src_mask, "tokens": tokens, "positions": positions, "self_kv": self_kv,
            "cross_kv": cross_kv}


def export_encoder(model: Transformer, path: Path) -> None:
    x = example_inputs(model)
    n, s = torch.export.Dim("batch"), torch.export.Dim("src_len")
    _export(
        EncoderGraph(model),
        (x["src"], x["src_mask"]),
        path,
        input_names=[GraphIO.SRC, GraphIO.SRC_MASK],
        output_names=[GraphIO.MEMORY, *cache_names(GraphIO.CROSS, model.cfg.n_layers)],
        dynamic_shapes={"src": {0: n, 1: s}, "src_mask": {0: n, 1: s}},
    )


def export_decoder(model: Transformer, path: Path, step: type[nn.Module] = DecoderGraph) -> None:
    """The decoder step graph (DecoderGraph, or a module of its inputs and outputs: a variant a study compares)."""
    x, layers = example_inputs(model), model.cfg.n_layers
    n, s, t = torch.export.Dim("batch"), torch.export.Dim("src_len"), torch.export.Dim("slots")
    _export(
        step(model),
        (x["tokens"], x["positions"], x["src_mask"], x["self_kv"], x["cross_kv"]),
        path,
        input_names=[GraphIO.TOKENS, GraphIO.POSITIONS, GraphIO.SRC_MASK, *cache_names(GraphIO.SELF, layers),
                     *cache_names(GraphIO.CROSS, layers)],
        output_names=[GraphIO.LOGITS, *cache_names(GraphIO.NEW_SELF, layers)],
        dynamic_shapes={
            "tokens": {0: n},
            "positions": {0: n},
            "src_mask": {0: n, 1: s},
            "self_kv": [{0: n, 2: t}] * (2 * layers),
            "cross_kv": [{0: n, 2: s}] * (2 * layers),
        },
    )
    append_top_k(path)


def append_top_k(path: Path) -> None:
    """Add what the search needs of the logits: top_logp, top_tokens = log_softmax(logits).topk(width).

    The same computation as model.transformer.best_next_tokens; `width` is an input, since the search asks for 1
    token per row (greedy) or 2 * beam size. Done in the graph, it spares copying (N, V) logits out at every step.
    """
    model = onnx.load(str(path))
    graph = model.graph
    io = GraphIO
    graph.input.append(helper.make_tensor_value_info(io.WIDTH, TensorProto.INT64, [1]))
    graph.node.extend(
        [
            helper.make_node("LogSoftmax", [io.LOGITS], ["logp"], name="log_softmax", axis=-1),
            helper.make_node("TopK", ["logp", io.WIDTH], [io.TOP_LOGP, io.TOP_TOKENS], name="top_k", axis=-1),
        ]
    )
    graph.output.insert(1, helper.make_tensor_value_info(io.TOP_LOGP, TensorProto.FLOAT, ["batch", "width"]))
    graph.output.insert(2, helper.make_tensor_value_info(io.TOP_TOKENS, TensorProto.INT64, ["batch", "width"]))
    onnx_files.save(model, path)
    onnx.checker.check_model(str(path))


# how fold_weights computes each node it folds, from its inputs' values and its node
FOLDS = {
    "Transpose": lambda values, node: np.transpose(values[0], attribute_value(node, "perm")),
    "Concat": lambda values, node: np.concatenate(values, axis=attribute_value(node, "axis")),
}


def fold_weights(graph: onnx.GraphProto, op_types: set[str]) -> None:
    """Replace each node of these types (of FOLDS) that reads initializers alone by its value, an initializer (as
    ONNX Runtime folds it at load); a weight that nothing else reads is then dropped. The int8 quantizer takes only
    initializers as weights: model.transformer.linears' joined weights (a Concat) and the output projection's
    transposed embedding must be initializers of their own."""
    weights = {w.name: w for w in graph.initializer}
    folds = [node for node in graph.node
             if node.op_type in op_types and node.input and all(name in weights for name in node.input)]
    for node in folds:
        value = FOLDS[node.op_type]([numpy_helper.to_array(weights[name]) for name in node.input], node)
        weights[node.output[0]] = numpy_helper.from_array(np.ascontiguousarray(value), node.output[0])
        graph.initializer.append(weights[node.output[0]])
        graph.node.remove(node)
    read = names_read(graph)
    for name in {name for node in folds for name in node.input} - read:
        graph.initializer.remove(weights[name])


def _export(module: nn.Module, args: tuple, path: Path, **kwargs) -> None:
    module.eval()
    with torch.no_grad():
        program = torch.onnx.export(module, args, dynamo=True, opset_version=OPSET, external_data=False, **kwargs)
    program.optimize()
    program.save(str(path), external_data=False)
    graph = onnx.load(str(path))
    graph.ir_version = min(graph.ir_version, IR_VERSION)
    fold_weights(graph.graph, {"Concat"})
    # The exporter also lists each weight's shape in value_info, a copy that goes stale once a tool rewrites the
    # weight: the int8 quantizer turns every Gemm into a MatMul of its transposed weight, and then fails on it.
    weights = {weight.name for weight in graph.graph.initializer}
    shapes = [info for info in graph.graph.value_info if info.name not in weights]
    del graph.graph.value_info[:]
    graph.graph.value_info.extend(shapes)
    onnx_files.save(graph, path)
    onnx.checker.check_model(str(path))

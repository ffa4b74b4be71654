"""The ONNX graphs of a model folder: encoder, one-step decoder with KV cache, and a row gather.

encoder.onnx   src (N, S) int64, src_mask (N, S) bool
               -> memory (N, S, D), cross_kv (L, 2, N, H, S, Dh)
decoder.onnx   tokens (N, 1) int64, self_kv (L, 2, N, H, T, Dh), cross_kv, src_mask
               -> logits (N, V), new_self_kv (L, 2, N, H, T+1, Dh)      (T = 0 at the first step)
select.onnx    x (L, 2, N, H, T, Dh) float, rows (M,) int64 -> x[:, :, rows]  (reorders caches on the GPU)
"""

from __future__ import annotations

from pathlib import Path

import onnx
import torch
from onnx import TensorProto, helper
from torch import Tensor, nn

from model.transformer import Transformer

OPSET = 18
IR_VERSION = 10  # ONNX Runtime 1.31 reads IR versions up to 13; onnx's helpers would write 14


class EncoderGraph(nn.Module):
    def __init__(self, model: Transformer):
        super().__init__()
        self.model = model

    def forward(self, src: Tensor, src_mask: Tensor) -> tuple[Tensor, Tensor]:
        memory = self.model.encode(src, src_mask)
        return memory, self.model.cross_keys_values(memory)


class DecoderGraph(nn.Module):
    def __init__(self, model: Transformer):
        super().__init__()
        self.model = model

    def forward(self, tokens: Tensor, self_kv: Tensor, cross_kv: Tensor, src_mask: Tensor) -> tuple[Tensor, Tensor]:
        logits, new_self_kv = self.model.decode(tokens, cross_kv, src_mask, self_kv)
        return logits[:, -1], new_self_kv


def example_inputs(model: Transformer, batch: int = 2, src_len: int = 5, past: int = 3) -> dict[str, Tensor]:
    """Inputs of both graphs with a padded source, used for tracing and for parity checks."""
    cfg = model.cfg
    src = torch.randint(4, cfg.vocab_size, (batch, src_len))
    src_mask = torch.ones(batch, src_len, dtype=torch.bool)
    src_mask[0, src_len - 2 :] = False
    src = src.masked_fill(~src_mask, cfg.pad_id)
    with torch.no_grad():
        _, cross_kv = EncoderGraph(model)(src, src_mask)
    self_kv = torch.randn(cfg.n_layers, 2, batch, cfg.n_heads, past, cfg.d_head)
    tokens = torch.randint(4, cfg.vocab_size, (batch, 1))
    return {"src": src, "src_mask": src_mask, "tokens": tokens, "self_kv": self_kv, "cross_kv": cross_kv}


def export_encoder(model: Transformer, path: Path) -> None:
    x = example_inputs(model)
    n, s = torch.export.Dim("batch"), torch.export.Dim("src_len")
    _export(
        EncoderGraph(model),
        (x["src"], x["src_mask"]),
        path,
        input_names=["src", "src_mask"],
        output_names=["memory", "cross_kv"],
        dynamic_shapes={"src": {0: n, 1: s}, "src_mask": {0: n, 1: s}},
    )


def export_decoder(model: Transformer, path: Path) -> None:
    x = example_inputs(model)
    n, s, t = torch.export.Dim("batch"), torch.export.Dim("src_len"), torch.export.Dim("past_len")
    _export(
        DecoderGraph(model),
        (x["tokens"], x["self_kv"], x["cross_kv"], x["src_mask"]),
        path,
        input_names=["tokens", "self_kv", "cross_kv", "src_mask"],
        output_names=["logits", "new_self_kv"],
        dynamic_shapes={
            "tokens": {0: n},
            "self_kv": {2: n, 4: t},
            "cross_kv": {2: n, 4: s},
            "src_mask": {0: n, 1: s},
        },
    )


def _export(module: nn.Module, args: tuple, path: Path, **kwargs) -> None:
    module.eval()
    with torch.no_grad():
        program = torch.onnx.export(module, args, dynamo=True, opset_version=OPSET, external_data=False, **kwargs)
    program.optimize()
    program.save(str(path), external_data=False)
    graph = onnx.load(str(path))
    graph.ir_version = min(graph.ir_version, IR_VERSION)
    onnx.save(graph, str(path))
    onnx.checker.check_model(str(path))


def write_select_graph(path: Path, dtype: int = TensorProto.FLOAT) -> None:
    """A one-node graph that gathers rows along axis 2 (the batch axis of both caches)."""
    x = helper.make_tensor_value_info("x", dtype, ["L", 2, "N", "H", "T", "Dh"])
    rows = helper.make_tensor_value_info("rows", TensorProto.INT64, ["M"])
    y = helper.make_tensor_value_info("y", dtype, ["L", 2, "M", "H", "T", "Dh"])
    graph = helper.make_graph([helper.make_node("Gather", ["x", "rows"], ["y"], axis=2)], "select", [x, rows], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))

"""Export a checkpoint to a self-contained model folder for the service.

    python -m export CHECKPOINT --out MODEL_DIR [--spm SPM] [--variants fp32 int8 fp16]

Writes encoder/decoder graphs for each precision (fp32: encoder.onnx; others: encoder.int8.onnx, ...; int8 is
export.quantize's; a graph of 1 GiB of weights or more has them beside it in GRAPH.data: export.onnx_files), the
tokenizer files and config.json. The tokenizer is the SentencePiece model SPM, or else the
one beside the checkpoint: spm.model, or a converted Marian model's source.spm, target.spm and vocab.json.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import torch
from onnx import TensorProto, helper, numpy_helper

from core.folder import OPSET, FolderConfig, fp32_io
from core.tokenizer import SPM_FILE, Layout, find_layout, layout_files
from export import onnx_files
from export.graphs import export_decoder, export_encoder
from export.quantize import quantize_int8
from model.checkpoint import load_model

VARIANTS = ("fp32", "int8", "fp16")


def graph_names(precision: str) -> dict[str, str]:
    suffix = "" if precision == "fp32" else f".{precision}"
    return {"encoder": f"encoder{suffix}.onnx", "decoder": f"decoder{suffix}.onnx"}


def convert_fp16(src: Path, dst: Path) -> None:
    """fp16 weights and arithmetic, for GPUs. The caches (the encoder's keys/values, the step's self- and
    cross-attention caches) are fp16 in and out, so that no step casts them; the other inputs and outputs (memory,
    logits, top_logp) stay fp32 (core.folder.fp32_io).

    The converter appends the Casts of the graph inputs after the nodes that read them; ONNX Runtime sorts graphs
    itself, but the ONNX checker (and other runtimes) want them in topological order, so the graph is sorted again.
    """
    import onnx_ir
    from onnxruntime.transformers.float16 import convert_float_to_float16

    # given the path, the converter infers shapes from the file, which works past protobuf's 2 GiB
    model = onnx_ir.from_proto(convert_float_to_float16(
        str(src), keep_io_types=fp32_io(onnx.load(str(src), load_external_data=False).graph)))
    model.graph.sort()
    onnx_files.save(onnx_ir.to_proto(model), dst)
    onnx.checker.check_model(str(dst))


def store_exact_weights_in_fp16(path: Path) -> None:
    """Store each fp32 weight that fp16 holds exactly as fp16, with a Cast back to fp32.

    Shipped weights are rounded to fp16 (model.package), so this halves an fp32 graph on disk without changing
    a number: ONNX Runtime folds the Casts into fp32 weights when it loads the graph and computes in fp32 as
    before. A weight that fp16 would change (the positional table, an unrounded checkpoint) stays as it is.
    """
    model = onnx.load(str(path))
    casts = []
    for weight in model.graph.initializer:
        if weight.data_type != TensorProto.FLOAT:
            continue
        values = numpy_helper.to_array(weight)
        with np.errstate(over="ignore"):  # a value beyond fp16's range becomes inf, so it stays fp32
            half = values.astype(np.float16)
        if not np.array_equal(half.astype(np.float32), values):
            continue
        name = weight.name
        weight.CopyFrom(numpy_helper.from_array(half, f"{name}.fp16"))
        casts.append(helper.make_node("Cast", [f"{name}.fp16"], [name], name=f"{name}.to_fp32", to=TensorProto.FLOAT))
    nodes = casts + list(model.graph.node)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    onnx_files.save(model, path)
    onnx.checker.check_model(str(path))


def copy_tokenizer(spm: Path | None, folder: Path, out: Path) -> Layout:
    """Copy the SentencePiece model spm, or else the tokenizer files in folder, into out; returns their layout."""
    layout = SPM_FILE if spm else find_layout(folder)
    files = {SPM_FILE: spm} if spm else {name: folder / name for name in layout_files(layout)}
    for name, path in files.items():
        if path.resolve() != (out / name).resolve():
            shutil.copy(path, out / name)
    return layout


def export_model(checkpoint: Path, out: Path, spm: Path | None, variants: list[str]) -> FolderConfig:
    """Export the checkpoint into the model folder out, with the tokenizer spm (None: the one beside the checkpoint)."""
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = copy_tokenizer(spm, checkpoint.parent, out)
    model = load_model(checkpoint)
    fp32 = graph_names("fp32")
    export_encoder(model, out / fp32["encoder"])
    export_decoder(model, out / fp32["decoder"])
    convert = {"int8": quantize_int8, "fp16": convert_fp16}
    for precision in variants:
        if precision != "fp32":
            for part, name in graph_names(precision).items():
                convert[precision](out / fp32[part], out / name)
    for name in fp32.values():  # after the conversions, which read plain fp32 weights
        store_exact_weights_in_fp16(out / name)
    config = FolderConfig(
        model=model.cfg,
        tokenizer=tokenizer,
        graphs={p: graph_names(p) for p in ["fp32", *[v for v in variants if v != "fp32"]]},
        opset=OPSET,
        versions={"torch": torch.__version__, "onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__},
        parameters=model.num_parameters(),
    )
    config.save(out)
    return config


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", type=Path)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--spm", type=Path, help="SentencePiece model (default: the tokenizer beside the checkpoint)")
    p.add_argument("--variants", nargs="+", choices=VARIANTS, default=["fp32", "int8"])
    args = p.parse_args(argv)
    export_model(args.checkpoint, args.out, args.spm, args.variants)
    for f in onnx_files.files(args.out):
        print(f"{f.name:24s} {f.stat().st_size / 2**20:9.2f} MiB")


if __name__ == "__main__":
    main()

"""Where a graph's weights go on disk: inside the .onnx file, or beside it when they are large.

protobuf cannot write a message past 2 GiB, so a graph whose weights take LARGE_BYTES or more (an NLLB-600M-shaped
model's fp32 graphs, BENCHMARKS.md#converting-and-serving-a-600m-parameter-model; the 1.3B and 3.3B models')
keeps them in one file beside it, ONNX's external data: decoder.onnx and
decoder.onnx.data, which onnx.load and ONNX Runtime read from the graph's folder. A smaller graph stays one file, as
the shipped models are. Every graph that export writes is written by save().
"""

from __future__ import annotations

from pathlib import Path

import onnx

LARGE_BYTES = 2**30  # weights of this many bytes or more go into GRAPH.data (tests set 0 to force it)


def data_file(path: Path) -> Path:
    """The external-data file of the graph at path: decoder.onnx -> decoder.onnx.data."""
    return path.with_name(f"{path.name}.data")


def weight_bytes(model: onnx.ModelProto) -> int:
    return sum(weight.ByteSize() for weight in model.graph.initializer)


def save(model: onnx.ModelProto, path: Path) -> None:
    """Write the graph to path, its weights beside it in data_file(path) when they take LARGE_BYTES or more; a data
    file left by an earlier write is replaced or removed. The graph is loaded in memory (onnx.load reads the data
    file): writing its weights out moves them out of `model`."""
    path, data = Path(path), data_file(Path(path))
    if weight_bytes(model) >= LARGE_BYTES:
        data.unlink(missing_ok=True)  # onnx appends to an existing data file
        onnx.save_model(model, str(path), save_as_external_data=True, location=data.name)
    else:
        onnx.save_model(model, str(path))
        data.unlink(missing_ok=True)


def files(folder: Path) -> list[Path]:
    """The graph files of a folder, their data files included."""
    return sorted([*folder.glob("*.onnx"), *folder.glob("*.onnx.data")])

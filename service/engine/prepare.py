"""The graphs a model's sessions load beside its folder's own, made by a process of their own.

    graphs = prepared_graphs(Path("models/en-de"), "decoder.onnx", "encoder.onnx", kernels=True)
    graphs.select, graphs.step, graphs.encoder, graphs.refused

The cache graphs (service.engine.cache_graphs) are built for the step's cache tensors, and the step (and the
encoder's fp16 projections, where this CPU runs ours) are rewritten for our kernels (service.engine.kernels.graph)
where asked. All need onnx, whose import the engine's process would hold to its end; so `python -m
service.engine.prepare` makes them and writes them to a folder, and the engine reads the bytes and never imports
onnx on the CPU.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from tempfile import TemporaryDirectory

import service

CACHE_GRAPHS = ("select", "join", "fit")  # built for every step
MOVE = "move"  # the cache graph of our kernels, beside their step
STEP = "step"  # the step with our kernels
ENCODER = "encoder"  # the encoder with our fp16-weight projections, beside that step
REFUSED = "refused.txt"  # why the step could not take our kernels
GRAPH_REFUSED = 2  # the exit status of a child that refused the folder's step (the reason its last line)


@dataclass
class PreparedGraphs:
    """Serialized graphs: the cache graphs, and the step with our kernels (None where not asked, or `refused`), and
    the encoder with our fp16-weight projections (None where not asked, or where this CPU or its graph has none)."""

    select: bytes
    join: bytes
    fit: bytes
    move: bytes | None = None
    step: bytes | None = None
    encoder: bytes | None = None
    refused: str | None = None


def prepared_graphs(model_dir: Path, decoder: str, encoder: str, kernels: bool) -> PreparedGraphs:
    """The graphs for a folder's decoder step and encoder (the files `decoder` and `encoder` in model_dir), made in
    a process of their own."""
    root = str(Path(service.__file__).resolve().parent.parent)  # where the child finds this package
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    with TemporaryDirectory(prefix="translator-graphs-") as out:
        command = [sys.executable, "-m", "service.engine.prepare", str(model_dir), decoder, encoder, out]
        done = subprocess.run([*command, *(["--kernels"] if kernels else [])], env=env, capture_output=True,
                              text=True)
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        if done.returncode == GRAPH_REFUSED:
            raise ValueError(last)
        if done.returncode != 0:
            raise RuntimeError(f"the graphs of {model_dir / decoder} could not be prepared: {last}")
        folder = Path(out)
        read = {name: path.read_bytes() for name in [*CACHE_GRAPHS, MOVE, STEP, ENCODER]
                if (path := folder / f"{name}.onnx").exists()}
        refused = folder / REFUSED
        return PreparedGraphs(**read, refused=refused.read_text() if refused.exists() else None)


def prepare(model_dir: Path, decoder: str, encoder: str, out: Path, kernels: bool) -> None:
    """Write the cache graphs of the step's cache tensors to `out`, and where asked the step with our kernels (or,
    where it cannot take them, the reason) and the encoder with our fp16-weight projections (where this CPU runs
    them and it has some). A step of an older export, which the engine cannot run, is refused (ValueError)."""
    import onnx

    from core.folder import GraphIO
    from service.engine.cache_graphs import fit_graph, join_graph, move_graph, select_graph
    from service.engine.kernels import built_library, half_weights
    from service.engine.kernels.graph import KernelsRefused, with_half_weights, with_kernels

    # without its weights where they are external data: a large model's stay there, where the step's session reads
    # them (service.engine.sessions)
    step = onnx.load(str(model_dir / decoder), load_external_data=False)
    if GraphIO.POSITIONS not in {x.name for x in step.graph.input}:
        raise ValueError(f"{model_dir} holds graphs of an older export (a cache that grows by concatenation, no "
                         "positions); export its model.pt again with `python -m export`")
    caches = [x for x in step.graph.input if x.name.startswith(f"{GraphIO.SELF}_")]
    count, dtype = len(caches), caches[0].type.tensor_type.elem_type
    for name, graph in zip(CACHE_GRAPHS, (select_graph, join_graph, fit_graph), strict=True):
        (out / f"{name}.onnx").write_bytes(graph(count, dtype))
    if kernels:
        try:
            library = built_library()
            halves = library is not None and half_weights(library)
            (out / f"{STEP}.onnx").write_bytes(with_kernels(step, halves).SerializeToString())
            (out / f"{MOVE}.onnx").write_bytes(move_graph(count))
        except KernelsRefused as why:
            (out / REFUSED).write_text(str(why))
            return
        halved = with_half_weights(onnx.load(str(model_dir / encoder), load_external_data=False)) if halves else None
        if halved is not None:
            (out / f"{ENCODER}.onnx").write_bytes(halved.SerializeToString())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("decoder", help="the decoder step's graph file in model_dir")
    parser.add_argument("encoder", help="the encoder's graph file in model_dir")
    parser.add_argument("out", type=Path, help="the folder the graphs are written to")
    parser.add_argument("--kernels", action="store_true",
                        help="also the step with our kernels (and the encoder with our fp16-weight projections)")
    args = parser.parse_args()
    try:
        prepare(args.model_dir, args.decoder, args.encoder, args.out, args.kernels)
    except ValueError as refused:  # a step of an older export
        print(f"{refused}".replace("\n", " "), file=sys.stderr)
        sys.exit(GRAPH_REFUSED)


if __name__ == "__main__":
    main()

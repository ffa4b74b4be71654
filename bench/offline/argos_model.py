"""An Argos Translate package of LibreTranslate's size end to end: conversion, export, the folder against the
package file by file, and the service's memory serving it.

    python -m bench.offline.argos_model [--work bench/results/tmp/argos-base] [--variants fp32 int8]
                                        [--serve int8] [--requests 8] [--keep]

Builds (once; kept in WORK) the package translate-en_de-1_0 (installed: a folder) and its .argosmodel (a zip of it)
as Locomotive, LibreTranslate's trainer, makes one with its defaults (its train.py): a SentencePiece model of 50,000
pieces (Locomotive's vocab_size; here trained on Multi30k's English and German and filled up with pieces no text
uses, bench.offline.large_model.sentencepiece_model), OpenNMT-py's shared vocabulary of them, and an OpenNMT-py
Transformer of 6 + 6 layers, d_model 512, 8 heads, ffn 2048, ReLU, pre-norm, one embedding for source, target and
output, OpenNMT-py's sinusoids, int8 weights (Locomotive converts with --quantization int8), written by ctranslate2's
own spec writer (bench.common.argos_package). Its weights are random (no network here: no real package), the end
token's output bias lowered so that no translation ever ends: every one is decoded to its length limit. Then, as
bench.offline.large_model does (each command a process of its own, timed, with its peak RSS):

    python -m model.convert WORK/translate-en_de-1_0.argosmodel --out WORK/model
    python -m export WORK/model/model.pt --out WORK/model --variants fp32 int8

lists the package's files and ours, and serves the folder with `python -m service` (int8): a few requests through
/translate, every one answered, the service's RSS once loaded and after. Writes bench/results/argos-model.json and
.md. With --keep the exported folder stays, for ours against CTranslate2 on the package's own model (LibreTranslate
runs ctranslate2 on the package's model/ folder, int8):

    python -m bench.offline.engines --model-dir WORK/model --package WORK/translate-en_de-1_0 --random-weights ...
"""

from __future__ import annotations

from pathlib import Path

from bench.common.argos_package import LOCOMOTIVE, opennmt_vocabulary, random_spec, write_package, zip_package
from bench.common.cli import command_line
from bench.common.defaults import RESULTS
from bench.common.machine import environment
from bench.common.report import markdown_table, write_results
from bench.common.sentences import multi30k_sentences
from bench.offline.large_model import convert_export_serve, folder_files, markdown, parse_args, sentencepiece_model

WORK = RESULTS / "tmp" / "argos-base"
PACKAGE = "translate-en_de-1_0"
PIECES = 50_000  # Locomotive's default vocab_size
STD = 0.05  # of the random projections: about 1 / sqrt(d_model), so that activations keep their scale
NEVER_ENDS = -1000.0  # added to the end token's output bias


def build_package(work: Path) -> Path:
    """The installed package WORK/PACKAGE and WORK/PACKAGE.argosmodel (random weights, seed 0)."""
    work.mkdir(parents=True, exist_ok=True)
    texts = [t for lang in ("en", "de") for t in multi30k_sentences(split="train", lang=lang)]
    pieces = work / "sentencepiece.model"
    sentencepiece_model(pieces, texts, PIECES)
    spec = random_spec(opennmt_vocabulary(pieces), shape=LOCOMOTIVE, std=STD, end_bias=NEVER_ENDS)
    folder = write_package(work / PACKAGE, spec, pieces, "int8")
    zip_package(folder)
    return folder


def main(argv: list[str] | None = None) -> None:
    args = parse_args(__doc__, WORK, ["fp32", "int8"], argv)
    package = args.work / PACKAGE
    archive = package.with_name(f"{PACKAGE}.argosmodel")
    if not archive.exists():
        build_package(args.work)
    result = {
        "environment": environment(["torch", "onnx", "onnxruntime", "ctranslate2"]),
        "command": command_line("bench.offline.argos_model", argv),
        "package_files": folder_files(package),
        "package_archive_mib": archive.stat().st_size / 2**20,
        **convert_export_serve([str(archive)], args),
    }
    theirs = [[name, f"{mib:,.1f}"] for name, mib in result["package_files"].items()]
    text = (
        markdown(result, "an Argos Translate package of Locomotive's defaults (Transformer base, 50,000 pieces)")
        + f"\nThe package: {PACKAGE}.argosmodel {result['package_archive_mib']:,.1f} MiB; installed, "
        f"{sum(result['package_files'].values()):,.1f} MiB:\n\n" + markdown_table(["file", "MiB"], theirs)
    )
    print("\n".join(map(str, write_results(args.out, "argos-model", result, text))))


if __name__ == "__main__":
    main()

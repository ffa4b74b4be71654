"""A 600M-parameter model end to end: conversion, export, the folder's size, and the service's memory serving it.

    python -m bench.offline.large_model [--work bench/results/tmp/nllb-600m] [--variants fp32 int8 fp16]
                                        [--serve int8] [--requests 8] [--keep]

Builds (once; kept in WORK) the Hugging Face folder of a model shaped as NLLB-200-distilled-600M (its config.json's
dimensions, random weights: no network here) with a tokenizer of NLLB-200's size: a SentencePiece model trained on
Multi30k's English and German, filled up to NLLB-200's 256,000 pieces with pieces no text uses, read by transformers'
NllbTokenizer with NLLB-200's language codes. Then runs, each as a process of its own, timed, with its peak memory
(the largest resident set of the process tree, ru_maxrss of the children):

    python -m model.convert WORK/hf --languages en de fr --out WORK/model
    python -m export WORK/model/model.pt --out WORK/model --variants fp32 int8 fp16

lists the folder's files and sizes, and serves it with `python -m service` (TRANSLATOR_MODEL_DIR=WORK/model,
TRANSLATOR_PRECISION=int8): a few requests through /translate, every one answered, and the resident set of the
service's process tree once loaded and after the requests. Writes bench/results/large-model.json and .md. The
exported folder is deleted afterwards unless --keep (bench.offline.engines can use it: --model-dir WORK/model); the
Hugging Face folder is kept for the next run.
"""

from __future__ import annotations

import argparse
import io
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx

from bench.common.cli import command_line
from bench.common.defaults import REPO, RESULTS
from bench.common.machine import environment, tree_rss_mib
from bench.common.report import markdown_table, write_results
from bench.common.sentences import SENTENCES, multi30k_sentences
from core.folder import FolderConfig
from core.tokenizer import FAIRSEQ_FILES
from service.launch import running_service

WORK = RESULTS / "tmp" / "nllb-600m"
# NLLB-200-distilled-600M's config.json, less what transformers fills in alike
NLLB_600M = dict(
    vocab_size=256206, d_model=1024, encoder_layers=12, decoder_layers=12, encoder_attention_heads=16,
    decoder_attention_heads=16, encoder_ffn_dim=4096, decoder_ffn_dim=4096, max_position_embeddings=1024,
    scale_embedding=True, activation_function="relu", dropout=0.1, attention_dropout=0.1, activation_dropout=0.0,
    pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2, tokenizer_class="NllbTokenizer",
)  # fmt: skip
SENTENCEPIECE_PIECES = 256_000  # NLLB-200's SentencePiece model: fairseq's ids 4..256000, then the languages
LANGUAGES = ["en", "de", "fr"]


def sentencepiece_model(path: Path, texts: list[str], pieces: int = SENTENCEPIECE_PIECES) -> None:
    """A unigram SentencePiece model trained on texts, then given pieces that no text uses (scored below all others)
    up to `pieces`, as many as NLLB-200's."""
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2

    buffer = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(texts), model_writer=buffer, model_type="unigram",
                                   vocab_size=8000, character_coverage=1.0, minloglevel=2)
    model = sentencepiece_model_pb2.ModelProto.FromString(buffer.getvalue())
    lowest = min(piece.score for piece in model.pieces) - 1
    for i in range(pieces - len(model.pieces)):
        model.pieces.add(piece=f"\u2581\u27e8{i}\u27e9", score=lowest - i * 1e-6)
    path.write_bytes(model.SerializeToString())


def build_hf_folder(folder: Path) -> None:
    """The Hugging Face folder of an NLLB-200-600M-shaped M2M100ForConditionalGeneration, random weights (seed 0)."""
    import torch
    import transformers
    from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES


    folder.mkdir(parents=True, exist_ok=True)
    texts = [t for lang in ("en", "de") for t in multi30k_sentences(split="train", lang=lang)]
    sentencepiece_model(folder / FAIRSEQ_FILES["sentencepiece"], texts)
    tokenizer = transformers.NllbTokenizer.from_pretrained(folder)
    tokenizer.add_tokens(FAIRSEQ_LANGUAGE_CODES, special_tokens=True)
    tokenizer.save_pretrained(folder)
    torch.manual_seed(0)
    model = transformers.M2M100ForConditionalGeneration(transformers.M2M100Config(**NLLB_600M))
    model.save_pretrained(folder)


def measured(command: list[str], log: Path) -> dict:
    """Run `command` from the repository root, its output into log: wall seconds and peak RSS (GNU time's maximum
    resident set size of the process, its children included)."""
    usage = log.with_suffix(".time")
    started = time.perf_counter()
    with log.open("w") as out:
        done = subprocess.run(["/usr/bin/time", "-o", str(usage), "-f", "%M", *command], cwd=REPO, stdout=out,
                              stderr=subprocess.STDOUT)
    seconds = time.perf_counter() - started
    if done.returncode:
        raise SystemExit(f"{' '.join(command)} failed (exit code {done.returncode}); see {log}")
    return {"command": " ".join(["python", *command[1:]]), "seconds": seconds,
            "peak_rss_mib": int(usage.read_text().split()[-1]) / 1024}


def folder_files(folder: Path) -> dict[str, float]:
    """Every file of the folder, its subfolders' too (by their paths in it), and its size, MiB."""
    return {str(f.relative_to(folder)): f.stat().st_size / 2**20 for f in sorted(folder.rglob("*")) if f.is_file()}


def served(model_dir: Path, precision: str, requests: int, log: Path) -> dict:
    """`python -m service` serving the folder: the RSS of its process tree once ready and after `requests` requests
    of 4 English sentences into German, greedy and beam 4 in turn (every answer checked)."""

    started = time.perf_counter()
    with running_service(model_dir, log, ready_timeout=900, precision=precision) as service:
        ready_s, pid = time.perf_counter() - started, service.process.pid
        rss_ready, answered, seconds = tree_rss_mib(pid), 0, []
        for i in range(requests):
            texts = SENTENCES[4 * i % len(SENTENCES) :][:4]
            body = {"q": texts, "source": "en", "target": "de", "beam_size": 1 + 3 * (i % 2), "max_length": 24}
            begun = time.perf_counter()
            response = httpx.post(f"{service.url}/translate", json=body, timeout=600)
            seconds.append(time.perf_counter() - begun)
            translated = response.json().get("translatedText") if response.status_code == 200 else None
            answered += isinstance(translated, list) and len(translated) == len(texts)
        rss_after = tree_rss_mib(pid)
    return {"precision": precision, "ready_s": ready_s, "rss_ready_mib": rss_ready, "rss_after_mib": rss_after,
            "requests": requests, "answered": answered, "request_seconds": seconds}


def markdown(result: dict, shape: str = "NLLB-200-distilled-600M") -> str:
    """The steps, the folder's files and the service's memory; `shape`: what the model is shaped as."""
    env, serve = result["environment"], result["serve"]
    steps = [[name, f"`{s['command']}`", f"{s['seconds']:.0f}", f"{s['peak_rss_mib'] / 1024:.2f}"]
             for name, s in result["steps"].items()]
    files = [[name, f"{mib:,.1f}"] for name, mib in result["files"].items()]
    total = sum(result["files"].values())
    return (
        f"Machine: {env['cpu']}, {env['cores']} cores. A model shaped as "
        f"{shape}, random weights: {result['parameters']:,} parameters.\n\n"
        + markdown_table(["step", "command", "seconds", "peak RSS GiB"], steps)
        + f"\nThe folder: {total / 1024:.2f} GiB.\n\n" + markdown_table(["file", "MiB"], files)
        + f"\nServed (`python -m service`, {serve['precision']}): ready after {serve['ready_s']:.0f} s; RSS of the "
        f"process tree {serve['rss_ready_mib'] / 1024:.2f} GiB ready, {serve['rss_after_mib'] / 1024:.2f} GiB after "
        f"{serve['requests']} requests of 4 sentences ({serve['answered']} answered, median "
        f"{sorted(serve['request_seconds'])[len(serve['request_seconds']) // 2]:.1f} s).\n"
    )


def parse_args(description: str, work: Path, variants: list[str], argv: list[str] | None) -> argparse.Namespace:
    """The options of this benchmark and of bench.offline.argos_model."""
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", type=Path, default=work, help="where the folders go (gitignored by default)")
    p.add_argument("--variants", nargs="+", default=variants)
    p.add_argument("--serve", default="int8", help="the precision served")
    p.add_argument("--requests", type=int, default=8)
    p.add_argument("--keep", action="store_true", help="keep the exported folder")
    p.add_argument("--out", type=Path, default=RESULTS)
    return p.parse_args(argv)


def convert_export_serve(convert_args: list[str], args: argparse.Namespace) -> dict:
    """`python -m model.convert CONVERT_ARGS --out WORK/model` and `python -m export` of it, each measured; then
    the folder's parameters and files, and the service's memory serving it. The folder is deleted afterwards
    unless --keep."""
    model = args.work / "model"
    shutil.rmtree(model, ignore_errors=True)
    python = [sys.executable, "-m"]
    steps = {
        "convert": measured([*python, "model.convert", *convert_args, "--out", str(model)], args.work / "convert.log"),
        "export": measured([*python, "export", str(model / "model.pt"), "--out", str(model), "--variants",
                            *args.variants], args.work / "export.log"),
    }
    result = {
        "parameters": FolderConfig.load(model).parameters,
        "steps": steps,
        "files": folder_files(model),
        "serve": served(model, args.serve, args.requests, args.work / "serve.log"),
    }
    if not args.keep:
        shutil.rmtree(model)
    return result


def main(argv: list[str] | None = None) -> None:
    args = parse_args(__doc__, WORK, ["fp32", "int8", "fp16"], argv)
    hf = args.work / "hf"
    if not (hf / "model.safetensors").exists():
        build_hf_folder(hf)
    result = {
        "environment": environment(["torch", "onnx", "onnxruntime", "transformers"]),
        "command": command_line("bench.offline.large_model", argv),
        **convert_export_serve([str(hf), "--languages", *LANGUAGES], args),
    }
    print("\n".join(map(str, write_results(args.out, "large-model", result, markdown(result)))))


if __name__ == "__main__":
    main()

"""A second start with the model cache against the same model served from a plain folder: time until /ready.

    python -m bench.offline.cached_start [--work bench/results/tmp/cached-start] [--rounds 5] [--pieces 8000]

Builds (once; kept in WORK) an Argos Translate package of Locomotive's default shape (bench.common.argos_package:
6 + 6 layers, d_model 512, random weights, int8) over a SentencePiece model of --pieces pieces, and an Argos index
of it (file:// links, its SHA-256). Pulls it into WORK/cache as the first start does (`python -m model.pull en-de`,
timed), copies the cached folder to WORK/plain/en-de, then starts `python -m service` (one HTTP worker, the CPU
provider, fp32) alternately in two ways, --rounds times each: TRANSLATOR_MODEL_DIR=WORK/plain, and
TRANSLATOR_MODELS=en-de with TRANSLATOR_MODEL_CACHE=WORK/cache (an empty TRANSLATOR_MODEL_DIR, and the index moved
away: a start that reached for it would fail). Each start's time is from the process's launch until GET /ready
answers 200. Writes bench/results/cached-start.json and .md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from bench.common.argos_package import LOCOMOTIVE, opennmt_vocabulary, random_spec, write_package, zip_package
from bench.common.cli import command_line
from bench.common.defaults import REPO, RESULTS
from bench.common.machine import environment
from bench.common.report import markdown_table, median, write_results
from bench.common.sentences import multi30k_sentences
from bench.offline.large_model import sentencepiece_model
from service.launch import running_service

PACKAGE = "translate-en_de-1_0"
STD = 0.05  # of the random projections, as bench.offline.argos_model's


def build(work: Path, pieces: int) -> Path:
    """WORK/index.json naming WORK/PACKAGE.argosmodel, built once."""
    index = work / "index.json"
    if index.is_file():
        return index
    work.mkdir(parents=True, exist_ok=True)
    texts = [t for lang in ("en", "de") for t in multi30k_sentences(split="train", lang=lang)]
    sentencepiece_model(work / "sentencepiece.model", texts, pieces)
    spec = random_spec(opennmt_vocabulary(work / "sentencepiece.model"), shape=LOCOMOTIVE, std=STD)
    package = zip_package(write_package(work / "package" / PACKAGE, spec, work / "sentencepiece.model", "int8"))
    entry = {"from_code": "en", "to_code": "de", "package_version": "1.0", "links": [package.resolve().as_uri()],
             "checksum": hashlib.sha256(package.read_bytes()).hexdigest()}
    index.write_text(json.dumps([entry]))
    return index


def time_to_ready(log: Path, model_dir: Path, **settings: object) -> float:
    start = time.perf_counter()
    with running_service(model_dir, log, ready_timeout=600, http_workers=1, provider="cpu", **settings):
        return time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", type=Path, default=RESULTS / "tmp" / "cached-start")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--pieces", type=int, default=8000, help="SentencePiece pieces (Locomotive's default: 50,000)")
    args = p.parse_args(argv)
    work, cache = args.work, args.work / "cache"
    index = build(work, args.pieces)
    shutil.rmtree(cache, ignore_errors=True)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "model.pull", "en-de", "--cache", str(cache)], cwd=REPO, check=True,
                   env={**os.environ, "TRANSLATOR_ARGOS_INDEX": index.as_uri()})
    first_pull = time.perf_counter() - start
    plain, empty = work / "plain", work / "empty"
    shutil.rmtree(plain, ignore_errors=True)
    shutil.copytree(cache / "argos-en-de", plain / "en-de")
    empty.mkdir(exist_ok=True)
    moved = index.with_suffix(".away")
    index.rename(moved)  # a cached start must not read it
    times: dict[str, list[float]] = {"plain folder": [], "cache (TRANSLATOR_MODELS)": []}
    try:
        for _ in range(args.rounds):
            times["plain folder"].append(time_to_ready(work / "plain.log", plain))
            times["cache (TRANSLATOR_MODELS)"].append(time_to_ready(
                work / "cached.log", empty, models="en-de", model_cache=cache, argos_index=index.as_uri()))
    finally:
        moved.rename(index)
    medians = {way: median(values) for way, values in times.items()}
    ratio = medians["cache (TRANSLATOR_MODELS)"] / medians["plain folder"]
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    data = {"command": command_line("bench.offline.cached_start", argv), "commit": commit,
            "date": datetime.now(UTC).isoformat(timespec="seconds"), "machine": environment(["onnxruntime"]),
            "pieces": args.pieces, "first_pull_s": first_pull, "seconds_to_ready": times, "medians": medians,
            "cached_over_plain": ratio}
    rows = [[way, f"{medians[way]:.2f}", " ".join(f"{t:.2f}" for t in values)] for way, values in times.items()]
    markdown = (f"# Second start with the model cache\n\n`{data['command']}` at {commit[:10]}, {data['date']}, "
                f"{data['machine']['cpu']} ({data['machine']['cores']} cores)\n\nAn Argos package of Locomotive's "
                f"shape ({args.pieces:,} pieces, random int8 weights); the first start's pull (fetch, convert, "
                f"export fp32 int8) took {first_pull:.1f} s. Seconds from launch to /ready 200 (one HTTP worker, "
                f"CPU, fp32), rounds alternated:\n\n"
                + markdown_table(["served from", "median s", "rounds"], rows)
                + f"\nCached over plain: **{ratio:.3f}×** (goal: at most 1.10×).\n")
    for path in write_results(RESULTS, "cached-start", data, markdown):
        print(path)
    print(markdown)


if __name__ == "__main__":
    main()

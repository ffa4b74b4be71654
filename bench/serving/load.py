"""Load test of the translation service: concurrent clients sending single Multi30k sentences to /translate.

    python -m bench.serving.load --url http://127.0.0.1:8000 --concurrency 32 --seconds 20 [--data MULTI30K_DIR]
    python -m bench.serving.load --compare [--model-dir models/en-de] [--concurrency 32] [--seconds 20]
                                 [--out bench/results/load.json] [--setting precision=int8 ...]

With --url it loads a running server and prints the report (throughput, latency percentiles, errors) as
JSON. With --compare it starts the service twice, with dynamic batching (the default settings) and without
(TRANSLATOR_MAX_BATCH_SENTENCES=1), loads each the same way, writes both reports and the throughput ratio
to --out and prints them as a markdown table. Sentences: the English side of test_2016_flickr.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from bench.common.cli import parse_settings
from bench.common.defaults import LOAD_SECONDS, MODEL_DIR, RESULTS
from bench.common.machine import environment
from bench.common.report import write_results
from bench.common.sentences import multi30k_sentences
from bench.serving.loadgen import run_load
from service.launch import running_service

MODES = {"batching": {}, "batch size 1": {"max_batch_sentences": 1}}
PACKAGES = ["onnxruntime", "onnxruntime-gpu", "fastapi", "uvicorn", "sentencepiece", "numpy"]


def load_running(url: str, sentences: list[str], concurrency: int, seconds: float, warmup: float) -> dict:
    if warmup > 0:
        run_load(url, sentences, concurrency, warmup)
    return run_load(url, sentences, concurrency, seconds)


def compare(model_dir: Path, sentences: list[str], args: argparse.Namespace, settings: dict[str, str]) -> dict:
    """Load the service with and without batching; both reports, the settings and the throughput ratio."""
    runs = {}
    with tempfile.TemporaryDirectory() as logs:
        for name, mode_settings in MODES.items():
            run_settings = {**settings, **mode_settings}
            log = Path(logs) / f"{name.replace(' ', '-')}.log"
            with running_service(model_dir, log, **run_settings) as service:
                report = load_running(service.url, sentences, args.concurrency, args.seconds, args.warmup)
            runs[name] = {"settings": run_settings, **report}
    config = json.loads((model_dir / "config.json").read_text())
    batched, single = runs["batching"]["sentences_per_s"], runs["batch size 1"]["sentences_per_s"]
    return {
        "model": {"dir": str(model_dir), "name": config["name"], "parameters": config.get("parameters")},
        "machine": environment(PACKAGES),
        "sentences_in_pool": len(sentences),
        "runs": runs,
        "throughput_ratio": round(batched / single, 2) if single else None,
    }


def markdown(results: dict) -> str:
    rows = [
        "| serving | clients | sentences/s | p50 ms | p95 ms | p99 ms | errors |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, run in results["runs"].items():
        lat = run["latency_ms"]
        rows.append(
            f"| {name} | {run['concurrency']} | {run['sentences_per_s']:.1f} | {lat['p50']} | {lat['p95']} "
            f"| {lat['p99']} | {run['errors']} |"
        )
    rows.append(f"\nBatching gives {results['throughput_ratio']}x the throughput of batch-size-1 serving.")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--url", help="base URL of a running server")
    target.add_argument("--compare", action="store_true", help="start the service with and without batching")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--seconds", type=float, default=LOAD_SECONDS)
    p.add_argument("--warmup", type=float, default=2, help="seconds of load run first and not counted")
    p.add_argument("--data", type=Path, help="Multi30k folder (default: $MULTI30K_DIR or shared/data/multi30k)")
    p.add_argument("--model-dir", type=Path, default=MODEL_DIR, help="with --compare: the model folder")
    p.add_argument("--setting", action="append", default=[], help="with --compare: a service setting, name=value")
    p.add_argument("--out", type=Path, default=RESULTS / "load.json", help="with --compare: where to write the results")
    args = p.parse_args(argv)
    sentences = multi30k_sentences(args.data)
    if args.url:
        print(json.dumps(load_running(args.url, sentences, args.concurrency, args.seconds, args.warmup), indent=2))
        return
    results = compare(args.model_dir, sentences, args, parse_settings(args.setting))
    (path,) = write_results(args.out.parent, args.out.stem, results)
    print(markdown(results))
    print(f"\nwritten to {path}")


if __name__ == "__main__":
    main()

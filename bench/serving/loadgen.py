"""A closed-loop load generator for LibreTranslate-compatible servers (POST /translate, JSON {q, source, target}).

    python -m bench.serving.loadgen URL [--concurrency 8] [--seconds 20] [--source en] [--target de] < sentences.txt

    from bench.serving.loadgen import run_load
    run_load("http://127.0.0.1:8000", sentences, concurrency=8, seconds=20)

The URL is the server's base URL (or its /translate endpoint itself). `concurrency` clients each send one request
at a time, one sentence per request (the sentences in turn), for a bounded time (whole seconds).
The clients are wrk's (Debian package `wrk`, driven by loadgen.lua): written in C, it takes a few percent of a core
where a Python client took a fifth of this machine's two cores away from the server it measured.
Requests still in flight at the deadline are not counted; latency percentiles are wrk's, over every response.
The command reads the sentences from its standard input, one a line, and prints run_load's report as JSON.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common.defaults import LOAD_SECONDS

SCRIPT = Path(__file__).with_suffix(".lua")


def translate_url(url: str) -> str:
    url = url.rstrip("/")
    return url if url.endswith("/translate") else url + "/translate"


def wrk_command(url: str, bodies: Path, concurrency: int, seconds: float, timeout: float) -> list[str]:
    wrk = shutil.which("wrk")
    if wrk is None:
        raise SystemExit("the load generator needs wrk: apt-get install wrk (or make system-deps)")
    duration, timeout_s = max(1, round(seconds)), max(1, round(timeout))
    options = ["--threads", "1", "--connections", str(concurrency), "--duration", f"{duration}s"]
    return [wrk, *options, "--timeout", f"{timeout_s}s", "--script", str(SCRIPT), translate_url(url), "--", str(bodies)]


def parse_report(output: str, concurrency: int) -> dict:
    """The report of loadgen.lua's last lines: failures as 'error: ...', then the totals as JSON."""
    lines = output.strip().splitlines()
    totals = json.loads(lines[-1])
    errors = totals["failed"] + totals["socket_errors"]
    ok = totals["ok"]
    failures = [line.removeprefix("error: ") for line in lines if line.startswith("error: ")]
    return {
        "concurrency": concurrency,
        "seconds": totals["seconds"],
        "requests": ok + errors,
        "ok": ok,
        "errors": errors,
        "error_examples": list(dict.fromkeys(failures)),
        "sentences_per_s": ok / totals["seconds"],  # one sentence per request
        "latency_ms": {p: totals[p] if ok else None for p in ("p50", "p95", "p99")},
    }


def run_load(
    url: str,
    sentences: list[str],
    concurrency: int,
    seconds: float,
    source: str = "en",
    target: str = "de",
    timeout: float = 120.0,
    fields: dict | None = None,
) -> dict:
    """Throughput (sentences/s), latency_ms {p50, p95, p99} and errors of `concurrency` clients for `seconds`;
    `fields` go into every request too (an api_key)."""
    with tempfile.TemporaryDirectory() as tmp:
        bodies = Path(tmp) / "bodies.jsonl"
        payloads = ({"q": s, "source": source, "target": target, "format": "text", **(fields or {})}
                    for s in sentences)
        bodies.write_text("".join(json.dumps(p) + "\n" for p in payloads))
        command = wrk_command(url, bodies, concurrency, seconds, timeout)
        done = subprocess.run(command, capture_output=True, text=True, check=True)
    return parse_report(done.stdout, concurrency)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("url", help="the server's base URL (or its /translate endpoint)")
    p.add_argument("--concurrency", type=int, default=8, help="clients, each sending one request at a time")
    p.add_argument("--seconds", type=float, default=LOAD_SECONDS)
    p.add_argument("--source", default="en")
    p.add_argument("--target", default="de")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds a response may take")
    args = p.parse_args(argv)
    sentences = [line for line in sys.stdin.read().splitlines() if line.strip()]
    if not sentences:
        raise SystemExit("no sentences on standard input (one a line)")
    report = run_load(args.url, sentences, args.concurrency, args.seconds, args.source, args.target, args.timeout)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

"""The front end's capacity: what the HTTP workers sustain alone, and single-sentence serving with the real engine.

    python -m bench.serving.frontend [--workers 1 2 4 8] [--clients 1 32 128 512] [--seconds 10]

by workers: requests/s at each HTTP worker count, 128 clients of one-sentence requests, with stand-in models
    (service.testing.ECHO_MODELS: the engine process answers every sentence at once with its own source ids, so the
    figure is the HTTP layer's work alone: parse, check, split, tokenize, the engine round trip (service.channel),
    detokenize, JSON) and with the real ones (the shipped model).
by clients: the shipped model, one sentence a request, at each client count: sentences/s and latency p50/p99, with
    the HTTP workers (default count) and with --http-workers 0 (one process does everything, the layout before
    HTTP workers) side by side.
Clients are wrk's (bench.serving.loadgen). Results: bench/results/frontend.{json,md}.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.common.cli import command_line
from bench.common.defaults import MODEL_DIR, REPEATS, REPO, RESULTS, THREADS
from bench.common.machine import environment
from bench.common.report import markdown_table, write_results
from bench.common.sentences import SENTENCES
from bench.common.timing import rotation
from bench.serving.instant_model import INSTANT_MODELS
from bench.serving.loadgen import run_load
from service.launch import RunningService, free_port, running_server, running_service, service_env
from service.processes import setup_logging
from service.settings import Settings, default_http_workers
from service.supervisor import Supervisor
from service.testing import ECHO_MODELS

BY_WORKERS_CLIENTS = 128
STAND_IN = ["bench.serving.frontend", "--serve-stand-in"]  # the service's processes with the stand-in models
STAND_IN_BATCHED = [*STAND_IN, INSTANT_MODELS]  # with the stand-ins that go through the engine's batcher


def serve_stand_in(models: str) -> None:
    """`python -m bench.serving.frontend --serve-stand-in [LOADER]`: the service's processes with stand-in models
    (service.testing's ECHO_MODELS, or the loader named), settings from the TRANSLATOR_* variables."""
    settings = Settings()
    setup_logging(settings)
    raise SystemExit(Supervisor(settings, models=models).run())


@contextmanager
def stand_in_service(log: Path, settings: dict[str, object] | None = None, checkout: Path = REPO,
                     module: list[str] = STAND_IN, model_dir: Path = MODEL_DIR) -> Iterator[RunningService]:
    """`python -m MODULE` of a checkout (STAND_IN: the service with the stand-in models, which read model_dir's
    config only) on a free loopback port, ready; settings the defaults but `settings`, its data folder beside the
    log unless a setting names one."""
    port = free_port()
    env = service_env(model_dir, port, {"data_dir": log.parent / "data", **(settings or {})})
    with running_server([sys.executable, "-m", *module], port, log, env, checkout) as service:
        yield service


def by_workers(workers: list[int], seconds: float, threads: int) -> list[dict]:
    rows = []
    for engine in ("stand-in", "real"):
        for count in workers:
            settings = {"http_workers": count, "threads": threads, "log_level": "warning"}
            port = free_port()
            module = STAND_IN if engine == "stand-in" else ["service"]
            command, env = [sys.executable, "-m", *module], service_env(MODEL_DIR, port, settings)
            with running_server(command, port, RESULTS / "tmp" / "frontend.log", env, cwd=REPO) as server:
                run_load(server.url, SENTENCES, BY_WORKERS_CLIENTS, 2)  # warm-up
                report = run_load(server.url, SENTENCES, BY_WORKERS_CLIENTS, seconds)
            rows.append({"engine": engine, "workers": count, **report})
            print(f"{engine} engine, {count} workers: {report['sentences_per_s']:.0f} requests/s", flush=True)
    return rows


def by_clients(clients: list[int], seconds: float, threads: int, repeats: int) -> list[dict]:
    """Both layouts at every client count, in `repeats` interleaved rounds; the median round of each."""
    layouts = {"HTTP workers": default_http_workers(), "one process": 0}
    runs: dict[tuple[str, int], list[dict]] = {}
    for round_ in range(repeats):
        for name in rotation(list(layouts), round_):
            settings = {"http_workers": layouts[name], "threads": threads, "log_level": "warning"}
            with running_service(MODEL_DIR, RESULTS / "tmp" / "frontend-service.log", **settings) as service:
                run_load(service.url, SENTENCES, 32, 2)  # warm-up
                for concurrency in clients:
                    report = run_load(service.url, SENTENCES, concurrency, seconds)
                    runs.setdefault((name, concurrency), []).append(report)
                    print(f"round {round_ + 1}, {name} ({layouts[name]}), {concurrency} clients: "
                          f"{report['sentences_per_s']:.0f} sentences/s, p99 {report['latency_ms']['p99']} ms",
                          flush=True)
    rows = []
    for (name, _), reports in runs.items():
        middle = sorted(reports, key=lambda r: r["sentences_per_s"])[len(reports) // 2]
        rows.append({"layout": name, "http_workers": layouts[name], "rounds": [r["sentences_per_s"] for r in reports],
                     **middle})
    return sorted(rows, key=lambda r: (r["concurrency"], r["layout"]))


def report(workers: list[dict], clients: list[dict]) -> str:
    text = f"`{command_line('bench.serving.frontend')}`\n\n"
    text += f"By HTTP workers, {BY_WORKERS_CLIENTS} clients of one-sentence requests:\n\n"
    text += markdown_table(
        ["engine", "HTTP workers", "requests/s", "p50 ms", "p99 ms", "errors"],
        [[r["engine"], r["workers"], r["sentences_per_s"], r["latency_ms"]["p50"], r["latency_ms"]["p99"],
          r["errors"]] for r in workers],
    )
    text += "\nThe shipped model, one sentence a request (the median of interleaved rounds):\n\n"
    text += markdown_table(
        ["layout", "clients", "sentences/s", "p50 ms", "p99 ms", "errors"],
        [[f"{r['layout']} ({r['http_workers']})", r["concurrency"], r["sentences_per_s"], r["latency_ms"]["p50"],
          r["latency_ms"]["p99"], r["errors"]] for r in clients],
    )
    return text


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--clients", type=int, nargs="+", default=[1, 32, 128, 512])
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--threads", type=int, default=THREADS, help="the engine's ONNX Runtime threads")
    p.add_argument("--repeats", type=int, default=REPEATS, help="interleaved rounds of the two layouts")
    p.add_argument("--serve-stand-in", nargs="?", const=ECHO_MODELS, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve_stand_in:
        serve_stand_in(args.serve_stand_in)
    (RESULTS / "tmp").mkdir(parents=True, exist_ok=True)
    workers = by_workers(args.workers, args.seconds, args.threads)
    clients = by_clients(args.clients, args.seconds, args.threads, args.repeats)
    data = {"environment": environment(["onnxruntime-gpu", "fastapi", "uvicorn", "uvloop"]),
            "by_workers": workers, "by_clients": clients}
    markdown = report(workers, clients)
    print(markdown)
    for path in write_results(RESULTS, "frontend", data, markdown):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()

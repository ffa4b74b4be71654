"""Our service against the real LibreTranslate server on the same model, under the same closed-loop load.

    python -m bench.serving.servers [--model-dir models/en-de] [--concurrency 1 8 32 64] [--seconds 20] [--rounds 2]
                                    [--threads N] [--precision fp32|int8] [--beam 1]

Ours: `python -m service` (service.launch.running_service) with TRANSLATOR_THREADS, _PRECISION and
_BEAM_SIZE. LibreTranslate 1.9.6 from its own venv (bench.serving.argos), serving our model converted by
bench.common.ct2_convert and installed as Argos Translate packages, with CTranslate2 at the same precision
(ARGOS_COMPUTE_TYPE float32/int8), intra-op threads and beam size; its other settings are its defaults
(waitress with 4 threads, one CTranslate2 translation at a time, no batching across requests).
Each round starts each server in turn (the order alternating), warms it up, loads it at every
concurrency for --seconds with bench.serving.loadgen (single Multi30k test sentences, one per request, on
127.0.0.1), records the RSS of the server's whole process tree (ours: supervisor, engine and HTTP workers;
LibreTranslate: its process and any children), VmRSS summed after each level and VmHWM summed as the peak, and
stops it.
Reported: medians over rounds, written to bench/results/servers.json, servers.md and servers.png.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import groupby
from pathlib import Path

from bench.common.cli import add_engine_arguments, command_line, settings_of
from bench.common.defaults import LOAD_SECONDS, RESULTS
from bench.common.engines import COMPUTE_TYPES, ensure_ct2_model
from bench.common.machine import environment, tree_peak_rss_mib, tree_rss_mib
from bench.common.report import figure, log_x_panel, markdown_table, median, write_results
from bench.common.sentences import multi30k_sentences
from bench.common.timing import rotation
from bench.serving import argos
from bench.serving.loadgen import run_load
from core.corpus import TEST_SPLIT
from service.launch import RunningService, free_port, running_server, running_service

SERVERS = ["ours", "libretranslate"]
PACKAGES = ["onnxruntime", "onnxruntime-gpu", "fastapi", "uvicorn", "httpx", "sentencepiece", "numpy"]


CT2_STAND_IN = Path(__file__).parent / "ct2_stand_in"  # its sitecustomize replaces CTranslate2's Translator


@contextmanager
def running_libretranslate(
    log: Path, threads: int, compute_type: str, beam_size: int, languages: str, timeout: float = 180,
    stand_in: bool = False,
) -> Iterator[RunningService]:
    """LibreTranslate on a free loopback port, with the Argos packages bench.serving.argos installed; `stand_in`:
    its model replaced by one that echoes at once (CT2_STAND_IN)."""
    port = free_port()
    command = [str(argos.VENV / "bin" / "libretranslate"), "--host", "127.0.0.1", "--port", str(port)]
    command += ["--load-only", languages, "--disable-web-ui", "--disable-files-translation"]
    env = argos.environment(threads, compute_type, beam_size)
    if stand_in:
        env["PYTHONPATH"] = str(CT2_STAND_IN)
    with running_server(command, port, log, env, ready_path="/languages", ready_timeout=timeout) as server:
        yield server


@contextmanager
def running(name: str, args: argparse.Namespace, log: Path) -> Iterator[RunningService]:
    if name == "ours":
        settings = {"threads": args.threads, "precision": args.precision, "beam_size": args.beam}
        with running_service(args.model_dir, log, **settings) as service:
            yield service
    elif name == "libretranslate":
        languages = f"{args.source},{args.target}"
        with running_libretranslate(log, args.threads, COMPUTE_TYPES[args.precision], args.beam, languages) as service:
            yield service
    else:
        raise ValueError(f"unknown server {name}")


def load_server(name: str, args: argparse.Namespace, sentences: list[str], round_: int) -> list[dict]:
    """Start one server, warm it up, load it at every concurrency; one record per concurrency."""
    records = []
    log = args.out / "tmp" / f"servers-{name}-{round_}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with running(name, args, log) as service:
        pid, url = service.process.pid, service.url
        run_load(url, sentences, concurrency=4, seconds=args.warmup, source=args.source, target=args.target)
        for concurrency in args.concurrency:
            result = run_load(url, sentences, concurrency, args.seconds, source=args.source, target=args.target)
            memory = {"rss_mib": tree_rss_mib(pid), "peak_rss_mib": tree_peak_rss_mib(pid)}
            records.append({"server": name, "round": round_, **result, **memory})
            latency = result["latency_ms"]
            print(
                f"round {round_} {name:14s} concurrency {concurrency:3d}: {result['sentences_per_s']:7.1f} "
                f"sentences/s  p50 {latency['p50']} ms  p99 {latency['p99']} ms  errors {result['errors']}  "
                f"RSS {memory['rss_mib']:.0f} MiB",
                file=sys.stderr,
            )
    return records


def summarize(runs: list[dict]) -> list[dict]:
    """Medians over rounds per (server, concurrency); errors summed."""
    key = lambda r: (r["server"], r["concurrency"])  # noqa: E731
    rows = []
    for (server, concurrency), group in groupby(sorted(runs, key=key), key=key):
        group = list(group)
        latency = {p: median([r["latency_ms"][p] for r in group if r["latency_ms"][p] is not None]) for p in
                   ("p50", "p95", "p99")}  # fmt: skip
        rows.append({
            "server": server,
            "concurrency": concurrency,
            "rounds": len(group),
            "sentences_per_s": median([r["sentences_per_s"] for r in group]),
            "latency_ms": latency,
            "requests": sum(r["requests"] for r in group),
            "errors": sum(r["errors"] for r in group),
            "rss_mib": median([r["rss_mib"] for r in group]),
            "peak_rss_mib": max(r["peak_rss_mib"] for r in group),
        })  # fmt: skip
    return rows


def markdown(result: dict) -> str:
    env, settings = result["environment"], result["settings"]
    header = ["server", "clients", "sentences/s", "p50 ms", "p95 ms", "p99 ms", "requests", "errors", "RSS MiB",
              "peak RSS MiB"]  # fmt: skip
    rows = [
        [r["server"], r["concurrency"], r["sentences_per_s"], r["latency_ms"]["p50"], r["latency_ms"]["p95"],
         r["latency_ms"]["p99"], r["requests"], r["errors"], r["rss_mib"], r["peak_rss_mib"]]
        for r in result["summary"]
    ]  # fmt: skip
    return (
        f"Machine: {env['cpu']}, {env['cores']} cores. {settings['threads']} inference threads per server, "
        f"{settings['precision']}, beam {settings['beam']}; {settings['seconds']:g} s per level, "
        f"{settings['rounds']} rounds (medians); one test sentence per request. RSS: the server's whole process "
        "tree.\n\n" + markdown_table(header, rows)
    )


def plot(summary: list[dict], path: Path) -> None:
    """Throughput and latency percentiles against concurrency, one line per server."""
    with figure(path, 2) as (speed, latency):
        for server in dict.fromkeys(r["server"] for r in summary):
            rows = sorted((r for r in summary if r["server"] == server), key=lambda r: r["concurrency"])
            clients = [r["concurrency"] for r in rows]
            line = speed.plot(clients, [r["sentences_per_s"] for r in rows], marker="o", label=server)[0]
            for percentile, style in (("p50", "-"), ("p99", "--")):
                values = [r["latency_ms"][percentile] for r in rows]
                latency.plot(clients, values, style, marker="o", color=line.get_color(), label=f"{server} {percentile}")
        speed.set(xlabel="concurrent clients", ylabel="sentences/s", title="throughput")
        latency.set(yscale="log", xlabel="concurrent clients", ylabel="ms", title="latency")
        for ax in (speed, latency):
            log_x_panel(ax, sorted({r["concurrency"] for r in summary}))


def add_server_arguments(p: argparse.ArgumentParser) -> None:
    """--model-dir, --threads and --ct2-dir, and what running() and the warm-up read besides: --precision, --beam,
    --source, --target, --warmup."""
    add_engine_arguments(p, ct2=True)
    p.add_argument("--warmup", type=float, default=3, help="seconds of load at concurrency 4 first, not counted")
    p.add_argument("--precision", choices=sorted(COMPUTE_TYPES), default="fp32")
    p.add_argument("--beam", type=int, default=1, help="beam size of both servers (1: greedy)")
    p.add_argument("--source", default="en")
    p.add_argument("--target", default="de")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_server_arguments(p)
    p.add_argument("--servers", nargs="+", default=SERVERS, choices=SERVERS)
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32, 64])
    p.add_argument("--seconds", type=float, default=LOAD_SECONDS, help="load time per concurrency level")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--split", default=TEST_SPLIT)
    p.add_argument("--out", type=Path, default=RESULTS, help="where servers.json, servers.md, servers.png go")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    sentences = multi30k_sentences(split=args.split, lang=args.source)
    if "libretranslate" in args.servers:
        argos.ensure_venv()
        args.ct2_dir = ensure_ct2_model(args.model_dir, args.ct2_dir)
        argos.install_packages(args.ct2_dir, args.source, args.target, args.out / "tmp" / "argos")
    runs = []
    for round_ in range(args.rounds):
        for name in rotation(args.servers, round_):
            runs.extend(load_server(name, args, sentences, round_))
    settings = settings_of(args, "out")
    env = environment(PACKAGES)
    if "libretranslate" in args.servers:
        env["libretranslate_venv"] = argos.versions()
    result = {"environment": env, "settings": settings, "command": command_line("bench.serving.servers", argv),
              "summary": summarize(runs), "runs": runs}  # fmt: skip
    paths = write_results(args.out, "servers", result, markdown(result))
    plot(result["summary"], args.out / "servers.png")
    print("\n".join(str(p) for p in (*paths, args.out / "servers.png")))


if __name__ == "__main__":
    main()

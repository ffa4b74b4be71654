"""Soak test: the service under a mixed load for minutes, its memory sampled all along (not run in CI).

    python -m bench.serving.soak --minutes 10 [--clients 8] [--model-dir models/en-de] [--setting threads=1 ...]

Starts the service (service.launch) with the shipped model and drives it from `--clients` concurrent clients on
127.0.0.1 for the given time. Each client sends one request at a time, drawn at random by weight (KINDS): single
sentences greedy and with beam 4, 64-sentence requests, beam 8 with 3 alternatives (the heaviest: 64 sentences),
/detect, bad input that must get 400, and abandoned requests (64 sentences, beam 4, the socket closed right after
sending). The clients are httpx's (and raw sockets for the abandoned ones), not wrk as in bench.serving.loadgen: wrk
sends one kind of request. The resident memory of the service's processes together (the supervisor, the engine and
the HTTP workers: their VmRSS summed) is sampled every few seconds.

Writes bench/results/soak.json and soak.md: RSS idle before the load, its peak, at the end of the load and idle
after it, and its growth from the first minute's median to the last minute's; responses by kind and status, as the
clients saw them and as the service counted them (translator_requests_total, where a hang-up is a 499). The goal of
the robustness issue: RSS growth < 10 % and not one response 500.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bench.common.cli import parse_settings
from bench.common.defaults import MODEL_DIR, RESULTS
from bench.common.machine import environment, tree_rss_mib
from bench.common.report import markdown_table, write_results
from bench.common.sentences import SENTENCES, multi30k_sentences
from service.launch import running_service

GROWTH_GOAL_PERCENT = 10.0
BAD_BODIES: list[bytes] = [
    b'{"q": "Hello.", "target": ',  # malformed JSON
    b'{"q": "\\ud800", "source": "en", "target": "de"}',  # a lone surrogate
    b'{"q": "", "source": "en", "target": "de"}',  # an empty q: a missing one
    b'{"q": "Hello.", "source": "en", "target": "xx"}',  # a target not served
    b'{"q": "Hello.", "source": "en", "target": "de", "alternatives": ' + b"9" * 5000 + b"}",  # 5,000 digits
    b"[" * 10_000 + b"]" * 10_000,  # nested 10,000 deep
    b'{"q": "\xff\xfe", "source": "en", "target": "de"}',  # not UTF-8
    json.dumps({"q": "Hello.", "source": "en", "target": "de", "beam_size": 9}).encode(),  # a beam over the limit
]


@dataclass
class Request:
    path: str
    content: bytes
    abandon: bool = False  # send it on a raw socket and hang up at once


@dataclass
class Kind:
    name: str
    weight: int
    expected: int  # the status it should get (0: none, the client hangs up)
    make: Callable[[random.Random, list[str]], Request]


def translate_request(q: str | list[str], abandon: bool = False, **fields: object) -> Request:
    return Request("/translate", json.dumps({"q": q, "source": "en", "target": "de", **fields}).encode(), abandon)


KINDS = [
    Kind("single", 40, 200, lambda rng, pool: translate_request(rng.choice(pool))),
    Kind("single beam 4", 15, 200, lambda rng, pool: translate_request(rng.choice(pool), beam_size=4)),
    Kind("4 sentences beam 8, 3 alternatives", 6, 200,
         lambda rng, pool: translate_request(rng.sample(pool, 4), beam_size=8, alternatives=3)),
    Kind("64 sentences", 5, 200, lambda rng, pool: translate_request(rng.sample(pool, 64))),
    Kind("64 sentences beam 4", 2, 200, lambda rng, pool: translate_request(rng.sample(pool, 64), beam_size=4)),
    Kind("64 sentences beam 8, 3 alternatives", 1, 200,
         lambda rng, pool: translate_request(rng.sample(pool, 64), beam_size=8, alternatives=3)),
    Kind("detect", 6, 200,
         lambda rng, pool: Request("/detect", json.dumps({"q": rng.choice(pool)}).encode())),
    Kind("bad input", 10, 400, lambda rng, pool: Request("/translate", rng.choice(BAD_BODIES))),
    Kind("abandoned 64 sentences beam 4", 3, 0,
         lambda rng, pool: translate_request(rng.sample(pool, 64), abandon=True, beam_size=4)),
]


def sentence_pool(data: Path | None) -> list[str]:
    """Single sentences of Multi30k's test set short enough that 64 of them fit the service's 5,000 characters."""
    try:
        lines = multi30k_sentences(data)
    except FileNotFoundError:  # Multi30k is not there
        lines = SENTENCES * 4
    return [line.strip() for line in lines if len(line.strip()) <= 75 and line.strip()[:-1].count(".") == 0]


@dataclass
class Tally:
    """What the clients saw: statuses by kind, transport errors by kind, and latencies of the 200s."""

    statuses: Counter = field(default_factory=Counter)  # (kind, status) -> count
    errors: Counter = field(default_factory=Counter)  # (kind, exception name) -> count
    latencies: dict[str, list[float]] = field(default_factory=dict)


async def send(client: httpx.AsyncClient, port: int, request: Request) -> int:
    """The status of the response (0 for an abandoned request)."""
    if request.abandon:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        head = (f"POST {request.path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(request.content)}\r\n\r\n")
        writer.write(head.encode() + request.content)
        await writer.drain()
        writer.close()
        await writer.wait_closed()
        return 0
    response = await client.post(request.path, content=request.content, headers={"content-type": "application/json"})
    return response.status_code


async def client_loop(client: httpx.AsyncClient, port: int, pool: list[str], deadline: float, rng: random.Random,
                      tally: Tally) -> None:
    weights = [kind.weight for kind in KINDS]
    while time.monotonic() < deadline:
        kind = rng.choices(KINDS, weights)[0]
        started = time.perf_counter()
        try:
            status = await send(client, port, kind.make(rng, pool))
        except (httpx.HTTPError, OSError) as error:
            tally.errors[kind.name, type(error).__name__] += 1
            continue
        tally.statuses[kind.name, status] += 1
        if status == 200:
            tally.latencies.setdefault(kind.name, []).append(time.perf_counter() - started)


async def sample_rss(pid: int, every: float, stop: asyncio.Event, samples: list[tuple[float, float]]) -> None:
    started = time.monotonic()
    while not stop.is_set():
        samples.append((round(time.monotonic() - started, 1), round(tree_rss_mib(pid), 1)))
        try:
            await asyncio.wait_for(stop.wait(), every)
        except TimeoutError:
            pass


async def soak(url: str, pid: int, pool: list[str], clients: int, seconds: float, every: float,
               seed: int) -> tuple[Tally, list[tuple[float, float]]]:
    tally, samples, stop = Tally(), [], asyncio.Event()
    port = int(url.rsplit(":", 1)[1])
    deadline = time.monotonic() + seconds
    limits = httpx.Limits(max_connections=clients)
    sampler = asyncio.create_task(sample_rss(pid, every, stop, samples))
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
        await asyncio.gather(*(client_loop(client, port, pool, deadline, random.Random(seed + i), tally)
                               for i in range(clients)))
    stop.set()
    await sampler
    return tally, samples


def idle_rss(pid: int, seconds: float) -> float:
    """The median RSS over `seconds` of idling (after the service's idle memory release, 1 s by default)."""
    time.sleep(seconds)
    values = []
    for _ in range(5):
        values.append(tree_rss_mib(pid))
        time.sleep(0.2)
    return statistics.median(values)


def served_statuses(url: str) -> dict[str, int]:
    """translator_requests_total by status (summed over its pairs), as the service counted them."""
    text = httpx.get(url + "/metrics", timeout=30).text
    counted: Counter[str] = Counter()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "translator_requests_total":
                counted[s.labels["status"]] += int(s.value)
    return dict(counted)


def summarize(samples: list[tuple[float, float]], idle_before: float, idle_after: float, seconds: float) -> dict:
    """RSS figures: the growth compares the median of the first minute with the last minute's (or of the first and
    last halves of a soak shorter than two minutes)."""
    window = min(60.0, seconds / 2)
    first = [rss for t, rss in samples if t <= window]
    last = [rss for t, rss in samples if t >= samples[-1][0] - window]
    first_median, last_median = statistics.median(first), statistics.median(last)
    return {
        "idle_before_mib": round(idle_before, 1),
        "peak_mib": max(rss for _, rss in samples),
        "end_of_load_mib": samples[-1][1],
        "idle_after_mib": round(idle_after, 1),
        "window_s": window,
        "first_window_median_mib": first_median,
        "last_window_median_mib": last_median,
        "growth_percent": round(100 * (last_median - first_median) / first_median, 2),
    }


def percentile(values: list[float], q: float) -> float | None:
    return round(1000 * statistics.quantiles(values, n=100)[q - 1], 1) if len(values) >= 2 else None


def kind_report(kind: Kind, tally: Tally) -> dict:
    statuses = {str(status): n for (name, status), n in sorted(tally.statuses.items()) if name == kind.name}
    errors = {error: n for (name, error), n in tally.errors.items() if name == kind.name}
    unexpected = sum(n for status, n in statuses.items() if int(status) != kind.expected) + sum(errors.values())
    latencies = tally.latencies.get(kind.name, [])
    return {
        "kind": kind.name, "expected": kind.expected, "statuses": statuses, "transport_errors": errors,
        "unexpected": unexpected, "p50_ms": percentile(latencies, 50), "p95_ms": percentile(latencies, 95),
    }


def run(args: argparse.Namespace) -> dict:
    pool = sentence_pool(args.data)
    settings = {"log_level": "warning", **parse_settings(args.setting)}
    with tempfile.TemporaryDirectory() as logs:
        log = Path(logs) / "service.log"
        with running_service(args.model_dir, log, **settings) as service:
            pid = service.process.pid
            idle_before = idle_rss(pid, 3)
            seconds = args.minutes * 60
            tally, samples = asyncio.run(
                soak(service.url, pid, pool, args.clients, seconds, args.sample_seconds, args.seed)
            )
            idle_after = idle_rss(pid, 5)
            served = served_statuses(service.url)
            exit_code = service.stop()
        log_text = log.read_text(errors="replace")
    kinds = [kind_report(kind, tally) for kind in KINDS]
    rss = summarize(samples, idle_before, idle_after, seconds)
    responses_500 = sum(n for (_, status), n in tally.statuses.items() if status == 500)
    return {
        "command": f"python -m bench.serving.soak --minutes {args.minutes:g} --clients {args.clients}"
                   + "".join(f" --setting {s}" for s in args.setting),
        "machine": environment(["onnxruntime", "onnxruntime-gpu", "uvicorn", "fastapi", "httpx"]),
        "model_dir": str(args.model_dir),
        "settings": settings,
        "minutes": args.minutes,
        "clients": args.clients,
        "sentences_in_pool": len(pool),
        "rss": rss,
        "rss_samples": samples,
        "kinds": kinds,
        "served_statuses": served,
        "service_tracebacks": log_text.count("Traceback"),
        "exit_code": exit_code,
        "goal": {
            "rss_growth_under_10_percent": rss["growth_percent"] < GROWTH_GOAL_PERCENT,
            "no_500": responses_500 == 0 and served.get("500", 0) == 0,
        },
    }


def markdown(results: dict) -> str:
    rss, goal = results["rss"], results["goal"]
    lines = [
        "# Soak (bench.serving.soak)",
        "",
        f"`{results['command']}`",
        "",
        f"Machine: {results['machine']['cpu']}, {results['machine']['cores']} cores. Model {results['model_dir']}; "
        f"settings {results['settings']}; {results['clients']} clients for {results['minutes']:g} min.",
        "",
        "## Resident memory of the service (MiB)",
        "",
        markdown_table(
            ["idle before", "peak", "end of load", "idle after", f"median first {rss['window_s']:g} s",
             f"median last {rss['window_s']:g} s", "growth %"],
            [[rss["idle_before_mib"], rss["peak_mib"], rss["end_of_load_mib"], rss["idle_after_mib"],
              rss["first_window_median_mib"], rss["last_window_median_mib"], rss["growth_percent"]]],
        ),
        "## Responses by kind (as the clients saw them)",
        "",
        markdown_table(
            ["kind", "expected", "statuses", "unexpected", "p50 ms", "p95 ms"],
            [[k["kind"], k["expected"] or "none (hangs up)",
              ", ".join(f"{s}: {n}" for s, n in k["statuses"].items()) or "–", k["unexpected"],
              k["p50_ms"] if k["p50_ms"] is not None else "–", k["p95_ms"] if k["p95_ms"] is not None else "–"]
             for k in results["kinds"]],
        ),
        "As the service counted them (translator_requests_total; 499: the client hung up): "
        + ", ".join(f"{s}: {n}" for s, n in sorted(results["served_statuses"].items())),
        "",
        f"Tracebacks in the service log: {results['service_tracebacks']}; exit code after SIGTERM: "
        f"{results['exit_code']}.",
        "",
        f"Goal: RSS growth < {GROWTH_GOAL_PERCENT:g} %: {'met' if goal['rss_growth_under_10_percent'] else 'NOT met'}; "
        f"no response 500: {'met' if goal['no_500'] else 'NOT met'}.",
        "",
        "RSS samples (s: MiB): " + ", ".join(f"{t:g}: {m:g}" for t, m in results["rss_samples"]),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=10)
    p.add_argument("--clients", type=int, default=8, help="concurrent clients, each one request at a time")
    p.add_argument("--model-dir", type=Path, default=MODEL_DIR)
    p.add_argument("--setting", action="append", default=[], help="a service setting, name=value (threads=1)")
    p.add_argument("--sample-seconds", type=float, default=2, help="how often the service's RSS is sampled")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data", type=Path, help="Multi30k folder (default: $MULTI30K_DIR or shared/data/multi30k)")
    p.add_argument("--out-dir", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    results = run(args)
    text = markdown(results)
    json_path, md_path = write_results(args.out_dir, "soak", results, text)
    print(text)
    print(f"written to {json_path} and {md_path}")


if __name__ == "__main__":
    main()

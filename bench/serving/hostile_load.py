"""Hostile load and a stopped engine: what clients get when more work comes than the service can do in time, and
when the engine process stops answering.

    python -m bench.serving.hostile_load [--clients 64] [--sentences 64] [--beam 8] [--model-dir models]
                                         [--setting name=value ...] [--no-stall]

load: the service with its defaults (one HTTP worker per core, the shipped models) and `--clients` clients that
    each send one request of `--sentences` Multi30k test sentences at `--beam`, all at once. For the requests
    answered 200: p50 and max seconds; how many got 503 with Retry-After (and how fast), and any other 5xx. The
    issue's goal: every accepted request answered within 20 s, the rest 503 with Retry-After, not one 500.
stall: the engine process stopped (SIGSTOP) while a heavy request is in flight: the seconds until /ready answers
    503, until the request in flight is answered 503 with Retry-After, and what a new request then gets and how fast;
    then SIGCONT and the seconds until /ready answers 200 and a request is translated again.

Writes bench/results/hostile_load.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx

from bench.common.cli import parse_settings
from bench.common.defaults import REPO, RESULTS
from bench.common.machine import environment
from bench.common.report import write_results
from bench.serving.soak import sentence_pool
from service.launch import RunningService, running_service

MODELS = REPO / "models"
GOAL_S = 20.0  # every accepted request answered within this (the goal)


def request_body(pool: list[str], client: int, sentences: int, beam: int) -> dict:
    """Client `client`'s request: its own run of `sentences` sentences of the pool (wrapping around)."""
    start = client * sentences
    q = [pool[(start + i) % len(pool)] for i in range(sentences)]
    return {"q": q, "source": "en", "target": "de", "beam_size": beam}


async def timed_post(client: httpx.AsyncClient, body: dict) -> tuple[httpx.Response | Exception, float]:
    started = time.perf_counter()
    try:
        response: httpx.Response | Exception = await client.post("/translate", json=body)
    except httpx.HTTPError as error:
        response = error
    return response, time.perf_counter() - started


def summary(answers: list[tuple[httpx.Response | Exception, float]]) -> dict:
    """Statuses, and the seconds of the 200s and of the 503s."""
    statuses: Counter = Counter()
    seconds: dict[str, list[float]] = {"200": [], "503": []}
    retry_after = 0
    for response, elapsed in answers:
        if isinstance(response, Exception):
            statuses[type(response).__name__] += 1
            continue
        statuses[str(response.status_code)] += 1
        if response.status_code in (200, 503):
            seconds[str(response.status_code)].append(elapsed)
        retry_after += response.status_code == 503 and int(response.headers.get("retry-after", "0")) >= 1

    def spread(values: list[float]) -> dict:
        return {"p50_s": round(statistics.median(values), 2), "max_s": round(max(values), 2)} if values else {}

    other_5xx = sum(n for status, n in statuses.items() if status.isdigit() and int(status) >= 500 and status != "503")
    return {
        "statuses": dict(sorted(statuses.items())),
        "accepted": spread(seconds["200"]),
        "refused_503": spread(seconds["503"]),
        "503_with_retry_after": retry_after,
        "other_5xx": other_5xx,
        "goal_met": bool(seconds["200"]) and max(seconds["200"]) <= GOAL_S and other_5xx == 0
        and retry_after == statuses["503"] and sum(statuses.values()) == len(answers),
    }


async def hostile(url: str, pool: list[str], clients: int, sentences: int, beam: int) -> dict:
    """Every client's one request at once, each on its own connection."""
    limits = httpx.Limits(max_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:
        started = time.perf_counter()
        answers = await asyncio.gather(
            *(timed_post(client, request_body(pool, i, sentences, beam)) for i in range(clients)))
        wall = time.perf_counter() - started
    return {"clients": clients, "sentences": sentences, "beam_size": beam, "wall_s": round(wall, 2),
            **summary(answers)}


def engine_pid(service: RunningService) -> int:
    """The engine process: the one child of the service that has loaded ONNX Runtime."""
    pid = service.process.pid
    kids = [int(c) for task in Path(f"/proc/{pid}/task").iterdir() for c in (task / "children").read_text().split()]
    engines = [kid for kid in kids if "onnxruntime" in Path(f"/proc/{kid}/maps").read_text()]
    if len(engines) != 1:
        raise SystemExit(f"one engine process expected among the children {kids} of {pid}")
    return engines[0]


async def seconds_until(condition, started: float, limit: float = 120) -> float:
    while not await condition():
        if time.perf_counter() - started > limit:
            raise SystemExit(f"not within {limit:.0f} s")
        await asyncio.sleep(0.05)
    return round(time.perf_counter() - started, 2)


async def stall(service: RunningService, pool: list[str], sentences: int, beam: int) -> dict:
    """SIGSTOP the engine while a heavy request runs; time what clients see; SIGCONT and time the recovery."""
    engine = engine_pid(service)
    async with httpx.AsyncClient(base_url=service.url, timeout=600) as client:

        async def ready_is(status: int) -> bool:
            return (await client.get("/ready")).status_code == status

        in_flight = asyncio.ensure_future(timed_post(client, request_body(pool, 0, sentences, beam)))
        await asyncio.sleep(0.5)  # it is decoding
        os.kill(engine, signal.SIGSTOP)
        stopped = time.perf_counter()
        try:
            ready_503 = await seconds_until(lambda: ready_is(503), stopped)
            response, _ = await in_flight
            in_flight_503 = round(time.perf_counter() - stopped, 2)
            new, new_s = await timed_post(client, request_body(pool, 1, 1, 1))
        finally:
            os.kill(engine, signal.SIGCONT)
        resumed = time.perf_counter()
        ready_200 = await seconds_until(lambda: ready_is(200), resumed)
        translated, _ = await timed_post(client, request_body(pool, 2, 1, 1))
    return {
        "ready_503_after_s": ready_503,
        "in_flight": {"status": getattr(response, "status_code", repr(response)), "after_s": in_flight_503,
                      "retry_after": response.headers.get("retry-after") if hasattr(response, "headers") else None},
        "new_request": {"status": getattr(new, "status_code", repr(new)), "seconds": round(new_s, 3)},
        "after_sigcont": {"ready_200_after_s": ready_200, "status": getattr(translated, "status_code", None)},
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", type=Path, default=MODELS)
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--sentences", type=int, default=64, help="sentences in each client's request")
    p.add_argument("--beam", type=int, default=8)
    p.add_argument("--setting", action="append", default=[], help="a service setting, name=value (default: none)")
    p.add_argument("--no-stall", action="store_true", help="leave out the stopped-engine measurement")
    p.add_argument("--data", type=Path, help="Multi30k folder (default: MULTI30K_DIR)")
    args = p.parse_args(argv)
    pool = sentence_pool(args.data)
    settings = {"log_level": "warning", **parse_settings(args.setting)}
    results: dict = {"machine": environment(["onnxruntime", "onnxruntime-gpu", "uvicorn"]), "settings": settings}
    with tempfile.TemporaryDirectory() as logs, running_service(args.model_dir, Path(logs) / "service.log",
                                                                **settings) as service:
        results["load"] = asyncio.run(hostile(service.url, pool, args.clients, args.sentences, args.beam))
        if not args.no_stall:
            results["stall"] = asyncio.run(stall(service, pool, args.sentences, args.beam))
    write_results(RESULTS, "hostile_load", results)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

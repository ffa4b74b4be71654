"""A small closed-loop load generator for LibreTranslate-compatible servers (POST /translate, JSON {q, source, target}).

    from bench.loadgen import run_load
    run_load("http://127.0.0.1:8000", sentences, concurrency=8, seconds=20)

The URL is the server's base URL (or its /translate endpoint itself).
`concurrency` clients each send one request at a time, one sentence per request (the sentences in
turn), for a bounded time; a request still in flight at the deadline is waited for and counted.
"""

from __future__ import annotations

import asyncio
import itertools
import time

import httpx
import numpy as np


def percentiles(latencies: list[float]) -> dict[str, float | None]:
    """p50/p95/p99 in milliseconds (None without any successful request)."""
    if not latencies:
        return {"p50": None, "p95": None, "p99": None}
    values = np.percentile(np.array(latencies) * 1000, [50, 95, 99])
    return {name: round(float(v), 1) for name, v in zip(("p50", "p95", "p99"), values)}


def translate_url(url: str) -> str:
    url = url.rstrip("/")
    return url if url.endswith("/translate") else url + "/translate"


async def _client(
    client: httpx.AsyncClient, url: str, payloads, deadline: float, latencies: list[float], errors: list[str]
) -> None:
    while time.perf_counter() < deadline:
        payload = next(payloads)
        started = time.perf_counter()
        try:
            response = await client.post(url, json=payload)
            if response.status_code == 200 and "translatedText" in response.json():
                latencies.append(time.perf_counter() - started)
            else:
                errors.append(f"HTTP {response.status_code}: {response.text[:200]}")
        except (httpx.HTTPError, ValueError) as e:
            errors.append(f"{type(e).__name__}: {e}")


async def run_load_async(
    url: str,
    sentences: list[str],
    concurrency: int,
    seconds: float,
    source: str = "en",
    target: str = "de",
    timeout: float = 120.0,
) -> dict:
    payloads = itertools.cycle([{"q": s, "source": source, "target": target, "format": "text"} for s in sentences])
    latencies: list[float] = []
    errors: list[str] = []
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:
        started = time.perf_counter()
        deadline = started + seconds
        await asyncio.gather(
            *(_client(client, translate_url(url), payloads, deadline, latencies, errors) for _ in range(concurrency))
        )
        elapsed = time.perf_counter() - started
    return {
        "concurrency": concurrency,
        "seconds": elapsed,
        "requests": len(latencies) + len(errors),
        "ok": len(latencies),
        "errors": len(errors),
        "error_examples": sorted(set(errors))[:3],
        "sentences_per_s": len(latencies) / elapsed,  # one sentence per request
        "latency_ms": percentiles(latencies),
    }


def run_load(url: str, sentences: list[str], concurrency: int, seconds: float, **kwargs) -> dict:
    """Throughput (sentences/s), latency_ms {p50, p95, p99} and errors of `concurrency` clients for `seconds`."""
    return asyncio.run(run_load_async(url, sentences, concurrency, seconds, **kwargs))

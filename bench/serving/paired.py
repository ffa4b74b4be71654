"""One client's latency at several servers, paired: it sends its requests to each in turn, one at a time, so that
every server meets the same moments of the machine (its other load, its clock) and a small difference between them
shows through the noise that separate runs would have.

    from bench.serving.paired import paired_latency
    paired_latency({"off": url_a, "on": url_b}, sentences, seconds=30, fields={"on": {"api_key": key}})
    # {"off": {"p50_ms": 8.6, "p99_ms": 14.1, "mean_ms": 9.0, "requests": 1078}, "on": {...}}

Each round sends the same sentence (the sentences in turn) to every server, the servers' order rotating from round to
round; POST /translate with JSON, one sentence a request, on a kept-alive connection to each. The client is
Python's standard library: its own time is in every server's figure alike. A response other than 200 raises.
"""

from __future__ import annotations

import http.client
import json
import statistics
import time
from urllib.parse import urlsplit

from bench.common.report import median
from bench.serving.loadgen import translate_url

WARM_UP = 20  # rounds not counted


def paired_latency(urls: dict[str, str], sentences: list[str], seconds: float, fields: dict[str, dict] | None = None,
                   source: str = "en", target: str = "de") -> dict[str, dict]:
    """Each server's p50, p99 and mean (ms; the mean is what a lone client's rate reads) and requests answered, over
    `seconds` of rounds."""
    fields = fields or {}
    connections, paths = {}, {}
    for name, url in urls.items():
        parts = urlsplit(translate_url(url))
        connections[name] = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
        paths[name] = parts.path
    latency: dict[str, list[float]] = {name: [] for name in urls}
    names, rounds, deadline = list(urls), 0, None
    try:
        while deadline is None or time.monotonic() < deadline:
            text = sentences[rounds % len(sentences)]
            for name in names[rounds % len(names):] + names[: rounds % len(names)]:
                body = json.dumps({"q": text, "source": source, "target": target, "format": "text",
                                   **fields.get(name, {})})
                started = time.perf_counter()
                connections[name].request("POST", paths[name], body, {"Content-Type": "application/json"})
                response = connections[name].getresponse()
                answer = response.read()
                if response.status != 200:
                    raise RuntimeError(f"{name} answered {response.status}: {answer[:200]!r}")
                if rounds >= WARM_UP:
                    latency[name].append(1000 * (time.perf_counter() - started))
            rounds += 1
            if rounds == WARM_UP:
                deadline = time.monotonic() + seconds
    finally:
        for connection in connections.values():
            connection.close()
    return {name: {"p50_ms": round(median(values), 3), "p99_ms": round(statistics.quantiles(values, n=100)[-1], 3),
                   "mean_ms": round(statistics.fmean(values), 3), "requests": len(values)}
            for name, values in latency.items()}

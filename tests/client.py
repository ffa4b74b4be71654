"""Talking to a running service from the tests: LibreTranslate's request and error shapes, and its metrics."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
from prometheus_client.parser import text_string_to_metric_families

TIMEOUT = httpx.Timeout(60.0)
JSON = {"content-type": "application/json"}


def body(q: str | list[str], **fields: object) -> dict:
    """An en->de translate request."""
    return {"q": q, "source": "en", "target": "de", **fields}


def translate(url: str, q: str | list[str], **fields: object) -> str | list[str]:
    response = httpx.post(url + "/translate", json=body(q, **fields), timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    return response.json()["translatedText"]


def assert_error(response: httpx.Response, status: int) -> str:
    """LibreTranslate's error shape: the status and {"error": message}; returns the message."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json"), response.headers
    error = response.json()
    assert list(error) == ["error"] and isinstance(error["error"], str) and error["error"], error
    return error["error"]


def metrics(url: str) -> dict[tuple[str, frozenset], float]:
    """Every sample of /metrics, parsed by Prometheus' own parser, by (name, labels)."""
    text = httpx.get(url + "/metrics", timeout=TIMEOUT).text
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


DECODED = ("translator_inference_seconds_count", frozenset({("stage", "decode")}))


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.05)


def metrics_after(url: str, before: dict[tuple[str, frozenset], float], sentences: int,
                  timeout: float = 10.0) -> dict[tuple[str, frozenset], float]:
    """metrics() once the engine has kept those of `sentences` more decoded sentences than `before` holds: it keeps a
    step's metrics just after the step's answers, so they may reach /metrics a moment after the responses."""
    decoded = before.get(DECODED, 0.0) + sentences
    wait_until(lambda: metrics(url).get(DECODED, 0.0) >= decoded, timeout,
               f"the metrics of {sentences} decoded sentences")
    return metrics(url)

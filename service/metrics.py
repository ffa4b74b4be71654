"""Prometheus metrics of one service process, on a registry of its own."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("translator_requests", "Translate requests by HTTP status", ["status"], registry=r)
        self.latency = Histogram(
            "translator_request_latency_seconds", "Translate request latency", buckets=LATENCY_BUCKETS, registry=r
        )
        self.batch_size = Histogram(
            "translator_batch_size", "Sentences per translator run", buckets=BATCH_BUCKETS, registry=r
        )
        self.queue_depth = Gauge(
            "translator_queue_depth", "Sentences waiting for a batch, by model", ["model"], registry=r
        )
        self.queue_wait = Histogram(
            "translator_queue_wait_seconds", "Time a sentence waits before its batch runs",
            buckets=LATENCY_BUCKETS, registry=r,
        )
        self.inference = Histogram(
            "translator_inference_seconds", "Translator run time by stage", ["stage"], buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.input_tokens = Counter("translator_input_tokens", "Source tokens translated", registry=r)
        self.output_tokens = Counter("translator_output_tokens", "Target tokens produced", registry=r)
        self.model_info = Gauge(
            "translator_model_info", "The model being served", ["model", "provider", "precision"], registry=r
        )

"""Prometheus metrics: requests (HTTP workers) and the engine's work (engine process), on a registry of their own.

With several processes (`python -m service`), PROMETHEUS_MULTIPROC_DIR is set for all of them before they start:
prometheus_client then keeps every value in a file per process, and exposition() reads them all, so whichever
worker answers /metrics, each request is counted once and the engine's figures are there too.
"""

from __future__ import annotations

import os

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, multiprocess

from service import __version__
from service.engine.memory import resident_bytes

MULTIPROCESS_DIR = "PROMETHEUS_MULTIPROC_DIR"
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
STEP_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        # the HTTP side
        # by language pair: a served pair's name, or "" for none (source "auto", /detect, a pair not served)
        self.requests = Counter(
            "translator_requests", "Translate requests by HTTP status and language pair", ["status", "pair"],
            registry=r,
        )
        self.latency = Histogram(
            "translator_request_latency_seconds", "Translate request latency by language pair", ["pair"],
            buckets=LATENCY_BUCKETS, registry=r,
        )
        self.billed_characters = Counter(
            "translator_billed_characters", "Characters of text translated through the DeepL API (its /v2/usage)",
            registry=r,
        )
        self.placeholders = Counter(
            "translator_placeholders", "Protected spans (URLs, emails, emoji, ...) by how they came back: copied by "
            "the model, or put back by place where the model dropped the placeholder", ["how"], registry=r,
        )
        for how in ("copied", "put_back"):  # both series from the start, though they move only once spans come
            self.placeholders.labels(how)
        # usage, without a label per key (python -m service.keys usage and /usage report each key's)
        self.key_requests = Counter("translator_key_requests", "Requests admitted with an API key", registry=r)
        self.key_characters = Counter("translator_key_characters", "Characters of the requests admitted with an API "
                                      "key", registry=r)
        self.limited = Counter("translator_limited", "Requests refused with 429, by limit: minute, day, chars",
                               ["limit"], registry=r)
        # the engine
        self.batch_size = Histogram(
            "translator_batch_size", "Sentences in the running batch, at each decoder step", buckets=BATCH_BUCKETS,
            registry=r,
        )
        self.queue_depth = Gauge(
            "translator_queue_depth", "Sentences waiting for a batch, by model", ["model"], registry=r,
            multiprocess_mode="livesum",
        )
        self.queue_wait = Histogram(
            "translator_queue_wait_seconds", "Time a sentence waits before it joins the running batch",
            buckets=LATENCY_BUCKETS, registry=r,
        )
        self.running_rows = Gauge(
            "translator_running_rows", "Decoder rows (sentences x beams) in the running batches now", registry=r,
            multiprocess_mode="livesum",
        )
        self.cache_bytes = Gauge(
            "translator_cache_bytes", "Memory the running batch's caches hold (self-attention and encoder "
            "keys/values), by model", ["model"], registry=r, multiprocess_mode="livesum",
        )
        self.decoder_steps = Counter("translator_decoder_steps", "Decoder steps run (rate: steps per second)",
                                     registry=r)
        self.step_time = Histogram(
            "translator_step_seconds", "Time of one decoder step", buckets=STEP_BUCKETS, registry=r
        )
        self.inference = Histogram(
            "translator_inference_seconds",
            "Encoding sentences that join the batch, and decoding a sentence from join to end, by stage", ["stage"],
            buckets=LATENCY_BUCKETS, registry=r,
        )
        self.input_tokens = Counter("translator_input_tokens", "Source tokens translated, by language pair", ["pair"],
                                    registry=r)
        self.output_tokens = Counter("translator_output_tokens", "Target tokens produced, by language pair", ["pair"],
                                     registry=r)
        self.model_info = Gauge(
            "translator_model_info", "The model being served", ["model", "provider", "precision"], registry=r,
            multiprocess_mode="livemax",
        )
        self.build_info = Gauge(
            "translator_build_info", "The release serving (always 1)", ["version"], registry=r,
            multiprocess_mode="livemax",
        )
        self.build_info.labels(__version__).set(1)
        # both: the engine process reports its own (it holds the models), each HTTP worker its own when it answers
        # /metrics; with several processes, each is labelled by its pid
        self.resident_memory = Gauge(
            "translator_resident_memory_bytes", "Resident memory of the engine process and of each HTTP worker",
            ["process"], registry=r, multiprocess_mode="liveall",
        )

    def billed(self) -> int:
        """translator_billed_characters, over every process of the service."""
        registry = self.registry
        if os.environ.get(MULTIPROCESS_DIR):
            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
        return int(registry.get_sample_value("translator_billed_characters_total") or 0)

    def exposition(self) -> bytes:
        """The text format of every metric: this process's, or with several processes, all of theirs (this HTTP
        worker's memory measured now, the other processes' as they last reported it)."""
        if os.environ.get(MULTIPROCESS_DIR):
            self.resident_memory.labels("worker").set(resident_bytes())
            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
            return generate_latest(registry)
        return generate_latest(self.registry)

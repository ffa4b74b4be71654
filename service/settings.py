"""Every setting of the service, in one place: defaults, or TRANSLATOR_* environment variables, or flags."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

SHIPPED_MODELS = Path(__file__).resolve().parent.parent / "models"
MAX_HTTP_WORKERS = 8


def default_http_workers() -> int:
    """One HTTP worker per core this process may use, at most MAX_HTTP_WORKERS."""
    return min(len(os.sched_getaffinity(0)), MAX_HTTP_WORKERS)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TRANSLATOR_", protected_namespaces=())

    model_dir: Path = Field(
        SHIPPED_MODELS,
        description="a model folder written by `python -m export`, or a folder of them: every pair is served",
    )
    host: str = Field("127.0.0.1", description="address to listen on (0.0.0.0 in a container)")
    port: int = Field(8000, description="port to listen on")
    http_workers: int = Field(
        default_factory=default_http_workers, ge=0, description="HTTP worker processes in front of the engine process "
        "(default: the cores available, at most 8); 0: one process does everything"
    )
    provider: Literal["auto", "cuda", "cpu"] = Field("auto", description="ONNX Runtime execution provider")
    precision: Literal["fp32", "fp16", "int8"] = Field("fp32", description="which graphs of the model folder")
    threads: int = Field(0, ge=0, description="ONNX Runtime intra-op threads (0: one per core)")
    optimization: Literal["disable", "basic", "extended", "all"] = Field("all", description="graph optimizations")
    spin_threads: bool = Field(False, description="ONNX Runtime's idle threads spin for work (best without HTTP load)")
    max_batch_sentences: int = Field(
        64, ge=1, description="sentences in the running batch at once (beams count once; the first sentences of new "
        "requests may take an eighth more)"
    )
    max_batch_tokens: int = Field(
        4096, ge=1, description="padded source tokens in the running batch (sentences x longest source; likewise)"
    )
    max_wait_ms: float = Field(
        0.0, ge=0, description="how long an empty batch's first sentence waits for company (0: a lone request runs "
        "at once; under load sentences join the running batch at every step anyway)"
    )
    max_queue: int = Field(1024, ge=1, description="sentences waiting; beyond it requests get 503")
    max_chars: int = Field(5000, ge=1, description="characters in one request")
    max_body_bytes: int = Field(1 << 20, ge=1, description="bytes of one request body; larger ones get 413 unread")
    max_sentences: int = Field(64, ge=1, description="sentences in one request, after splitting")
    max_sentence_tokens: int = Field(250, ge=1, description="source tokens of one sentence")
    beam_size: int = Field(1, ge=1, description="default beam size (1: greedy)")
    max_beam_size: int = Field(8, ge=1, description="largest beam_size a request may ask for")
    max_alternatives: int = Field(3, ge=0, description="most alternatives a request may ask for")
    length_penalty: float = Field(0.6, ge=0, description="beam search length normalization alpha")
    max_length_ratio: float = Field(1.5, gt=0, description="translation tokens <= ratio * source tokens + 10")
    max_request_work: int = Field(
        65536, ge=1, description="decoder rows x steps one request may ask for at most: the sum over its sentences "
        "of beam size x longest translation (400 beyond it)"
    )
    release_memory_after_s: float = Field(
        1.0, gt=0, description="idle seconds after which memory that a heavy batch took is given back to the system"
    )
    drain_seconds: float = Field(
        20.0, ge=0, description="on SIGTERM, how long accepted work may still run before it is answered 503"
    )
    cors_origins: Annotated[list[str], NoDecode] = Field(
        [], description="comma-separated origins whose pages may call the API (* for any); empty: no CORS"
    )
    api_keys: Annotated[list[str], NoDecode] = Field([], description="comma-separated keys; empty: no keys")
    log_level: str = Field("info", description="uvicorn log level")

    @field_validator("api_keys", "cors_origins", mode="before")
    @classmethod
    def split_commas(cls, value: str | list[str]) -> list[str]:
        if isinstance(value, str):
            return [k.strip() for k in value.split(",") if k.strip()]
        return value

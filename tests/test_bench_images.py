"""bench.deploy.images' changes to LibreTranslate's Dockerfile: each substitution applies once, the machine's
certificates reach its builder stage alone, and a Dockerfile they no longer fit stops the benchmark."""

from __future__ import annotations

import pytest

from bench.deploy import images

# The shape of LibreTranslate's docker/Dockerfile (1.9.6): a builder stage and a runtime stage on python:*-slim
DOCKERFILE = """FROM python:3.11.14-slim-bookworm AS builder
WORKDIR /app
RUN python -mvenv venv && ./venv/bin/pip install --no-cache-dir --upgrade pip
COPY . .
RUN ./venv/bin/pip install .

FROM python:3.11.14-slim-bookworm
RUN addgroup --system --gid 1032 libretranslate && adduser --system --uid 1032 libretranslate
COPY --from=builder --chown=1032:1032 /app /app
"""


def test_the_stages_move_to_the_debian_bases_and_only_the_builder_gets_the_certificates():
    builder, runtime = images.substituted(DOCKERFILE).split("\n\n")
    assert builder.splitlines()[0] == f"FROM {images.engine.PYTHON_BUILD.name} AS builder"
    assert "ENV PIP_CERT=/etc/pip-ca.crt" in builder and f"--from={images.CA_CONTEXT}" in builder
    assert "RUN python3 -mvenv venv" in builder
    assert runtime.splitlines()[0] == f"FROM {images.LT_RUNTIME.name}"
    assert "pip-ca" not in runtime and "PIP_CERT" not in runtime
    assert images.LT_RUNTIME.packages == (*images.engine.PYTHON.packages, "adduser")


def test_a_dockerfile_the_substitutions_do_not_fit_stops_the_benchmark():
    with pytest.raises(AssertionError, match="matched 0 times"):
        images.substituted(DOCKERFILE.replace("python -mvenv", "python3 -m venv"))

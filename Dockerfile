# syntax=docker/dockerfile:1.7
#
# The translation service image, in two flavours that differ only in their base:
#   docker build --target gpu -t mt-translator:gpu .   CUDA 13 + cuDNN 9, ONNX Runtime's CUDA provider
#   docker build --target cpu -t mt-translator:cpu .   python:3.11-slim, ONNX Runtime's CPU build only
# Both install the project as the README's set-up does (`pip install .`: pyproject's serving dependencies,
# no torch), run as a non-root user, report healthy once GET /ready answers 200, and serve the models baked
# in from models/ (every model folder in it: each language pair is served). To serve another model, mount its
# folder and point TRANSLATOR_MODEL_DIR at it (or at a folder of model folders):
#   docker run -v /path/to/fr-en:/models/fr-en:ro -e TRANSLATOR_MODEL_DIR=/models/fr-en ...
# The bases are build arguments (tests/deploy builds them from Debian's archive). PYTHON_BUILD_IMAGE must carry the
# same Python, at the same path, as PYTHON_IMAGE (the venv links to it), and venv. Where pip needs a certificate
# bundle of its own to reach its index, pass it as a secret (`--secret id=pip_cert,src=FILE`): it is used by the
# build and never stored in a layer; PIP_INDEX_URL likewise comes as a build argument.

ARG CUDA_IMAGE=nvidia/cuda:13.0.2-cudnn-runtime-ubuntu24.04
ARG PYTHON_IMAGE=python:3.11-slim
ARG PYTHON_BUILD_IMAGE=python:3.11-slim

# What `pip install .` reads, and nothing else: both builds take their sources from here.
FROM scratch AS source
COPY pyproject.toml README.md /src/
COPY core /src/core
COPY model /src/model
COPY export /src/export
COPY service /src/service
COPY deploy/requirements.py /src/deploy/requirements.py

# One base per flavour, each with a Python. The CUDA image has none: it gets Ubuntu 24.04's (3.12),
# whose venv module the build needs (not pinned: Ubuntu drops superseded versions from its archive).
FROM ${PYTHON_IMAGE} AS cpu-base

FROM ${CUDA_IMAGE} AS gpu-base
# hadolint ignore=DL3008
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 python3-venv \
    && rm -rf /var/lib/apt/lists/*

# The virtual environment, built where pip, its cache and the sources can stay behind. The venv's python
# links to the base's, so each flavour builds its own.
# The CPU image installs pyproject's dependencies with ONNX Runtime's CPU build in place of onnxruntime-gpu
# (deploy/requirements.py), then the project without dependencies. It also builds our decoder-step kernels
# (service/engine/kernels) into the installed package: g++ here only, and for any x86-64-v2 CPU (KERNELS_MARCH),
# since the image may run on another machine than its build's.
FROM ${PYTHON_BUILD_IMAGE} AS cpu-build
# hadolint ignore=DL3008
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends g++ \
    && rm -rf /var/lib/apt/lists/*
COPY --from=source /src /src
ARG KERNELS_MARCH=x86-64-v2
ARG PIP_INDEX_URL
RUN --mount=type=cache,target=/root/.cache/pip --mount=type=secret,id=pip_cert \
    if [ -f /run/secrets/pip_cert ]; then export PIP_CERT=/run/secrets/pip_cert; fi \
    && python3 -m venv /opt/venv \
    && python3 /src/deploy/requirements.py --cpu /src/pyproject.toml > /tmp/requirements.txt \
    && /opt/venv/bin/pip install -r /tmp/requirements.txt && /opt/venv/bin/pip install --no-deps /src \
    && /opt/venv/bin/python -m service.engine.kernels.build --march "${KERNELS_MARCH}"
# What serving never runs stays behind: pip and setuptools; the packages' own test suites and onnx's test data;
# ONNX Runtime's C library (its Python module carries the runtime itself) and its Python tools for converting and
# quantizing models (python -m export's work, not the service's); and the extension modules' debug symbols. The
# libraries that wheels bundle in their *.libs folders are left as they are: patchelf rewrote them, and strip
# breaks such files.
RUN /opt/venv/bin/python -m pip uninstall -q -y pip setuptools \
    && find /opt/venv -depth -type d -name tests -exec rm -rf {} + \
    && site=$(echo /opt/venv/lib/python3*/site-packages) \
    && rm -rf "$site"/onnx/backend/test "$site"/onnxruntime/capi/libonnxruntime.so.* \
        "$site"/onnxruntime/quantization "$site"/onnxruntime/tools "$site"/onnxruntime/transformers \
    && find "$site" -type f -name '*.so*' -not -path "$site/*.libs/*" -exec strip --strip-unneeded {} +

FROM gpu-base AS gpu-build
COPY --from=source /src /src
ARG PIP_INDEX_URL
RUN --mount=type=cache,target=/root/.cache/pip --mount=type=secret,id=pip_cert \
    if [ -f /run/secrets/pip_cert ]; then export PIP_CERT=/run/secrets/pip_cert; fi \
    && python3 -m venv /opt/venv && /opt/venv/bin/pip install /src

# The runtime stages: the same instructions on top of each base (tests/test_deploy.py keeps them in step).
# TRANSLATOR_HOST: a container must listen on all its interfaces, not only on its own loopback.
FROM gpu-base AS gpu
COPY --from=gpu-build /opt/venv /opt/venv
COPY deploy/healthcheck.py /app/healthcheck.py
COPY models /app/models
# the model cache (TRANSLATOR_MODELS) and the data folder (the store, translated files): a volume mounted at
# either starts out owned by the service's user
RUN mkdir /cache /data && chown 10001:10001 /cache /data
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    TRANSLATOR_HOST=0.0.0.0 \
    TRANSLATOR_MODEL_DIR=/app/models \
    TRANSLATOR_MODEL_CACHE=/cache \
    TRANSLATOR_DATA_DIR=/data
WORKDIR /app
USER 10001:10001
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 CMD ["python", "/app/healthcheck.py"]
CMD ["python", "-m", "service"]

FROM cpu-base AS cpu
COPY --from=cpu-build /opt/venv /opt/venv
COPY deploy/healthcheck.py /app/healthcheck.py
COPY models /app/models
# the model cache (TRANSLATOR_MODELS) and the data folder (the store, translated files): a volume mounted at
# either starts out owned by the service's user
RUN mkdir /cache /data && chown 10001:10001 /cache /data
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    TRANSLATOR_HOST=0.0.0.0 \
    TRANSLATOR_MODEL_DIR=/app/models \
    TRANSLATOR_MODEL_CACHE=/cache \
    TRANSLATOR_DATA_DIR=/data
WORKDIR /app
USER 10001:10001
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 CMD ["python", "/app/healthcheck.py"]
CMD ["python", "-m", "service"]

# The converters of TRANSLATOR_MODELS, which the serving images leave out (torch): compose's one-shot `models`
# service runs this target's `python -m model.pull` before the translator starts. Given no names, it pulls
# TRANSLATOR_MODELS into TRANSLATOR_MODEL_CACHE (the volume the translator reads) and exits; nothing named, at once.
#   docker build --target models -t mt-translator:models .
# The serving dependencies (ONNX Runtime's CPU build), the pull extra, torch's CPU build from TORCH_INDEX_URL, the
# project.
FROM ${PYTHON_BUILD_IMAGE} AS models
COPY --from=source /src /src
ARG PIP_INDEX_URL
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
RUN --mount=type=cache,target=/root/.cache/pip --mount=type=secret,id=pip_cert \
    if [ -f /run/secrets/pip_cert ]; then export PIP_CERT=/run/secrets/pip_cert; fi \
    && python3 -m venv /opt/venv \
    && /opt/venv/bin/pip install --index-url "${TORCH_INDEX_URL}" torch==2.13.0 \
    && python3 /src/deploy/requirements.py --cpu /src/pyproject.toml > /tmp/requirements.txt \
    && python3 -c 'import sys, tomllib; print("\n".join(tomllib.load(open(sys.argv[1], "rb"))["project"]["optional-dependencies"]["pull"]))' /src/pyproject.toml >> /tmp/requirements.txt \
    && /opt/venv/bin/pip install -r /tmp/requirements.txt && /opt/venv/bin/pip install --no-deps /src \
    && rm -rf /src && mkdir /cache && chown 10001:10001 /cache
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    TRANSLATOR_MODEL_CACHE=/cache
USER 10001:10001
CMD ["python", "-m", "model.pull"]

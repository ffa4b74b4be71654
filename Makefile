# make serve: create .venv, install the serving dependencies, serve the shipped model on 127.0.0.1:8000
# make test:  create .venv, install everything (torch CPU first), run the tests
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
MULTI30K_DIR ?= $(firstword $(wildcard ../shared/data/multi30k) data/multi30k)
export MULTI30K_DIR
PORT ?= 8000

.PHONY: serve test test-deploy deploy-deps lint bench system-deps data kernels clean

$(VENV)/bin/python:
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip

$(VENV)/.serve: $(VENV)/bin/python pyproject.toml
	$(PIP) install -q -e .
	touch $@

# argos-translate-lt: tests/test_argos_bpe.py's reference tokenizer (argostranslate's BPETokenizer), without its
# translation dependencies (minisbd's onnxruntime would replace onnxruntime-gpu's files)
$(VENV)/.dev: $(VENV)/bin/python pyproject.toml
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[train,dev]'
	$(PIP) install -q --no-deps argos-translate-lt==1.12.1
	touch $@

# Our decoder-step kernels for the CPU (service/engine/kernels): g++ and ONNX Runtime's headers (fetched from
# Debian's archive where the system has none). `make serve` goes on without them (the service then runs the step as
# exported, and says so); the tests need them.
KERNELS := service/engine/kernels/libdecoder_step.so
$(KERNELS): service/engine/kernels/decoder_step.cc service/engine/kernels/build.py | $(VENV)/bin/python
	$(PY) -m service.engine.kernels.build

kernels: $(VENV)/.serve
	@$(MAKE) --no-print-directory $(KERNELS) || true

serve: $(VENV)/.serve kernels
	$(PY) -m service --port $(PORT)

# Real Prometheus, promtool and nginx are used by the tests, wrk by the load generator, Chromium by the page's
# browser test, PostgreSQL by the store's tests, nodejs and npm by tests/test_deepl_node.py (deepl-node: npm installs
# it into .cache/deepl-node on first use) (Debian packages).
SYSTEM_DEPS := prometheus:prometheus promtool:prometheus nginx:nginx-light wrk:wrk chromium:chromium \
	/usr/lib/postgresql/*/bin/initdb:postgresql node:nodejs npm:npm  # command:package, installed where missing
system-deps:
	@missing=$$(for dep in $(SYSTEM_DEPS); do command -v $${dep%:*} >/dev/null || echo $${dep##*:}; done | sort -u); \
		test -z "$$missing" || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
		$$missing >/dev/null)

# The tests score the shipped model on Multi30k: MULTI30K_DIR, else fetched into data/multi30k, else one line on how.
data: $(VENV)/bin/python
	@test -d "$(MULTI30K_DIR)" || $(PY) -m model.download multi30k --out "$(MULTI30K_DIR)" >/dev/null 2>&1 || \
		{ echo "make test needs Multi30k (task 1) and could not download it: set MULTI30K_DIR to a folder of its {split}.{lang}.gz files, or run 'python -m model.download multi30k --out data/multi30k' where the network allows"; \
		rm -rf "$(MULTI30K_DIR)"; exit 1; }

test: $(VENV)/.dev system-deps data $(KERNELS)
	$(PY) -m pytest -q --ignore=tests/deploy  # tests/deploy: make test-deploy

# The container tests (tests/deploy): Debian's podman (runc, cgroupfs), mmdebstrap for the base images, and
# podman-compose (the dev extra's, which reads compose's !reset). Builds reach PyPI through this machine's CAs.
deploy-deps:
	@command -v podman >/dev/null && command -v mmdebstrap >/dev/null && command -v runc >/dev/null || \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc mmdebstrap >/dev/null)

test-deploy: $(VENV)/.dev deploy-deps
	PATH="$(abspath $(VENV))/bin:$$PATH" DEPLOY_TESTS=1 $(PY) -m pytest -q -p no:cacheprovider tests/deploy

# Every benchmark of BENCHMARKS.md, one after the other (well over an hour on 2 cores; `python -m bench --list` names
# them, `python -m bench NAME` runs one; `images` builds images with podman); results in bench/results/.
bench: $(VENV)/.dev system-deps deploy-deps
	$(PIP) install -q -e '.[bench]'
	$(PY) -m bench

lint: $(VENV)/.dev
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) .pytest_cache $(KERNELS)

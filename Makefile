# make serve: create .venv, install the serving dependencies, serve the shipped model on 127.0.0.1:8000
# make test:  create .venv, install everything (torch CPU first), run the tests
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
MULTI30K_DIR ?= ../shared/data/multi30k
export MULTI30K_DIR

.PHONY: serve test lint bench system-deps clean

$(VENV)/bin/python:
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip

$(VENV)/.serve: $(VENV)/bin/python pyproject.toml
	$(PIP) install -q -e .
	touch $@

$(VENV)/.dev: $(VENV)/bin/python pyproject.toml
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[train,dev]'
	touch $@

serve: $(VENV)/.serve
	$(PY) -m service

# Real Prometheus, promtool and nginx are used by the tests, wrk by the load generator (Debian packages).
system-deps:
	@command -v prometheus >/dev/null && command -v promtool >/dev/null && command -v nginx >/dev/null && \
		command -v wrk >/dev/null || (apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus nginx-light wrk >/dev/null)

test: $(VENV)/.dev system-deps
	$(PY) -m pytest -q

# Every benchmark of BENCHMARKS.md, one after the other (about an hour on 2 cores); results in bench/results/.
bench: $(VENV)/.dev system-deps
	$(PY) -m bench.decode
	$(PY) -m bench.load --compare --concurrency 32 --seconds 20
	$(PY) -m bench.ct2_check
	$(PY) -m bench.engines
	$(PY) -m bench.servers
	$(PY) -m bench.profile_steps

lint: $(VENV)/.dev
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) .pytest_cache

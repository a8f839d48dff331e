# TaskForge: `make help` lists the targets; `make run` serves the whole stack, `make test` runs the suite.
# Both use DATABASE_URL / REDIS_URL when set, embedded servers otherwise.
# A target is listed by `make help` when its rule line ends with a `## ` comment.

SHELL := /bin/bash
.DEFAULT_GOAL := help
VENV := .venv
PY := $(VENV)/bin/python
# The Django-free client distribution, installed into the venv as an editable package.
CLIENT := clients/python
CLIENT_PROJECT := $(wildcard $(CLIENT)/pyproject.toml)
# What the client's lock is compiled from: its pyproject.toml, else a requirements.in.
CLIENT_LOCK_INPUT := $(firstword $(CLIENT_PROJECT) $(wildcard $(CLIENT)/requirements.in))
STAMP := $(VENV)/.installed-$(shell cat requirements.txt requirements-dev.txt $(CLIENT_PROJECT) | sha1sum | cut -c1-12)
# Django 6 needs Python 3.12+: take the first suitable interpreter on this machine.
PYTHON_312 := $(shell for c in python3.13 python3.12 python3 \
	$$(command -v pyenv >/dev/null && ls -d $$(pyenv root)/versions/3.1[2-9]*/bin/python3 2>/dev/null); do \
	command -v $$c >/dev/null 2>&1 && $$c -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null \
	&& { command -v $$c; break; }; done)
# Tests (and mypy's Django plugin, which imports the settings) never need a real
# secret; production refuses to start without one.
TEST_ENV := DJANGO_SECRET_KEY=$${DJANGO_SECRET_KEY:-test-only-not-secret}
# Run a command with embedded Postgres/Redis unless both URLs are given.
WITH_SERVICES := $(if $(and $(DATABASE_URL),$(REDIS_URL)),,$(PY) -m taskforge.dev.embedded --)
# Locks: every requirement pinned with its hashes, resolved for every platform.
# `make lock` keeps the pins already there; `make lock LOCK_ARGS=--upgrade` (or
# `LOCK_ARGS="--upgrade-package django"`) moves them.
LOCK := $(VENV)/bin/uv pip compile --quiet --generate-hashes --universal --python-version 3.12 \
	--custom-compile-command "make lock" $(LOCK_ARGS)

.PHONY: help venv run test test-unit test-browser lint typecheck format docs lock test-faults test-faults-multinode bench bench-phases bench-partitions fuzz clean

help: ## List the targets
	@awk 'BEGIN { FS = ":[^#]*## " } /^[a-zA-Z_-]+:.*## / { printf "  %-16s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

venv: $(STAMP) ## Create .venv from the locks (pip --require-hashes) and the client package

$(STAMP): requirements.txt requirements-dev.txt $(CLIENT_PROJECT)
	@test -n "$(PYTHON_312)" || { echo "TaskForge needs Python 3.12 or newer (python3.12 on PATH, or pyenv install 3.12)." >&2; exit 1; }
	@test -x $(PY) || $(PYTHON_312) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --require-hashes -r requirements.txt -r requirements-dev.txt
	@# The client's one dependency (httpx) is already pinned in requirements.txt.
	@if test -f $(CLIENT)/pyproject.toml; then $(PY) -m pip install --quiet --no-deps -e ./$(CLIENT); fi
	@rm -f $(VENV)/.installed-*; touch $@

run: venv ## Serve the API, loops and dashboard (embedded Postgres/Redis unless URLs are set)
	$(PY) -m taskforge.dev.devstack

test: venv ## Run the whole suite (unit, integration, system), then the browser tests
	$(TEST_ENV) $(WITH_SERVICES) $(PY) -m pytest -m "not browser" -n 2 --dist loadgroup $(PYTEST_ARGS)
	@$(MAKE) --no-print-directory test-browser

# No WITH_SERVICES: the unit tier must pass with Postgres and Redis stopped.
test-unit: venv ## Run the unit tests only (no Postgres, no Redis: seconds)
	$(TEST_ENV) $(PY) -m pytest tests/unit -p no:xdist -p no:hypothesispytest -p no:schemathesis -p no:faker -p no:anyio -q $(PYTEST_ARGS)

# Playwright's event loop upsets later asyncio tests: browser tests run alone.
test-browser: venv ## Run the headless-Chromium dashboard tests on their own
	@if ls tests/integration/dashboard/test_browser*.py >/dev/null 2>&1; then \
		$(TEST_ENV) DJANGO_ALLOW_ASYNC_UNSAFE=true $(WITH_SERVICES) $(PY) -m pytest -m browser -p no:xdist $(PYTEST_ARGS); \
	fi

lint: venv ## ruff check, ruff format --check and mypy
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	@$(MAKE) --no-print-directory typecheck

typecheck: venv ## mypy with the django-stubs plugin (configured in pyproject.toml)
	$(TEST_ENV) $(PY) -m mypy

format: venv ## Format and autofix with ruff
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

docs: venv ## Build the documentation site into site/ (strict: a warning fails)
	$(VENV)/bin/mkdocs build --strict

lock: venv ## Re-pin requirements*.txt (and the client's lock) from the .in files, with hashes
	$(LOCK) requirements.in -o requirements.txt
	$(LOCK) requirements-dev.in -o requirements-dev.txt
	$(LOCK) requirements-bench.in -o requirements-bench.txt
	@# The client shares the server's pins: the image installs it with --no-deps.
	@if test -n "$(CLIENT_LOCK_INPUT)"; then \
		$(LOCK) $(CLIENT_LOCK_INPUT) -c requirements.txt -o $(CLIENT)/requirements.lock; \
	fi

# Benchmark against Celery (not part of make test): bench/results/<timestamp>.json.
# The harness and the peers live in their own venv; BENCH_QUICK=1 is a short development run.
BENCH_VENV := .venv-bench
BENCH_STAMP := $(BENCH_VENV)/.installed-$(shell cat requirements-bench.txt 2>/dev/null | sha1sum | cut -c1-12)

$(BENCH_STAMP): requirements-bench.txt
	@test -n "$(PYTHON_312)" || { echo "make bench needs Python 3.12 or newer." >&2; exit 1; }
	@test -x $(BENCH_VENV)/bin/python || $(PYTHON_312) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(BENCH_VENV)/bin/python -m pip install --quiet --require-hashes -r requirements-bench.txt
	@rm -f $(BENCH_VENV)/.installed-*; touch $@

bench: venv $(BENCH_STAMP) ## Benchmark against Celery (BENCH_QUICK=1: a short run)
	$(WITH_SERVICES) $(BENCH_VENV)/bin/python -m bench

# Where one single enqueue's CPU goes inside an API process (thread CPU per phase, in-process,
# on a database of its own): the breakdown behind docs/performance.md's single-call figures.
bench-phases: venv ## CPU of one single enqueue per phase, inside one API process (about a minute)
	$(WITH_SERVICES) $(PY) -m bench.phases

# The history's partitions measured (not part of make test; about 15 minutes, some 5 GB of disk
# in a database of its own, dropped at the end): the online conversion of 1M events, retention
# dropping a day of 10M, and whether tf_task would gain from partitioning. See docs/operations.md.
bench-partitions: venv ## Measure the history partitions: conversion lock, retention lock, tf_task (about 15 minutes)
	$(TEST_ENV) $(WITH_SERVICES) $(PY) -m bench.partitions $(BENCH_PARTITIONS_ARGS)

# Fault injection, not part of make test (about 10 minutes, loopback only): kills, pauses,
# Redis and Postgres outages, skewed clocks (needs Debian's faketime), failpoints; every
# scenario is checked for lost, duplicated or stale work. See faults/ and docs/guarantees.md.
test-faults: venv ## Fault injection: outages, kills, skewed clocks (about 10 minutes; FAULTS_SOAK_MINUTES=N: a soak)
	$(PY) -m faults $(FAULTS_ARGS)

# The soak through the multi-node simulation (faults/multinode.py): 3 API servers behind HAProxy,
# PgBouncer, two of each loop; once on a Redis Cluster, once on a Sentinel-managed Redis.
test-faults-multinode: venv ## The fault soak through the multi-node simulation, on a Cluster then on Sentinel (3 min each)
	$(PY) -m faults --multinode cluster $(FAULTS_ARGS)
	$(PY) -m faults --multinode sentinel $(FAULTS_ARGS)

# Schemathesis over /api/schema with every role's key, coverage phase on (make test runs a
# bounded version of the same test).
fuzz: venv ## Schemathesis over the OpenAPI schema, coverage phase on
	$(TEST_ENV) FUZZ_COVERAGE=1 FUZZ_MAX_EXAMPLES=$${FUZZ_MAX_EXAMPLES:-50} $(WITH_SERVICES) \
		$(PY) -m pytest tests/system/fuzz -p no:xdist $(PYTEST_ARGS)

clean: ## Remove the venv, collected static files and the built docs
	rm -rf $(VENV) staticfiles site

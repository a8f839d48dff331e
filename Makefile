# TaskForge: `make run` serves the whole stack, `make test` runs the suite.
# Both use DATABASE_URL / REDIS_URL when set, embedded servers otherwise.

SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat requirements.txt requirements-dev.txt | sha1sum | cut -c1-12)
# Django 6 needs Python 3.12+: take the first suitable interpreter on this machine.
PYTHON_312 := $(shell for c in python3.13 python3.12 python3 \
	$$(command -v pyenv >/dev/null && ls -d $$(pyenv root)/versions/3.1[2-9]*/bin/python3 2>/dev/null); do \
	command -v $$c >/dev/null 2>&1 && $$c -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null \
	&& { command -v $$c; break; }; done)
# Tests never need a real secret; production refuses to start without one.
TEST_ENV := DJANGO_SECRET_KEY=$${DJANGO_SECRET_KEY:-test-only-not-secret}
# Run a command with embedded Postgres/Redis unless both URLs are given.
WITH_SERVICES := $(if $(and $(DATABASE_URL),$(REDIS_URL)),,$(PY) -m taskforge.dev.embedded --)

.PHONY: venv run test test-browser lint format test-faults bench fuzz clean

venv: $(STAMP)

$(STAMP): requirements.txt requirements-dev.txt
	@test -n "$(PYTHON_312)" || { echo "TaskForge needs Python 3.12 or newer (python3.12 on PATH, or pyenv install 3.12)." >&2; exit 1; }
	@test -x $(PY) || $(PYTHON_312) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt -r requirements-dev.txt
	@rm -f $(VENV)/.installed-*; touch $@

run: venv
	$(PY) -m taskforge.dev.devstack

test: venv
	$(TEST_ENV) $(WITH_SERVICES) $(PY) -m pytest -m "not browser" -n 2 --dist loadgroup $(PYTEST_ARGS)
	@$(MAKE) --no-print-directory test-browser

# Playwright's event loop upsets later asyncio tests: browser tests run alone.
test-browser: venv
	@if ls tests/integration/dashboard/test_browser*.py >/dev/null 2>&1; then \
		$(TEST_ENV) DJANGO_ALLOW_ASYNC_UNSAFE=true $(WITH_SERVICES) $(PY) -m pytest -m browser -p no:xdist $(PYTEST_ARGS); \
	fi

lint: venv
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

format: venv
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

# Benchmark against Celery (not part of make test): bench/results/<timestamp>.json.
# The harness and the peers live in their own venv; BENCH_QUICK=1 is a short development run.
BENCH_VENV := .venv-bench
BENCH_STAMP := $(BENCH_VENV)/.installed-$(shell cat requirements-bench.txt 2>/dev/null | sha1sum | cut -c1-12)

$(BENCH_STAMP): requirements-bench.txt
	@test -n "$(PYTHON_312)" || { echo "make bench needs Python 3.12 or newer." >&2; exit 1; }
	@test -x $(BENCH_VENV)/bin/python || $(PYTHON_312) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(BENCH_VENV)/bin/python -m pip install --quiet -r requirements-bench.txt
	@rm -f $(BENCH_VENV)/.installed-*; touch $@

bench: venv $(BENCH_STAMP)
	$(WITH_SERVICES) $(BENCH_VENV)/bin/python -m bench

# Fault injection, not part of make test (about 8 minutes, loopback only): kills, pauses,
# Redis and Postgres outages, skewed clocks (needs Debian's faketime), failpoints; every
# scenario is checked for lost, duplicated or stale work. See faults/ and README "Guarantees".
test-faults: venv
	$(PY) -m faults $(FAULTS_ARGS)

# Schemathesis over /api/schema with every role's key, coverage phase on (make test runs a
# bounded version of the same test).
fuzz: venv
	$(TEST_ENV) FUZZ_COVERAGE=1 FUZZ_MAX_EXAMPLES=$${FUZZ_MAX_EXAMPLES:-50} $(WITH_SERVICES) \
		$(PY) -m pytest tests/system/fuzz -p no:xdist $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) staticfiles

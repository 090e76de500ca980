# riskstream: `make demo` and `make test` work on a fresh machine (they create .venv).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export DO_NOT_TRACK := 1
export PYTHONHASHSEED := 0

.PHONY: setup demo lint test test-fast bench dev clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -U pip setuptools wheel
	$(PY) -m pip install -q -e '.[orchestration,evidence,test]'
	touch $(STAMP)

# The compiled core (streaming/native.py): rebuilt whenever one of its sources changed since the
# last build; a no-op otherwise.
setup: $(STAMP)
	@if [ -f dbt_project/dbt_project.yml ]; then $(PY) -m orchestration.prepare_dbt; fi
	@RISKSTREAM_NATIVE=off $(PY) -m riskstream_tools.native_build ensure

demo: setup
	$(PY) -m riskstream_tools.demo

# ruff (style, imports, bugbear, pyupgrade) and mypy (strict on the pure core), as configured
# in pyproject.toml.
lint: setup
	$(PY) -m ruff check .
	$(PY) -m mypy

# Two worker processes, whole files each (module fixtures are built once); TEST_WORKERS=0
# runs the suite in this one process. The slowest 25 are listed at the end, so a run's log
# says where the suite's time (kept under 20 minutes) went.
TEST_WORKERS ?= 2
test: setup
	$(PY) -m pytest -q -p no:cacheprovider --timeout=900 -n $(TEST_WORKERS) --dist loadfile \
		--durations=25 tests

# The inner loop: everything but the long scenarios and the Dagster runs (about a minute).
test-fast: setup
	$(PY) -m pytest -q -p no:cacheprovider --timeout=900 -n $(TEST_WORKERS) --dist loadfile \
		-m "not slow and not dagster" tests

bench: setup
	$(PY) -m streaming.cli.main bench --all

dev: setup
	bash scripts/dev.sh

clean:
	rm -rf .riskstream evidence/out bench/results

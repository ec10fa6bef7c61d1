# Every target runs from the project's own virtual environment (.venv):
# the machine's system Python may carry incompatible packages.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP_BASE := $(VENV)/.installed-base
STAMP_DEV := $(VENV)/.installed-dev
STAMP_BENCH := $(VENV)/.installed-bench

.PHONY: demo test lint typecheck pytest test-under-load bench bench-full clean

# uv installs into the venv: it resolves and downloads in parallel, which keeps
# a fresh `make test` (every framework extra included) within minutes.
UV := $(BIN)/uv pip install --quiet --python $(BIN)/python

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip uv

# The base install includes the mcp extra, so that `serve` works right after
# `make demo` (the README's next step).
$(STAMP_BASE): pyproject.toml | $(BIN)/python
	$(UV) -e '.[mcp]'
	touch $@

$(STAMP_DEV): pyproject.toml | $(BIN)/python
	$(UV) -e '.[dev]'
	touch $@ $(STAMP_BASE)

$(STAMP_BENCH): pyproject.toml | $(BIN)/python
	$(UV) -e '.[dev,bench]'
	touch $@ $(STAMP_DEV) $(STAMP_BASE)

demo: $(STAMP_BASE)
	$(BIN)/trio-delegate demo $(DEMO_ARGS)

lint: $(STAMP_DEV)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP_DEV)
	$(BIN)/mypy

pytest: $(STAMP_DEV)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test: lint typecheck pytest

# The suite (or MODULES) RUNS times in a row while another process keeps one
# core busy; it fails unless every run is green (see docs/testing.md).
RUNS ?= 5
MODULES ?= tests
test-under-load: $(STAMP_DEV)
	$(BIN)/python -m tests.under_load --runs $(RUNS) $(MODULES) $(PYTEST_ARGS)

bench: $(STAMP_DEV)
	$(BIN)/python -m benchmarks

bench-full: $(STAMP_BENCH)
	$(BIN)/python -m benchmarks --full

clean:
	rm -rf $(VENV) build dist .mypy_cache .pytest_cache .ruff_cache

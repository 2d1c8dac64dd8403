# The two commands of the README: `make demo` and `make test`.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
DEMO_DIR ?= workdirs/demo
STAMP   := $(VENV)/.installed
TSTAMP  := $(VENV)/.installed-test

.PHONY: demo test data clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q -U pip setuptools wheel

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

$(TSTAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[test]'
	touch $@ $(STAMP)

data: $(STAMP)
	$(BIN)/python -m data.sample

demo: $(STAMP) data
	$(BIN)/python -m zoo.compare --config configs/compare/demo.py --workdir $(DEMO_DIR)

test: $(TSTAMP)
	$(BIN)/python -m data.sample
	$(BIN)/python -m pytest -q -n 2 --dist loadfile tests

clean:
	rm -rf $(VENV) workdirs .data

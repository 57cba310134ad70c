# seqloader — every target creates/refreshes .venv first, so a fresh clone needs nothing else.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench chaos explore under-load clean venv

# setup.py and the C source too: `pip install -e .` compiles the optional row kernel in place
# (src/seqloader/sources/_rowcopy*.so; skipped without a C compiler: the numpy path runs)
$(STAMP): pyproject.toml setup.py src/seqloader/sources/_rowcopy.c
	test -d $(VENV) || $(PY) -m venv $(VENV)
	# torch first, pinned to the local CPU wheel (any other spec fetches a multi-GB CUDA build)
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/seqloader demo

# mypy (about half a minute of one core in a fresh clone, no cache yet) runs beside pytest, on the
# core pytest leaves idle most of the time; either failing fails the target
test: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	log=$$(mktemp); $(BIN)/mypy > $$log 2>&1 & mypy=$$!; \
	$(BIN)/python -m pytest -q -x; tests=$$?; \
	wait $$mypy; typed=$$?; cat $$log; rm -f $$log; \
	test $$tests -eq 0 && test $$typed -eq 0

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/pip install -q -e '.[bench]'
	$(BIN)/python -m benchmarks

# random SIGKILLs of torchrun ranks with elastic resume, then the extended tests (further
# multi-process variants of contracts `test` keeps); minutes, so not part of `test`
# (docs/reliability.md). KILLS=16 by default; CHAOS_ARGS e.g. "--seed 5 --launcher fork"
KILLS ?= 16
chaos: $(STAMP)
	$(BIN)/python tests/dist/chaos.py --kills $(KILLS) $(CHAOS_ARGS)
	$(BIN)/python -m pytest -q -m extended

# the suite with new hypothesis examples on every run (`test` draws the same ones each time)
explore: $(STAMP)
	HYPOTHESIS_PROFILE=explore $(BIN)/python -m pytest -q

# the suite RUNS times in a row with two busy loops beside it (docs/reliability.md)
RUNS ?= 5
under-load: $(STAMP)
	PYTHON=$(BIN)/python tests/under_load.sh $(RUNS)

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .hypothesis .mypy_cache src/seqloader/sources/*.so

# Ringscope: the two commands of the README.
#   make demo   set everything up, open the window and start a real 2-rank CPU DDP demo training
#   make test   set everything up, run lint (ruff), layering contracts (import-linter), types (mypy) and pytest
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup demo app test lint bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml constraints/cpu.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints/cpu.txt -e '.[gui,dev]' torch tensorflow-cpu
	touch $(STAMP)

demo: setup
	$(BIN)/ringscope demo

app: setup
	$(BIN)/ringscope

lint: setup
	$(BIN)/ruff check agent gui trainers tests benchmarks
	$(BIN)/lint-imports
	$(BIN)/mypy

test: lint
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest -q

bench: setup
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache

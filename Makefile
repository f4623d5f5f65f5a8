# Ringscope: the two commands of the README.
#   make demo   set everything up, open the window and start a real 2-rank CPU DDP demo training
#   make test   set everything up, run lint (ruff), layering contracts (import-linter), types (mypy) and pytest
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup demo app test test-deps lint bench clean

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

test: lint test-deps
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest -q

# System packages the tests use: Debian's prometheus (tests/integration/test_metrics_endpoint.py scrapes the
# metrics endpoint with a real Prometheus server). Installed once, when missing; without root, stop and say how.
test-deps:
	@command -v prometheus >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -q prometheus \
	    || { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q prometheus; }; \
	  else \
	    echo "make test: the metrics tests need a Prometheus server: sudo apt-get install -y prometheus" >&2; \
	    exit 1; \
	  fi; }

bench: setup
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache

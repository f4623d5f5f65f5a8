# Ringscope: the two commands of the README.
#   make demo   set everything up, open the window and start a real 2-rank CPU DDP demo training
#   make test   set everything up, run lint (ruff), layering contracts (import-linter), types (mypy), the minimum
#               Python of the installed code (vermin: 3.10) and pytest (which also builds and installs the wheel)
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
	$(BIN)/ruff check agent gui trainers tests benchmarks src
	$(BIN)/lint-imports
	$(BIN)/mypy
	$(BIN)/vermin -q --no-tips --violations --eval-annotations -t=3.10- agent gui trainers src/ringscope/__init__.py

test: lint test-deps
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest -q

# System packages the tests use, installed once when missing: Debian's prometheus (tests/integration/
# test_metrics_endpoint.py scrapes the metrics endpoint with a real Prometheus server), iproute2 (the multi-node tests'
# network namespaces and tc), openssh-server/-client (launching on other hosts over SSH), slurmctld/slurmd/slurm-client
# and munge (a real Slurm cluster on the test hosts: tests/multinode/test_slurm.py). Without root, stop and say how.
TEST_PACKAGES := prometheus:prometheus ip:iproute2 tc:iproute2 /usr/sbin/sshd:openssh-server ssh:openssh-client \
	/usr/sbin/slurmctld:slurmctld /usr/sbin/slurmd:slurmd sbatch:slurm-client /usr/sbin/munged:munge
test-deps:
	@missing=""; for pair in $(TEST_PACKAGES); do \
	  tool=$${pair%%:*}; package=$${pair#*:}; \
	  if ! command -v $$tool >/dev/null 2>&1 && [ ! -x "$$tool" ]; then missing="$$missing $$package"; fi; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing \
	    || { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing; }; \
	  else \
	    echo "make test: the tests need these Debian packages: sudo apt-get install -y$$missing" >&2; \
	    exit 1; \
	  fi; \
	fi

bench: setup
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache

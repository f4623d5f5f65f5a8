#!/usr/bin/env bash
# GPU check of the DDP integration (and the TF one where TensorFlow with GPU support is installed).
#
# It runs the reference DDP trainer with NCCL on every GPU (nproc = GPU count, at least 1) and prints NVML
# readings, the CUDA-event stall figures per rank, and the agent's overhead ratio; then TensorFlow
# MirroredStrategy on the GPUs. Exits non-zero when there is no GPU or a check fails.
#
# On a GPU machine with internet, from a fresh clone:   bash benchmarks/gpu_check.sh
#   It runs `make setup`, which installs the CPU torch pinned in constraints/cpu.txt; a GPU machine needs a CUDA
#   build instead: GPU_CHECK_INSTALL_TORCH=1 makes this script reinstall torch without the constraint.
#
# With an existing Python that has CUDA torch (no `make setup`):   PYTHON=python3 bash benchmarks/gpu_check.sh
#   The repository is used from its folder (not installed: src/ goes first on PYTHONPATH). It needs pyzmq, msgpack, psutil, numpy, scikit-learn
#   and nvidia-ml-py besides torch. On this workplace's lent H200 machines (nothing can be downloaded there,
#   python3 is 3.12 with CUDA torch and all of those but pyzmq) carry pyzmq as a wheel. Here, in the repo root:
#     echo /.whl/ >> .git/info/exclude
#     python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#         --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d .whl pyzmq==27.3.0
#   and run there (carry: [".whl"]), in one call of about 5 minutes:
#     python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site \
#         && PYTHON=python3 bash benchmarks/gpu_check.sh 2>&1 | tee $OUT/gpu_check.log
#   TensorFlow is not installed there (and too large to carry), so the TF part says it is skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu_check: no NVIDIA GPU here (nvidia-smi missing or it lists no GPU); run this on a GPU machine." >&2
    exit 1
fi
if [ -n "${PYTHON:-}" ]; then
    PY=$PYTHON
    # the repository, not installed: src/ holds the ringscope namespace, the root the benchmarks package
    export PYTHONPATH="$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH}"
    missing=$("$PY" - <<'PYEOF'
import importlib.util
names = {"torch": "torch", "zmq": "pyzmq", "msgpack": "msgpack", "psutil": "psutil", "numpy": "numpy",
         "sklearn": "scikit-learn", "pynvml": "nvidia-ml-py"}
print(" ".join(package for module, package in names.items() if importlib.util.find_spec(module) is None))
PYEOF
)
    if [ -n "$missing" ]; then
        echo "gpu_check: $PY lacks: $missing (install them, or carry wheels: see the top of this script)" >&2
        exit 1
    fi
else
    make setup
    PY=.venv/bin/python
fi
if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    if [ -z "${PYTHON:-}" ] && [ "${GPU_CHECK_INSTALL_TORCH:-0}" = "1" ]; then
        .venv/bin/pip install --force-reinstall torch
    else
        echo "gpu_check: $PY's torch ($("$PY" -c 'import torch; print(torch.__version__)')) has no CUDA." >&2
        echo "  Install a CUDA build: .venv/bin/pip install --force-reinstall torch  (or GPU_CHECK_INSTALL_TORCH=1)" >&2
        exit 1
    fi
fi
echo "== versions"
"$PY" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "nccl", ".".join(map(str, torch.cuda.nccl.version())))'
echo "== nvidia-smi"
nvidia-smi --query-gpu=index,uuid,name,pci.bus_id,utilization.gpu,memory.used,power.draw,temperature.gpu \
    --format=csv
echo "== DDP (NCCL)"
status=0
"$PY" -m benchmarks.gpu_check_ddp || status=$?
echo "== TensorFlow"
if "$PY" -c 'import tensorflow' >/dev/null 2>&1; then
    "$PY" -m benchmarks.gpu_check_tf || status=$?
else
    echo "gpu_check: TensorFlow is not installed for $PY: the MirroredStrategy GPU check is SKIPPED (not run)."
fi
exit $status

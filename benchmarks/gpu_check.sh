#!/usr/bin/env bash
# GPU check of the DDP integration (and the TF one when benchmarks/gpu_check_tf.py exists).
#
# On a machine with an NVIDIA GPU, from a fresh clone:   bash benchmarks/gpu_check.sh
# It runs `make setup`, then the reference DDP trainer with NCCL on every GPU (nproc = GPU count, at least 1), and
# prints NVML readings, the CUDA-event stall figures per rank, and the agent's overhead ratio.
#
# `make setup` installs the CPU torch pinned in constraints/cpu.txt. A GPU machine needs a CUDA build instead:
#     .venv/bin/pip install --force-reinstall torch        # no "-c constraints/cpu.txt"
# (or set GPU_CHECK_INSTALL_TORCH=1 and this script does exactly that). Exits non-zero when there is no GPU.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu_check: no NVIDIA GPU here (nvidia-smi missing or it lists no GPU); run this on a GPU machine." >&2
    exit 1
fi
make setup
PY=.venv/bin/python
if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    if [ "${GPU_CHECK_INSTALL_TORCH:-0}" = "1" ]; then
        .venv/bin/pip install --force-reinstall torch
    else
        echo "gpu_check: the virtualenv's torch ($("$PY" -c 'import torch; print(torch.__version__)')) has no CUDA." >&2
        echo "  Install a CUDA build: .venv/bin/pip install --force-reinstall torch  (or GPU_CHECK_INSTALL_TORCH=1)" >&2
        exit 1
    fi
fi
echo "== nvidia-smi"
nvidia-smi --query-gpu=index,uuid,name,pci.bus_id,utilization.gpu,memory.used,power.draw,temperature.gpu \
    --format=csv
echo "== DDP (NCCL)"
"$PY" -m benchmarks.gpu_check_ddp
if [ -f benchmarks/gpu_check_tf.py ]; then
    echo "== TensorFlow"
    "$PY" -m benchmarks.gpu_check_tf
fi

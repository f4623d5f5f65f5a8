"""GPU check of ringscope.agent.torch_ddp (run by benchmarks/gpu_check.sh on a machine with NVIDIA GPUs; needs CUDA
torch).

1. The reference trainer with NCCL on every GPU (nproc = GPU count), rank 0 slowed by 50 ms when there are 2+
   GPUs, telemetry received on a real ROUTER socket: prints per rank the CUDA-event phase medians (data wait,
   compute, comm, AllReduce stall) and the NVML readings tagged with the rank (mapped by UUID, not CUDA index).
2. The overhead: the same training with and without the agent, alternated (3 pairs), ratio of median step times.

Exits 1 (with what failed) when a check fails, 2 when there is no CUDA GPU.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from ringscope.agent import wire
from ringscope.agent.schema import GpuSample, Hello, Record, Step
from ringscope.trainers.common import free_port, median, parse_result

ROOT = Path(__file__).resolve().parents[1]
TRAIN = ["--device", "cuda", "--dataset", "synthetic", "--model-width", "2048", "--model-depth", "4",
         "--batch-size", "512", "--steps", "300", "--log-every", "0"]


def torchrun(nproc: int, args: list[str], endpoint: str) -> dict[str, Any]:
    env = dict(os.environ, RINGSCOPE_ENDPOINT=endpoint, RINGSCOPE_RUN_ID="gpu-check")
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
                          "--master-port", str(free_port()), "-m", "ringscope.trainers.ddp_trainer", *args],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    if out.returncode != 0:
        raise SystemExit(f"gpu_check_ddp: trainer failed ({out.returncode}):\n{out.stderr[-4000:]}")
    return parse_result(out.stdout)


def receive(endpoint_holder: list[str], records: list[Record], stop: threading.Event) -> None:
    import zmq

    context = zmq.Context()
    pull = context.socket(zmq.ROUTER)
    pull.setsockopt(zmq.LINGER, 0)
    endpoint_holder.append(f"tcp://127.0.0.1:{pull.bind_to_random_port('tcp://127.0.0.1')}")
    while not stop.is_set():
        if pull.poll(50):
            records.extend(wire.decode(pull.recv_multipart()[-1]).records)
    pull.close(linger=0)
    context.term()


def main() -> int:
    import torch

    gpus = torch.cuda.device_count()
    if gpus < 1:
        print("gpu_check_ddp: torch sees no CUDA GPU; install a CUDA build of torch (see gpu_check.sh)",
              file=sys.stderr)
        return 2
    records: list[Record] = []
    holder: list[str] = []
    stop = threading.Event()
    thread = threading.Thread(target=receive, args=(holder, records, stop), daemon=True)
    thread.start()
    while not holder:
        time.sleep(0.01)
    endpoint = holder[0]
    failures: list[str] = []
    slow = ["--slow-rank", "0", "--slow-ms", "50"] if gpus >= 2 else []
    result = torchrun(gpus, TRAIN + slow, endpoint)
    time.sleep(2.0)
    print(f"trainer: {json.dumps(result)}")
    for hello in (r for r in records if isinstance(r, Hello)):
        print(f"rank {hello.rank} backend {hello.backend} devices {hello.devices}")
        break
    for rank in range(gpus):
        steps = [r for r in records if isinstance(r, Step) and r.rank == rank and not r.first_batch]
        if not steps:
            failures.append(f"no steps from rank {rank}")
            continue
        row = {f: _median_ms(steps, f) for f in ("step_s", "data_wait_s", "compute_s", "comm_s", "comm_exposed_s")}
        losses = [s.loss for s in steps if s.loss is not None]
        print(f"rank {rank}: {len(steps)} steps, medians (ms, CUDA events) {row}, last loss {losses[-1:]}")
        if row["comm_exposed_s"] is None and gpus > 1:
            failures.append(f"rank {rank}: no AllReduce stall measured")
        if not losses:
            failures.append(f"rank {rank}: no loss read back from the GPU")
    if gpus >= 2:
        stalls = {r: _median_ms([s for s in records if isinstance(s, Step) and s.rank == r], "comm_exposed_s")
                  for r in range(gpus)}
        print(f"stall per rank (ms): {stalls}; expected: rank 0 (slowed 50 ms) smallest, others ~50 ms more")
        if min(stalls, key=lambda r: stalls[r] or 0.0) != 0:
            failures.append("the slowed rank 0 does not have the smallest stall")
    samples = [r for r in records if isinstance(r, GpuSample)]
    for index in sorted({s.gpu_index for s in samples}):
        mine = [s for s in samples if s.gpu_index == index]
        print(f"NVML gpu {index} ({mine[-1].uuid}) rank {mine[-1].rank}: util {_mean(mine, 'util_pct')} %, "
              f"power {_mean(mine, 'power_w')} W, mem {mine[-1].mem_used_bytes} B, temp {mine[-1].temp_c} C, "
              f"sm {_mean(mine, 'sm_clock_mhz')} MHz, throttle {mine[-1].throttle_reasons}")
    if not samples:
        failures.append("no NVML GPU samples received")
    elif any(s.rank is None for s in samples):
        failures.append("GPU samples not tagged with a rank (UUID mapping failed)")

    ratios = []
    for _ in range(3):
        with_agent = torchrun(gpus, TRAIN, endpoint)["step_time_median_s"]
        without = torchrun(gpus, [*TRAIN, "--no-agent"], endpoint)["step_time_median_s"]
        ratios.append(with_agent / without)
    print(f"overhead ratio (agent / no agent, median step): {statistics.median(ratios):.4f} from {ratios}")
    stop.set()
    thread.join(2)
    for failure in failures:
        print(f"FAIL: {failure}", file=sys.stderr)
    print("gpu_check_ddp: " + ("FAILED" if failures else "OK"))
    return 1 if failures else 0


def _median_ms(steps: list[Step], field: str) -> float | None:
    value = median([getattr(s, field) for s in steps if getattr(s, field) is not None])
    return None if value is None else round(value * 1e3, 3)


def _mean(samples: list[GpuSample], field: str) -> float | None:
    values = [getattr(s, field) for s in samples if getattr(s, field) is not None]
    return round(statistics.mean(values), 1) if values else None


if __name__ == "__main__":
    sys.exit(main())

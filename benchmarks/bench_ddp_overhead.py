"""Overhead of Ringscope's DDP instrumentation: step time with the agent vs without, interleaved in one run.

One torchrun run of 2 gloo ranks holds two identical DDP models of the reference trainer's MLP (digits data):

* baseline: plain DDP (its built-in C++ all-reduce), plain batch list;
* instrumented: ``agent.torch_ddp.instrument`` (timing hook wrapping all-reduce, timed loader, ``step_done`` with
  the loss) reporting every step through a real agent to a real ZeroMQ PULL socket bound by this process.

They alternate in blocks of ``BLOCK_STEPS`` steps so machine load hits both alike. Reported: the median over
rounds of (median instrumented step / median baseline step) with its interquartile range, and the median extra
time per step. Target: <= 1.01.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROUNDS_QUICK, ROUNDS_FULL = 8, 30
BLOCK_STEPS = 25
ROOT = Path(__file__).resolve().parents[1]


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Run the interleaved comparison under torchrun and return the benchmark rows."""
    import zmq

    rounds = ROUNDS_QUICK if quick else ROUNDS_FULL
    context = zmq.Context()
    pull = context.socket(zmq.PULL)
    pull.setsockopt(zmq.LINGER, 0)
    endpoint = f"tcp://127.0.0.1:{pull.bind_to_random_port('tcp://127.0.0.1')}"
    received = [0]
    stop = threading.Event()

    def drain() -> None:
        while not stop.is_set():
            if pull.poll(50):
                pull.recv()
                received[0] += 1

    thread = threading.Thread(target=drain, daemon=True)
    thread.start()
    try:
        env = dict(os.environ, RINGSCOPE_ENDPOINT=endpoint, RINGSCOPE_RUN_ID="bench-ddp", OMP_NUM_THREADS="1")
        out = subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
             str(_free_port()), "-m", "benchmarks.bench_ddp_overhead", "--child", str(rounds)],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False,
        )
    finally:
        stop.set()
        thread.join(2)
        pull.close(linger=0)
        context.term()
    if out.returncode != 0:
        raise RuntimeError(f"DDP overhead child failed ({out.returncode}):\n{out.stderr[-3000:]}")
    result = json.loads([line for line in out.stdout.splitlines() if line.startswith("{")][-1])
    ratios: list[float] = result["ratios"]
    q1, _, q3 = statistics.quantiles(ratios, n=4)
    note = f"{rounds} rounds x {BLOCK_STEPS} steps each way, interleaved; 2 gloo ranks, digits MLP"
    return [
        {"benchmark": "ddp_overhead", "metric": "step_ratio_median", "value": statistics.median(ratios),
         "unit": "x", "note": f"target <= 1.01; IQR {q1:.4f}..{q3:.4f}; {note}"},
        {"benchmark": "ddp_overhead", "metric": "baseline_step_median", "value": result["baseline_step_s"] * 1e3,
         "unit": "ms", "note": "plain DDP, same process"},
        {"benchmark": "ddp_overhead", "metric": "extra_per_step_median", "value": result["extra_step_s"] * 1e6,
         "unit": "µs", "note": "instrumented minus baseline, median over rounds"},
        {"benchmark": "ddp_overhead", "metric": "messages_received", "value": float(received[0]),
         "unit": "msgs", "note": "telemetry really sent to a PULL socket"},
    ]


def _child(rounds: int) -> None:
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    from agent.torch_ddp import instrument
    from trainers import common
    from trainers.ddp_trainer import build_model

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    data = common.load_dataset("digits")
    order = common.shard_indices(len(data.x_train), rank, world, epoch=0, seed=0)
    batches = [(torch.from_numpy(data.x_train[order[i : i + 32]]), torch.from_numpy(data.y_train[order[i : i + 32]]))
               for i in range(0, 32 * BLOCK_STEPS, 32)]
    models = []
    for _ in range(2):
        torch.manual_seed(0)
        models.append(DistributedDataParallel(build_model(data.num_features, data.num_classes, 64, 2)))
    baseline, instrumented = models
    probe = instrument(instrumented, batches)
    loss_fn = nn.CrossEntropyLoss()

    def block(ddp: Any, source: Any, with_probe: bool) -> float:
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
        times = []
        last = time.perf_counter()
        for x, y in source:
            loss = loss_fn(ddp(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if with_probe:
                probe.step_done(samples=len(x), loss=loss)
            now = time.perf_counter()
            times.append(now - last)
            last = now
        return statistics.median(times[1:])

    block(baseline, batches, False)  # warm-up both
    block(instrumented, probe.loader, True)
    ratios, extras, bases = [], [], []
    for index in range(rounds):
        order_pair = [(baseline, batches, False), (instrumented, probe.loader, True)]
        if index % 2:
            order_pair.reverse()  # neither always runs first
        medians = {with_probe: block(ddp, src, with_probe) for ddp, src, with_probe in order_pair}
        ratios.append(medians[True] / medians[False])
        extras.append(medians[True] - medians[False])
        bases.append(medians[False])
    probe.close()
    if rank == 0:
        print(json.dumps({"ratios": ratios, "extra_step_s": statistics.median(extras),
                          "baseline_step_s": statistics.median(bases)}), flush=True)
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        _child(int(sys.argv[2]))
    else:
        for row in run(quick="--quick" in sys.argv):
            print(row)

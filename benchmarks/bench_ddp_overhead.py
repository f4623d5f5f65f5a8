"""Overhead of Ringscope's DDP instrumentation: step time with the agent vs without, interleaved in one run.

One torchrun run of 2 gloo ranks measures two workloads of the reference trainer (``ringscope.trainers.ddp_trainer``'s
MLP and ``ringscope.trainers.common`` data, batch 32 per rank), one after the other in the same processes:

* ``digits``: the trainer's default (digits data, width 64, depth 2): a ~1-3 ms step, the worst case for a fixed
  per-step cost;
* ``realistic``: ``--dataset synthetic --model-width 1024 --model-depth 4``: a ~30-60 ms CPU step, several buckets.

Each workload holds four identical DDP models (same seed, ``gradient_as_bucket_view=True`` as in the trainer):

* ``baseline``: plain DDP (its built-in C++ all-reduce, no Python comm hook), plain batch list;
* ``control``: a second plain DDP model, measured exactly like the baseline. control / baseline is an A/A ratio:
  its spread is the noise floor of this machine at this moment, so an instrumented ratio inside it is not a
  measured overhead;
* ``instrumented``: ``ringscope.agent.torch_ddp.instrument`` (timing all-reduce hook, timed loader, ``step_done`` with
the
  loss tensor) reporting every step through a real agent to a real ZeroMQ ROUTER socket bound by the parent;
* ``python_hook``: plain DDP with PyTorch's own Python ``allreduce_hook`` and no agent: what any Python comm hook
  costs over DDP's C++ one, so the instrumented ratio can be read against that floor.

The four run in blocks of a few steps, the order rotating every round so that load and cache effects hit all
alike. A step is timed from before its batch is taken to after ``step_done`` (baseline: after ``zero_grad``).
Reported per workload: the median over rounds of (median instrumented step / median baseline step) with its
interquartile range, the same for the A/A control, the baseline's median step, and the extra time per step (median
over rounds of the paired difference, and the difference of the pooled 25th percentiles, which load spikes on a
shared machine disturb least), and the extra process CPU time per step (all threads of the rank, so the comm
callbacks and the agent's sender thread count; far less disturbed by other processes than wall time). Target:
ratio <= 1.01.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.overhead import VARIANTS, WORKLOADS, interleave, summarize, summary_rows
from ringscope.trainers.common import free_port

DDP_VARIANTS = (*VARIANTS, "python_hook")

ROOT = Path(__file__).resolve().parents[1]
def run(quick: bool = False) -> list[dict[str, Any]]:
    """Run the interleaved comparison under torchrun and return the benchmark rows."""
    import zmq

    context = zmq.Context()
    pull = context.socket(zmq.ROUTER)
    pull.setsockopt(zmq.LINGER, 0)
    endpoint = f"tcp://127.0.0.1:{pull.bind_to_random_port('tcp://127.0.0.1')}"
    received = [0]
    stop = threading.Event()

    def drain() -> None:
        while not stop.is_set():
            if pull.poll(50):
                pull.recv_multipart()[-1]
                received[0] += 1

    thread = threading.Thread(target=drain, daemon=True)
    thread.start()
    try:
        env = dict(os.environ, RINGSCOPE_ENDPOINT=endpoint, RINGSCOPE_RUN_ID="bench-ddp", OMP_NUM_THREADS="1")
        out = subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
             str(free_port()), "-m", "benchmarks.bench_ddp_overhead", "--child", "quick" if quick else "full"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False,
        )
    finally:
        stop.set()
        thread.join(2)
        pull.close(linger=0)
        context.term()
    if out.returncode != 0:
        raise RuntimeError(f"DDP overhead child failed ({out.returncode}):\n{out.stderr[-3000:]}")
    results: dict[str, dict[str, Any]] = json.loads([ln for ln in out.stdout.splitlines() if ln.startswith("{")][-1])
    rows: list[dict[str, Any]] = []
    for name, result in results.items():
        rows += summary_rows("ddp_overhead", name, result,
                             "2 gloo ranks, gradient_as_bucket_view, vs DDP's built-in C++ all-reduce")
    rows.append({"benchmark": "ddp_overhead", "metric": "messages_received", "value": float(received[0]),
                 "unit": "msgs", "note": "telemetry really sent to a ROUTER socket (batched frames)"})
    return rows


def _child(quick: bool) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    results = {name: _measure(name, spec, quick) for name, spec in WORKLOADS.items()}
    if dist.get_rank() == 0:
        print(json.dumps(results), flush=True)
    dist.barrier()
    dist.destroy_process_group()


def _measure(name: str, spec: tuple[str, int, int, int, tuple[int, int], int], quick: bool) -> dict[str, Any]:
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel

    from ringscope.agent.torch_ddp import instrument
    from ringscope.trainers import common
    from ringscope.trainers.ddp_trainer import build_model

    dataset, width, depth, batch, rounds_by_mode, block = spec
    rounds = rounds_by_mode[0 if quick else 1]
    rank, world = dist.get_rank(), dist.get_world_size()
    data = common.load_dataset(dataset, model_width=width)
    order = common.shard_indices(len(data.x_train), rank, world, epoch=0, seed=0)
    x_train, y_train = data.x_train, data.y_train
    batches = [(torch.from_numpy(x_train[order[i : i + batch]]), torch.from_numpy(y_train[order[i : i + batch]]))
               for i in range(0, batch * block, batch)]
    models = {}
    for variant in DDP_VARIANTS:
        torch.manual_seed(0)
        # As the reference trainer builds it (see there): gradients are views into DDP's buckets.
        models[variant] = DistributedDataParallel(build_model(data.num_features, data.num_classes, width, depth),
                                                  gradient_as_bucket_view=True)
    probe = instrument(models["instrumented"], batches)
    models["python_hook"].register_comm_hook(None, default_hooks.allreduce_hook)
    optimizers = {v: torch.optim.SGD(m.parameters(), lr=0.01) for v, m in models.items()}
    loss_fn = nn.CrossEntropyLoss()

    def run_block(variant: str) -> list[float]:
        ddp, optimizer = models[variant], optimizers[variant]
        with_probe = variant == "instrumented"
        iterator = iter(probe.loader if with_probe else batches)  # type: ignore[arg-type]
        times = []
        for _ in range(block):
            started = time.perf_counter()
            x, y = next(iterator)
            loss = loss_fn(ddp(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if with_probe:
                probe.step_done(samples=len(x), loss=loss)
            times.append(time.perf_counter() - started)
        return times

    times, cpu = interleave(run_block, rounds, variants=DDP_VARIANTS)
    probe.close()
    return summarize(times, cpu, f"{dataset} width {width} depth {depth} batch {batch}/rank", block)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        from ringscope.trainers.ddp_trainer import exit_without_finalizing

        _child(sys.argv[2] == "quick")
        exit_without_finalizing(0)  # the same native teardown abort as the trainer's (see there)
    else:
        for row in run(quick="--quick" in sys.argv):
            print(row)

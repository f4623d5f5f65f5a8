"""The peer DDP workload, plain and instrumented in the same two rank processes, taking turns (run by torchrun from
``bench_peer``; not a benchmark module itself).

The workload of shared/ENVIRONMENT.md — the PyTorch examples' DDP tutorial adapted to CPU/gloo: ``nn.Linear(20, 1)``,
batch 32, 262 144 random in-memory samples, SGD, DistributedSampler — on two identical DDP models: ``plain`` (no
Ringscope) and ``agent`` (``ringscope.agent.torch_ddp.instrument`` with its timed loader and ``step_done`` every step,
the
README's three lines, reporting to ``RINGSCOPE_ENDPOINT``). Each round trains ``--phase-steps`` steps on each model, the
order alternating every round (ABBA), so load drifting on a shared machine hits both alike. Rank 0 prints one line
per round: ``ROUND <plain ms> <agent ms> <plain thread µs> <agent thread µs>``: the median wall time of an iteration
and the median CPU time of the training thread per iteration (``time.thread_time``: what the training thread itself
spent, the agent's sender thread and gloo's threads excluded).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from ringscope.agent.torch_ddp import instrument


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--phase-steps", type=int, default=500)
    parser.add_argument("--timing", default=None, help="light or full (default: the agent's default)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    data = TensorDataset(torch.randn(262_144, 20), torch.randn(262_144, 1))
    models = []
    for _ in range(2):
        torch.manual_seed(0)
        models.append(DistributedDataParallel(nn.Linear(20, 1)))
    probe = instrument(models[1], None, timing=args.timing)
    phases = {"plain": phase(models[0], data, args.phase_steps, None),
              "agent": phase(models[1], data, args.phase_steps, probe)}
    for round_index in range(args.rounds):
        order = ["plain", "agent"] if round_index % 2 == 0 else ["agent", "plain"]
        figures = {name: phases[name]() for name in order}
        if dist.get_rank() == 0:
            (plain_ms, plain_us), (agent_ms, agent_us) = figures["plain"], figures["agent"]
            print(f"ROUND {plain_ms:.4f} {agent_ms:.4f} {plain_us:.3f} {agent_us:.3f}", flush=True)
    stats = probe.agent.stats
    probe.close()
    if dist.get_rank() == 0 and stats is not None:
        print(f"AGENT sent {stats.sent_records} dropped {stats.dropped_records}", flush=True)
    dist.destroy_process_group()


def phase(model: DistributedDataParallel, data: TensorDataset, steps: int,
          probe: Any) -> Callable[[], tuple[float, float]]:
    """A function training ``model`` for ``steps`` iterations; returns (median ms, median training-thread µs)."""
    loader = DataLoader(data, batch_size=32, sampler=DistributedSampler(data))
    source: Any = probe.wrap_loader(loader) if probe is not None else loader
    batches: Iterator[Any] = iter(source)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.MSELoss()

    def run() -> tuple[float, float]:
        nonlocal batches
        wall: list[float] = []
        cpu: list[float] = []
        last, last_cpu = time.perf_counter(), time.thread_time()
        for _ in range(steps):
            try:
                x, y = next(batches)
            except StopIteration:
                batches = iter(source)
                x, y = next(batches)
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            if probe is not None:
                probe.step_done(samples=len(x), loss=loss)
            now, now_cpu = time.perf_counter(), time.thread_time()
            wall.append(now - last)
            cpu.append(now_cpu - last_cpu)
            last, last_cpu = now, now_cpu
        return statistics.median(wall[1:]) * 1e3, statistics.median(cpu[1:]) * 1e6

    return run


if __name__ == "__main__":
    main()

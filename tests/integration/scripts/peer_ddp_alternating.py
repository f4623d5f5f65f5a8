"""Zero-code, manual and plain DDP in one process tree, alternating: the overhead comparison that survives a
shared machine (run it under ``ringscope run``; ``zero_code_overhead.py --alternating`` does).

The peer workload of shared/ENVIRONMENT.md (nn.Linear(20, 1), batch 32, in-memory data, SGD, DistributedSampler,
gloo) on three identical DDP models: the first is the one zero-code attached to, the second is instrumented by hand
(``instrument``), the third is left plain. Each round trains ``--phase-steps`` steps on each model in turn (the
order rotates every round) and rank 0 prints one line per round: ``ROUND <zero-code ms> <manual ms> <plain ms>``,
median wall time of an iteration per phase. While the manual or plain model trains, zero-code's step marking is
switched off (its DataLoader and optimizer hooks then cost one global lookup each), as in a process without it.
"""

from __future__ import annotations

import argparse
import os
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

import ringscope.agent.inject.torch_patch as zero_code
from ringscope.agent.torch_ddp import instrument


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--phase-steps", type=int, default=400)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    data = TensorDataset(torch.randn(262_144, 20), torch.randn(262_144, 1))
    models = []
    for _ in range(3):
        torch.manual_seed(0)
        models.append(DistributedDataParallel(nn.Linear(20, 1)))
    attachment = zero_code._ACTIVE
    assert attachment is not None or os.environ.get("ALLOW_PLAIN"), "run this under ringscope run"
    probe = instrument(models[1], None)
    phases: dict[str, Callable[[], float]] = {
        "zero-code": phase(models[0], data, args.phase_steps, None),
        "manual": phase(models[1], data, args.phase_steps, probe),
        "plain": phase(models[2], data, args.phase_steps, None),
    }
    order = list(phases)
    for round_index in range(args.rounds):
        medians = {}
        for name in order[round_index % 3:] + order[:round_index % 3]:
            zero_code._ACTIVE = attachment if name == "zero-code" else None
            medians[name] = phases[name]()
        if dist.get_rank() == 0:
            print("ROUND " + " ".join(f"{medians[name] * 1000:.4f}" for name in order), flush=True)
    zero_code._ACTIVE = attachment
    probe.close()
    dist.destroy_process_group()


def phase(model: DistributedDataParallel, data: TensorDataset, steps: int, probe: Any) -> Callable[[], float]:
    """A function that trains ``model`` for ``steps`` iterations and returns the median iteration (seconds)."""
    loader = DataLoader(data, batch_size=32, sampler=DistributedSampler(data), persistent_workers=False)
    batches: Iterator[Any] = iter(probe.wrap_loader(loader) if probe is not None else loader)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.MSELoss()

    def run() -> float:
        nonlocal batches
        times = []
        last = time.perf_counter()
        for _ in range(steps):
            try:
                x, y = next(batches)
            except StopIteration:
                batches = iter(probe.wrap_loader(loader) if probe is not None else loader)
                x, y = next(batches)
            loss_fn(model(x), y).backward()
            optimizer.step()
            optimizer.zero_grad()
            if probe is not None:
                probe.step_done(samples=len(x), loss=None)
            now = time.perf_counter()
            times.append(now - last)
            last = now
        return statistics.median(times[1:])

    return run


if __name__ == "__main__":
    main()

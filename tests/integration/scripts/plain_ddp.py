"""A plain PyTorch DDP training with no Ringscope import (unless --manual): what a user runs under `ringscope run`.

MLP on random data, DistributedSampler, DataLoader, SGD, gloo. Known delays for the measurement tests:
``--data-delay-ms`` sleeps in the loader's collate function once per batch, ``--slow-rank R --slow-ms M`` sleeps
in rank R's compute (between forward and backward). ``--manual`` instruments the same loop by hand with
``ringscope.agent.torch_ddp.instrument`` (the reference the zero-code figures are compared with). Rank 0 prints one line
``RESULT <checksum of the final weights> <steps>``; ``--exit-code N`` ends with that code after printing.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, default_collate
from torch.utils.data.distributed import DistributedSampler


class Samples(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Random inputs and labels."""

    def __init__(self, count: int, features: int) -> None:
        generator = torch.Generator().manual_seed(0)
        self.x = torch.randn(count, features, generator=generator)
        self.y = torch.randint(0, 10, (count,), generator=generator)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[index], self.y[index]


class SlowCollate:
    """``default_collate`` after ``delay_s`` of sleep: one known delay per batch, inside the loader's ``next()``."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s

    def __call__(self, samples: list[tuple[torch.Tensor, torch.Tensor]]) -> object:
        if self.delay_s:
            time.sleep(self.delay_s)
        return default_collate(samples)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--data-delay-ms", type=float, default=0.0)
    parser.add_argument("--slow-rank", type=int, default=-1)
    parser.add_argument("--slow-ms", type=float, default=0.0)
    parser.add_argument("--manual", action="store_true", help="instrument by hand with ringscope.agent.torch_ddp")
    parser.add_argument("--exit-code", type=int, default=0)
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 10))
    ddp = DistributedDataParallel(model)
    data = Samples(args.steps * args.batch * world, 32)
    sampler: DistributedSampler[int] = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader: Iterable[Any] = DataLoader(data, batch_size=args.batch, sampler=sampler,
                                collate_fn=SlowCollate(args.data_delay_ms / 1000))
    probe = None
    if args.manual:
        from ringscope.agent.torch_ddp import instrument

        probe = instrument(ddp, loader)
        loader = probe.loader or loader
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05)
    slow_s = args.slow_ms / 1000 if rank == args.slow_rank else 0.0
    steps = 0
    for x, y in loader:
        loss = nn.functional.cross_entropy(ddp(x), y)
        if slow_s:
            time.sleep(slow_s)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if probe is not None:
            probe.step_done(samples=len(x), loss=loss)
        steps += 1
    if probe is not None:
        probe.close()
    checksum = sum(float(p.detach().double().sum()) for p in ddp.parameters())
    dist.destroy_process_group()
    if rank == 0:
        print(f"RESULT {checksum:.10f} {steps}", flush=True)
    return args.exit_code


if __name__ == "__main__":
    sys.exit(main())

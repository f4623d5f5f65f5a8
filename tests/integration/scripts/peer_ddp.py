"""The peer DDP workload of shared/ENVIRONMENT.md (nn.Linear(20, 1), batch 32, 262 144 in-memory samples, SGD,
DistributedSampler, CPU/gloo) timing its own iterations; rank 0 prints ``MEDIAN_STEP_MS <ms> CPU_MS_PER_STEP <ms>``
(the median wall time of an iteration, and the process's CPU time over the measured iterations, all threads, per
iteration: the steadier figure when the machine is shared).

``--manual`` instruments it by hand (``ringscope.agent.torch_ddp.instrument``); without it the script imports nothing of
Ringscope, so under ``ringscope run`` it is the zero-code path and under plain torchrun the uninstrumented floor.
Used by ``zero_code_overhead.py``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Iterable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--manual", action="store_true")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    ddp = DistributedDataParallel(nn.Linear(20, 1))
    data = TensorDataset(torch.randn(262_144, 20), torch.randn(262_144, 1))
    loader: Iterable[Any] = DataLoader(data, batch_size=32, sampler=DistributedSampler(data))
    probe = None
    if args.manual:
        from ringscope.agent.torch_ddp import instrument

        probe = instrument(ddp, loader)
        loader = probe.loader or loader
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    loss_fn = nn.MSELoss()
    times: list[float] = []
    last = time.perf_counter()
    cpu_start = 0.0
    for index, (x, y) in enumerate(loader):
        loss = loss_fn(ddp(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if probe is not None:
            probe.step_done(samples=len(x), loss=loss)
        now = time.perf_counter()
        if index >= args.warmup:
            times.append(now - last)
        elif index + 1 == args.warmup:
            cpu_start = time.process_time()
        last = now
        if index + 1 >= args.warmup + args.steps:
            break
    cpu_per_step = (time.process_time() - cpu_start) / len(times)
    if probe is not None:
        probe.close()
    if dist.get_rank() == 0:
        print(f"MEDIAN_STEP_MS {statistics.median(times) * 1000:.4f} CPU_MS_PER_STEP {cpu_per_step * 1000:.4f}",
              flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

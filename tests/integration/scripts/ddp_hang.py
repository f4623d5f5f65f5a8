"""A DDP training (instrumented by hand, gloo, 2+ ranks) in which one rank blocks forever at a given step.

``--hang-rank R --hang-at-step N``: rank R calls ``block_forever()`` before its step N's forward pass, so every other
rank waits in the all-reduce of step N. Each rank prints ``READY <rank>`` once training runs and the hanging rank
prints ``BLOCKING <unix time>`` just before it blocks. Runs until killed (the test ends it).
"""

from __future__ import annotations

import argparse
import threading
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from ringscope.agent.torch_ddp import instrument


def block_forever() -> None:
    """Where the test expects the stack to point."""
    threading.Event().wait()  # the hang: this line


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hang-rank", type=int, default=1)
    parser.add_argument("--hang-at-step", type=int, default=50)
    parser.add_argument("--step-ms", type=float, default=5.0, help="sleep per step, so steps have a known length")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(4096, 16), torch.randn(4096, 1))
    loader = DataLoader(data, batch_size=16, sampler=DistributedSampler(data, seed=0))
    model = DistributedDataParallel(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    probe = instrument(model, loader)
    step = 0
    print(f"READY {rank}", flush=True)
    while True:
        for x, y in probe.loader:
            if rank == args.hang_rank and step == args.hang_at_step:
                print(f"BLOCKING {time.time():.3f}", flush=True)
                block_forever()
            time.sleep(args.step_ms / 1000.0)
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            probe.step_done(samples=len(x), loss=loss)
            step += 1


if __name__ == "__main__":
    main()

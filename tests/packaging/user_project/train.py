"""A user's DDP training whose project has its own ``agent``, ``gui`` and ``trainers`` packages.

Run through ``ringscope run`` from an installed wheel. ``IMPORT_ORDER=framework-first`` imports torch before the
user's packages, anything else after them: the zero-code bootstrap must work either way. Prints one line per rank:
``OWNERS <rank> <owner of agent> <owner of gui> <owner of trainers> <agent's folder>``.
"""

from __future__ import annotations

import argparse
import os

if os.environ.get("IMPORT_ORDER") == "framework-first":
    import torch

    import agent
    import gui
    import trainers
else:
    import agent
    import gui
    import trainers
    import torch

import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    owners = f"OWNERS {rank} {agent.OWNER} {gui.OWNER} {trainers.OWNER} {os.path.dirname(agent.__file__)}\n"
    os.write(1, owners.encode())  # one write: the ranks share the pipe, and their output may be unbuffered
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(4096, 16), torch.randn(4096, 1))
    loader = DataLoader(data, batch_size=16, sampler=DistributedSampler(data, seed=0))
    model = DistributedDataParallel(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step, (x, y) in enumerate(loader):
        if step == args.steps:
            break
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

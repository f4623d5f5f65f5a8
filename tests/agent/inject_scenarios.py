"""Scenarios of zero-code PyTorch instrumentation, each run in a fresh process started with the injection
environment (``tests/agent/test_inject_torch.py``): one gloo rank, real DDP models, real DataLoaders.

Zero-code attaches to the first DDP model of a process, so a second DDP model built the same way is an
uninstrumented reference trained in lockstep: equal weights prove the injection changed nothing. The steps the
attached probe reports are captured from its agent (``Agent.put``) and printed with the results as one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset

BATCH = 4


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", choices=sorted(SCENARIOS))
    scenario = parser.parse_args().scenario
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1")
    dist.init_process_group("gloo")
    result = SCENARIOS[scenario]()
    dist.destroy_process_group()
    print("SCENARIO " + json.dumps(result), flush=True)
    return 0


# ---- Helpers -------------------------------------------------------------------------------------------------------

def ddp_pair() -> tuple[DistributedDataParallel, DistributedDataParallel]:
    """The attached model (first built) and an identical uninstrumented reference (second)."""
    models = []
    for _ in range(2):
        torch.manual_seed(0)
        models.append(DistributedDataParallel(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))))
    return models[0], models[1]


def loader(count: int) -> DataLoader[Any]:
    generator = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(count * BATCH, 8, generator=generator),
                         torch.randint(0, 3, (count * BATCH,), generator=generator))
    return DataLoader(data, batch_size=BATCH)


def capture_steps(ddp: DistributedDataParallel) -> list[dict[str, Any]]:
    """The Step records the attached probe reports, as dictionaries (captured from its agent's queue)."""
    agent = getattr(ddp, "_ringscope_zero_code").probe.agent  # noqa: B009 - set by the injection
    captured: list[dict[str, Any]] = []
    put = agent.put

    def keep(record: Any) -> None:
        if type(record).__name__ == "Step":
            captured.append({"step": record.step, "samples": record.samples, "first": record.first_batch,
                             "buckets": record.bucket_count, "comm_s": record.comm_s})
        put(record)

    agent.put = keep
    return captured


def reported(ddp: DistributedDataParallel, captured: list[dict[str, Any]]) -> int:
    """How many steps the probe has reported, once it reported every finished one (normally the agent's sender
    thread does that every flush interval)."""
    getattr(ddp, "_ringscope_zero_code").probe.flush()  # noqa: B009
    return len(captured)


def train(ddp: DistributedDataParallel, batches: Iterable[Any], step: Callable[[], None]) -> None:
    for x, y in batches:
        nn.functional.cross_entropy(ddp(x), y).backward()
        step()


def same_weights(a: nn.Module, b: nn.Module) -> bool:
    return all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))


def manual_update(ddp: nn.Module) -> Callable[[], None]:
    def update() -> None:
        with torch.no_grad():
            for parameter in ddp.parameters():
                if parameter.grad is not None:
                    parameter.sub_(0.1 * parameter.grad)
                parameter.grad = None

    return update


def sgd_step(*optimizers: torch.optim.Optimizer) -> Callable[[], None]:
    def step() -> None:
        for optimizer in optimizers:
            optimizer.step()
            optimizer.zero_grad()

    return step


# ---- Scenarios -----------------------------------------------------------------------------------------------------

def user_hook() -> dict[str, Any]:
    """The script registers fp16 compression after construction: wrapped (timed, same weights); a second
    registration fails exactly as DDP fails without Ringscope; an internal failure of the timing falls back to
    the plain hook mid-training without changing a weight."""
    attached, reference = ddp_pair()
    steps = capture_steps(attached)
    attached.register_comm_hook(None, default_hooks.fp16_compress_hook)
    reference.register_comm_hook(None, default_hooks.fp16_compress_hook)
    hook_names = [m._get_ddp_logging_data().get("comm_hook") for m in (attached, reference)]
    errors = []
    for model in (attached, reference):
        try:
            model.register_comm_hook(None, default_hooks.allreduce_hook)
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
    opt_a, opt_r = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (attached, reference))
    train(attached, loader(3), sgd_step(opt_a))
    train(reference, loader(3), sgd_step(opt_r))
    equal_before = same_weights(attached, reference)

    def broken(state: Any, bucket: Any) -> Any:
        raise RuntimeError("simulated failure inside the timing hook")

    reported(attached, steps)
    getattr(attached, "_ringscope_zero_code").slot.timed = broken  # noqa: B009
    train(attached, loader(2), sgd_step(opt_a))
    train(reference, loader(2), sgd_step(opt_r))
    return {"steps": steps, "equal_before": equal_before, "equal_after": same_weights(attached, reference),
            "errors": errors, "hook_names": hook_names}


def boundaries() -> dict[str, Any]:
    """Where steps end: a DataLoader with manual updates (next batch request), a list with manual updates (next
    DDP forward, the last one at exit), then two optimizers per iteration (one step per iteration)."""
    attached, _ = ddp_pair()
    steps = capture_steps(attached)
    train(attached, loader(4), manual_update(attached))
    after_loader = reported(attached, steps)
    train(attached, list(loader(3)), manual_update(attached))
    after_list = reported(attached, steps)
    first, second = (torch.optim.SGD(layer.parameters(), lr=0.1) for layer in (attached.module[0], attached.module[2]))
    train(attached, loader(3), sgd_step(first, second))
    after_optimizers = reported(attached, steps)
    getattr(attached, "_ringscope_zero_code").close()  # noqa: B009 - what runs at exit
    return {"steps": steps, "counts": [after_loader, after_list, after_optimizers, len(steps)]}


def fault_attach() -> dict[str, Any]:
    """RINGSCOPE_INJECT_FAULT=attach: the model is not instrumented and trains exactly like the reference."""
    attached, reference = ddp_pair()
    for model in (attached, reference):
        train(model, loader(3), sgd_step(torch.optim.SGD(model.parameters(), lr=0.1)))
    return {"attached": hasattr(attached, "_ringscope_zero_code"), "hooks": len(attached._comm_hooks),
            "equal": same_weights(attached, reference)}


def hand_over() -> dict[str, Any]:
    """The script calls instrument() itself on the attached model: it gets the probe, its loop marks the steps
    (once each), and its comm hook is wrapped."""
    from ringscope.agent.torch_ddp import instrument

    attached, reference = ddp_pair()
    steps = capture_steps(attached)
    probe = instrument(attached, loader(3), comm_hook=default_hooks.fp16_compress_hook, comm_state=None)
    optimizer = torch.optim.SGD(attached.parameters(), lr=0.1)
    for x, y in probe.loader:  # type: ignore[union-attr]
        nn.functional.cross_entropy(attached(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
        probe.step_done(samples=len(x))
    reference.register_comm_hook(None, default_hooks.fp16_compress_hook)
    train(reference, loader(3), sgd_step(torch.optim.SGD(reference.parameters(), lr=0.1)))
    same_probe = probe is getattr(attached, "_ringscope_zero_code").probe  # noqa: B009
    probe.close()
    return {"steps": steps, "same_probe": same_probe, "equal": same_weights(attached, reference)}


SCENARIOS: dict[str, Callable[[], dict[str, Any]]] = {
    "user_hook": user_hook, "boundaries": boundaries, "fault_attach": fault_attach, "hand_over": hand_over,
}

if __name__ == "__main__":
    sys.exit(main())

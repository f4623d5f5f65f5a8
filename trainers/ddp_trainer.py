"""Reference PyTorch DDP training that uses Ringscope like a user would (``ringscope.agent.torch_ddp.instrument``).

Run with ``torchrun --nproc-per-node 2 -m ringscope.trainers.ddp_trainer [options]`` on CPU (gloo) or GPU (nccl,
``--device auto|cpu|cuda``). Shared options are in ``ringscope.trainers.common``; DDP-only ones: ``--device``,
``--compression none|fp16|bf16|powersgd`` (wrapped by the timing hook), ``--bucket-mb``, ``--amp`` (GPU only),
``--comm-delay-ms X`` (each bucket's all-reduce completes X ms later: ``delayed_comm_hook``).

Every option is checked before the process group starts (argparse error, exit code 2). Rank 0 prints one line
``RINGSCOPE_RESULT {json}``: final loss, steps, accuracy (digits), median step time, and per rank the median
step time and DDP's own logging figures (``_get_ddp_logging_data``) for cross-checking the probe.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import sys
import time
from typing import Any, NoReturn

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Sampler

from ringscope.trainers import common

COMPRESSIONS = ("none", "fp16", "bf16", "powersgd")
CHECKPOINT_NAME = "checkpoint.pt"


# ---- Options -----------------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The trainer's options: the shared ones plus device, compression, buckets and AMP."""
    parser = argparse.ArgumentParser(
        prog="torchrun --nproc-per-node N -m ringscope.trainers.ddp_trainer",
        description="Ringscope's reference PyTorch DDP training (an MLP on digits or synthetic data).",
    )
    common.add_common_arguments(parser)
    common.add_comm_delay_argument(parser)
    ddp = parser.add_argument_group("DDP")
    ddp.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                     help="auto: CUDA when available (nccl), else CPU (gloo)")
    ddp.add_argument("--compression", choices=COMPRESSIONS, default="none", help="gradient compression comm hook")
    ddp.add_argument("--bucket-mb", type=float, default=25.0, help="DDP gradient bucket size in MB (default: 25)")
    ddp.add_argument("--amp", action="store_true", help="automatic mixed precision (bf16 autocast; GPU only)")
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse and check every option; exits with code 2 and a clear message on a bad one."""
    parser = build_parser()
    args = parser.parse_args(argv)
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    common.check_common_arguments(parser, args, world_size)
    if not args.bucket_mb > 0:
        parser.error(f"--bucket-mb must be a positive number of megabytes, got {args.bucket_mb}")
    cuda = torch.cuda.is_available()
    if args.device == "cuda" and not cuda:
        parser.error("--device cuda was asked for but this torch sees no CUDA GPU "
                     f"(torch {torch.__version__}); use --device cpu, or install a CUDA build of torch")
    args.device = "cuda" if args.device == "cuda" or (args.device == "auto" and cuda) else "cpu"
    if args.amp and args.device != "cuda":
        parser.error("--amp needs a GPU (mixed precision on CPU is not what this trainer measures); "
                     "drop --amp or run with --device cuda on a GPU machine")
    if args.compression == "bf16" and args.device != "cuda":
        parser.error("--compression bf16 needs NCCL on a GPU (DDP's bf16 hook refuses gloo); use fp16 or none on CPU")
    if args.resume and not os.path.exists(os.path.join(args.checkpoint_dir, CHECKPOINT_NAME)):
        parser.error(f"--resume: no {CHECKPOINT_NAME} in --checkpoint-dir {args.checkpoint_dir!r}; "
                     "train once with --checkpoint-every-steps N first, or drop --resume")
    return args


# ---- Data and model ----------------------------------------------------------------------------------------------


class BatchDataset(torch.utils.data.Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """``dataset[indices]`` builds a whole batch, paying ``--data-delay-ms`` once per batch (in the worker)."""

    def __init__(self, x: np.ndarray, y: np.ndarray, delay_ms: float) -> None:
        self.x, self.y, self.delay_ms = x, y, delay_ms

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, indices: Any) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = common.fetch_batch(self.x, self.y, np.asarray(indices), self.delay_ms)
        return torch.from_numpy(x), torch.from_numpy(y)


class ShardBatches(Sampler[np.ndarray]):
    """Yields this rank's batches of indices for the current epoch (``set_epoch`` reshuffles)."""

    def __init__(self, count: int, batch_size: int, rank: int, world_size: int, seed: int) -> None:
        self.count, self.batch_size, self.rank, self.world_size, self.seed = count, batch_size, rank, world_size, seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return max(1, (self.count // self.world_size) // self.batch_size)

    def __iter__(self) -> Any:
        order = common.shard_indices(self.count, self.rank, self.world_size, epoch=self.epoch, seed=self.seed)
        for start in range(0, len(self) * self.batch_size, self.batch_size):
            yield order[start : start + self.batch_size]


def build_model(num_features: int, num_classes: int, width: int, depth: int) -> nn.Module:
    layers: list[nn.Module] = []
    size = num_features
    for _ in range(depth):
        layers += [nn.Linear(size, width), nn.ReLU()]
        size = width
    layers.append(nn.Linear(size, num_classes))
    return nn.Sequential(*layers)


# ---- Training ----------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    backend = "nccl" if args.device == "cuda" else "gloo"
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if args.device == "cuda":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
        torch.set_num_threads(1)  # two ranks on a small box: one thread each, no oversubscription
    if "RANK" not in os.environ:  # plain `python -m ringscope.trainers.ddp_trainer`: a one-rank group
        os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(common.free_port()))
    dist.init_process_group(backend, device_id=device if args.device == "cuda" else None)
    try:
        code = _train(args, device)
        # Release DDP's reducer, the comm hook's futures and the loader's workers now, while the group and the
        # interpreter are fully alive, then tear down together.
        gc.collect()
        dist.barrier()
        return code
    finally:
        dist.destroy_process_group()


def _train(args: argparse.Namespace, device: torch.device) -> int:
    rank, world_size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)
    data = common.load_dataset(args.dataset, seed=args.seed, model_width=args.model_width)
    model = build_model(data.num_features, data.num_classes, args.model_width, args.model_depth).to(device)
    # Gradients as views into DDP's buckets (PyTorch's advice: less memory, no copy). With a comm hook, as here,
    # it also matters for speed: without it DDP copies each gradient into its bucket and the hook then divides
    # the bucket in a second pass; with it the hook's division is the only pass, as in DDP without a hook.
    ddp = DistributedDataParallel(
        model, device_ids=[device.index] if device.type == "cuda" else None, bucket_cap_mb=args.bucket_mb,
        gradient_as_bucket_view=True,
    )
    if device.type == "cpu":
        ddp._set_ddp_runtime_logging_sample_rate(1)  # cross-check figures every step (on CUDA this would sync)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
    sampler = ShardBatches(len(data.x_train), args.batch_size, rank, world_size, args.seed)
    loader = DataLoader(
        BatchDataset(data.x_train, data.y_train, args.data_delay_ms), batch_size=None, sampler=sampler,
        num_workers=args.loader_workers, prefetch_factor=args.prefetch if args.loader_workers else None,
        persistent_workers=args.loader_workers > 0, pin_memory=device.type == "cuda",
    )
    probe = None
    comm_hook, comm_state = _hook_pair(args.compression)
    if args.comm_delay_ms > 0:
        comm_hook = delayed_comm_hook(comm_hook, args.comm_delay_ms)
    if args.no_agent:
        if args.compression != "none" or args.comm_delay_ms > 0:
            ddp.register_comm_hook(comm_state, comm_hook)
        batches: Any = loader
    else:
        from ringscope.agent.torch_ddp import instrument

        probe = instrument(ddp, loader, comm_hook=comm_hook, comm_state=comm_state)
        batches = probe.loader
    restored = _maybe_resume(args, ddp, optimizer, device, probe)
    step = restored
    steps = common.total_steps(args, data, world_size)
    schedule = common.CheckpointSchedule(args.checkpoint_every_steps, args.checkpoint_every_s)
    loss_fn = nn.CrossEntropyLoss()
    step_times: list[float] = []
    last_loss: torch.Tensor | None = None
    last_end = time.perf_counter()
    epoch = step // len(sampler)
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if args.amp else contextlib.nullcontext()
    while step < steps:
        sampler.set_epoch(epoch)
        if probe is not None:
            probe.set_epoch(epoch)
        for x, y in batches:
            if args.fault:
                common.inject_faults(args, rank, step)
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            with amp:
                loss = loss_fn(ddp(x), y)
            common.extra_compute(args, rank)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            if probe is not None:
                probe.step_done(samples=len(x), loss=loss)
            now = time.perf_counter()
            step_times.append(now - last_end)
            last_end, last_loss = now, loss.detach()
            if schedule.due(step):
                _save(args, ddp, optimizer, step, probe)
            if args.log_every and rank == 0 and step % args.log_every == 0:
                # reading the loss synchronizes a GPU: print it on CPU only
                shown = f" loss {float(loss.detach()):.4f}" if device.type == "cpu" else ""
                print(f"step {step}/{steps}{shown}", file=sys.stderr, flush=True)
            if step >= steps:
                break
        epoch += 1
    if probe is not None:
        probe.close()
    _report(args, ddp, data, device, step, restored, last_loss, step_times)
    return 0


def _hook_pair(compression: str) -> tuple[Any, Any]:
    from ringscope.agent.torch_ddp import comm_hook_for

    return comm_hook_for(compression)


def delayed_comm_hook(inner: Any, delay_ms: float) -> Any:
    """``inner`` (a DDP comm hook) whose all-reduce completes ``delay_ms`` later (``--comm-delay-ms``).

    The delay is a sleep in a callback chained to the collective's future, so the bucket's result arrives late on
    the communication path (gloo's or NCCL's completion thread), while autograd carries on: DDP's finalizer waits
    for it as it would for a slow network, and Ringscope, which wraps this hook in ``instrument``, sees it as
    AllReduce stall. Paid once per bucket (the reference MLP fits in one bucket: once per step).
    """
    delay_s = delay_ms / 1000.0

    # No annotations on purpose: DDP checks a hook's "bucket" annotation, and this module's annotations are strings.
    def delayed_allreduce(state, bucket):
        def late(future):
            time.sleep(delay_s)
            return future.value()

        return inner(state, bucket).then(late)

    return delayed_allreduce


def _save(args: argparse.Namespace, ddp: DistributedDataParallel, optimizer: Any, step: int, probe: Any) -> None:
    """Rank 0 writes the checkpoint atomically (temp file + rename); the others wait so none runs ahead of it."""
    if dist.get_rank() == 0:
        os.makedirs(args.checkpoint_dir, exist_ok=True)
        path = os.path.join(args.checkpoint_dir, CHECKPOINT_NAME)
        state = {"model": ddp.module.state_dict(), "optimizer": optimizer.state_dict(), "step": step}
        started = time.perf_counter()
        torch.save(state, path + ".tmp")
        os.replace(path + ".tmp", path)
        if probe is not None:
            probe.checkpoint_saved(path, time.perf_counter() - started)
    dist.barrier()


def _maybe_resume(args: argparse.Namespace, ddp: DistributedDataParallel, optimizer: Any, device: torch.device,
                  probe: Any) -> int:
    path = os.path.join(args.checkpoint_dir or "", CHECKPOINT_NAME)
    if not (args.resume or (args.resume_latest and os.path.exists(path))):
        return 0
    started = time.perf_counter()
    state = torch.load(path, map_location=device)
    ddp.module.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    step = int(state["step"])
    if probe is not None:
        probe.checkpoint_restored(path, time.perf_counter() - started, step=step)
    return step


def _report(args: argparse.Namespace, ddp: DistributedDataParallel, data: common.Dataset, device: torch.device,
            step: int, restored: int, last_loss: torch.Tensor | None, step_times: list[float]) -> None:
    """Gather per-rank figures and print the one RINGSCOPE_RESULT line on rank 0."""
    accuracy = None
    if args.dataset == "digits":
        with torch.no_grad():
            logits = ddp.module(torch.from_numpy(data.x_test).to(device))
            accuracy = float((logits.argmax(1).cpu().numpy() == data.y_test).mean())
    logging_data = ddp._get_ddp_logging_data()
    ns = 1e-9
    mine = {
        "rank": dist.get_rank(),
        "step_time_median_s": common.median(step_times[1:] or step_times),
        "ddp_avg_backward_comm_s": _scaled(logging_data.get("avg_backward_comm_time"), ns),
        "ddp_avg_backward_overlap_s": _scaled(logging_data.get("avg_backward_compute_comm_overlap_time"), ns),
    }
    per_rank: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(per_rank, mine)
    if dist.get_rank() != 0:
        return
    common.print_result({
        "final_loss": None if last_loss is None else float(last_loss),
        "steps": step,
        "resumed_from_step": restored,
        "accuracy": accuracy,
        "step_time_median_s": mine["step_time_median_s"],
        "world_size": dist.get_world_size(),
        "device": device.type,
        "compression": args.compression,
        "comm_delay_ms": args.comm_delay_ms,
        "agent": not args.no_agent,
        "footing": common.footing(args, sum(p.numel() for p in ddp.module.parameters())),
        "ranks": per_rank,
    })


def _scaled(value: Any, factor: float) -> float | None:
    return None if not isinstance(value, (int, float)) or value <= 0 else float(value) * factor


def exit_without_finalizing(code: int) -> NoReturn:
    """End the process after a finished run without Python's finalization and C++ static destructors.

    Everything the run owns is already released (probe closed, telemetry flushed, process group destroyed). What
    is left is native teardown in torch/gloo, where a rank was seen aborting *after* a complete, correct run
    ("terminate called without an active exception", SIGABRT; in CI and in earlier runs on a loaded 2-core
    machine, with and without the agent). torchrun then reports the whole job failed. Only normal returns come here: an
    exception still unwinds and exits through the interpreter, with its traceback.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_without_finalizing(main())

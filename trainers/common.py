"""What both reference trainers (PyTorch DDP and TensorFlow) share: their common options, data sets, injected delays.

Framework-neutral on purpose: stdlib, numpy and scikit-learn only, never torch or tensorflow, so the TF trainer
imports exactly the same options, data and delay semantics as the DDP trainer. Keep it small and stable.

Options (``add_common_arguments`` + ``check_common_arguments``), with the same meaning in both trainers:

* ``--dataset digits|synthetic`` digits = scikit-learn's ``load_digits`` (ships inside the package, 8x8 images,
  10 classes); synthetic = a learnable random problem whose feature count scales with ``--model-width``.
* ``--model-width`` / ``--model-depth`` hidden units per layer / hidden layers of the MLP.
* ``--batch-size`` per rank (per replica). ``--steps`` or ``--epochs`` (one of them; default ``--steps 200``).
* ``--lr``, ``--seed``, ``--log-every``.
* ``--loader-workers`` / ``--prefetch`` input-pipeline parallelism / batches prefetched per worker.
* ``--data-delay-ms Y`` Y ms of extra work per batch *inside the data set* (each worker pays it for each batch it
  builds), i.e. real loader latency that workers can hide, exactly as a slow decoder would be.
* ``--slow-rank K --slow-ms X`` rank K does X ms more compute per step (see ``extra_compute``).
* ``--comm-delay-ms X`` (trainers that call ``add_comm_delay_argument``; the DDP trainer) each gradient all-reduce
  completes X ms later, on every rank: a slow network as the training sees it (see ``add_comm_delay_argument``).
* ``--checkpoint-dir``, ``--checkpoint-every-steps``, ``--checkpoint-every-s``, ``--resume``, ``--resume-latest``.
* ``--fault KIND:RANK:STEP[:ATTEMPT]`` (trainers that call ``inject_faults``; the DDP trainer) a rank hangs, kills
  itself or exits with an error before a step, in one attempt of a restarted run (``RINGSCOPE_ATTEMPT``).
* ``--no-agent`` run without Ringscope telemetry (the overhead benchmark's baseline).

Every bad value is refused by argparse (exit code 2) with the value seen and what to do, before any process group
or strategy starts. At the end a trainer prints one line ``RINGSCOPE_RESULT {json}`` (``print_result``) whose
``footing`` (``footing``) says what the run trained, so runs of both trainers can be checked to be comparable.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

RESULT_PREFIX: Final[str] = "RINGSCOPE_RESULT "
"""Start of the one machine-readable result line a trainer prints on stdout."""

DATASETS: Final[tuple[str, ...]] = ("digits", "synthetic")
DEFAULT_STEPS: Final[int] = 200


# ---- Options -----------------------------------------------------------------------------------------------------


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the options both reference trainers offer (see the module docstring for their meaning)."""
    data = parser.add_argument_group("data and model")
    data.add_argument("--dataset", choices=DATASETS, default="digits", help="data set (default: digits)")
    data.add_argument("--model-width", type=int, default=64, help="hidden units per MLP layer (default: 64)")
    data.add_argument("--model-depth", type=int, default=2, help="hidden layers of the MLP (default: 2)")
    data.add_argument("--batch-size", type=int, default=32, help="samples per rank per step (default: 32)")
    length = data.add_mutually_exclusive_group()
    length.add_argument("--steps", type=int, default=None, help=f"optimizer steps (default: {DEFAULT_STEPS})")
    length.add_argument("--epochs", type=float, default=None, help="passes over the training data (instead of --steps)")
    data.add_argument("--lr", type=float, default=0.05, help="learning rate (default: 0.05)")
    data.add_argument("--seed", type=int, default=0, help="random seed for data split and initial weights")
    data.add_argument("--loader-workers", type=int, default=0, help="input-pipeline worker processes (default: 0)")
    data.add_argument("--prefetch", type=int, default=2, help="batches prefetched per loader worker (default: 2)")

    inject = parser.add_argument_group("injected delays (to test what Ringscope measures)")
    inject.add_argument("--data-delay-ms", type=float, default=0.0, help="extra ms per batch inside the data set")
    inject.add_argument("--slow-rank", type=int, default=None, help="rank that does --slow-ms more compute per step")
    inject.add_argument("--slow-ms", type=float, default=0.0, help="ms of extra compute per step on --slow-rank")

    ckpt = parser.add_argument_group("checkpoints")
    ckpt.add_argument("--checkpoint-dir", default=None, help="directory for checkpoints (created if missing)")
    ckpt.add_argument("--checkpoint-every-steps", type=int, default=None, help="save every N steps")
    ckpt.add_argument("--checkpoint-every-s", type=float, default=None, help="save every N seconds")
    ckpt.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --checkpoint-dir")
    ckpt.add_argument("--resume-latest", action="store_true",
                      help="continue from the latest checkpoint in --checkpoint-dir when there is one, else start at "
                           "step 0 (what a restarted attempt needs: ringscope run --restart, torchrun --max-restarts)")
    inject.add_argument("--fault", action="append", default=[], type=parse_fault, metavar="KIND:RANK:STEP[:ATTEMPT]",
                        help="inject a fault: KIND hang (block forever), kill (SIGKILL itself) or exit (exit code 3) "
                             "on RANK before its step STEP, only in attempt ATTEMPT (RINGSCOPE_ATTEMPT; default: "
                             "every attempt); repeatable")

    run = parser.add_argument_group("run")
    run.add_argument("--no-agent", action="store_true", help="run without Ringscope telemetry")
    run.add_argument("--log-every", type=int, default=20, help="print progress every N steps (0: never)")


def add_comm_delay_argument(parser: argparse.ArgumentParser) -> None:
    """Add ``--comm-delay-ms X``: every gradient all-reduce of every rank completes X ms later than it would.

    Injected on the communication path (the DDP trainer delays the all-reduce's future in its comm hook), not in
    compute, so it shows as AllReduce stall, exactly as a slower interconnect would. Only trainers that implement
    it add it (the scaling sweep's test uses it to make one configuration scale worse). Checked by
    ``check_common_arguments``.
    """
    group = parser.add_argument_group("injected network delay")
    group.add_argument("--comm-delay-ms", type=float, default=0.0,
                       help="extra ms before each gradient all-reduce completes, on every rank (default: 0)")


def check_common_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace, world_size: int) -> None:
    """Refuse bad combinations with ``parser.error`` (exit code 2) before any process group starts.

    ``world_size`` is the number of ranks (replicas) the trainer will run, used to check ``--slow-rank``.
    Fills ``args.steps`` with the default when neither ``--steps`` nor ``--epochs`` was given.
    """
    positive = {
        "--model-width": args.model_width,
        "--model-depth": args.model_depth,
        "--batch-size": args.batch_size,
        "--prefetch": args.prefetch,
    }
    for name, value in positive.items():
        if value < 1:
            parser.error(f"{name} must be at least 1, got {value}")
    if args.steps is not None and args.steps < 1:
        parser.error(f"--steps must be at least 1, got {args.steps}; give a positive number of optimizer steps")
    if args.epochs is not None and not (args.epochs > 0 and math.isfinite(args.epochs)):
        parser.error(f"--epochs must be a positive number, got {args.epochs}")
    if args.steps is None and args.epochs is None:
        args.steps = DEFAULT_STEPS
    if not (args.lr > 0 and math.isfinite(args.lr)):
        parser.error(f"--lr must be a positive number, got {args.lr}")
    if args.loader_workers < 0:
        parser.error(f"--loader-workers must be 0 (load in the training process) or more, got {args.loader_workers}")
    if args.log_every < 0:
        parser.error(f"--log-every must be 0 (never) or more, got {args.log_every}")
    delays = (("--data-delay-ms", args.data_delay_ms), ("--slow-ms", args.slow_ms),
              ("--comm-delay-ms", getattr(args, "comm_delay_ms", 0.0)))
    for name, ms in delays:
        if not (ms >= 0 and math.isfinite(ms)):
            parser.error(f"{name} must be 0 or a positive number of milliseconds, got {ms}")
    if args.slow_rank is not None:
        if not 0 <= args.slow_rank < world_size:
            parser.error(
                f"--slow-rank {args.slow_rank} does not exist: this run has {world_size} rank(s), "
                f"numbered 0..{world_size - 1}"
            )
        if args.slow_ms <= 0:
            parser.error(f"--slow-rank {args.slow_rank} needs --slow-ms with a positive number of milliseconds")
    elif args.slow_ms > 0:
        parser.error(f"--slow-ms {args.slow_ms} needs --slow-rank K to say which rank is slowed")
    for fault in args.fault:
        if not 0 <= fault.rank < world_size:
            parser.error(f"--fault {fault}: rank {fault.rank} does not exist: this run has {world_size} rank(s)")
    every_steps, every_s = args.checkpoint_every_steps, args.checkpoint_every_s
    if every_steps is not None and every_steps < 1:
        parser.error(f"--checkpoint-every-steps must be at least 1, got {every_steps}")
    if every_s is not None and not (every_s > 0 and math.isfinite(every_s)):
        parser.error(f"--checkpoint-every-s must be a positive number of seconds, got {every_s}")
    wants_dir = [name for name, on in (("--checkpoint-every-steps", every_steps is not None),
                                       ("--checkpoint-every-s", every_s is not None),
                                       ("--resume", args.resume),
                                       ("--resume-latest", args.resume_latest)) if on]
    if wants_dir and not args.checkpoint_dir:
        parser.error(f"{', '.join(wants_dir)} needs --checkpoint-dir DIR (where checkpoints are written and read)")


# ---- Injected faults ---------------------------------------------------------------------------------------------

FAULT_KINDS: Final[tuple[str, ...]] = ("hang", "kill", "exit")
FAULT_EXIT_CODE: Final[int] = 3


@dataclass(frozen=True, slots=True)
class Fault:
    """``--fault KIND:RANK:STEP[:ATTEMPT]``: what a rank does before one of its steps (to try restarts)."""

    kind: str
    rank: int
    step: int
    attempt: int | None = None

    def __str__(self) -> str:
        return f"{self.kind}:{self.rank}:{self.step}" + (f":{self.attempt}" if self.attempt is not None else "")


def parse_fault(text: str) -> Fault:
    """argparse's type for ``--fault``."""
    parts = text.split(":")
    try:
        if len(parts) not in (3, 4) or parts[0] not in FAULT_KINDS:
            raise ValueError
        numbers = [int(p) for p in parts[1:]]
        if min(numbers) < 0 or (len(numbers) == 3 and numbers[2] < 1):
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected KIND:RANK:STEP[:ATTEMPT] with KIND one of {', '.join(FAULT_KINDS)} (e.g. hang:1:50:1), got "
            f"{text!r}") from None
    return Fault(parts[0], numbers[0], numbers[1], numbers[2] if len(numbers) == 3 else None)


def inject_faults(args: argparse.Namespace, rank: int, step: int) -> None:
    """Before ``step`` (steps done so far) of ``rank``: do what a ``--fault`` says, if one is due."""
    from ringscope.agent.runtime import current_attempt  # only when faults are asked for: the agent's own rule

    attempt = current_attempt() or 1
    for fault in args.fault:
        if fault.rank != rank or fault.step != step or fault.attempt not in (None, attempt):
            continue
        print(f"rank {rank}: injected fault {fault.kind} at step {step} (attempt {attempt})", flush=True)
        if fault.kind == "hang":
            block_forever()
        elif fault.kind == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        else:
            raise SystemExit(FAULT_EXIT_CODE)


def block_forever() -> None:
    """An injected hang: this rank never reaches the collective again (where the stacks should point)."""
    threading.Event().wait()


# ---- Data --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Dataset:
    """A classification data set as float32 features and int64 labels, already split."""

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int

    @property
    def num_features(self) -> int:
        """Input width of the model."""
        return int(self.x_train.shape[1])


def load_dataset(name: str, *, seed: int = 0, model_width: int = 64) -> Dataset:
    """Load ``digits`` (scikit-learn, 1797 8x8 images, 80/20 split) or build ``synthetic`` (sizes scale with width).

    The split and the synthetic problem depend only on ``seed``, so every rank builds the same data set.
    """
    rng = np.random.default_rng(seed)
    if name == "digits":
        from sklearn.datasets import load_digits  # shipped with scikit-learn: no download

        bunch = load_digits()
        x = (bunch.data / 16.0).astype(np.float32)
        y = bunch.target.astype(np.int64)
        num_classes = 10
    elif name == "synthetic":
        # A random linear teacher: learnable, so loss falls and accuracy means something. Features scale with the
        # model so that --model-width also scales the input layer and the gradient size.
        num_features, num_classes, count = max(64, model_width), 10, 8192
        x = rng.standard_normal((count, num_features), dtype=np.float32)
        teacher = rng.standard_normal((num_features, num_classes), dtype=np.float32)
        y = np.argmax(x @ teacher, axis=1).astype(np.int64)
    else:
        raise ValueError(f"unknown data set {name!r}; choose one of {', '.join(DATASETS)}")
    order = rng.permutation(len(x))
    cut = int(len(x) * 0.8)
    train, test = order[:cut], order[cut:]
    return Dataset(name, x[train], y[train], x[test], y[test], num_classes)


def shard_indices(count: int, rank: int, world_size: int, *, epoch: int, seed: int) -> np.ndarray:
    """This rank's sample order for one epoch: a seeded shuffle, cut into equal rank-strided shards.

    Every rank gets the same number of samples (the tail is dropped), so all ranks run the same number of steps
    and none waits at an all-reduce that the others never reach.
    """
    order = np.random.default_rng((seed, epoch)).permutation(count)
    per_rank = count // world_size
    return order[rank : per_rank * world_size : world_size]


def fetch_batch(ds_x: np.ndarray, ds_y: np.ndarray, indices: np.ndarray, delay_ms: float) -> tuple[np.ndarray, ...]:
    """Build one batch, paying ``delay_ms`` of loader latency first (``--data-delay-ms``).

    The delay is a sleep inside the data set, so it costs no CPU and loader workers overlap it with training and
    with each other, just as they would overlap a slow decoder waiting on storage.
    """
    if delay_ms > 0:
        time.sleep(delay_ms / 1000.0)
    return ds_x[indices], ds_y[indices]


def steps_per_epoch(dataset: Dataset, batch_size: int, world_size: int) -> int:
    """Full batches per rank in one epoch (at least 1)."""
    return max(1, (len(dataset.x_train) // world_size) // batch_size)


def total_steps(args: argparse.Namespace, dataset: Dataset, world_size: int) -> int:
    """Steps to run: ``--steps`` or ``--epochs`` x steps per epoch (rounded up, at least 1)."""
    if args.epochs is not None:
        return max(1, math.ceil(args.epochs * steps_per_epoch(dataset, args.batch_size, world_size)))
    return int(args.steps)


# ---- Injected compute, checkpoints, result -----------------------------------------------------------------------


def extra_compute(args: argparse.Namespace, rank: int) -> None:
    """On ``--slow-rank``, spend ``--slow-ms`` more per step (called inside the step, before the backward pass).

    A sleep, not a busy loop: on a shared 2-core machine a busy loop would also slow the other rank and blur the
    straggler the test expects to see.
    """
    if args.slow_rank == rank and args.slow_ms > 0:
        time.sleep(args.slow_ms / 1000.0)


class CheckpointSchedule:
    """Decides when to save: every N steps and/or every N seconds (whichever comes first)."""

    def __init__(self, every_steps: int | None, every_s: float | None) -> None:
        self.every_steps = every_steps
        self.every_s = every_s
        self._last_s = time.monotonic()

    def due(self, step: int) -> bool:
        """True when the step just finished (``step`` counts from 1) should be followed by a save."""
        by_steps = self.every_steps is not None and step % self.every_steps == 0
        by_time = self.every_s is not None and time.monotonic() - self._last_s >= self.every_s
        if by_steps or by_time:
            self._last_s = time.monotonic()
            return True
        return False


def median(values: list[float]) -> float | None:
    """Median of a list, or None when empty."""
    return float(np.median(values)) if values else None


def free_ports(count: int) -> list[int]:
    """``count`` distinct free localhost TCP ports (bound, noted, released: a tiny race is accepted for tests)."""
    sockets, ports = [], []
    for _ in range(count):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sockets.append(sock)
        ports.append(int(sock.getsockname()[1]))
    for sock in sockets:
        sock.close()
    return ports


def free_port() -> int:
    """A free localhost TCP port (``free_ports(1)``)."""
    return free_ports(1)[0]


OPTIMIZER: Final[str] = "SGD, momentum 0.9"
"""The optimizer both reference trainers build (with ``--lr``), as ``footing`` names it."""


def footing(args: argparse.Namespace, parameters: int) -> dict[str, Any]:
    """What a run trained, for comparing runs (the ``footing`` of ``RINGSCOPE_RESULT``): data set, model shape and
    its parameter count as built, per-rank batch, optimizer, learning rate and seed. Two runs with equal footings
    trained the same model on the same data with the same per-rank batch, whichever trainer ran them."""
    return {
        "dataset": args.dataset,
        "model_width": args.model_width,
        "model_depth": args.model_depth,
        "parameters": int(parameters),
        "batch_size_per_rank": args.batch_size,
        "optimizer": OPTIMIZER,
        "lr": args.lr,
        "seed": args.seed,
    }


def print_result(result: dict[str, Any]) -> None:
    """Print the one machine-readable line ``RINGSCOPE_RESULT {json}`` (stdout, flushed)."""
    print(RESULT_PREFIX + json.dumps(result, sort_keys=True), flush=True)


def parse_result(stdout: str) -> dict[str, Any]:
    """The last ``RINGSCOPE_RESULT`` object in a trainer's stdout. Raises ValueError when there is none."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            parsed: dict[str, Any] = json.loads(line[len(RESULT_PREFIX) :])
            return parsed
    raise ValueError(f"no line starting with {RESULT_PREFIX.strip()!r} in the trainer's output")

"""Run a synthetic data-parallel cluster through the real agent code path: ringscope simulate --ranks N.

    ringscope simulate --ranks 64 --straggler 5:40 --data-stall 10 --duration 30

Every simulated rank reports like a real one (marked framework "simulated"); point it at a running app or
'ringscope record' (--endpoint, default the app's default endpoint).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from types import FrameType

from agent.publisher import DEFAULT_ENDPOINT
from agent.simulate import parse_straggler, run_cluster


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``ringscope simulate``."""
    parser.add_argument("--ranks", type=int, required=True, metavar="N", help="number of simulated ranks (GPUs)")
    parser.add_argument("--steps-per-second", type=float, default=10.0, metavar="R", help="target step rate")
    parser.add_argument("--straggler", default=None, metavar="RANK:MS",
                        help="make RANK compute MS milliseconds longer every step (e.g. 5:40)")
    parser.add_argument("--data-stall", type=float, default=0.0, metavar="MS",
                        help="extra data-loader wait on every rank and step, in ms")
    parser.add_argument("--endpoint", default=None, metavar="E",
                        help=f"collector endpoint (default $RINGSCOPE_ENDPOINT or {DEFAULT_ENDPOINT})")
    parser.add_argument("--run-id", default=None, help="run id to report (default sim-<time>-<pid>)")
    parser.add_argument("--processes", type=int, default=None, help="simulator processes (default: 1 per 256 ranks)")
    until = parser.add_mutually_exclusive_group()
    until.add_argument("--duration", type=float, default=None, metavar="S", help="stop after S seconds")
    until.add_argument("--steps", type=int, default=None, metavar="N", help="stop after N steps")


def run(args: argparse.Namespace) -> int:
    """Simulate until done or interrupted; 2 on bad values."""
    import os

    endpoint = args.endpoint or os.environ.get("RINGSCOPE_ENDPOINT") or DEFAULT_ENDPOINT
    try:
        straggler = parse_straggler(args.straggler) if args.straggler is not None else None
        if straggler is not None and straggler[0] >= args.ranks:
            raise ValueError(f"--straggler rank {straggler[0]} does not exist with --ranks {args.ranks} "
                             f"(ranks are 0..{args.ranks - 1})")
        if args.processes is not None and args.processes < 0:
            raise ValueError(f"--processes must be >= 0, got {args.processes}")
        stop = threading.Event()

        def on_signal(signum: int, frame: FrameType | None) -> None:
            stop.set()

        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, on_signal)
        print(f"ringscope simulate: {args.ranks} ranks at {args.steps_per_second:g} steps/s -> {endpoint}",
              file=sys.stderr, flush=True)
        result = run_cluster(args.ranks, endpoint=endpoint, steps_per_second=args.steps_per_second,
                             duration_s=args.duration, steps=args.steps, straggler=straggler,
                             data_stall_ms=args.data_stall, run_id=args.run_id, stop=stop,
                             processes=args.processes)
    except ValueError as exc:
        print(f"ringscope simulate: {exc}", file=sys.stderr)
        return 2
    print(f"ringscope simulate: run {result.run_id}: {result.steps} steps x {result.ranks} ranks in "
          f"{result.elapsed_s:.1f} s ({result.steps_per_second:.1f} steps/s), {result.sent_records} records sent, "
          f"{result.dropped_records} dropped by the agents", file=sys.stderr, flush=True)
    return 0

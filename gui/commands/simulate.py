"""Run a synthetic data-parallel cluster through the real agent code path.

    ringscope simulate --ranks 64 --straggler 5:40 --data-stall 10 --duration 30

Every simulated rank reports like a real one (marked framework "simulated"); point it at a running window or
'ringscope record' (--endpoint). Exit codes: 0 when the collector took the telemetry; 1 when nothing was
delivered (no collector took a single message within --connect-timeout seconds, then the simulation stops) or a
simulator process died (the whole simulated cluster stops with it); 2 for a bad argument.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from types import FrameType

from ringscope.agent.publisher import DEFAULT_ENDPOINT
from ringscope.gui.commands._args import (
    EXIT_FAILED,
    check_endpoint,
    connect_endpoint,
    fail,
    milliseconds,
    positive_int,
    seconds,
    seconds_or_zero,
    step_rate,
    straggler,
)

ENV_ENDPOINT = "RINGSCOPE_ENDPOINT"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``ringscope simulate``."""
    parser.add_argument("--ranks", type=positive_int, required=True, metavar="N",
                        help="number of simulated ranks (GPUs)")
    parser.add_argument("--steps-per-second", type=step_rate, default=10.0, metavar="RATE",
                        help="target step rate (default %(default)g)")
    parser.add_argument("--straggler", type=straggler, default=None, metavar="RANK:MS",
                        help="make RANK compute MS milliseconds longer every step (e.g. 5:40)")
    parser.add_argument("--data-stall", type=milliseconds, default=0.0, metavar="MS",
                        help="extra data-loader wait on every rank and step, in ms (default %(default)g)")
    parser.add_argument("--endpoint", type=connect_endpoint, default=None, metavar="ENDPOINT",
                        help=f"collector endpoint (default ${ENV_ENDPOINT} or {DEFAULT_ENDPOINT})")
    parser.add_argument("--connect-timeout", type=seconds_or_zero, default=5.0, metavar="SECONDS",
                        help="stop with exit code 1 when no collector has taken a single message this many seconds "
                             "after the first step (default %(default)g; 0 waits as long as the simulation runs)")
    parser.add_argument("--run-id", default=None, metavar="ID", help="run id to report (default sim-<time>-<pid>)")
    parser.add_argument("--processes", type=positive_int, default=None, metavar="N",
                        help="simulator processes (default: 1 per 256 ranks, at most 2 per CPU core)")
    until = parser.add_mutually_exclusive_group()
    until.add_argument("--duration", type=seconds, default=None, metavar="SECONDS",
                       help="stop after this many seconds (default: run until Ctrl-C)")
    until.add_argument("--steps", type=positive_int, default=None, metavar="N", help="stop after N steps")


def run(args: argparse.Namespace) -> int:
    """Simulate until done or interrupted; 1 when nothing was delivered or a simulator process died, 2 on bad
    values."""
    from ringscope.agent.simulate import run_cluster

    endpoint = args.endpoint or os.environ.get(ENV_ENDPOINT) or DEFAULT_ENDPOINT
    if not args.endpoint:
        try:
            check_endpoint(endpoint, bind=False)
        except ValueError as exc:
            return fail("simulate", f"${ENV_ENDPOINT}: {exc}; fix it or pass --endpoint ENDPOINT")
    if args.straggler is not None and args.straggler[0] >= args.ranks:
        return fail("simulate", f"argument --straggler: rank {args.straggler[0]} does not exist with --ranks "
                                f"{args.ranks} (ranks are 0..{args.ranks - 1})")
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    print(f"ringscope simulate: {args.ranks} ranks at {args.steps_per_second:g} steps/s -> {endpoint}",
          file=sys.stderr, flush=True)
    try:
        result = run_cluster(args.ranks, endpoint=endpoint, steps_per_second=args.steps_per_second,
                             duration_s=args.duration, steps=args.steps, straggler=args.straggler,
                             data_stall_ms=args.data_stall, run_id=args.run_id, stop=stop,
                             processes=args.processes, give_up_after_s=args.connect_timeout or None)
    except RuntimeError as exc:  # a simulator process that could not start
        print(f"ringscope simulate: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(f"ringscope simulate: run {result.run_id}: {result.steps} steps x {result.ranks} ranks in "
          f"{result.elapsed_s:.1f} s ({result.steps_per_second:.1f} steps/s), {result.sent_records} records sent, "
          f"{result.dropped_records} dropped by the agents", file=sys.stderr, flush=True)
    for problem in result.problems:
        print(f"ringscope simulate: FAILED: {problem}", file=sys.stderr, flush=True)
    if not result.delivered:
        print(f"ringscope simulate: start a collector first ('ringscope record --out SESSION.db --bind "
              f"{endpoint}' or the window) or pass --endpoint ENDPOINT", file=sys.stderr)
    return 0 if result.ok else EXIT_FAILED

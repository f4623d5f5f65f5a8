"""Change a run's telemetry settings while it trains: ringscope control --run RUN --stack-after 2 ...

    ringscope control [--endpoint E] [--run RUN] [--ranks 0,3] [--timing light|full] [--stack-after S]
                      [--device-interval S] [--flush-interval S]

--timing switches DDP's gradient-communication timing (light: no comm hook, full: the per-bucket hook);
--stack-after sets how long a rank sits in one phase before its heartbeat carries its stack; --device-interval sets
the GPU/host sampling period; --flush-interval how long records wait on the agent before they are sent. Every agent
answers with what it applied and what it refused (and why); the change is recorded as a 'control' event of the
run. Exit codes: 0 every agent applied everything, 1 something was refused or nothing answered, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import sys

from ringscope.gui.commands._args import EXIT_FAILED, fail, seconds
from ringscope.gui.commands.stacks import add_request_arguments, request_keys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``ringscope control``."""
    add_request_arguments(parser)
    parser.add_argument("--timing", choices=("light", "full"), default=None,
                        help="DDP communication timing: light (no comm hook) or full (per-bucket hook)")
    parser.add_argument("--stack-after", type=seconds, default=None, metavar="SECONDS",
                        help="send a rank's stack once it sits this long in one phase")
    parser.add_argument("--device-interval", type=seconds, default=None, metavar="SECONDS",
                        help="GPU / host sampling period")
    parser.add_argument("--flush-interval", type=seconds, default=None, metavar="SECONDS",
                        help="how long records wait on the agent before they are sent (0.01-1; agents: 0.05, "
                             "'ringscope record' asks for 0.25)")


def settings_of(args: argparse.Namespace) -> dict[str, object]:
    """The settings ``args`` ask to change (``ringscope.agent.control.SETTINGS`` names)."""
    wanted = {"timing": args.timing, "stack_after_s": args.stack_after, "device_interval_s": args.device_interval,
              "flush_interval_s": args.flush_interval}
    return {name: value for name, value in wanted.items() if value is not None}


def run(args: argparse.Namespace) -> int:
    """Ask every live agent of the run to apply the settings; print what each did."""
    from ringscope.gui.core.ingest.ask import AskError, ask

    settings = settings_of(args)
    if not settings:
        return fail("control", "nothing to change: give --timing, --stack-after, --device-interval or "
                                "--flush-interval")
    keys, code = request_keys(args, "control")
    if code:
        return code
    try:
        result = ask(args.endpoint, "set", run_id=args.run, ranks=args.ranks, settings=settings, wait_s=args.wait,
                     keys=keys)  # type: ignore[arg-type]
    except AskError as exc:
        print(f"ringscope control: {exc}", file=sys.stderr)
        return EXIT_FAILED
    failed = False
    for entry in result.get("ranks", []):
        who = f"rank {entry.get('rank')} ({entry.get('host')}, pid {entry.get('pid')}, run {entry.get('run_id')})"
        if not entry.get("answered"):
            print(f"{who}: no answer")
            failed = True
            continue
        applied = ", ".join(f"{k}={v}" for k, v in (entry.get("applied") or {}).items()) or "nothing"
        refused = entry.get("refused") or {}
        failed |= bool(refused)
        extra = "; refused " + "; ".join(f"{k}: {v}" for k, v in refused.items()) if refused else ""
        print(f"{who}: applied {applied}{extra}")
    return EXIT_FAILED if failed or not result.get("answered") else 0

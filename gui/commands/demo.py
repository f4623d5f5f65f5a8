"""Open the window and start a real 2-rank demo training (PyTorch DDP reference trainer, a straggler included).

    ringscope demo [--bind tcp://127.0.0.1:5757] [--record demo.db] [--steps 600] [--secure]

The window binds the collector, then starts the demo through its launcher once it is shown; the process panel shows
the ranks' output. Without a GPU the demo runs on the CPU (gloo); with two or more GPUs on CUDA (NCCL).
"""

from __future__ import annotations

import argparse
import sys

from agent.publisher import DEFAULT_ENDPOINT
from gui.commands.keys import add_secure_arguments, secure_keys
from gui.core.launch import DEMO_STEPS, check_bindable, demo_spec, validate


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``ringscope demo``."""
    parser.add_argument("--bind", default=DEFAULT_ENDPOINT, metavar="ENDPOINT",
                        help=f"collector endpoint the window binds (default {DEFAULT_ENDPOINT})")
    parser.add_argument("--record", default=None, metavar="FILE.db",
                        help="also record the session to this SQLite file")
    parser.add_argument("--steps", type=int, default=DEMO_STEPS,
                        help=f"training steps of the demo (default {DEMO_STEPS}, about a minute or two on a CPU)")
    add_secure_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Check that the demo can start, then hand it to the window."""
    if args.steps < 1:
        print(f"ringscope demo: --steps {args.steps} must be at least 1", file=sys.stderr)
        return 2
    problem = check_bindable(args.bind)
    if problem is not None:
        print(f"ringscope demo: {problem}", file=sys.stderr)
        return 2
    spec = demo_spec(steps=args.steps)
    errors = validate(spec)
    if errors:
        print("ringscope demo cannot start:\n" + "\n".join(f"  - {e}" for e in errors), file=sys.stderr)
        return 2
    keys, code = secure_keys(args, "demo")
    if code:
        return code
    from gui import app  # Qt only now: the checks above work (and fail clearly) without a display

    return int(app.run(bind=args.bind, record_to=args.record, demo=spec, keys=keys))

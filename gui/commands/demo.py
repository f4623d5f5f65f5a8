"""Open the window and start a real 2-rank demo training (PyTorch DDP reference trainer, a straggler included).

    ringscope demo [--bind ENDPOINT] [--record SESSION.db] [--steps N] [--secure]

The window binds the collector, then starts the demo through its launcher once it is shown; the process panel shows
the ranks' output. Without a GPU the demo runs on the CPU (gloo); with two or more GPUs on CUDA (NCCL).
"""

from __future__ import annotations

import argparse

from ringscope.agent.publisher import DEFAULT_ENDPOINT
from ringscope.gui.commands._args import bind_endpoint, bind_problem, fail, new_session_file, positive_int
from ringscope.gui.commands.keys import add_secure_arguments, secure_keys
from ringscope.gui.core.extras import require
from ringscope.gui.core.launch import DEMO_STEPS, demo_spec, validate


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``ringscope demo``."""
    parser.add_argument("--bind", type=bind_endpoint, default=DEFAULT_ENDPOINT, metavar="ENDPOINT",
                        help="collector endpoint the window binds (default %(default)s; tcp://127.0.0.1:0 picks a "
                             "free port)")
    parser.add_argument("--record", type=new_session_file, default=None, metavar="SESSION.db",
                        help="also record the session to this new file (missing folders are created)")
    parser.add_argument("--steps", type=positive_int, default=DEMO_STEPS, metavar="N",
                        help="training steps of the demo (default %(default)s, about a minute or two on a CPU)")
    add_secure_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Check that the demo can start (display, endpoint, trainer), then hand it to the window."""
    require("gui", "the window")
    spec = demo_spec(steps=args.steps)
    errors = validate(spec)
    if errors:
        return fail("demo", "cannot start: " + "; ".join(errors))
    from ringscope.gui import app  # Qt only now: the checks above work (and fail clearly) without a display

    problem = app.missing_display()
    if problem:
        return fail("demo", problem)
    problem = bind_problem(args.bind)
    if problem:
        return fail("demo", f"argument --bind: {problem}")
    keys, code = secure_keys(args, "demo")
    if code:
        return code
    return int(app.run(bind=args.bind, record_to=args.record, demo=spec, keys=keys))

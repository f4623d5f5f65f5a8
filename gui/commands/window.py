"""Open the Ringscope window (the default command).

    ringscope window [--bind tcp://127.0.0.1:5757] [--record FILE.db] [--simulate N] [--secure]
"""

from __future__ import annotations

import argparse

from gui.commands.keys import add_secure_arguments, secure_keys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``ringscope window``."""
    parser.add_argument("--bind", help="ZeroMQ endpoint the collector binds (default from Preferences, "
                                       "tcp://127.0.0.1:5757); tcp://127.0.0.1:0 picks a free port")
    parser.add_argument("--record", metavar="FILE", help="session file to record to (default: a new file in "
                                                         "~/.local/share/ringscope/sessions/)")
    parser.add_argument("--simulate", metavar="N", type=int, help="feed the window from N simulated ranks "
                                                                  "(real agents, synthetic steps)")
    add_secure_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Open the window; returns when it is closed."""
    if args.simulate is not None and args.simulate < 1:
        raise SystemExit(f"--simulate needs a number of ranks >= 1, got {args.simulate}")
    keys, code = secure_keys(args, "window")
    if code:
        return code
    from gui.app import run as run_app  # Qt is imported only when the window is really opened

    return run_app(bind=args.bind, record_to=args.record, simulate_ranks=args.simulate, keys=keys)

"""Open the Ringscope window (the default command).

    ringscope [window] [--bind ENDPOINT] [--record SESSION.db] [--simulate N] [--secure]
"""

from __future__ import annotations

import argparse

from ringscope.gui.commands._args import bind_endpoint, bind_problem, fail, new_session_file, positive_int
from ringscope.gui.commands.keys import add_secure_arguments, secure_keys
from ringscope.gui.core.extras import require


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``ringscope window``."""
    parser.add_argument("--bind", type=bind_endpoint, metavar="ENDPOINT",
                        help="ZeroMQ endpoint the collector binds (default: the one in Preferences, "
                             "tcp://127.0.0.1:5757 unless changed); tcp://127.0.0.1:0 picks a free port")
    parser.add_argument("--record", type=new_session_file, metavar="SESSION.db",
                        help="new session file to record to (default: a new file in "
                             "~/.local/share/ringscope/sessions/; missing folders are created)")
    parser.add_argument("--simulate", type=positive_int, metavar="N",
                        help="feed the window from N simulated ranks (real agents, synthetic steps)")
    add_secure_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Open the window; returns when it is closed. Exit 2, before any window, when no window can open here or the
    collector endpoint cannot be bound."""
    require("gui", "the window")
    from ringscope.gui import app  # Qt is imported only when the window is really opened

    problem = app.missing_display()
    if problem:
        return fail("window", problem)
    if args.bind:
        problem = bind_problem(args.bind)
        if problem:
            return fail("window", f"argument --bind: {problem}")
    else:
        from ringscope.gui.views.qt_preferences import load_preferences

        problem = bind_problem(load_preferences().endpoint)
        if problem:
            return fail("window", f"the collector endpoint saved in Preferences: {problem}; start with --bind "
                                  "ENDPOINT to use another")
    keys, code = secure_keys(args, "window")
    if code:
        return code
    return app.run(bind=args.bind, record_to=args.record, simulate_ranks=args.simulate, keys=keys)

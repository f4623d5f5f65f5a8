"""Show a recorded session read-only in the window: ringscope open SESSION.db (or just ringscope SESSION.db).

Every run of the session gets a row in the runs table, its charts cover the whole run (zoom and pan), and its
state is the recorded one (finished, stopped, failed, lost, unfinished). Nothing is received, launched or recorded.
Exit code 2 with a one-line message when the file is not a readable Ringscope session or no window can open here.
"""

from __future__ import annotations

import argparse

from ringscope.gui.commands._args import fail
from ringscope.gui.core.extras import require
from ringscope.gui.core.ingest.session_reader import SessionFileError, load


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``ringscope open``."""
    parser.add_argument("session", metavar="SESSION.db", help="a file written by 'ringscope record' or the window")


def run(args: argparse.Namespace) -> int:
    """Load the session (before any window: a bad file is one line on stderr), then show it until closed."""
    try:
        data = load(args.session)
    except SessionFileError as exc:
        return fail("open", str(exc))
    require("gui", "the window")
    from ringscope.gui import app  # Qt is imported only when the window is really opened

    problem = app.missing_display()
    if problem:
        return fail("open", problem)
    return app.run_viewer(args.session, data=data)

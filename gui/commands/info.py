"""Print a JSON summary of a session file: ringscope info SESSION.db.

Run ids, ranks, steps per rank, time span, gaps, drops, rejected messages by reason, events, agents, file size.
Exit code 2 with a one-line message when the file is not a readable Ringscope session.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from ringscope.gui.core.analysis.info import summarize
from ringscope.gui.core.ingest.session_reader import SessionFileError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``ringscope info``."""
    parser.add_argument("session", metavar="SESSION.db", help="a file written by 'ringscope record' or the app")


def _finite(value: Any) -> Any:
    """The summary with non-finite numbers as null: standard JSON even for files written before values were checked
    (an older recorder accepted ``end_s = inf``)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def run(args: argparse.Namespace) -> int:
    """Print the summary; 2 on a bad file."""
    try:
        summary = summarize(args.session)
    except SessionFileError as exc:
        print(f"ringscope info: {exc}", file=sys.stderr)
        return 2
    try:
        print(json.dumps(_finite(summary), indent=2, allow_nan=False))
    except BrokenPipeError:  # `ringscope info S.db | head`: the reader has seen enough
        sys.stderr.close()
    return 0

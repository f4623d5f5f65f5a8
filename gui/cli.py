"""The ``ringscope`` command: the window by default, and headless sub-commands.

    ringscope                      open the window
    ringscope demo                 open the window and start a real 2-rank demo training
    ringscope record --out S.db    headless collector
    ringscope simulate --ranks N   synthetic cluster through the real agent code path
    ringscope info S.db            JSON summary of a session file
    ringscope report S.db ...      HTML / PDF / CSV / trace exports
    ringscope compare A.db B.db    side-by-side comparison

Qt is imported only by the window commands, so the headless ones work on machines without a display or PySide6.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

# sub-command name -> module under gui.commands providing add_arguments(parser) and run(args) -> int
COMMANDS: dict[str, str] = {
    "window": "gui.commands.window",
    "demo": "gui.commands.demo",
    "record": "gui.commands.record",
    "simulate": "gui.commands.simulate",
    "info": "gui.commands.info",
    "report": "gui.commands.report",
    "compare": "gui.commands.compare",
    "keys": "gui.commands.keys",
}


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (sub-command modules add their own options)."""
    parser = argparse.ArgumentParser(prog="ringscope", description=__doc__.split("\n\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module_name in COMMANDS.items():
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue  # a command whose optional dependencies are missing is simply not offered
        doc = (module.__doc__ or name).strip().splitlines()[0]
        command_parser = sub.add_parser(name, help=doc, description=module.__doc__)
        module.add_arguments(command_parser)
        command_parser.set_defaults(_module=module)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ringscope`` console script."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    # `ringscope [--verbose] [window options]` opens the window: insert the default sub-command.
    first_positional = next((a for a in args_list if not a.startswith("-")), None)
    wants_help = any(a in ("-h", "--help") for a in args_list) and first_positional is None
    if not wants_help and first_positional not in COMMANDS:
        verbose = [a for a in args_list if a in ("-v", "--verbose")]
        args_list = [*verbose, "window", *[a for a in args_list if a not in verbose]]
    parser = build_parser()
    args = parser.parse_args(args_list)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    module = getattr(args, "_module", None)
    if module is None:
        parser.print_help()
        return 2
    return int(module.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())

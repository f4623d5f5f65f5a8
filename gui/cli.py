"""The ringscope command: the window by default, and headless commands.

    ringscope                            open the window
    ringscope demo                       open the window and start a real 2-rank demo training
    ringscope open SESSION.db            a recorded session in the window, read-only (or: ringscope SESSION.db)
    ringscope record --out SESSION.db    headless collector
    ringscope simulate --ranks N         synthetic cluster through the real agent code path
    ringscope info SESSION.db            JSON summary of a session file
    ringscope report SESSION.db ...      HTML / PDF / CSV / trace exports
    ringscope compare A.db B.db ...      side-by-side comparison
    ringscope sweep --frameworks ... --ranks 1,2 --out DIR   scaling sweep / framework bake-off on one model
    ringscope keys                       access token for a --secure collector
    ringscope stacks [--run RUN]         every rank's Python stacks now, folded (asks the running collector)
    ringscope control --run RUN ...      change timing / stack threshold / sampling while the run trains
    ringscope submit --nodes N ... -- SCRIPT   submit a training to Slurm with Ringscope in it, and follow the job
    ringscope profile --steps N --out D  torch.profiler on the next N steps of chosen ranks, one merged trace

Qt is imported only by the window commands, so the headless ones work on machines without a display or PySide6.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import logging
import sys
from collections.abc import Sequence

from ringscope.gui.commands._args import EXIT_USAGE, Parser
from ringscope.gui.core.extras import MissingExtraError

# sub-command name -> module under ringscope.gui.commands providing add_arguments(parser) and run(args) -> int
COMMANDS: dict[str, str] = {
    "window": "ringscope.gui.commands.window",
    "demo": "ringscope.gui.commands.demo",
    "open": "ringscope.gui.commands.open",
    "record": "ringscope.gui.commands.record",
    "simulate": "ringscope.gui.commands.simulate",
    "info": "ringscope.gui.commands.info",
    "report": "ringscope.gui.commands.report",
    "compare": "ringscope.gui.commands.compare",
    "keys": "ringscope.gui.commands.keys",
    "run": "ringscope.gui.commands.run",
    "submit": "ringscope.gui.commands.submit",
    "sweep": "ringscope.gui.commands.sweep",
    "stacks": "ringscope.gui.commands.stacks",
    "control": "ringscope.gui.commands.control",
    "profile": "ringscope.gui.commands.profile",
}
DEFAULT_COMMAND = "window"
_TOP_LEVEL_ONLY = ("-h", "--help", "--version")
_EPILOG = """exit codes:
  0  done
  1  the command ran but failed (e.g. simulate delivered nothing, or a simulator process died)
  2  a bad argument, file or endpoint; one line on stderr names it, and nothing was written

'ringscope COMMAND --help' lists the options of a command."""


def version() -> str:
    """``ringscope X.Y.Z (telemetry schema A.B)``."""
    from importlib import metadata

    from ringscope.agent.schema import AGENT_VERSION, schema_version_str

    try:
        number = metadata.version("ringscope")
    except metadata.PackageNotFoundError:  # run from a source tree without installing
        number = AGENT_VERSION
    return f"ringscope {number} (telemetry schema {schema_version_str()})"


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (sub-command modules add their own options)."""
    parser = Parser(prog="ringscope", description=__doc__, epilog=_EPILOG,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    parser.add_argument("--version", action="version", version=version())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module_name in COMMANDS.items():
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue  # a command whose optional dependencies are missing is simply not offered
        doc = (module.__doc__ or name).strip()
        command_parser = sub.add_parser(name, help=doc.splitlines()[0], description=doc,
                                        formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(command_parser)
        command_parser.set_defaults(_module=module, _parser=command_parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ringscope`` console script; returns the exit code (argparse's included)."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args_list = _with_command(parser, args_list)
        args, unknown = parser.parse_known_args(args_list)
        if unknown:  # said by the command's parser, so that the message points at the command's --help
            getattr(args, "_parser", parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    except SystemExit as exc:  # --help, --version, or a bad argument (already reported on one line)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    module = getattr(args, "_module", None)
    if module is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        return int(module.run(args) or 0)
    except MissingExtraError as exc:  # an optional part the command needs is not installed: one line says which
        print(f"ringscope {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _with_command(parser: argparse.ArgumentParser, args: list[str]) -> list[str]:
    """``args`` with the default command inserted when none is given (``ringscope --bind E`` opens the window);
    exits 2 with the list of commands when the first word is not one."""
    index = _first_word(args, _value_options(parser, DEFAULT_COMMAND))
    if index is None:
        if any(a in _TOP_LEVEL_ONLY for a in args):
            return args
        verbose = [a for a in args if a in ("-v", "--verbose")]
        return [*verbose, DEFAULT_COMMAND, *[a for a in args if a not in verbose]]
    word = args[index]
    if word in COMMANDS:
        return args
    if word.endswith(".db"):  # `ringscope S.db` opens a recorded session
        return [*args[:index], "open", *args[index:]]
    close = difflib.get_close_matches(word, COMMANDS, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    parser.exit(EXIT_USAGE, f"ringscope: unknown command {word!r}{hint}; commands: {', '.join(COMMANDS)}; "
                            "see 'ringscope --help'\n")


def _first_word(args: list[str], value_options: set[str]) -> int | None:
    """Index of the first argument that is neither an option nor an option's value."""
    takes_value = False
    for index, arg in enumerate(args):
        if takes_value:
            takes_value = False
        elif arg == "--":
            return index + 1 if index + 1 < len(args) else None
        elif arg.startswith("-") and len(arg) > 1:
            takes_value = "=" not in arg and arg in value_options
        else:
            return index
    return None


def _value_options(parser: argparse.ArgumentParser, command: str) -> set[str]:
    """The option strings of ``command`` that take a value (so the word after them is not a command)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and command in action.choices:
            return {option for sub_action in action.choices[command]._actions if sub_action.nargs != 0
                    for option in sub_action.option_strings}
    return set()


if __name__ == "__main__":
    sys.exit(main())

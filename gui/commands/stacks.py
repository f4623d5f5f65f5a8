"""Every rank's Python stacks now, from every host, folded: ringscope stacks [--run RUN] [--json].

    ringscope stacks [--endpoint E] [--run RUN] [--ranks 0,3] [--wait S] [--json]

Asks the collector at --endpoint (the window or 'ringscope record', default tcp://127.0.0.1:5757) to ask every live
agent of the run for the stacks of all its threads, the training thread first. Identical stacks are folded, with
the ranks that share each. A rank whose agent cannot answer (its training thread holds the GIL in native code) is
named, and when it runs on the collector's host its native stack is read with 'py-spy dump --native'. The agents'
answers are stored in the recording. A collector started with --secure needs its access token: RINGSCOPE_KEY /
RINGSCOPE_KEY_FILE, or --secure [--key-file] on the collector's own machine.
Exit codes: 0 answered, 1 no collector or no live run answered, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import json
import sys

from ringscope.gui.commands._args import EXIT_FAILED, EXIT_USAGE, connect_endpoint, fail, seconds
from ringscope.gui.commands.keys import add_secure_arguments

DEFAULT_ENDPOINT = "tcp://127.0.0.1:5757"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``ringscope stacks``."""
    add_request_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the collector's answer as JSON (every rank, "
                                                            "every thread, unfolded)")


def add_request_arguments(parser: argparse.ArgumentParser, wait_default: float = 3.0) -> None:
    """What ``stacks`` and ``control`` share: where the collector is, which run and ranks, how long to wait."""
    parser.add_argument("--endpoint", type=connect_endpoint, default=DEFAULT_ENDPOINT, metavar="ENDPOINT",
                        help=f"the collector's endpoint, as the agents use it (default {DEFAULT_ENDPOINT})")
    parser.add_argument("--run", default=None, metavar="RUN", help="run id (default: every live run)")
    parser.add_argument("--ranks", type=rank_list, default=None, metavar="N,N,...",
                        help="only these ranks (default: all)")
    parser.add_argument("--wait", type=seconds, default=wait_default, metavar="SECONDS",
                        help=f"how long the agents get to answer (default {wait_default:g} s)")
    add_secure_arguments(parser)


def rank_list(text: str) -> list[int]:
    """``"0,3,5-7"`` -> ``[0, 3, 5, 6, 7]`` (argparse's type)."""
    from ringscope.gui.core.analysis.stacks import parse_rank_list

    try:
        return parse_rank_list(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def request_keys(args: argparse.Namespace, command: str) -> tuple[object, int]:
    """The access keys this tool presents: the collector's (--secure / --key-file, on its own machine), else the
    agents' token from the environment, else none. (keys, 0) or (None, 2) after printing why."""
    from ringscope.agent.keys import AccessKeyError, agent_keys_from_env
    from ringscope.gui.commands.keys import secure_keys

    if getattr(args, "secure", False) or getattr(args, "key_file", None):
        args.secure = True
        keys, code = secure_keys(args, command)
        return (keys.agent_keys if keys is not None else None), code
    try:
        return agent_keys_from_env(), 0
    except AccessKeyError as exc:
        return None, fail(command, str(exc))


def run(args: argparse.Namespace) -> int:
    """Ask, fold, print; see the module docstring for exit codes."""
    from ringscope.gui.core.analysis.stacks import fold, render_text
    from ringscope.gui.core.ingest.ask import AskError, ask

    keys, code = request_keys(args, "stacks")
    if code:
        return code
    try:
        result = ask(args.endpoint, "stacks", run_id=args.run, ranks=args.ranks, wait_s=args.wait,
                     keys=keys)  # type: ignore[arg-type]
    except AskError as exc:
        print(f"ringscope stacks: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(render_text(fold(result)))
    return 0 if result.get("answered") else EXIT_FAILED


__all__ = ["EXIT_USAGE", "add_arguments", "run"]

"""Profile the next N steps of chosen ranks with the framework's profiler: ringscope profile --run RUN --steps 5.

    ringscope profile [--endpoint E] [--run RUN] [--ranks 0,3] --steps N --out DIR [--wait S]

The collector at --endpoint asks the chosen ranks (default: all) to run torch.profiler (Kineto) around their next N
steps; the training pays for the profiler during those steps only. Each rank writes its Chrome trace on its own host
(RINGSCOPE_PROFILE_DIR, default the temp folder's ringscope-profiles/). This command merges the traces it can read
into DIR/trace.json, every rank on the collector's clock as its own track (open it in ui.perfetto.dev), copies the
raw traces to DIR/ranks/, and prints each rank's top operators (also in DIR/summary.txt). The answers are recorded.
Exit codes: 0 a trace was written, 1 no rank answered with a readable trace, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import sys

from ringscope.gui.commands._args import EXIT_FAILED, fail, output_folder, positive_int
from ringscope.gui.commands.stacks import add_request_arguments, request_keys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``ringscope profile``."""
    add_request_arguments(parser, wait_default=60.0)
    parser.add_argument("--steps", type=positive_int, required=True, metavar="N", help="steps to profile (1..1000)")
    parser.add_argument("--out", type=output_folder, required=True, metavar="DIR",
                        help="folder for trace.json, ranks/ and summary.txt (created)")


def run(args: argparse.Namespace) -> int:
    """Ask, merge, print the summary."""
    from ringscope.gui.core.ingest.ask import AskError, ask
    from ringscope.gui.core.report.profiles import merge

    if args.steps > 1000:
        return fail("profile", f"--steps {args.steps}: at most 1000")
    keys, code = request_keys(args, "profile")
    if code:
        return code
    try:
        result = ask(args.endpoint, "profile", run_id=args.run, ranks=args.ranks, steps=args.steps,
                     wait_s=args.wait, keys=keys)  # type: ignore[arg-type]
    except AskError as exc:
        print(f"ringscope profile: {exc}", file=sys.stderr)
        return EXIT_FAILED
    summary = merge(result, args.out)
    print(summary.text())
    return 0 if summary.trace is not None or summary.tensorboard else EXIT_FAILED

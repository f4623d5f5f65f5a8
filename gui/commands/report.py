"""Export a recorded session: ``ringscope report SESSION.db --html F --pdf F --csv DIR --trace F``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gui.core.analysis.cost import DEFAULT_PRICE_PER_GPU_HOUR
from gui.core.ingest.session import SessionFileError, load

OUTPUTS: tuple[str, ...] = ("html", "pdf", "csv", "trace")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``ringscope report``."""
    parser.add_argument("session", help="a session file recorded by 'ringscope record' (or the window)")
    parser.add_argument("--html", metavar="FILE", help="self-contained HTML report (opens offline)")
    parser.add_argument("--pdf", metavar="FILE", help="PDF report with the same content")
    parser.add_argument("--csv", metavar="DIR", help="directory for steps.csv, devices.csv, hosts.csv, events.csv")
    parser.add_argument("--trace", metavar="FILE", help="Chrome-trace / Perfetto JSON of per-rank step phases")
    parser.add_argument("--price-per-gpu-hour", type=float, default=None, metavar="P",
                        help=f"price per GPU-hour (default: the agents' price, else {DEFAULT_PRICE_PER_GPU_HOUR})")


def run(args: argparse.Namespace) -> int:
    """Write every requested export; exit 2 on a bad session file or bad arguments."""
    from gui.core.report import build_report, export

    wanted = [(kind, getattr(args, kind)) for kind in OUTPUTS if getattr(args, kind)]
    if not wanted:
        print("ringscope report: nothing to write; give at least one of --html FILE, --pdf FILE, --csv DIR, "
              "--trace FILE", file=sys.stderr)
        return 2
    if args.price_per_gpu_hour is not None and args.price_per_gpu_hour < 0:
        print(f"ringscope report: --price-per-gpu-hour must be >= 0, got {args.price_per_gpu_hour}", file=sys.stderr)
        return 2
    for kind, target in wanted:
        parent = Path(target) if kind == "csv" else Path(target).parent
        if kind != "csv" and not parent.is_dir():
            print(f"ringscope report: cannot write --{kind} {target}: folder {parent} does not exist",
                  file=sys.stderr)
            return 2
    try:
        session = load(args.session)
    except SessionFileError as exc:
        print(f"ringscope report: {exc}", file=sys.stderr)
        return 2
    report = build_report(session, args.price_per_gpu_hour)
    for kind, target in wanted:
        try:
            for path in export(report, kind, target):
                print(f"{kind}: {path}")
        except OSError as exc:
            print(f"ringscope report: cannot write --{kind} {target}: {exc}", file=sys.stderr)
            return 1
    return 0

"""Export a recorded session: HTML, PDF, CSV files and a Chrome/Perfetto trace.

    ringscope report SESSION.db [--run RUN | --all-runs] [--html FILE] [--pdf FILE] [--csv DIR] [--trace FILE]
                     [--price-per-gpu-hour PRICE]

A session holds one run per training (ringscope info lists them). With one run it is reported; with several, name
one with --run (an id or an unambiguous prefix), or give --all-runs for one part per run.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ringscope.gui.commands._args import (
    add_price_argument,
    create_folders,
    fail,
    os_error_text,
    output_file,
    output_folder,
    remove_folders,
)
from ringscope.gui.core.analysis.cost import DEFAULT_PRICE_PER_GPU_HOUR
from ringscope.gui.core.analysis.runs import pick_run, runs_of
from ringscope.gui.core.extras import require
from ringscope.gui.core.ingest.session_reader import SessionFileError, load

OUTPUTS: tuple[str, ...] = ("html", "pdf", "csv", "trace")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``ringscope report``."""
    parser.add_argument("session", metavar="SESSION.db",
                        help="a session file recorded by 'ringscope record' (or the window)")
    parser.add_argument("--html", type=output_file, metavar="FILE", help="self-contained HTML report (opens offline)")
    parser.add_argument("--pdf", type=output_file, metavar="FILE", help="PDF report with the same content")
    parser.add_argument("--csv", type=output_folder, metavar="DIR",
                        help="folder for steps.csv, devices.csv, hosts.csv, events.csv")
    parser.add_argument("--trace", type=output_file, metavar="FILE",
                        help="Chrome-trace / Perfetto JSON of per-rank step phases")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--run", metavar="RUN", help="the run to report (an id from 'ringscope info', or a prefix)")
    which.add_argument("--all-runs", action="store_true",
                       help="one part per run: HTML and PDF get a section per run, CSV a folder per run, traces "
                            "one file per run")
    add_price_argument(parser, f"the agents' price, else {DEFAULT_PRICE_PER_GPU_HOUR:g}")


def run(args: argparse.Namespace) -> int:
    """Write every requested export; exit 2 on a bad session file, bad arguments or an unwritable output."""
    from ringscope.gui.core.report import build_report, export

    wanted = [(kind, getattr(args, kind)) for kind in OUTPUTS if getattr(args, kind)]
    if not wanted:
        return fail("report", "nothing to write; give at least one of --html FILE, --pdf FILE, --csv DIR, "
                              "--trace FILE")
    if args.pdf:
        require("pdf", "--pdf")  # before any file is written
    try:
        session = load(args.session)
    except SessionFileError as exc:
        return fail("report", str(exc))
    runs = runs_of(session)
    if args.all_runs or (not runs and args.run is None):
        chosen = [run.run_id for run in runs]
    else:
        try:
            chosen = [pick_run(runs, args.run).run_id]
        except LookupError as exc:
            return fail("report", str(exc))
    if not chosen:  # an empty session: report it as it is (it says "no data")
        reports = [build_report(session, args.price_per_gpu_hour)]
    else:
        reports = [build_report(session.for_run(run_id), args.price_per_gpu_hour) for run_id in chosen]
    report = reports[0] if len(reports) == 1 else reports
    for kind, target in wanted:
        folder = Path(target) if kind == "csv" else Path(target).parent
        created: list[Path] = []
        try:
            created = create_folders([folder])
            for path in export(report, kind, target):
                print(f"{kind}: {path}")
        except OSError as exc:
            remove_folders(created)
            return fail("report", f"cannot write --{kind} {target}: {os_error_text(exc)}")
    return 0

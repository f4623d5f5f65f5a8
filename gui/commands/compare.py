"""Compare two recorded sessions side by side.

    ringscope compare A.db B.db --html FILE [--pdf FILE] [--price-per-gpu-hour PRICE]
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
    remove_folders,
)
from ringscope.gui.core.extras import require
from ringscope.gui.core.ingest.session_reader import SessionFileError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``ringscope compare``."""
    parser.add_argument("session_a", metavar="A.db", help="first session file (A, e.g. before / DDP)")
    parser.add_argument("session_b", metavar="B.db", help="second session file (B, e.g. after / MirroredStrategy)")
    parser.add_argument("--html", type=output_file, metavar="FILE", help="self-contained HTML comparison")
    parser.add_argument("--pdf", type=output_file, metavar="FILE", help="PDF comparison")
    add_price_argument(parser, "each session's own")


def run(args: argparse.Namespace) -> int:
    """Write the comparison; exit 2 on a bad session file, an unwritable output or when no output was asked for."""
    from ringscope.gui.core.report.compare import compare_files

    if not args.html and not args.pdf:
        return fail("compare", "nothing to write; give --html FILE and/or --pdf FILE")
    if args.pdf:
        require("pdf", "--pdf")  # before any file is written
    targets = " and ".join(f"--{kind} {target}" for kind, target in (("html", args.html), ("pdf", args.pdf))
                           if target)
    created: list[Path] = []
    try:
        created = create_folders(Path(t).parent for t in (args.html, args.pdf) if t)
        comparison, written = compare_files(args.session_a, args.session_b, html_path=args.html,
                                            pdf_path=args.pdf, price_per_gpu_hour=args.price_per_gpu_hour)
    except SessionFileError as exc:
        remove_folders(created)
        return fail("compare", str(exc))
    except OSError as exc:
        remove_folders(created)
        return fail("compare", f"cannot write {targets}: {os_error_text(exc)}")
    for path in written:
        print(f"{path.suffix.lstrip('.')}: {path}")
    for metric in comparison.metrics:
        print(f"{metric.label:32} {metric.direction:>16}  better: {metric.better}")
    return 0


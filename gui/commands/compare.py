"""Compare two recorded sessions side by side: ``ringscope compare A.db B.db --html F [--pdf F]``."""

from __future__ import annotations

import argparse
import sys

from gui.core.ingest.session import SessionFileError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``ringscope compare``."""
    parser.add_argument("session_a", help="first session file (A, e.g. before / DDP)")
    parser.add_argument("session_b", help="second session file (B, e.g. after / MirroredStrategy)")
    parser.add_argument("--html", metavar="FILE", help="self-contained HTML comparison")
    parser.add_argument("--pdf", metavar="FILE", help="PDF comparison")
    parser.add_argument("--price-per-gpu-hour", type=float, default=None, metavar="P",
                        help="price per GPU-hour applied to both sessions (default: each session's own)")


def run(args: argparse.Namespace) -> int:
    """Write the comparison; exit 2 on a bad session file or when no output was asked for."""
    from gui.core.analysis.compare import compare_files

    if not args.html and not args.pdf:
        print("ringscope compare: nothing to write; give --html FILE and/or --pdf FILE", file=sys.stderr)
        return 2
    try:
        comparison, written = compare_files(args.session_a, args.session_b, html_path=args.html,
                                            pdf_path=args.pdf, price_per_gpu_hour=args.price_per_gpu_hour)
    except SessionFileError as exc:
        print(f"ringscope compare: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"ringscope compare: cannot write the comparison: {exc}", file=sys.stderr)
        return 1
    for path in written:
        print(f"{path.suffix.lstrip('.')}: {path}")
    for metric in comparison.metrics:
        print(f"{metric.label:32} {metric.direction:>16}  better: {metric.better}")
    return 0

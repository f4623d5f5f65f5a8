"""Report exports of a session: self-contained HTML, PDF, raw CSV and a Chrome/Perfetto trace.

This package owns turning a ``SessionData`` into files a user can open offline. Every export takes a progress
callback and a cancel flag, writes through a temporary file (a cancelled export leaves nothing), and never imports
Qt (PDF charts use matplotlib's object API, imported only when a PDF is written: HTML, CSV and traces need no
matplotlib). ``export`` is the one entry point the views and commands use; ``compare`` writes the pages of a
comparison of two sessions.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Final

from ringscope.gui.core.extras import require
from ringscope.gui.core.report.csv_export import write_csv
from ringscope.gui.core.report.html import render_html, write_html
from ringscope.gui.core.report.model import Report, build_report
from ringscope.gui.core.report.progress import CancelFlag, ExportCancelled, Progress, ProgressCallback
from ringscope.gui.core.report.trace import write_trace

EXPORT_KINDS: Final[tuple[str, ...]] = ("html", "pdf", "csv", "trace")


def export(report: Report | Sequence[Report], kind: str, path: str | Path, progress: ProgressCallback | None = None,
           cancel: CancelFlag | None = None) -> list[Path]:
    """Write one export (``kind`` in ``EXPORT_KINDS``; ``csv`` takes a directory). Returns the files written.

    Several reports (one per run of a session) make one HTML page or PDF with a part per run; CSV files go to one
    sub-folder per run and traces to one file per run (``trace-<run>.json``). Raises ``ExportCancelled`` when
    ``cancel.is_set()`` becomes true, leaving no output file.
    """
    tracker = Progress(progress, cancel)
    tracker(0.0, f"starting {kind} export")
    reports = [report] if isinstance(report, Report) else list(report)
    if kind == "html":
        return [write_html(reports, path, tracker)]
    if kind == "pdf":
        return [write_pdf(reports, path, tracker)]
    if kind not in ("csv", "trace"):
        raise ValueError(f"unknown export kind {kind!r}; choose one of {', '.join(EXPORT_KINDS)}")
    written: list[Path] = []
    for number, one in enumerate(reports):
        part = tracker.slice(number / len(reports), (number + 1) / len(reports))
        if kind == "csv":
            folder = Path(path) if len(reports) == 1 else Path(path) / _file_part(one.analysis.run_id)
            folder.mkdir(parents=True, exist_ok=True)
            written += write_csv(one.session, folder, part)
        else:
            target = Path(path)
            if len(reports) > 1:
                target = target.with_name(f"{target.stem}-{_file_part(one.analysis.run_id)}{target.suffix}")
            written.append(write_trace(one.session, target, part))
    return written


def write_pdf(report: Report | Sequence[Report], path: str | Path, progress: Progress | None = None) -> Path:
    """The PDF report (``report.pdf``). Needs matplotlib: raises ``MissingExtraError`` naming the extra without it."""
    require("pdf", "a PDF report")
    from ringscope.gui.core.report.pdf import write_pdf as write

    return write(report, path, progress)


def _file_part(run_id: str) -> str:
    """A run id as a safe file-name part."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in run_id)[:80] or "run"


__all__ = ["EXPORT_KINDS", "CancelFlag", "ExportCancelled", "Progress", "ProgressCallback", "Report",
           "build_report", "export", "render_html", "write_csv", "write_html", "write_pdf", "write_trace"]

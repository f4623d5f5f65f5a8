"""Report exports of a session: self-contained HTML, PDF, raw CSV and a Chrome/Perfetto trace.

This package owns turning a ``SessionData`` into files a user can open offline. Every export takes a progress
callback and a cancel flag, writes through a temporary file (a cancelled export leaves nothing), and never imports
Qt (charts use matplotlib's object API). ``export`` is the one entry point the views and commands use.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from gui.core.report.csv_export import write_csv
from gui.core.report.html import render_html, write_html
from gui.core.report.model import Report, build_report
from gui.core.report.pdf import write_pdf
from gui.core.report.progress import CancelFlag, ExportCancelled, Progress, ProgressCallback
from gui.core.report.trace import write_trace

EXPORT_KINDS: Final[tuple[str, ...]] = ("html", "pdf", "csv", "trace")


def export(report: Report, kind: str, path: str | Path, progress: ProgressCallback | None = None,
           cancel: CancelFlag | None = None) -> list[Path]:
    """Write one export (``kind`` in ``EXPORT_KINDS``; ``csv`` takes a directory). Returns the files written.

    Raises ``ExportCancelled`` when ``cancel.is_set()`` becomes true, leaving no output file.
    """
    tracker = Progress(progress, cancel)
    tracker(0.0, f"starting {kind} export")
    if kind == "html":
        return [write_html(report, path, tracker)]
    if kind == "pdf":
        return [write_pdf(report, path, tracker)]
    if kind == "csv":
        return write_csv(report.session, path, tracker)
    if kind == "trace":
        return [write_trace(report.session, path, tracker)]
    raise ValueError(f"unknown export kind {kind!r}; choose one of {', '.join(EXPORT_KINDS)}")


__all__ = ["EXPORT_KINDS", "CancelFlag", "ExportCancelled", "Progress", "ProgressCallback", "Report",
           "build_report", "export", "render_html", "write_csv", "write_html", "write_pdf", "write_trace"]

"""The PDF report: the same content as the HTML one, page by page, with matplotlib's PdfPages (no Qt).

Owns the page layout of the PDF: a text page (summary, straggler, cost, checkpoints, recommendations, data
quality) followed by the chart pages. Written to a temporary file and renamed, so a cancelled export leaves
nothing behind.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path

from matplotlib.backends.backend_pdf import PdfPages
from matplotlib.figure import Figure

from gui.core.report import charts
from gui.core.report.html import atomic_target
from gui.core.report.model import Report, Rows, checkpoint_rows, cost_rows, headline_rows, quality_rows
from gui.core.report.progress import Progress

PAGE_SIZE = (8.27, 11.69)  # A4 portrait, inches
LINES_PER_PAGE = 62


def write_pdf(report: Report | Sequence[Report], path: str | Path, progress: Progress | None = None) -> Path:
    """Write the PDF report and return its path; several reports (one per run) follow each other."""
    progress = progress or Progress()
    target = Path(path)
    reports = [report] if isinstance(report, Report) else list(report)
    pages: list[tuple[Report, str, object]] = []
    for one in reports:
        pages += [(one, "text", lines) for lines in _paginate(_text_lines(one))]
        pages += [(one, "chart", f) for f in (charts.step_breakdown_columns, charts.throughput_line,
                                              charts.rank_bars, charts.gpu_utilization)]
        pages.append((one, "cost", charts.cost_split))
    runs = ", ".join(r.analysis.run_id for r in reports)
    with atomic_target(target) as tmp, \
            PdfPages(tmp, metadata={"Title": f"Ringscope report {runs}", "Creator": "Ringscope"}) as pdf:
        for number, (one, kind, content) in enumerate(pages):
            progress(number / len(pages), f"page {number + 1} of {len(pages)}")
            if kind == "text":
                fig = _text_page(content)  # type: ignore[arg-type]
            elif kind == "cost":
                fig = content(one.cost)  # type: ignore[operator]
            else:
                fig = content(one.analysis)  # type: ignore[operator]
            pdf.savefig(fig)
    progress(1.0, "PDF written")
    return target


def _text_lines(report: Report) -> list[tuple[str, str]]:
    """(style, text) lines: style is "title", "heading" or "body"."""
    lines: list[tuple[str, str]] = [("title", f"Ringscope report — run {report.analysis.run_id or '(unnamed)'}"),
                                    ("body", "Where did the time and the money go?"), ("body", "")]

    def block(heading: str, rows: Rows) -> None:
        lines.append(("heading", heading))
        for key, value in rows:
            lines.extend(("body", part) for part in textwrap.wrap(f"{key}: {value}", 100, subsequent_indent="    "))
        lines.append(("body", ""))

    block("Summary", headline_rows(report))
    block("Cost", cost_rows(report))
    block("Checkpoints and work at risk", checkpoint_rows(report))
    recs = [(f"[{r.severity}] {r.title}", f"{r.advice} — {r.evidence}") for r in report.recommendations]
    block("Recommendations", recs or [("None", "no threshold crossed")])
    block("Data quality", quality_rows(report))
    return lines


def _paginate(lines: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    return [lines[i:i + LINES_PER_PAGE] for i in range(0, len(lines), LINES_PER_PAGE)] or [[]]


def _text_page(lines: list[tuple[str, str]]) -> Figure:
    fig = Figure(figsize=PAGE_SIZE)
    y = 0.96
    sizes = {"title": 16, "heading": 11.5, "body": 8}
    for style, text in lines:
        fig.text(0.07, y, text, fontsize=sizes[style], family="monospace" if style == "body" else "sans-serif",
                 weight="bold" if style != "body" else "normal", va="top")
        y -= 0.0145 if style == "body" else 0.022
    return fig

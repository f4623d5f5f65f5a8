"""The PDF report: A4 pages a team can attach to a ticket, with matplotlib's PdfPages (no Qt).

Owns what goes on which page: page 1 answers "is this run healthy?" (the verdict in one sentence, the run summary
as a table, the step-time breakdown), the next page holds the charts (throughput, per-rank breakdown, GPU
utilization or the statement that there is none, where the money went), then the tables (cost, checkpoints,
recommendations, data quality). Every page is A4 with the run id and "page i of n" in its footer. Written to a
temporary file and renamed, so a cancelled export leaves nothing behind.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ringscope.gui.core.report import charts
from ringscope.gui.core.report.html import atomic_target
from ringscope.gui.core.report.model import (
    Report,
    checkpoint_rows,
    cost_rows,
    duration_text,
    headline_rows,
    network_rows,
    quality_rows,
    verdict,
    when_text,
)
from ringscope.gui.core.report.pdf_layout import PAGE_SIZE, PageBook
from ringscope.gui.core.report.progress import Progress

__all__ = ["PAGE_SIZE", "write_pdf"]

_CHART_S = 0.24  # a time chart's height, as a fraction of the page


def write_pdf(report: Report | Sequence[Report], path: str | Path, progress: Progress | None = None) -> Path:
    """Write the PDF report and return its path; several reports (one per run) follow each other."""
    progress = progress or Progress()
    target = Path(path)
    reports = [report] if isinstance(report, Report) else list(report)
    book = PageBook("Ringscope report")
    for number, one in enumerate(reports):
        progress(0.3 * number / len(reports), f"laying out run {one.analysis.run_id or '(unnamed)'}")
        _run_pages(book, one)
    pages = book.finish()
    runs = ", ".join(r.analysis.run_id for r in reports)
    from matplotlib.backends.backend_pdf import PdfPages

    with atomic_target(target) as tmp, \
            PdfPages(tmp, metadata={"Title": f"Ringscope report {runs}", "Creator": "Ringscope"}) as pdf:
        for number, fig in enumerate(pages):
            progress(0.3 + 0.7 * number / len(pages), f"page {number + 1} of {len(pages)}")
            pdf.savefig(fig)
    progress(1.0, "PDF written")
    return target


def _run_pages(book: PageBook, report: Report) -> None:
    """One run's pages: the first page, the chart page, the tables."""
    a = report.analysis
    run = a.run_id or "(unnamed)"
    book.new_page(footer=f"run {run}")
    book.title(f"Ringscope report — run {run}",
               f"{a.framework} / {a.strategy} · {len(a.ranks)} rank(s) · started {when_text(a.start_s)} · "
               f"{duration_text(a.duration_s)}")
    book.paragraph(verdict(report), 10.5, weight="bold", box="#eef3f8")
    book.heading("Run summary")
    book.table(headline_rows(report))
    book.heading("Where the step time went", keep_with=0.2)
    book.phase_legend()
    book.chart(max(0.2, min(0.36, book.room())), lambda ax: charts.draw_step_breakdown(ax, a, legend=False))

    book.new_page()
    book.heading("Charts", keep_with=0.2)
    book.phase_legend()
    book.chart(0.2, lambda ax: charts.draw_throughput(ax, a))
    shown = len(charts.ranks_to_show(a)[0])
    book.chart(min(0.42, 0.09 + 0.011 * max(shown, 2)), lambda ax: charts.draw_rank_bars(ax, a, legend=False),
               left=0.14)
    if a.gpus:
        gpus = min(len(a.gpus), charts.MAX_RANK_BARS)
        book.chart(min(0.42, 0.09 + 0.011 * max(gpus, 2)), lambda ax: charts.draw_gpu_utilization(ax, a), left=0.24)
    else:
        book.heading("GPUs", keep_with=0.02)
        book.paragraph(a.gpu_statement)
    book.chart(0.13, lambda ax: charts.draw_cost_split(ax, report.cost), left=0.11, right=0.66)

    if links := network_rows(a):
        book.heading("Network (per host)")
        book.table(links)
    for heading, rows in (("Cost", cost_rows(report)), ("Checkpoints and work at risk", checkpoint_rows(report)),
                          ("Recommendations", _recommendation_rows(report)), ("Data quality", quality_rows(report))):
        book.heading(heading)
        book.table(rows)


def _recommendation_rows(report: Report) -> list[tuple[str, str]]:
    if not report.recommendations:
        return [("None", "no threshold crossed: nothing to recommend")]
    return [(f"[{r.severity}] {r.title}", f"{r.advice} — {r.evidence}") for r in report.recommendations]

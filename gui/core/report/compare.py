"""The pages of a comparison of two sessions (``ringscope.gui.core.analysis.compare``): HTML (self-contained, like
the report) and an A4 PDF, with A and B side by side on one scale; ``compare_files`` loads, analyzes, compares and
writes them (the CLI's and the window's one path).

Every value is HTML-escaped; pages are written through a temporary file (a cancelled export leaves nothing). Must
never import Qt; matplotlib is imported only when a PDF is written (the pdf extra).
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ringscope.gui.core.analysis.compare import AnalyzedSession, Comparison, MetricDelta, compare
from ringscope.gui.core.extras import require
from ringscope.gui.core.ingest.session_reader import load
from ringscope.gui.core.report import interactive
from ringscope.gui.core.report.html import STYLE, atomic_target, legend_html, write_text_atomically
from ringscope.gui.core.report.interactive import escape
from ringscope.gui.core.report.model import build_report, duration_text, straggler_text
from ringscope.gui.core.report.progress import CancelFlag, Progress, ProgressCallback

if TYPE_CHECKING:  # matplotlib is imported only when a PDF is written (the pdf extra)
    from matplotlib.axes import Axes


def compare_files(
    session_a: str | Path,
    session_b: str | Path,
    *,
    html_path: str | Path | None = None,
    pdf_path: str | Path | None = None,
    price_per_gpu_hour: float | None = None,
    progress: ProgressCallback | None = None,
    cancel: CancelFlag | None = None,
) -> tuple[Comparison, list[Path]]:
    """Load and analyze two session files, compare them and write the pages asked for (the CLI's and the
    window's one path). Raises ``SessionFileError`` for a bad file, ``ExportCancelled`` when ``cancel`` is set
    (nothing written)."""
    tracker = Progress(progress, cancel)
    reports = []
    for number, path in enumerate((session_a, session_b)):
        tracker(0.3 * number, f"loading {Path(path).name}")
        reports.append(build_report(load(path), price_per_gpu_hour))
    comparison = compare(reports[0], reports[1], Path(session_a).name, Path(session_b).name)
    written: list[Path] = []
    outputs = [(write, target) for write, target in ((write_compare_html, html_path), (write_compare_pdf, pdf_path))
               if target is not None]
    for number, (write, target) in enumerate(outputs):
        share = 0.4 / len(outputs)
        written.append(write(comparison, target, tracker.slice(0.6 + share * number, 0.6 + share * (number + 1))))
    tracker(1.0, "comparison written")
    return comparison, written


def render_compare_html(comparison: Comparison, progress: Progress | None = None) -> str:
    """The comparison page: identity, figures table with units and direction, A and B charts side by side on one
    scale (titled "A: ..." and "B: ..."), both straggler lines."""
    progress = progress or Progress()
    c = comparison
    a_head, b_head = f"A: {c.label_a}", f"B: {c.label_b}"
    rows = "".join(
        f"<tr><th>{escape(m.label)}</th><td>{escape(m.unit)}</td><td>{_num(m.a)}</td>"
        f"<td>{_num(m.b)}</td><td>{escape(m.direction)}</td><td>{escape(_better(m))}</td></tr>"
        for m in c.metrics)
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>Ringscope comparison</title>"
             f"<style>{STYLE}{_FIGURES_CSS}</style>{interactive.head_assets()}</head><body>"
             "<h1>Ringscope comparison</h1>",
             f"<p class='sub'>{escape(a_head)} vs {escape(b_head)}</p>", legend_html(),
             f"<section id='sessions'><h2>Sessions</h2><table><tr><th>{escape(a_head)}</th><td>{escape(_identity(c.a))}"
             f"</td></tr><tr><th>{escape(b_head)}</th><td>{escape(_identity(c.b))}</td></tr></table></section>",
             "<section id='figures'><h2>Figures</h2><table><tr><th>Figure</th><th>Unit</th>"
             f"<th>{escape(a_head)}</th><th>{escape(b_head)}</th><th>B vs A</th><th>Better</th></tr>{rows}</table>"
             "<p class='evidence'>\"Better\" ignores differences under 1 %; \"no data\": that session has no steps "
             "(or their phases were not measured).</p></section>",
             f"<section id='stragglers'><h2>Stragglers</h2><p><b>{escape(a_head)}</b> — "
             f"{escape(straggler_text(c.a.analysis))}</p><p><b>{escape(b_head)}</b> — "
             f"{escape(straggler_text(c.b.analysis))}</p></section>"]
    progress(0.3, "building the charts")
    step_top = 1.1 * max(interactive.stack_top_ms(r.analysis) for r in (c.a, c.b))
    rate_top = 1.15 * max(interactive.throughput_top(r.analysis) for r in (c.a, c.b))
    parts.append(_pair_section(
        "charts-time", "Step time, A and B on one scale",
        "Mean time per step and phase per time bucket; hover for values, drag to zoom (double-click resets), click "
        "a legend entry to hide a phase.",
        [(head, interactive.step_breakdown_chart(r.analysis, f"{key}-breakdown", ymax=step_top or None))
         for key, head, r in (("a", a_head, c.a), ("b", b_head, c.b))]))
    parts.append(_pair_section(
        "charts-throughput", "Throughput (all ranks), A and B on one scale", "",
        [(head, interactive.throughput_chart(r.analysis, f"{key}-throughput", ymax=rate_top or None,
                                             label=f"{head[:1]}: throughput"))
         for key, head, r in (("a", a_head, c.a), ("b", b_head, c.b))]))
    progress(0.7, "building the per-rank tables")
    parts.append(_pair_section(
        "ranks", "Per-rank breakdown, A and B", "Steady-state milliseconds per step; click a column to sort.",
        [(head, interactive.rank_table(r.analysis)) for head, r in ((a_head, c.a), (b_head, c.b))]))
    parts.append(interactive.body_scripts() + "</body></html>")
    progress(1.0, "comparison ready")
    return "\n".join(parts)


def _pair_section(section_id: str, title: str, caption: str, halves: list[tuple[str, str]]) -> str:
    """A section with A's and B's part side by side, each headed with its label."""
    cells = "".join(f"<div><h3>{escape(head)}</h3>{body}</div>" for head, body in halves)
    note = f"<p class='evidence'>{escape(caption)}</p>" if caption else ""
    return f"<section id='{section_id}'><h2>{escape(title)}</h2>{note}<div class='pair'>{cells}</div></section>"


def write_compare_html(comparison: Comparison, path: str | Path, progress: Progress | None = None) -> Path:
    """Write the comparison page (atomically)."""
    return write_text_atomically(Path(path), render_compare_html(comparison, progress))


def write_compare_pdf(comparison: Comparison, path: str | Path, progress: Progress | None = None) -> Path:
    """Write the comparison as an A4 PDF (atomically): the sessions, the figures table with units and the
    stragglers, then A and B side by side on one scale: step-time breakdown, throughput, per-rank breakdown."""
    require("pdf", "a PDF comparison")
    from matplotlib.backends.backend_pdf import PdfPages

    from ringscope.gui.core.report import charts
    from ringscope.gui.core.report.pdf_layout import LEFT, RIGHT, Column, PageBook

    progress = progress or Progress()
    c = comparison
    a_head, b_head = f"A: {c.label_a}", f"B: {c.label_b}"
    book = PageBook("Ringscope comparison")
    book.new_page(footer=f"{a_head} vs {b_head}")
    book.title("Ringscope comparison", f"{a_head} vs {b_head}")
    book.heading("Sessions")
    book.table([(a_head, _identity(c.a)), (b_head, _identity(c.b))], [Column("", 0.3, bold=True),
                                                                        Column("", RIGHT - LEFT - 0.3)])
    book.heading("Figures")
    columns = [Column("Figure", 0.25, bold=True), Column("Unit", 0.1), Column(a_head, 0.13, "right"),
               Column(b_head, 0.13, "right"), Column("B vs A", 0.15), Column("Better", 0.12)]
    book.table([(m.label, m.unit, _num(m.a), _num(m.b), m.direction, _better(m)) for m in c.metrics], columns,
               header=True)
    book.paragraph("\"Better\" ignores differences under 1 %. \"no data\": that session has no steps (or their "
                   "phases were not measured).", 7.5, color="#555")
    book.heading("Stragglers")
    book.table([(a_head, straggler_text(c.a.analysis)), (b_head, straggler_text(c.b.analysis))],
               [Column("", 0.3, bold=True), Column("", RIGHT - LEFT - 0.3)])
    progress(0.2, "drawing charts")
    book.new_page()
    book.heading("A and B side by side, on one scale", keep_with=0.3)
    book.phase_legend()
    book.chart_pair(0.27, *_pair_draws(c, "breakdown"), sharey=True)
    book.chart(0.2, _draw_throughputs(c))
    ranks = max(len(charts.ranks_to_show(r.analysis)[0]) for r in (c.a, c.b))
    book.chart_pair(min(0.45, 0.09 + 0.011 * max(ranks, 2)), *_pair_draws(c, "ranks"), sharey=False, left=0.12,
                    gap=0.1)
    pages = book.finish()
    target = Path(path)
    with atomic_target(target) as tmp, PdfPages(tmp, metadata={"Title": f"Ringscope comparison {a_head} vs {b_head}",
                                                              "Creator": "Ringscope"}) as pdf:
        for number, fig in enumerate(pages):
            progress(0.3 + 0.7 * number / len(pages), f"page {number + 1} of {len(pages)}")
            pdf.savefig(fig)
    progress(1.0, "comparison PDF written")
    return target


_FIGURES_CSS = ("#figures td{white-space:nowrap}#figures td:nth-child(3),#figures td:nth-child(4){text-align:right}"
                ".pair{display:grid;grid-template-columns:minmax(0,1fr) minmax(0,1fr);gap:1.2em}"
                ".pair h3{margin:.3em 0;overflow-wrap:anywhere}")

RUN_COLORS: tuple[str, str] = ("#222222", "#8e44ad")
"""A's and B's line colors (phase colors are taken by the phases)."""


def _identity(report: AnalyzedSession) -> str:
    a = report.analysis
    if not a.steps_total:
        return f"run {a.run_id or '(unnamed)'}: no data (no steps recorded)"
    return (f"run {a.run_id or '(unnamed)'} — {a.framework} / {a.strategy}, {len(a.ranks)} rank(s), "
            f"{duration_text(a.duration_s)}, {a.steps_total:,} steps")


def _better(metric: MetricDelta) -> str:
    """The winner, or why there is none."""
    if metric.lower_is_better is None:
        return "—"
    return "no data" if metric.a is None or metric.b is None else metric.better


def _wrap(text: str, width: int) -> str:
    """A long label on several lines instead of cut."""
    return "\n".join(textwrap.wrap(text, width)) or text


def _pair_draws(c: Comparison, kind: str) -> tuple[Callable[[Axes], None], Callable[[Axes], None]]:
    """Drawing functions of A's and B's chart of one kind, titled "A: ..." and "B: ..."."""
    from ringscope.gui.core.report import charts

    def draw(report: AnalyzedSession, head: str) -> Callable[[Axes], None]:
        title = _wrap(head, 48)
        if kind == "breakdown":
            return lambda ax: charts.draw_step_breakdown(ax, report.analysis, title=title, legend=False)
        return lambda ax: charts.draw_rank_bars(ax, report.analysis, title=title, legend=False)
    return draw(c.a, f"A: {c.label_a}"), draw(c.b, f"B: {c.label_b}")


def _draw_throughputs(c: Comparison) -> Callable[[Axes], None]:
    """A's and B's throughput on one axes, with a legend that says which is which."""
    from ringscope.gui.core.report import charts

    def draw(ax: Axes) -> None:
        for report, head, color in ((c.a, f"A: {c.label_a}", RUN_COLORS[0]), (c.b, f"B: {c.label_b}",
                                                                               RUN_COLORS[1])):
            charts.draw_throughput(ax, report.analysis, title="Throughput (all ranks), A and B", color=color,
                                   label=_wrap(head, 40))
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, frameon=False, loc="lower right")
    return draw


def _num(value: float | None) -> str:
    return "no data" if value is None else f"{value:,.3g}" if abs(value) < 100 else f"{value:,.1f}"

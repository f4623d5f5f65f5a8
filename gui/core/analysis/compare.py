"""Two sessions side by side (DDP vs MirroredStrategy, before vs after a fix): figures, differences, direction.

This module owns which figures are compared and which direction is better for each. It works on two ``Report``
bundles and renders the comparison as HTML (self-contained, like the report) or PDF. Must never import Qt.
"""

from __future__ import annotations

import html
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ringscope.gui.core.extras import require
from ringscope.gui.core.ingest.session import load
from ringscope.gui.core.phases import PHASES
from ringscope.gui.core.report import build_report, interactive
from ringscope.gui.core.report.html import STYLE, atomic_target, legend_html, write_text_atomically
from ringscope.gui.core.report.model import Report, duration_text, straggler_text
from ringscope.gui.core.report.progress import CancelFlag, Progress, ProgressCallback

if TYPE_CHECKING:  # matplotlib is imported only when a PDF is written (the pdf extra)
    from matplotlib.axes import Axes


@dataclass(frozen=True, slots=True)
class MetricDelta:
    """One compared figure. ``better`` is "A", "B" or "same"; ``lower_is_better`` None for neutral figures."""

    key: str
    label: str
    unit: str
    a: float | None
    b: float | None
    lower_is_better: bool | None

    @property
    def delta(self) -> float | None:
        """B − A."""
        return None if self.a is None or self.b is None else self.b - self.a

    @property
    def delta_pct(self) -> float | None:
        """(B − A) / A in percent, None when A is 0 or missing."""
        d = self.delta
        return None if d is None or not self.a else 100.0 * d / abs(self.a)

    @property
    def better(self) -> str:
        """Which session is better on this figure (within 1 % counts as the same)."""
        d = self.delta
        if d is None or self.lower_is_better is None:
            return "n/a"
        scale = max(abs(self.a or 0.0), abs(self.b or 0.0), 1e-12)
        if abs(d) / scale < 0.01:
            return "same"
        return "A" if (d > 0) == self.lower_is_better else "B"

    @property
    def direction(self) -> str:
        """The change in words: "up 12.0 %", "down 3.1 %", "unchanged"."""
        d = self.delta
        if d is None:
            return "no data" if self.a is None or self.b is None else "n/a"
        pct = self.delta_pct
        if d == 0 or (pct is not None and abs(pct) < 0.05):
            return "unchanged"
        amount = f"{abs(pct):.1f} %" if pct is not None else f"{abs(d):,.3g} {self.unit}"
        return ("up " if d > 0 else "down ") + amount


@dataclass(frozen=True, slots=True)
class Comparison:
    """Two reports and their compared figures."""

    a: Report
    b: Report
    label_a: str
    label_b: str
    metrics: list[MetricDelta]


def compare(a: Report, b: Report, label_a: str = "A", label_b: str = "B") -> Comparison:
    """Compare two analyzed sessions on shares, step time, throughput, cost, stall and straggler.

    A session without steps has no step figures: they are ``None`` ("no data"), never 0, and name no winner.
    """
    unit = a.analysis.throughput_unit
    metrics = [
        MetricDelta("step_s", "Mean step time (steady)", "ms", _step(a, lambda r: r.analysis.overall.step_s * 1e3),
                    _step(b, lambda r: r.analysis.overall.step_s * 1e3), True),
        MetricDelta("throughput", "Throughput", unit, a.analysis.throughput, b.analysis.throughput
                    if b.analysis.throughput_unit == unit else None, False),
    ]
    for phase in PHASES:
        metrics.append(MetricDelta(
            f"share_{phase.name}", f"{phase.label} share", "% of step",
            _measured(a, _share_of(phase.name)), _measured(b, _share_of(phase.name)),
            phase.name != "compute"))
    metrics += [
        MetricDelta("idle_share", "Idle share", "% of step",
                    _measured(a, _idle), _measured(b, _idle), True),
        MetricDelta("stall_ms", "AllReduce stall per step", "ms",
                    _measured(a, lambda r: r.analysis.overall.seconds["comm_exposed"] * 1e3),
                    _measured(b, lambda r: r.analysis.overall.seconds["comm_exposed"] * 1e3), True),
        MetricDelta("straggler_gap_ms", "Straggler lateness", "ms", _step(a, _gap_ms), _step(b, _gap_ms), True),
        MetricDelta("cost_total", "Cost so far", a.cost.currency, a.cost.cost_total, b.cost.cost_total, None),
        MetricDelta("waste_share", "Cost of waiting share", "% of cost",
                    _measured(a, _waste), _measured(b, _waste), True),
        MetricDelta("cost_per_step", "Cost per 1000 steps", a.cost.currency, _per_kstep(a), _per_kstep(b), True),
        MetricDelta("cost_per_ksample", "Cost per 1000 samples", a.cost.currency, _per_ksample(a), _per_ksample(b),
                    True),
        MetricDelta("ranks", "Ranks", "ranks", float(len(a.analysis.ranks)), float(len(b.analysis.ranks)), None),
    ]
    return Comparison(a, b, label_a, label_b, metrics)


def _step(report: Report, figure: Callable[[Report], float]) -> float | None:
    """A step figure, or None when the session has no steps."""
    return figure(report) if report.analysis.overall.steps else None


def _idle(report: Report) -> float:
    return 100 * report.analysis.overall.idle_share


def _waste(report: Report) -> float:
    return 100 * report.cost.waste_share


def _share_of(phase: str) -> Callable[[Report], float]:
    """A phase's share of step time in percent."""
    return lambda report: 100 * report.analysis.overall.shares[phase]


def _measured(report: Report, figure: Callable[[Report], float]) -> float | None:
    """A phase figure, or None when there are no steps or their phases were not measured (Keras fit)."""
    return figure(report) if report.analysis.overall.phases_measured else None


def render_compare_html(comparison: Comparison, progress: Progress | None = None) -> str:
    """The comparison page: identity, figures table with units and direction, A and B charts side by side on one
    scale (titled "A: ..." and "B: ..."), both straggler lines."""
    progress = progress or Progress()
    c = comparison
    a_head, b_head = f"A: {c.label_a}", f"B: {c.label_b}"
    rows = "".join(
        f"<tr><th>{_e(m.label)}</th><td>{_e(m.unit)}</td><td>{_num(m.a)}</td>"
        f"<td>{_num(m.b)}</td><td>{_e(m.direction)}</td><td>{_e(_better(m))}</td></tr>"
        for m in c.metrics)
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>Ringscope comparison</title>"
             f"<style>{STYLE}{_FIGURES_CSS}</style>{interactive.head_assets()}</head><body>"
             "<h1>Ringscope comparison</h1>",
             f"<p class='sub'>{_e(a_head)} vs {_e(b_head)}</p>", legend_html(),
             f"<section id='sessions'><h2>Sessions</h2><table><tr><th>{_e(a_head)}</th><td>{_e(_identity(c.a))}"
             f"</td></tr><tr><th>{_e(b_head)}</th><td>{_e(_identity(c.b))}</td></tr></table></section>",
             "<section id='figures'><h2>Figures</h2><table><tr><th>Figure</th><th>Unit</th>"
             f"<th>{_e(a_head)}</th><th>{_e(b_head)}</th><th>B vs A</th><th>Better</th></tr>{rows}</table>"
             "<p class='evidence'>\"Better\" ignores differences under 1 %; \"no data\": that session has no steps "
             "(or their phases were not measured).</p></section>",
             f"<section id='stragglers'><h2>Stragglers</h2><p><b>{_e(a_head)}</b> — "
             f"{_e(straggler_text(c.a.analysis))}</p><p><b>{_e(b_head)}</b> — {_e(straggler_text(c.b.analysis))}"
             "</p></section>"]
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
    cells = "".join(f"<div><h3>{_e(head)}</h3>{body}</div>" for head, body in halves)
    note = f"<p class='evidence'>{_e(caption)}</p>" if caption else ""
    return f"<section id='{section_id}'><h2>{_e(title)}</h2>{note}<div class='pair'>{cells}</div></section>"


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


_FIGURES_CSS = ("#figures td{white-space:nowrap}#figures td:nth-child(3),#figures td:nth-child(4){text-align:right}"
                ".pair{display:grid;grid-template-columns:minmax(0,1fr) minmax(0,1fr);gap:1.2em}"
                ".pair h3{margin:.3em 0;overflow-wrap:anywhere}")

RUN_COLORS: tuple[str, str] = ("#222222", "#8e44ad")
"""A's and B's line colors (phase colors are taken by the phases)."""


def _identity(report: Report) -> str:
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

    def draw(report: Report, head: str) -> Callable[[Axes], None]:
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


def _gap_ms(report: Report) -> float:
    """The straggler's lateness (0 when none was flagged: every rank on time)."""
    s = report.analysis.straggler
    return s.gap_s * 1e3 if s is not None else 0.0


def _per_kstep(report: Report) -> float | None:
    steps = report.analysis.steps_total / max(len(report.analysis.ranks), 1)
    return 1000 * report.cost.cost_total / steps if steps else None


def _per_ksample(report: Report) -> float | None:
    """Cost per 1000 samples (all ranks): the figure that compares runs of different batch sizes or rank counts."""
    samples = report.session.steps["samples"]
    total = float(np.nansum(samples)) if len(samples) and not np.isnan(samples).all() else 0.0
    return 1000 * report.cost.cost_total / total if total > 0 else None


def _num(value: float | None) -> str:
    return "no data" if value is None else f"{value:,.3g}" if abs(value) < 100 else f"{value:,.1f}"


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)

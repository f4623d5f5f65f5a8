"""Two sessions side by side (DDP vs MirroredStrategy, before vs after a fix): figures, differences, direction.

This module owns which figures are compared and which direction is better for each. It works on two ``Report``
bundles and renders the comparison as HTML (self-contained, like the report) or PDF. Must never import Qt.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_pdf import PdfPages
from matplotlib.figure import Figure

from gui.core.ingest.session import load
from gui.core.phases import PHASES
from gui.core.report import build_report, charts
from gui.core.report.html import STYLE, atomic_target, legend_html, write_text_atomically
from gui.core.report.model import Report, straggler_text
from gui.core.report.progress import CancelFlag, Progress, ProgressCallback


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
            return "n/a"
        pct = self.delta_pct
        if d == 0 or (pct is not None and abs(pct) < 0.05):
            return "unchanged"
        amount = f"{abs(pct):.1f} %" if pct is not None else f"{abs(d):g} {self.unit}"
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
    """Compare two analyzed sessions on shares, step time, throughput, cost, stall and straggler."""
    metrics = [
        MetricDelta("step_s", "Mean step time (steady)", "ms", a.analysis.overall.step_s * 1e3,
                    b.analysis.overall.step_s * 1e3, True),
        MetricDelta("throughput", f"Throughput ({a.analysis.throughput_unit})", a.analysis.throughput_unit,
                    a.analysis.throughput, b.analysis.throughput
                    if b.analysis.throughput_unit == a.analysis.throughput_unit else None, False),
    ]
    for phase in PHASES:
        metrics.append(MetricDelta(f"share_{phase.name}", f"{phase.label} share", "% of step",
                                   100 * a.analysis.overall.shares[phase.name],
                                   100 * b.analysis.overall.shares[phase.name], phase.name != "compute"))
    metrics += [
        MetricDelta("idle_share", "Idle share", "% of step", 100 * a.analysis.overall.idle_share,
                    100 * b.analysis.overall.idle_share, True),
        MetricDelta("stall_ms", "AllReduce stall per step", "ms", a.analysis.overall.seconds["comm_exposed"] * 1e3,
                    b.analysis.overall.seconds["comm_exposed"] * 1e3, True),
        MetricDelta("straggler_gap_ms", "Straggler lateness", "ms", _gap_ms(a), _gap_ms(b), True),
        MetricDelta("cost_total", "Cost so far", a.cost.currency, a.cost.cost_total, b.cost.cost_total, None),
        MetricDelta("waste_share", "Cost of waiting share", "% of cost", 100 * a.cost.waste_share,
                    100 * b.cost.waste_share, True),
        MetricDelta("cost_per_step", "Cost per 1000 steps", a.cost.currency, _per_kstep(a), _per_kstep(b), True),
        MetricDelta("cost_per_ksample", "Cost per 1000 samples", a.cost.currency, _per_ksample(a), _per_ksample(b),
                    True),
        MetricDelta("ranks", "Ranks", "", float(len(a.analysis.ranks)), float(len(b.analysis.ranks)), None),
    ]
    return Comparison(a, b, label_a, label_b, metrics)


def render_compare_html(comparison: Comparison, progress: Progress | None = None) -> str:
    """The comparison page: identity, figures table with direction, both per-rank charts, both straggler lines."""
    progress = progress or Progress()
    c = comparison
    ida = f"{c.a.analysis.framework}/{c.a.analysis.strategy}, {len(c.a.analysis.ranks)} ranks"
    idb = f"{c.b.analysis.framework}/{c.b.analysis.strategy}, {len(c.b.analysis.ranks)} ranks"
    rows = "".join(
        f"<tr><th>{_e(m.label)}</th><td>{_num(m.a)}</td><td>{_num(m.b)}</td><td>{_e(m.direction)}</td>"
        f"<td>{_e(m.better)}</td></tr>" for m in c.metrics)
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>Ringscope comparison</title>"
             f"<style>{STYLE}</style></head><body><h1>Ringscope comparison</h1>", legend_html(),
             f"<section id='sessions'><h2>Sessions</h2><table><tr><th>A: {_e(c.label_a)}</th><td>{_e(ida)}</td></tr>"
             f"<tr><th>B: {_e(c.label_b)}</th><td>{_e(idb)}</td></tr></table></section>",
             "<section id='figures'><h2>Figures</h2><table><tr><th>Figure</th><th>A</th><th>B</th>"
             f"<th>B vs A</th><th>Better</th></tr>{rows}</table></section>",
             f"<section id='stragglers'><h2>Stragglers</h2><p>A: {_e(straggler_text(c.a.analysis))}</p>"
             f"<p>B: {_e(straggler_text(c.b.analysis))}</p></section>"]
    for number, (label, report) in enumerate(((c.label_a, c.a), (c.label_b, c.b))):
        progress(0.2 + 0.4 * number, f"drawing charts of {label}")
        parts.append(f"<section id='charts-{'ab'[number]}'><h2>{_e(label)}</h2>"
                     + charts.to_svg(charts.rank_bars(report.analysis))
                     + charts.to_svg(charts.step_breakdown_columns(report.analysis)) + "</section>")
    parts.append("</body></html>")
    progress(1.0, "comparison ready")
    return "\n".join(parts)


def write_compare_html(comparison: Comparison, path: str | Path, progress: Progress | None = None) -> Path:
    """Write the comparison page (atomically)."""
    return write_text_atomically(Path(path), render_compare_html(comparison, progress))


def write_compare_pdf(comparison: Comparison, path: str | Path, progress: Progress | None = None) -> Path:
    """Write the comparison as a PDF (atomically): a table page, then each session's per-rank and step-time
    charts."""
    progress = progress or Progress()
    target = Path(path)
    with atomic_target(target) as tmp, PdfPages(tmp) as pdf:
        pdf.savefig(_table_page(comparison))
        for number, report in enumerate((comparison.a, comparison.b)):
            progress(0.2 + 0.4 * number, "drawing charts")
            pdf.savefig(charts.rank_bars(report.analysis))
            pdf.savefig(charts.step_breakdown_columns(report.analysis))
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


def _table_page(c: Comparison) -> Figure:
    fig = Figure(figsize=(8.27, 11.69))
    fig.text(0.07, 0.96, "Ringscope comparison", fontsize=16, weight="bold", va="top")
    fig.text(0.07, 0.92, f"A: {c.label_a}\nB: {c.label_b}", fontsize=9, va="top", family="monospace")
    y = 0.86
    fig.text(0.07, y, f"{'Figure':34} {'A':>12} {'B':>12}  {'B vs A':14} Better", fontsize=8.5,
             family="monospace", weight="bold", va="top")
    for m in c.metrics:
        y -= 0.018
        fig.text(0.07, y, f"{m.label[:34]:34} {_num(m.a):>12} {_num(m.b):>12}  {m.direction:14} {m.better}",
                 fontsize=8.5, family="monospace", va="top")
    return fig


def _gap_ms(report: Report) -> float:
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
    return "n/a" if value is None else f"{value:,.3g}" if abs(value) < 100 else f"{value:,.1f}"


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)

"""``sweep.pdf``: the sweep on A4 pages (``ringscope.gui.core.report.pdf_layout``), and its charts drawn with
matplotlib.

Page 1 answers "which framework, on how many ranks?": the recommendation, its evidence, the equal-footing statement,
throughput against ranks with the ideal linear line and the scaling efficiency. Then the phase shares and the cost
per 1000 samples of each configuration, the figures table and how they were measured. Never pyplot, never Qt.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ringscope.gui.core.phases import COMM_EXPOSED, COMPUTE, PHASE_BY_NAME
from ringscope.gui.core.report.charts import no_data, side_legend, stacked_share_bars, style_axes
from ringscope.gui.core.report.html import atomic_target
from ringscope.gui.core.report.pdf_layout import LEFT, RIGHT, Column, PageBook
from ringscope.gui.core.sweep.advice import money
from ringscope.gui.core.sweep.analysis import SweepRow
from ringscope.gui.core.sweep.plan import SweepPlan
from ringscope.gui.core.sweep.report import (
    FRAMEWORK_COLORS,
    IDEAL_DASH,
    SHARE_PHASES,
    SweepReport,
    row_value,
    throughput_unit,
)

DOCUMENT = "Ringscope scaling sweep"


# ---- Public API ----------------------------------------------------------------------------------------------------


def write_pdf(report: SweepReport, path: str | Path) -> Path:
    """Write ``sweep.pdf`` (atomically) and return its path."""
    from matplotlib.backends.backend_pdf import PdfPages

    pages = _pages(report)
    target = Path(path)
    with atomic_target(target) as tmp, PdfPages(tmp, metadata={"Title": DOCUMENT, "Creator": "Ringscope"}) as pdf:
        for fig in pages:
            pdf.savefig(fig)
    return target


def draw_throughput(ax: Axes, rows: Sequence[SweepRow], plan: SweepPlan) -> None:
    """Samples/s (steps/s for a script without sample counts) against ranks per framework, each with its dashed
    ideal line N x throughput(1)."""
    ax.set_title("Throughput vs ranks (dashed: ideal linear)", fontsize=9, loc="left")
    ax.set_xlabel("ranks", fontsize=8)
    ax.set_ylabel(f"{throughput_unit(rows)} (all ranks)", fontsize=8)
    if not any(row.measured for row in rows):
        no_data(ax)
        return
    ranks = np.array(plan.ranks, dtype=np.float64)
    for framework in plan.frameworks:
        color = FRAMEWORK_COLORS.get(framework, COMPUTE.color)
        values = np.array([row_value(rows, framework, n, "throughput") for n in plan.ranks], dtype=np.float64)
        ax.plot(ranks, values, color=color, marker="o", label=f"{framework} measured")
        base = row_value(rows, framework, 1, "throughput")
        if base is not None:
            ax.plot(ranks, ranks * base, color=color, linestyle=(0, tuple(IDEAL_DASH)), linewidth=1,
                    label=f"{framework} ideal")
    ax.set_xticks(ranks, [str(n) for n in plan.ranks])
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7, frameon=False, loc="upper left")
    style_axes(ax)


def draw_efficiency(ax: Axes, rows: Sequence[SweepRow], plan: SweepPlan) -> None:
    """Scaling efficiency (%) against ranks per framework, with the 100 % line."""
    ax.set_title("Scaling efficiency: throughput(N) / (N x throughput(1))", fontsize=9, loc="left")
    ax.set_xlabel("ranks", fontsize=8)
    ax.set_ylabel("efficiency (%)", fontsize=8)
    if not any(row.efficiency is not None for row in rows):
        no_data(ax)
        return
    ranks = np.array(plan.ranks, dtype=np.float64)
    ax.axhline(100, color="#888", linestyle=(0, tuple(IDEAL_DASH)), linewidth=1, label="linear (100 %)")
    for framework in plan.frameworks:
        values = np.array([row_value(rows, framework, n, "efficiency") for n in plan.ranks], dtype=np.float64) * 100
        ax.plot(ranks, values, color=FRAMEWORK_COLORS.get(framework, COMPUTE.color), marker="o", label=framework)
        for x, y in zip(ranks, values, strict=True):
            if np.isfinite(y):
                ax.annotate(f"{y:.0f} %", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
    top = max(100.0, *(100 * (row.efficiency or 0) for row in rows))
    ax.set_ylim(0, top * 1.15)
    ax.set_xticks(ranks, [str(n) for n in plan.ranks])
    ax.legend(fontsize=7, frameon=False, loc="lower left")
    style_axes(ax)


def draw_phase_shares(ax: Axes, rows: Sequence[SweepRow]) -> None:
    """One stacked horizontal bar per configuration: share of the steady step in each phase."""
    ax.set_title("Share of the steady-state step in each phase, per configuration", fontsize=9, loc="left")
    ax.set_xlabel("share of step time (%)", fontsize=8)
    ax.set_xlim(0, 100)
    if not rows:
        no_data(ax)
        return
    stacked_share_bars(ax, [row.label if row.measured else f"{row.label} (no data)" for row in rows],
                       [(PHASE_BY_NAME[phase], np.array([getattr(row, name) or 0.0 for row in rows]))
                        for name, phase in SHARE_PHASES])
    style_axes(ax)


def draw_cost(ax: Axes, rows: Sequence[SweepRow]) -> None:
    """Cost per 1000 samples per configuration: the useful part and the waiting part."""
    ax.set_title("Cost per 1000 samples: useful compute and waiting", fontsize=9, loc="left")
    priced = [row for row in rows if row.cost_per_1000_samples is not None]
    if priced:
        ax.set_xlabel(_plain(f"cost per 1000 samples ({money(priced[0].price_per_gpu_hour)} per "
                             f"{priced[0].cost_unit[:-1]})"), fontsize=8)
    if not priced:
        no_data(ax)
        return
    y = np.arange(len(rows))
    waiting = np.array([row.waiting_cost or 0.0 for row in rows])
    total = np.array([row.cost_per_1000_samples or 0.0 for row in rows])
    ax.barh(y, total - waiting, color=COMPUTE.color, label="useful compute")
    ax.barh(y, waiting, left=total - waiting, color=COMM_EXPOSED.color, label="waiting")
    for index, row in enumerate(rows):
        if row.cost_per_1000_samples is not None:
            ax.annotate(_plain(money(row.cost_per_1000_samples)), (total[index], index), textcoords="offset points",
                        xytext=(3, -2), fontsize=7, va="center")
    ax.set_yticks(y, [row.label for row in rows], fontsize=7)
    ax.set_xlim(0, float(total.max()) * 1.25 or 1.0)
    ax.invert_yaxis()
    side_legend(ax)
    style_axes(ax)


# ---- Pages ---------------------------------------------------------------------------------------------------------


def _pages(report: SweepReport) -> list[Figure]:
    book = PageBook(DOCUMENT)
    book.new_page(footer=report.session_path)
    book.title(DOCUMENT, report.subtitle())
    book.paragraph(_plain(report.advice.headline), 9.5, weight="bold", box="#eef3f8")
    for reason in report.advice.reasons:
        book.paragraph(_plain(reason), 9)
    book.heading("Evidence")
    for line in report.advice.evidence:
        book.paragraph("• " + _plain(line), 8)
    book.heading("Equal footing")
    book.paragraph(_plain(report.footing.text), 8.5,
                   color="#222" if report.footing.equal else "#d62728" if report.footing.checked else "#555")
    book.chart_pair(0.3, lambda ax: draw_throughput(ax, report.rows, report.plan),
                    lambda ax: draw_efficiency(ax, report.rows, report.plan), sharey=False, gap=0.09)

    book.new_page()
    book.heading("Where the step time went", keep_with=0.2)
    book.phase_legend()
    bars = min(0.4, 0.1 + 0.025 * max(len(report.rows), 2))
    book.chart(bars, lambda ax: draw_phase_shares(ax, report.rows), left=0.2)
    book.chart(bars, lambda ax: draw_cost(ax, report.rows), left=0.2, right=0.72)
    book.heading("All figures")
    unit = throughput_unit(report.rows).capitalize()
    columns = [Column("Configuration", 0.16, bold=True), Column(unit, 0.1, "right"),
               Column("Efficiency", 0.09, "right"), Column("Stall", 0.07, "right"), Column("Compute", 0.08, "right"),
               Column("Per 1000 samples", 0.13, "right"), Column("Waiting", 0.13, "right"),
               Column("Status", RIGHT - LEFT - 0.76)]
    book.table([tuple(_plain(cell) for cell in _table_row(row)) for row in report.rows], columns, header=True)
    book.heading("How these figures were measured")
    for note in report.notes():
        book.paragraph("• " + _plain(note), 7.5, color="#444")
    return book.finish()


def _table_row(row: SweepRow) -> tuple[str, ...]:
    rate = "{:,.0f}" if row.samples_per_s is not None else "{:,.1f}"
    return (row.label, _number(row.throughput, rate), _number(row.efficiency, "{:.0%}"),
            _number(row.allreduce_stall_share, "{:.0%}"), _number(row.compute_share, "{:.0%}"),
            money(row.cost_per_1000_samples) if row.cost_per_1000_samples is not None else "no data",
            money(row.waiting_cost) if row.waiting_cost is not None else "no data", row.status)


def _plain(text: str) -> str:
    """``text`` as matplotlib should draw it: two "$" in one text would start its math mode (money amounts)."""
    return text.replace("$", r"\$")


def _number(value: float | None, form: str) -> str:
    if value is None:
        return "no data"
    text = form.format(value)
    return text[1:] if text.startswith("-") and not any(c in "123456789" for c in text) else text  # never "-0%"

"""Report charts drawn with matplotlib's object API (``Figure`` + Agg/SVG/PDF canvases), never pyplot, never Qt.

Owns the look of the exported pictures: stacked step-time columns over time, per-rank stacked horizontal bars,
throughput, per-GPU utilization and the cost split, all in the phase colors of ``ringscope.gui.core.phases``. Each
chart is a
``draw_*`` function onto a given ``Axes``: the PDF lays several out on an A4 page, the comparison puts A and B side
by side on a shared scale (the HTML report draws its own interactive charts in the browser). Every axis has units,
every chart a title; a chart that shows only part of the data says so in its title, one without data says "no data".
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ringscope.gui.core.analysis.cost import WASTE_CAUSES, CostBreakdown
from ringscope.gui.core.analysis.summary import RankSummary, SessionAnalysis
from ringscope.gui.core.phases import (
    ALERT_COLOR,
    CAUSE_COLORS,
    COMPUTE,
    NO_DATA_COLOR,
    PHASES,
    Phase,
)

MAX_RANK_BARS: int = 32
"""Beyond this, per-rank bars become noise (UI.md): show the most suspicious ranks and say so."""


# ---- Public API: drawing onto an Axes -----------------------------------------------------------------------------


def draw_step_breakdown(ax: Axes, analysis: SessionAnalysis, *, title: str | None = None,
                        legend: bool = True) -> None:
    """Stacked columns per time bucket: mean milliseconds per step in each phase (TensorBoard's step-time graph)."""
    t = analysis.timeline
    ax.set_title(title or "Step-time breakdown over time (all ranks)", fontsize=9, loc="left")
    ax.set_xlabel(f"time since start (s), {t.bucket_s:g} s buckets", fontsize=8)
    ax.set_ylabel("mean step time (ms)", fontsize=8)
    if not analysis.steps_total:
        no_data(ax)
        return
    bottom = np.zeros(len(t.start_s))
    for phase in PHASES:
        values = np.nan_to_num(t.phase_s[phase.name]) * 1e3
        ax.bar(t.start_s, values, width=t.bucket_s * 0.9, bottom=bottom, align="edge", color=phase.color,
               label=phase.label)
        bottom += values
    empty = np.isnan(t.step_s)
    if empty.any():
        ax.bar(t.start_s[empty], np.full(empty.sum(), max(bottom.max(), 1.0)), width=t.bucket_s * 0.9,
               align="edge", color=NO_DATA_COLOR, alpha=0.4, label="no data")
    style_axes(ax)
    if legend:
        side_legend(ax)


def draw_rank_bars(ax: Axes, analysis: SessionAnalysis, *, title: str | None = None, legend: bool = True) -> None:
    """One stacked horizontal bar per rank: share of step time per phase; the straggler's label in red."""
    ranks, shown = ranks_to_show(analysis)
    ax.set_title(title + "\n" + shown if title else shown, fontsize=9, loc="left")
    ax.set_xlabel("share of step time (%), steady state", fontsize=8)
    ax.set_xlim(0, 100)
    if not ranks:
        no_data(ax)
        return
    stacked_share_bars(ax, [f"rank {r.rank}" for r in ranks],
                       [(phase, np.array([r.breakdown.shares[phase.name] for r in ranks])) for phase in PHASES],
                       fontsize=7 if len(ranks) <= 16 else 5.5)
    straggler = analysis.straggler.rank if analysis.straggler else None
    for label, summary in zip(ax.get_yticklabels(), ranks, strict=True):
        if summary.rank == straggler:
            label.set_color(ALERT_COLOR)
            label.set_fontweight("bold")
    style_axes(ax)
    if legend:
        side_legend(ax)


def stacked_share_bars(ax: Axes, labels: Sequence[str], columns: Sequence[tuple[Phase, np.ndarray]], *,
                       fontsize: float = 7) -> None:
    """One horizontal bar per label, top to bottom, stacked by phase: ``columns`` holds each phase with its shares
    (0..1, one per label) in stacking order. Titles, axes and legends stay with the caller."""
    y = np.arange(len(labels))
    left = np.zeros(len(labels))
    for phase, shares in columns:
        values = np.asarray(shares, dtype=np.float64) * 100
        ax.barh(y, values, left=left, color=phase.color, label=phase.label)
        left += values
    ax.set_yticks(y, list(labels), fontsize=fontsize)
    ax.invert_yaxis()


def draw_throughput(ax: Axes, analysis: SessionAnalysis, *, title: str | None = None, color: str = COMPUTE.color,
                    label: str | None = None) -> None:
    """Global throughput per time bucket; empty buckets are gaps, not zeros."""
    t = analysis.timeline
    ax.set_title(title or "Throughput (all ranks)", fontsize=9, loc="left")
    ax.set_xlabel("time since start (s)", fontsize=8)
    ax.set_ylabel(t.throughput_unit, fontsize=8)
    if not np.isfinite(t.throughput).any():
        no_data(ax)
        return
    ax.plot(t.start_s + t.bucket_s / 2, t.throughput, color=color, marker=".", label=label)
    ax.set_ylim(bottom=0, top=float(np.nanmax(t.throughput)) * 1.15)
    style_axes(ax)


def draw_gpu_utilization(ax: Axes, analysis: SessionAnalysis) -> None:
    """Per-GPU median utilization with p5..p95 whiskers, red when mostly idle; the statement when no GPU."""
    gpus = analysis.gpus[:MAX_RANK_BARS]
    shown = f" (first {len(gpus)} of {len(analysis.gpus)})" if len(analysis.gpus) > len(gpus) else ""
    ax.set_title("GPU utilization" + shown + ": median, whiskers p5..p95", fontsize=9, loc="left")
    ax.set_xlabel("NVML utilization (%) — time some kernel ran, not SM occupancy", fontsize=8)
    ax.set_xlim(0, 100)
    if not gpus:
        no_data(ax, analysis.gpu_statement)
        return
    y = np.arange(len(gpus))
    p50 = np.array([g.util_p50 if g.util_p50 is not None else np.nan for g in gpus])
    colors = [ALERT_COLOR if (v is not None and v < 50) else COMPUTE.color for v in p50]
    ax.barh(y, np.nan_to_num(p50), color=colors)
    low = np.array([g.util_p5 if g.util_p5 is not None else np.nan for g in gpus])
    high = np.array([g.util_p95 if g.util_p95 is not None else np.nan for g in gpus])
    ax.errorbar(np.nan_to_num(p50), y, xerr=[np.nan_to_num(p50 - low), np.nan_to_num(high - p50)], fmt="none",
                ecolor="black", capsize=2, linewidth=0.8)
    ax.set_yticks(y, [f"{g.host}:{g.gpu_index}" + (f" (rank {g.rank})" if g.rank is not None else "") for g in gpus],
                  fontsize=7 if len(gpus) <= 16 else 5.5)
    ax.invert_yaxis()
    style_axes(ax)


def draw_cost_split(ax: Axes, cost: CostBreakdown) -> None:
    """One horizontal bar: useful compute vs each waiting cause, in money."""
    useful = max(cost.cost_total - cost.waste_total, 0.0)
    left = 0.0
    parts = [("Compute (useful)", useful, COMPUTE.color)]
    parts += [(WASTE_CAUSES[c], cost.waste_cost[c], CAUSE_COLORS[c]) for c in WASTE_CAUSES]
    for label, value, color in parts:
        amount = f"{value:,.2f}" if value >= 1 or value == 0 else f"{value:.4f}"  # cents of a short run read 0.00
        ax.barh([0], [value], left=left, color=color, label=f"{label}: {cost.currency}{amount}")
        left += value
    ax.set_yticks([])
    ax.set_xlabel(f"cost ({cost.currency}, {cost.price_per_gpu_hour:g} per {cost.unit[:-1]})", fontsize=8)
    ax.set_title("Where the money went", fontsize=9, loc="left")
    style_axes(ax)
    side_legend(ax)


def side_legend(ax: Axes) -> None:
    """The legend to the right of the axes, small, without a frame."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, frameon=False)


def no_data(ax: Axes, text: str = "no data") -> None:
    """Say "no data" (or why) in the middle of an empty chart: no data is not zero."""
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=9, color="#555", transform=ax.transAxes, wrap=True)
    ax.set_xticks([])
    ax.set_yticks([])
    style_axes(ax)


# ---- Public API: output ----------------------------------------------------------------------------------------


def to_svg(fig: Figure) -> str:
    """The figure as an inline ``<svg>`` element (no XML prolog), self-contained."""
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg")
    text = buffer.getvalue()
    return text[text.index("<svg"):]


# ---- Helpers ------------------------------------------------------------------------------------------------------


def style_axes(ax: Axes) -> None:
    """The report charts' look: small tick labels, no top and right frame."""
    ax.tick_params(labelsize=7)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def ranks_to_show(analysis: SessionAnalysis) -> tuple[list[RankSummary], str]:
    ranks = [r for r in analysis.per_rank if r.breakdown.steps]
    if len(ranks) <= MAX_RANK_BARS:
        return ranks, "Per-rank breakdown (steady state)"
    # The likely stragglers (smallest exposed wait) and the most data-starved ranks are the interesting ones.
    by_wait = sorted(ranks, key=lambda r: r.breakdown.shares["comm_exposed"])[:MAX_RANK_BARS // 2]
    rest = [r for r in sorted(ranks, key=lambda r: -r.breakdown.shares["data_wait"]) if r not in by_wait]
    chosen = sorted(by_wait + rest[:MAX_RANK_BARS - len(by_wait)], key=lambda r: r.rank)
    return chosen, (f"Per-rank breakdown: {len(chosen)} of {len(ranks)} ranks (least exposed wait and most data "
                    f"wait)")

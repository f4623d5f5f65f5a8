"""Report charts drawn with matplotlib's object API (``Figure`` + Agg/SVG/PDF canvases), never pyplot, never Qt.

Owns the look of the exported pictures: stacked step-time columns over time, per-rank stacked horizontal bars,
throughput, per-GPU utilization and the cost split, all in the phase colors of ``gui.core.phases``. Every axis has
units; a chart that shows only part of the data says so in its title.
"""

from __future__ import annotations

import base64
import io

import numpy as np
from matplotlib.figure import Figure

from gui.core.analysis.cost import WASTE_CAUSES, CostBreakdown
from gui.core.analysis.summary import RankSummary, SessionAnalysis
from gui.core.phases import ALERT_COLOR, COMM_EXPOSED, COMPUTE, DATA_WAIT, NO_DATA_COLOR, OTHER, PHASES

MAX_RANK_BARS: int = 32
"""Beyond this, per-rank bars become noise (UI.md): show the most suspicious ranks and say so."""
_CAUSE_COLORS = {"allreduce_stall": COMM_EXPOSED.color, "data_loader_idle": DATA_WAIT.color, "other": OTHER.color}


def step_breakdown_columns(analysis: SessionAnalysis) -> Figure:
    """Stacked columns per time bucket: mean seconds per step in each phase (TensorBoard's step-time graph)."""
    fig = Figure(figsize=(9, 3.4))
    ax = fig.add_subplot()
    t = analysis.timeline
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
    ax.set_xlabel(f"time since start (s), {t.bucket_s:g} s buckets")
    ax.set_ylabel("mean step time (ms)")
    ax.set_title("Step-time breakdown over time (all ranks)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


def rank_bars(analysis: SessionAnalysis) -> Figure:
    """One stacked horizontal bar per rank: share of step time per phase; the straggler's label in red."""
    ranks, title = _ranks_to_show(analysis)
    fig = Figure(figsize=(9, max(2.0, 0.3 * len(ranks) + 1.2)))
    ax = fig.add_subplot()
    y = np.arange(len(ranks))
    left = np.zeros(len(ranks))
    for phase in PHASES:
        values = np.array([r.breakdown.shares[phase.name] for r in ranks]) * 100
        ax.barh(y, values, left=left, color=phase.color, label=phase.label)
        left += values
    ax.set_yticks(y, [f"rank {r.rank}" for r in ranks])
    straggler = analysis.straggler.rank if analysis.straggler else None
    for label, summary in zip(ax.get_yticklabels(), ranks, strict=True):
        if summary.rank == straggler:
            label.set_color(ALERT_COLOR)
            label.set_fontweight("bold")
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("share of step time (%), steady state")
    ax.set_title(title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


def throughput_line(analysis: SessionAnalysis) -> Figure:
    """Global throughput per time bucket; empty buckets are gaps, not zeros."""
    fig = Figure(figsize=(9, 2.6))
    ax = fig.add_subplot()
    t = analysis.timeline
    ax.plot(t.start_s + t.bucket_s / 2, t.throughput, color=COMPUTE.color, marker=".")
    ax.set_xlabel("time since start (s)")
    ax.set_ylabel(t.throughput_unit)
    ax.set_ylim(bottom=0)
    ax.set_title("Throughput (all ranks)")
    fig.tight_layout()
    return fig


def gpu_utilization(analysis: SessionAnalysis) -> Figure:
    """Per-GPU median utilization with p5..p95 whiskers, red when mostly idle; a plain statement without GPUs."""
    gpus = analysis.gpus[:MAX_RANK_BARS]
    fig = Figure(figsize=(9, max(1.6, 0.3 * len(gpus) + 1.2)))
    ax = fig.add_subplot()
    if not gpus:
        ax.axis("off")
        ax.text(0.5, 0.5, analysis.gpu_statement, ha="center", va="center", fontsize=12)
        return fig
    y = np.arange(len(gpus))
    p50 = np.array([g.util_p50 if g.util_p50 is not None else np.nan for g in gpus])
    colors = [ALERT_COLOR if (v is not None and v < 50) else COMPUTE.color for v in p50]
    ax.barh(y, np.nan_to_num(p50), color=colors)
    low = np.array([g.util_p5 if g.util_p5 is not None else np.nan for g in gpus])
    high = np.array([g.util_p95 if g.util_p95 is not None else np.nan for g in gpus])
    ax.errorbar(np.nan_to_num(p50), y, xerr=[np.nan_to_num(p50 - low), np.nan_to_num(high - p50)], fmt="none",
                ecolor="black", capsize=3)
    ax.set_yticks(y, [f"{g.host}:{g.gpu_index}" + (f" (rank {g.rank})" if g.rank is not None else "") for g in gpus])
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("NVML utilization (%): median, whiskers p5..p95 — time some kernel ran, not SM occupancy")
    shown = f" (first {len(gpus)} of {len(analysis.gpus)})" if len(analysis.gpus) > len(gpus) else ""
    ax.set_title("GPU utilization" + shown)
    fig.tight_layout()
    return fig


def cost_split(cost: CostBreakdown) -> Figure:
    """One horizontal bar: useful compute vs each waiting cause, in money."""
    fig = Figure(figsize=(9, 1.8))
    ax = fig.add_subplot()
    useful = max(cost.cost_total - cost.waste_total, 0.0)
    left = 0.0
    parts = [("Compute (useful)", useful, COMPUTE.color)]
    parts += [(WASTE_CAUSES[c], cost.waste_cost[c], _CAUSE_COLORS[c]) for c in WASTE_CAUSES]
    for label, value, color in parts:
        ax.barh([0], [value], left=left, color=color, label=f"{label}: {cost.currency}{value:,.2f}")
        left += value
    ax.set_yticks([])
    ax.set_xlabel(f"cost ({cost.currency}, {cost.price_per_gpu_hour:g} per {cost.unit[:-1]})")
    ax.set_title("Where the money went")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


def to_svg(fig: Figure) -> str:
    """The figure as an inline ``<svg>`` element (no XML prolog), self-contained."""
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg")
    text = buffer.getvalue()
    return text[text.index("<svg"):]


def to_png_base64(fig: Figure, dpi: int = 100) -> str:
    """The figure as a base64 PNG (for a ``data:`` URL)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _ranks_to_show(analysis: SessionAnalysis) -> tuple[list[RankSummary], str]:
    ranks = [r for r in analysis.per_rank if r.breakdown.steps]
    if len(ranks) <= MAX_RANK_BARS:
        return ranks, "Per-rank breakdown (steady state)"
    # The likely stragglers (smallest exposed wait) and the most data-starved ranks are the interesting ones.
    by_wait = sorted(ranks, key=lambda r: r.breakdown.shares["comm_exposed"])[:MAX_RANK_BARS // 2]
    rest = [r for r in sorted(ranks, key=lambda r: -r.breakdown.shares["data_wait"]) if r not in by_wait]
    chosen = sorted(by_wait + rest[:MAX_RANK_BARS - len(by_wait)], key=lambda r: r.rank)
    return chosen, (f"Per-rank breakdown: {len(chosen)} of {len(ranks)} ranks (least exposed wait and most data "
                    f"wait)")

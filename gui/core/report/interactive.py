"""The interactive parts of the HTML report: chart specs for the embedded uPlot, sortable per-rank and per-GPU tables.

Owns what the page's script is given (JSON specs with ``null`` for no data, never 0), the tables' HTML and
``escape``, the one HTML-escaping helper of every page (report, comparison, sweep). The charting library (uPlot, MIT,
vendored in ``resources/report``) and ``report.js`` are embedded in the page, so it works offline: no file and no URL
is referenced. Must never import Qt.
"""

from __future__ import annotations

import html
import json
import math
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from ringscope import resources
from ringscope.gui.core.analysis.cost import WASTE_CAUSES, CostBreakdown
from ringscope.gui.core.analysis.goodput import CAUSE_TEXT as GOODPUT_TEXT
from ringscope.gui.core.analysis.goodput import CAUSES as GOODPUT_CAUSES
from ringscope.gui.core.analysis.goodput import Goodput
from ringscope.gui.core.analysis.summary import SessionAnalysis
from ringscope.gui.core.phases import ALERT_COLOR, CAUSE_COLORS, COMPUTE, PHASES

CHARTING_LIBRARY = "uPlot 1.6.32 (MIT, https://github.com/leeoniya/uPlot)"

CSS = """
.chart{width:100%;min-height:120px}.chart .u-legend{font-size:.85em}
table.sortable th{cursor:pointer;user-select:none}table.sortable th[data-dir=asc]::after{content:' \\25B2'}
table.sortable th[data-dir=desc]::after{content:' \\25BC'}
table.sortable td,table.sortable th{padding:.2em .55em}
table.sortable td.num{text-align:right;font-variant-numeric:tabular-nums}
.bar{display:flex;width:130px;height:.9em;background:#eee;border-radius:2px;overflow:hidden;margin-top:.2em}
.bar span{display:block;height:100%}
tr.straggler td,tr.straggler th{color:#d62728;font-weight:600}
.scroll{max-height:36em;overflow:auto;border:1px solid #eee}
.scroll thead th{position:sticky;top:0;background:#fff}
"""


# ---- Public API ---------------------------------------------------------------------------------------------------


def head_assets() -> str:
    """The ``<style>`` for the charts and tables (uPlot's own CSS included)."""
    return f"<style>{_resource('uPlot.min.css')}{CSS}</style>"


def body_scripts() -> str:
    """The embedded library and the page's script; placed last in ``<body>``, after the chart elements."""
    return (f"<script>/* {CHARTING_LIBRARY} */\n{_script_text(_resource('uPlot.iife.min.js'))}</script>"
            f"<script>{_script_text(_resource('report.js'))}</script>")


def step_breakdown_chart(analysis: SessionAnalysis, chart_id: str, *, ymax: float | None = None) -> str:
    """Stacked columns of mean milliseconds per step and phase per time bucket; hover gives each phase's value.
    ``ymax`` (ms) fixes the y-scale, so that charts set side by side compare by eye."""
    t = analysis.timeline
    spec = {"kind": "stack", "x": (t.start_s + t.bucket_s / 2).tolist(), "bucket": t.bucket_s,
            "empty": np.isnan(t.step_s).tolist(),
            "xlabel": f"time since start (s), {t.bucket_s:g} s buckets", "ylabel": "mean step time (ms)",
            "unit": "ms", "series": [{"label": p.label, "color": p.color, "values": _values(t.phase_s[p.name] * 1e3)}
                                     for p in PHASES]}
    return _chart(chart_id, _with_ymax(spec, ymax), analysis.steps_total > 0)


def throughput_chart(analysis: SessionAnalysis, chart_id: str, *, ymax: float | None = None,
                     label: str = "Throughput (all ranks)") -> str:
    """Throughput per time bucket as a line; empty buckets are gaps. ``ymax`` fixes the y-scale."""
    t = analysis.timeline
    spec = {"kind": "line", "x": (t.start_s + t.bucket_s / 2).tolist(), "bucket": t.bucket_s,
            "xlabel": "time since start (s)",
            "ylabel": t.throughput_unit, "unit": t.throughput_unit,
            "series": [{"label": label, "color": COMPUTE.color, "values": _values(t.throughput)}]}
    return _chart(chart_id, _with_ymax(spec, ymax), bool(np.isfinite(t.throughput).any()))


def stack_top_ms(analysis: SessionAnalysis) -> float:
    """The tallest column of ``step_breakdown_chart`` (ms; 0 without data): for a y-scale shared by several."""
    t = analysis.timeline
    tops = sum(np.nan_to_num(t.phase_s[p.name]) for p in PHASES) * 1e3
    return float(np.max(tops)) if np.size(tops) else 0.0


def throughput_top(analysis: SessionAnalysis) -> float:
    """The highest point of ``throughput_chart`` (0 without data)."""
    values = analysis.timeline.throughput
    return float(np.nanmax(values)) if np.isfinite(values).any() else 0.0


def rank_table(analysis: SessionAnalysis) -> str:
    """One row per rank (all of them): steady-state milliseconds per phase, idle share, throughput and the breakdown
    as a stacked bar; the straggler's row in red. Sortable by any column."""
    ranks = [r for r in analysis.per_rank if r.breakdown.steps]
    if not ranks:
        return "<p>no data: no rank completed a steady-state step.</p>"
    straggler = analysis.straggler.rank if analysis.straggler else None
    heads = ["Rank", "Steps", "Step (ms)", *(f"{p.label.split(' (')[0]} (ms)" for p in PHASES), "Idle (%)",
             "Samples/s", "Share of step"]
    rows = []
    for r in ranks:
        b = r.breakdown
        bar = "".join(f"<span style='width:{100 * b.shares[p.name]:.2f}%;background:{p.color}' "
                      f"title='{escape(p.label)}: {100 * b.shares[p.name]:.1f} %'></span>" for p in PHASES)
        idle = 100 * b.idle_share if b.phases_measured else None
        cells = [number_cell(r.rank, 0), number_cell(r.steps_total, 0), number_cell(b.step_s * 1e3, 2),
                 *(number_cell(b.seconds[p.name] * 1e3, 2) for p in PHASES), number_cell(idle, 1),
                 number_cell(r.samples_per_s, 1), f"<td data-v='{idle if idle is not None else -1:.3f}'>"
                 f"<div class='bar'>{bar}</div></td>"]
        mark = " class='straggler' title='the straggler'" if r.rank == straggler else ""
        rows.append(f"<tr{mark}>{''.join(cells)}</tr>")
    return sortable_table(heads, rows, f"{len(ranks)} rank(s), steady state; milliseconds are means per step, "
                                       "idle = data wait + exposed comm + other. Click a column heading to sort.")


def gpu_table(analysis: SessionAnalysis) -> str:
    """One row per GPU: utilization median with a bar (red when mostly idle), p5, p95, SM clock, throttling."""
    if not analysis.gpus:
        return ""
    heads = ["GPU", "Rank", "Median utilization (%)", "p5 (%)", "p95 (%)", "SM clock p50 (MHz)",
             "Throttled (% of samples)", "Samples"]
    rows = []
    for g in analysis.gpus:
        p50 = g.util_p50
        color = ALERT_COLOR if p50 is not None and p50 < 50 else COMPUTE.color
        bar = (f"<div class='bar'><span style='width:{p50:.1f}%;background:{color}'></span></div>"
               if p50 is not None else "")
        rows.append(f"<tr><td data-v='{escape(g.host)}:{g.gpu_index:04d}'>{escape(g.host)}:{g.gpu_index}"
                    f"{' (' + escape(g.name) + ')' if g.name else ''}</td>{number_cell(g.rank, 0)}"
                    f"<td class='num' data-v='{_sort_key(p50)}'>{_fmt(p50, 0)}{bar}</td>{number_cell(g.util_p5, 0)}"
                    f"{number_cell(g.util_p95, 0)}{number_cell(g.sm_clock_p50_mhz, 0)}"
                    f"{number_cell(None if g.throttled_share is None else 100 * g.throttled_share, 0)}"
                    f"{number_cell(g.samples, 0)}</tr>")
    return sortable_table(heads, rows, "NVML utilization: share of time some kernel ran, not SM occupancy.")


def cost_bar(cost: CostBreakdown) -> str:
    """Where the money went as one stacked bar with amounts (no script needed)."""
    useful = max(cost.cost_total - cost.waste_total, 0.0)
    parts = [("Compute (useful)", useful, COMPUTE.color)]
    parts += [(WASTE_CAUSES[c], cost.waste_cost[c], CAUSE_COLORS[c]) for c in WASTE_CAUSES]
    total = sum(value for _, value, _ in parts) or 1.0
    spans = "".join(f"<span style='width:{100 * value / total:.2f}%;background:{color}' "
                    f"title='{escape(label)}: {_money(cost, value)}'></span>" for label, value, color in parts)
    legend = " &nbsp; ".join(f"<span class='swatch' style='background:{color}'></span>{escape(label)}: "
                             f"{_money(cost, value)}" for label, value, color in parts)
    return (f"<h3>Where the money went</h3><div class='bar' style='width:100%;height:1.4em'>{spans}</div>"
            f"<p class='evidence'>{legend}</p>")


GOODPUT_COLORS: dict[str, str] = {
    "productive": COMPUTE.color, "data_wait": CAUSE_COLORS["data_loader_idle"],
    "allreduce_stall": CAUSE_COLORS["allreduce_stall"], "checkpoint": "#8e6cc2",
    "hang_undetected": "#5b2a86", "detect_to_restart": "#b07aa1", "startup": "#9aa5b1", "redone": "#c96f3b",
}


def goodput_bar(goodput: Goodput, cost: CostBreakdown) -> str:
    """The run's wall time by cause (``ringscope.gui.core.analysis.goodput``) as one stacked bar, with seconds,
    shares and money."""
    parts = [(cause, goodput.seconds.get(cause, 0.0)) for cause in GOODPUT_CAUSES]
    total = goodput.wall_s or 1.0
    spans = "".join(f"<span style='width:{100 * value / total:.2f}%;background:{GOODPUT_COLORS[cause]}' "
                    f"title='{escape(GOODPUT_TEXT[cause])}: {value:.1f} s'></span>"
                    for cause, value in parts if value > 0)
    legend = " &nbsp; ".join(
        f"<span class='swatch' style='background:{GOODPUT_COLORS[cause]}'></span>{escape(GOODPUT_TEXT[cause])}: "
        f"{value:.1f} s ({value / total:.1%}, {_money(cost, goodput.cost(cause, cost.price_per_gpu_hour))})"
        for cause, value in parts if value > 0)
    return (f"<h3>Where the wall time went</h3><div class='bar' style='width:100%;height:1.4em'>{spans}</div>"
            f"<p class='evidence'>{legend}</p>")


def sortable_table(heads: list[str], rows: list[str], caption: str) -> str:
    """A table sortable by any column (``report.js``) under a caption; ``rows`` are ``<tr>`` elements."""
    head = "".join(f"<th>{escape(h)}</th>" for h in heads)
    return (f"<p class='evidence'>{escape(caption)}</p><div class='scroll'><table class='sortable'><thead><tr>{head}"
            f"</tr></thead><tbody>{''.join(rows)}</tbody></table></div>")


def number_cell(value: float | None, digits: int) -> str:
    """A right-aligned number cell that sorts by value; "no data" for None or NaN."""
    return f"<td class='num' data-v='{_sort_key(value)}'>{_fmt(value, digits)}</td>"


def xy_chart(chart_id: str, x: list[float], series: list[dict[str, Any]], *, xlabel: str, ylabel: str, unit: str,
             xunit: str = "", xdigits: int = 0, xticks: list[float] | None = None,
             ymax: float | None = None, height: int = 280) -> str:
    """Lines over a numeric x (e.g. throughput against rank count): each series ``{label, color, values}`` with
    optional ``dash`` (e.g. [6, 4]) and ``points`` (marker size, 0: none); ``xticks`` puts ticks at those x only;
    hover shows x with ``xunit`` and ``xdigits``; ``height`` in pixels."""
    spec: dict[str, Any] = {"kind": "line", "x": x, "xlabel": xlabel, "ylabel": ylabel, "unit": unit,
                            "xunit": xunit, "xdigits": xdigits, "bucket": 0.5, "height": height,
                            "series": [dict(s, values=_values(np.asarray(s["values"], dtype=np.float64)))
                                       for s in series]}
    if xticks:
        spec["xticks"] = xticks
    has_data = any(v is not None for s in spec["series"] for v in s["values"])
    return _chart(chart_id, _with_ymax(spec, ymax), has_data)


# ---- Helpers ------------------------------------------------------------------------------------------------------


def _chart(chart_id: str, spec: dict[str, Any], has_data: bool) -> str:
    if not has_data:
        return "<p>no data</p>"
    payload = json.dumps(spec, allow_nan=False, separators=(",", ":"))
    return (f"<div class='chart' data-chart='{chart_id}'>chart needs JavaScript</div>"
            f"<script type='application/json' id='{chart_id}'>{_script_text(payload)}</script>")


def _with_ymax(spec: dict[str, Any], ymax: float | None) -> dict[str, Any]:
    if ymax is not None and math.isfinite(ymax) and ymax > 0:
        spec["ymax"] = round(float(ymax), 6)
    return spec


def _values(array: np.ndarray) -> list[float | None]:
    """Numbers for JSON, NaN as null (no data)."""
    return [None if not math.isfinite(v) else round(float(v), 6) for v in np.asarray(array, dtype=np.float64)]


def _sort_key(value: float | None) -> str:
    return "-1e300" if value is None or not math.isfinite(value) else f"{value:.6g}"


def _fmt(value: float | None, digits: int) -> str:
    return "no data" if value is None or not math.isfinite(value) else f"{value:,.{digits}f}"


def _money(cost: CostBreakdown, value: float) -> str:
    return f"{cost.currency}{value:,.2f}" if value >= 1 or value == 0 else f"{cost.currency}{value:.4f}"


def _script_text(text: str) -> str:
    """Text safe inside a <script> element (a "</script" in it would end the element)."""
    return text.replace("</", "<\\/")


@cache
def _resource(name: str) -> str:
    # resources.__path__ rather than resources.path(): a stale editable install can expose it as a namespace package
    return (Path(next(iter(resources.__path__))) / "report" / name).read_text(encoding="utf-8")


def escape(text: object) -> str:
    """``text`` as HTML text or attribute value (quotes escaped too): every value a page shows goes through it."""
    return html.escape(str(text), quote=True)

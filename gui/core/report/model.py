"""The bundle every export renders (session + analysis + cost + recommendations) and the words it is told in.

Owns the text of the report's tables (headline, straggler, cost, checkpoints, data quality) so that HTML and PDF
say exactly the same thing. Must never import Qt.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ringscope.agent.schema import EventKind
from ringscope.gui.core.analysis.cost import WASTE_CAUSES, CostBreakdown, estimate_cost
from ringscope.gui.core.analysis.recommendations import Recommendation, recommend
from ringscope.gui.core.analysis.summary import SessionAnalysis, analyze
from ringscope.gui.core.phases import PHASES
from ringscope.gui.core.session_data import SessionData

Rows = list[tuple[str, str]]


@dataclass(frozen=True, slots=True)
class Report:
    """Everything an export needs."""

    session: SessionData
    analysis: SessionAnalysis
    cost: CostBreakdown
    recommendations: list[Recommendation]


def build_report(session: SessionData, price_per_gpu_hour: float | None = None, *,
                 now_s: float | None = None) -> Report:
    """Analyze a session, price it and derive the recommendations."""
    analysis = analyze(session)
    cost = estimate_cost(analysis, session, price_per_gpu_hour, now_s=now_s)
    return Report(session, analysis, cost, recommend(analysis, cost))


def headline_rows(report: Report) -> Rows:
    """The answer to "is this run healthy, what did it cost, where did the time go?" in a few lines."""
    a, c = report.analysis, report.cost
    shares = a.overall.shares
    throughput = f"{a.throughput:,.1f} {a.throughput_unit}" if a.throughput is not None else "no steady steps"
    return [
        ("Run", a.run_id or "(unnamed)"),
        ("Source", a.source),
        ("Framework / strategy", f"{a.framework} / {a.strategy}"),
        ("Ranks", f"{len(a.ranks)} (world size {a.world_size})"),
        ("Started", when_text(a.start_s)),
        ("Duration", duration_text(a.duration_s)),
        ("Steps", f"{a.steps_total:,} recorded, {a.steps_steady:,} in steady state"),
        ("Mean step time", f"{a.overall.step_s * 1e3:.1f} ms (steady state)" if a.overall.steps else NO_DATA),
        ("Throughput", throughput if a.overall.steps else NO_DATA),
        ("Time split", ", ".join(f"{p.label} {shares[p.name]:.1%}" for p in PHASES)
         if a.overall.phases_measured else _unmeasured(a)),
        ("Idle share", f"{a.overall.idle_share:.1%} of step time" if a.overall.phases_measured
         else _unmeasured(a)),
        ("Straggler", straggler_text(a)),
        ("Cost so far", money(c, c.cost_total) + f" ({hours_text(c.device_hours)} {c.unit})"),
        ("Cost of waiting", money(c, c.waste_total) + f" ({c.waste_share:.1%} of the cost)"
         if c.waste_measured and a.overall.steps else _unmeasured(a)),
        ("GPUs", a.gpu_statement),
    ]


NO_DATA = "no data"
"""What a figure reads when the session has no steps to compute it from (never "0.0 ms" or "0.0 %")."""


def verdict(report: Report) -> str:
    """The run's health in one sentence: the first thing a reader of the report needs."""
    a = report.analysis
    if not a.overall.steps:
        return "No data: this session recorded no training steps, so there is nothing to judge."
    if not a.overall.phases_measured:
        return (f"Steps of {a.overall.step_s * 1e3:.1f} ms on {len(a.ranks)} rank(s); where the time went is not "
                "measured (Keras fit).")
    idle = a.overall.idle_share
    cause = max((p for p in PHASES if p.name != "compute"), key=lambda p: a.overall.shares[p.name])
    if a.straggler is not None:
        return (f"Rank {a.straggler.rank} is a straggler: every other rank waits {a.straggler.gap_s * 1e3:.1f} ms per "
                f"step for it ({idle:.0%} of step time is idle).")
    if idle < 0.15:
        return f"Healthy: {1 - idle:.0%} of step time is compute on {len(a.ranks)} rank(s)."
    return (f"{idle:.0%} of step time is idle, mostly {cause.label[0].lower()}{cause.label[1:]} "
            f"({a.overall.shares[cause.name]:.0%}).")


def _unmeasured(analysis: SessionAnalysis) -> str:
    return NOT_MEASURED if analysis.overall.steps else NO_DATA


NOT_MEASURED = ("phases not measured with Keras fit (data wait, compute and all-reduce are timed together; use "
                "TimedStepRunner for the split)")


def _hangs_text(report: Report) -> str:
    """How often the run stopped completing steps, and the first verdict (its stacks are in the HTML report)."""
    hangs = [e for e in report.session.events if e.event == EventKind.HANG]
    if not hangs:
        return "none detected"
    first = (hangs[0].text or "").splitlines()[0] if hangs[0].text else "no detail"
    return f"{len(hangs)}: {first}"


def straggler_text(analysis: SessionAnalysis) -> str:
    """The straggler and its cause in one sentence, or why none was flagged."""
    s = analysis.straggler
    if not analysis.overall.steps:
        return NO_DATA
    if s is None:
        network = analysis.network
        if analysis.wait_diagnosis == "network":
            if network is not None and network.congested:
                return ("none: every rank waits at the all-reduce and nobody's compute stands out — the network "
                        f"(interconnect) is the bottleneck: {network.evidence()}")
            return ("none: every rank waits at the all-reduce and nobody's compute stands out — "
                    "the network (interconnect) is the likely bottleneck")
        if network is not None and network.congested is False and analysis.overall.shares["comm_exposed"] >= 0.2:
            return ("none flagged; the all-reduce takes a large share of the step but no link queues "
                    f"({network.evidence()}): the collective's own latency, or ranks competing for CPU cores")
        return "none flagged"
    return (f"rank {s.rank}, late by {s.gap_s * 1e3:.1f} ms per step ({s.gap_share:.1%} of the step), slowest in "
            f"{s.min_share:.0%} of steps in {s.windows_flagged}/{s.windows_total} windows; cause: "
            f"{s.cause.replace('_', ' ')} — {s.cause_detail}")


def network_rows(analysis: SessionAnalysis) -> Rows:
    """Per host: bytes all-reduced, transfer time, bus bandwidth, how long its telemetry queued (``analysis.network``);
    empty for a single-host run."""
    network = analysis.network
    if network is None or len(network.hosts) < 2:
        return []
    rows: Rows = [("Links", network.evidence())]
    for link in network.hosts:
        ranks = ", ".join(str(r) for r in link.ranks)
        parts = [f"{link.bytes_per_step / 1e3:,.1f} kB all-reduced per step per rank"
                 if link.bytes_per_step is not None else "bytes per step not measured"]
        if link.transfer_s is not None:
            parts.append(f"transfer {link.transfer_s * 1e3:.1f} ms per step")
        if link.bus_bandwidth_bps is not None:
            parts.append(f"{link.bus_bandwidth_bps * 8 / 1e6:,.2f} Mbit/s bus bandwidth")
        if link.queue_p50_s is not None and link.queue_p90_s is not None:
            parts.append(f"telemetry queued {link.queue_p50_s * 1e3:.1f} ms p50 / {link.queue_p90_s * 1e3:.1f} ms p90")
        slow = " — slow link" if link.host == network.slow_host else ""
        rows.append((f"{link.host} (ranks {ranks})", "; ".join(parts) + slow))
    return rows


def cost_rows(report: Report) -> Rows:
    """Price, its origin, the device assumption and the cost of waiting by cause."""
    c = report.cost
    rows = [
        ("Price", f"{c.currency}{c.price_per_gpu_hour:g} per {c.unit[:-1]} (from {c.price_source})"),
        ("Devices", c.assumption),
        ("Total", f"{money(c, c.cost_total)} for {hours_text(c.device_hours)} {c.unit}"),
    ]
    rows += [(f"Waiting: {label}", f"{money(c, c.waste_cost[key])} ({hours_text(c.waste_hours[key])} {c.unit})")
             for key, label in WASTE_CAUSES.items()]
    return rows


def checkpoint_rows(report: Report) -> Rows:
    """Checkpoint times and intervals, restarts, and the work a failure now would lose."""
    a, c = report.analysis, report.cost
    intervals = a.checkpoint_intervals_s
    rows = [
        ("Checkpoints", f"{len(a.checkpoints_s)}" + (f", last at {when_text(a.checkpoints_s[-1])}"
                                                      if a.checkpoints_s else "")),
        ("Interval", (f"median {duration_text(sorted(intervals)[len(intervals) // 2])}, longest "
                      f"{duration_text(max(intervals))}") if intervals else "n/a"),
        ("Restarts", str(a.restarts)),
        ("Hangs", _hangs_text(report)),
        ("Errors", str(a.errors)),
        ("Work at risk", f"{hours_text(c.at_risk_hours)} {c.unit} = {money(c, c.at_risk_cost)} ({c.at_risk_reason})"),
    ]
    return rows


def quality_rows(report: Report) -> Rows:
    """What the figures could not see."""
    q = report.analysis.data_quality
    rejected = ", ".join(f"{k}: {v}" for k, v in sorted(q.rejected.items())) or "none"
    return [
        ("Sequence gaps", f"{q.gaps} ({q.missing_messages} messages lost in transit)"),
        ("Rejected messages", rejected),
        ("Dropped by agents", f"{q.agent_dropped_records} records (agent queue full)"),
        ("Steps with unmeasured phases", f"{q.steps_missing_phases} (their time is counted as 'Other')"),
        *ingest_quality_rows(report.session.counters),
    ]


def ingest_quality_rows(counters: dict[str, Any]) -> Rows:
    """What the recorder itself could not see or keep: agents that joined late (their earlier messages went to a
    collector that stopped or crashed, or were lost), records it dropped, rows it failed to write."""
    rows: Rows = []
    late = counters.get("joined_late") or []
    if late:
        rows.append(("Joined late", f"{len(late)} agent(s); {counters.get('missing_before_join', 0):,} earlier "
                                    "message(s) are not in this session (sent before it listened, or to a collector "
                                    "that stopped)"))
    if counters.get("recorder_dropped_records"):
        rows.append(("Dropped by the recorder", f"{counters['recorder_dropped_records']:,} records (writer behind)"))
    if counters.get("write_errors"):
        rows.append(("Write errors", f"{counters['write_errors']:,} rows not written "
                                     f"({counters.get('last_write_error') or 'no detail'})"))
    return rows


def money(cost: CostBreakdown, value: float) -> str:
    """A money amount with the currency (cents for amounts under 1 would all read 0.00: show 4 decimals)."""
    return f"{cost.currency}{value:,.2f}" if abs(value) >= 1 or value == 0 else f"{cost.currency}{value:.4f}"


def hours_text(hours: float) -> str:
    """Device-hours with 2 decimals, or 3 significant digits for short runs ("0.00" would say nothing); below
    0.0001 h (a third of a second) "< 0.0001", not a number in scientific notation."""
    if hours >= 1 or hours == 0:
        return f"{hours:,.2f}"
    return f"{hours:.3g}" if hours >= 1e-4 else "< 0.0001"


def duration_text(seconds: float) -> str:
    """Seconds as "1 h 02 min", "3 min 05 s" or "12.3 s"."""
    if seconds >= 3600:
        return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"
    if seconds >= 60:
        return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"
    return f"{seconds:.1f} s"


def when_text(ts_s: float) -> str:
    """A Unix time as "YYYY-MM-DD HH:MM:SS UTC", or "n/a" when unknown."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts_s)) if ts_s > 0 else "n/a"

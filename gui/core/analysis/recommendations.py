"""Plain-language recommendations, each tied to the figure that triggered it and the threshold it crossed.

This module owns the thresholds (one table, ``THRESHOLDS``) and the wording. It must never recommend without a
number: every ``Recommendation`` carries the measured value, its unit and the threshold. Qt-free.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np

from ringscope.gui.core.analysis.cost import CostBreakdown
from ringscope.gui.core.analysis.summary import SessionAnalysis


@dataclass(frozen=True, slots=True)
class Threshold:
    """When a recommendation fires: ``value >= limit`` (or ``<=`` when ``below``)."""

    limit: float
    unit: str
    below: bool = False
    why: str = ""


THRESHOLDS: Final[dict[str, Threshold]] = {
    "input_bound": Threshold(0.20, "share of step time", why="data wait this large starves the accelerator"),
    "comm_bound": Threshold(0.20, "share of step time", why="exposed AllReduce this large is not hidden"),
    "straggler": Threshold(0.05, "share of step time", why="one rank makes all the others wait"),
    "checkpoint_risk_hours": Threshold(2.0, "hours since last checkpoint", why="a crash would lose this work"),
    "checkpoint_risk_devices": Threshold(8, "devices", why="many devices multiply the loss"),
    "low_gpu_util": Threshold(50.0, "% median GPU utilization", below=True, why="the GPU mostly sits idle"),
    "data_quality": Threshold(1, "lost or rejected messages", why="figures miss part of the run"),
}


@dataclass(frozen=True, slots=True)
class Recommendation:
    """One piece of advice with the figure behind it."""

    key: str
    severity: str  # "high" | "medium" | "info"
    title: str
    advice: str
    figure: str
    value: float
    unit: str
    threshold: float

    @property
    def evidence(self) -> str:
        """The figure in words: e.g. "Data wait = 31.0 % of step time (threshold 20 %)"."""
        return f"{self.figure} = {_fmt(self.value, self.unit)} (threshold {_fmt(self.threshold, self.unit)})"


def recommend(analysis: SessionAnalysis, cost: CostBreakdown) -> list[Recommendation]:
    """Every recommendation the session's figures trigger, most severe first."""
    out: list[Recommendation] = []
    shares = analysis.overall.shares
    t = THRESHOLDS
    if analysis.overall.steps and shares["data_wait"] >= t["input_bound"].limit:
        out.append(Recommendation(
            "input_bound", "high", "The input pipeline is the bottleneck",
            "Use more data-loader workers, prefetch more batches, pin host memory (pin_memory=True with "
            "non_blocking copies), or cache/preprocess data offline (tf.data: .prefetch(AUTOTUNE), parallel map).",
            "Data wait", shares["data_wait"], t["input_bound"].unit, t["input_bound"].limit))
    if analysis.overall.steps and shares["comm_exposed"] >= t["comm_bound"].limit \
            and analysis.wait_diagnosis != "straggler":
        out.append(Recommendation(
            "comm_bound", "high", "Gradient communication is not hidden behind compute",
            "Try gradient compression (DDP fp16/PowerSGD comm hooks), larger gradient buckets (bucket_cap_mb), "
            "gradient accumulation (fewer all-reduces per sample), or a faster interconnect.",
            "Exposed AllReduce", shares["comm_exposed"], t["comm_bound"].unit, t["comm_bound"].limit))
    straggler = analysis.straggler
    if straggler is not None:
        look = {"input_pipeline": "its data loading (disk, decoding, worker count)",
                "hardware": "its GPU (clocks, temperature, power cap)",
                "compute": "its host and GPU load (other processes, placement, batch size)",
                "other": "host-side work between phases on that rank"}.get(straggler.cause, "its host, data and GPU")
        out.append(Recommendation(
            "straggler", "high", f"Rank {straggler.rank} is a straggler",
            f"Every other rank waits for rank {straggler.rank}. Look at {look}. {straggler.cause_detail}.",
            f"Rank {straggler.rank} lateness", straggler.gap_share, t["straggler"].unit, t["straggler"].limit))
    hours_since = cost.at_risk_hours / cost.devices if cost.devices else 0.0
    if hours_since >= t["checkpoint_risk_hours"].limit and cost.devices >= t["checkpoint_risk_devices"].limit:
        out.append(Recommendation(
            "checkpoint_risk", "medium", f"{cost.currency}{cost.at_risk_cost:,.0f} of work is at risk",
            f"{cost.devices} devices have run {hours_since:.1f} h {cost.at_risk_reason}. Checkpoint more often "
            f"(e.g. every 30 min) so a failure loses less.",
            "Time since last checkpoint", hours_since, t["checkpoint_risk_hours"].unit,
            t["checkpoint_risk_hours"].limit))
    low_gpu = _low_gpu_recommendation(analysis)
    if low_gpu is not None:
        out.append(low_gpu)
    quality = analysis.data_quality
    lost = quality.missing_messages + sum(quality.rejected.values()) + quality.agent_dropped_records
    if lost >= t["data_quality"].limit:
        out.append(Recommendation(
            "data_quality", "info", "Some telemetry was lost or rejected",
            "Figures are computed from what arrived; see the data quality section for where the gaps are.",
            "Lost or rejected messages", float(lost), t["data_quality"].unit, t["data_quality"].limit))
    order = {"high": 0, "medium": 1, "info": 2}
    return sorted(out, key=lambda r: order[r.severity])


def _low_gpu_recommendation(analysis: SessionAnalysis) -> Recommendation | None:
    """One recommendation for all mostly idle GPUs together ("7 of 8 GPUs ~45 % busy"), never one GPU named as if
    it were alone; a single idle GPU among busy ones is named."""
    limit = THRESHOLDS["low_gpu_util"]
    measured = [g for g in analysis.gpus if g.util_p50 is not None]
    idle = sorted((g for g in measured if g.util_p50 is not None and g.util_p50 <= limit.limit),
                  key=lambda g: g.util_p50 if g.util_p50 is not None else 0.0)
    if not idle:
        return None
    medians = [g.util_p50 for g in idle if g.util_p50 is not None]
    typical = float(np.median(medians))
    advice = ("Raise the batch size, overlap data loading, or use fewer GPUs; the idle share above says where the "
              "time goes.")
    if len(idle) == 1:
        name = f"{idle[0].host}:{idle[0].gpu_index}"
        return Recommendation(
            "low_gpu_util", "medium",
            f"GPU {name} is mostly idle ({typical:.0f} % busy)" + (f"; the other {len(measured) - 1} are busier"
                                                                  if len(measured) > 1 else ""),
            advice, f"Median utilization of GPU {name}", typical, limit.unit, limit.limit)
    spread = f"{min(medians):.0f}–{max(medians):.0f} %" if max(medians) - min(medians) >= 1 else f"{typical:.0f} %"
    idlest = ", ".join(f"{g.host}:{g.gpu_index}" for g in idle[:3])
    return Recommendation(
        "low_gpu_util", "medium", f"{len(idle)} of {len(measured)} GPUs ~{typical:.0f} % busy",
        f"{advice} Medians range {spread}; idlest: {idlest}{', …' if len(idle) > 3 else ''}.",
        f"Median utilization (median over the {len(idle)} idle GPUs)", typical, limit.unit, limit.limit)


def _fmt(value: float, unit: str) -> str:
    if unit.startswith("share"):
        return f"{value * 100:.1f} % of step time"
    if unit.startswith("%"):
        return f"{value:.0f}{unit}"
    return f"{value:g} {unit}"

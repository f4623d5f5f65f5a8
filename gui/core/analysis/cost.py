"""What the session cost, what the waiting cost (by cause), and what a crash now would throw away.

This module owns the money model: price per GPU-hour x GPUs x wall time, with the idle phases of each rank priced
as waste. It never guesses silently: on a CPU-only run it prices *rank-hours* and says so in ``assumption``; the
price's origin (argument, agent, default) is part of the result. Qt-free; takes a ``SessionAnalysis`` plus the
``SessionData`` it came from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np

from ringscope.gui.core.analysis.summary import SessionAnalysis, phase_seconds
from ringscope.gui.core.session_data import SessionData

DEFAULT_PRICE_PER_GPU_HOUR: Final[float] = 2.50
"""USD per GPU-hour used when neither the user nor an agent gave a price (roughly an on-demand A100 hour)."""
CURRENCY: Final[str] = "$"

WASTE_CAUSES: Final[dict[str, str]] = {
    "allreduce_stall": "AllReduce stall",
    "data_loader_idle": "Data-loader idle",
    "other": "Other idle",
}
"""Cost-of-waiting causes -> labels. They map to the phases comm_exposed, data_wait and other."""
PHASE_OF_CAUSE: Final[dict[str, str]] = {"allreduce_stall": "comm_exposed", "data_loader_idle": "data_wait",
                                          "other": "other"}


@dataclass(frozen=True, slots=True)
class CostBreakdown:
    """Money figures of a session. ``unit`` is "GPU-hours" or "rank-hours" (CPU-only runs)."""

    price_per_gpu_hour: float
    price_source: str  # "argument" | "agent" | "default"
    currency: str
    devices: int
    unit: str
    assumption: str
    duration_s: float
    device_hours: float
    cost_total: float
    waste_hours: dict[str, float]
    waste_cost: dict[str, float]
    at_risk_since_s: float
    at_risk_hours: float
    at_risk_cost: float
    at_risk_reason: str
    waste_measured: bool = True  # False when no step's phases were measured (Keras fit): waiting is unknown, not 0

    @property
    def waste_total(self) -> float:
        """Money spent waiting, all causes."""
        return sum(self.waste_cost.values())

    @property
    def waste_share(self) -> float:
        """Waste as a share of the total cost (0 when nothing was spent)."""
        return self.waste_total / self.cost_total if self.cost_total > 0 else 0.0


def resolve_price(argument: float | None, session: SessionData) -> tuple[float, str]:
    """The price to use and where it came from: the argument, else an agent's Hello, else the default."""
    if argument is not None:
        if argument < 0:
            raise ValueError(f"price per GPU-hour must be >= 0, got {argument}; pass e.g. 2.5 (currency per hour)")
        return float(argument), "argument"
    sent = [h.price_per_gpu_hour for h in session.agents if h.price_per_gpu_hour is not None]
    if sent:
        return float(max(sent)), "agent"
    return DEFAULT_PRICE_PER_GPU_HOUR, "default"


def estimate_cost(analysis: SessionAnalysis, session: SessionData, price_per_gpu_hour: float | None = None,
                  *, now_s: float | None = None) -> CostBreakdown:
    """Cost so far, cost of waiting by cause, and work at risk since the last checkpoint.

    ``now_s`` is the end of the priced span (default: the last step's end); a live window passes the clock.
    """
    price, source = resolve_price(price_per_gpu_hour, session)
    devices, unit, assumption = _devices(analysis, session)
    end_s = max(analysis.end_s, now_s or analysis.end_s)
    # the devices are held from the first process's start (imports, process-group set-up), not from the first step
    start_s = min([analysis.start_s, *(h.started_s for h in session.agents)]) if analysis.steps_total else \
        analysis.start_s
    duration_s = max(0.0, end_s - start_s)
    device_hours = devices * duration_s / 3600.0
    # Each rank is one device: its idle seconds are that device's idle seconds. Warm-up steps count here (the
    # money is spent), unlike in the steady-state shares. Every step's: a live store's running totals where its
    # columns hold the recent steps only.
    totals = session.phase_totals if session.phase_totals is not None else \
        {phase: float(seconds.sum()) for phase, seconds in phase_seconds(session.steps).items()}
    waste_hours = {cause: totals[phase] / 3600.0 for cause, phase in PHASE_OF_CAUSE.items()}
    if unit == "GPU-hours" and devices > len(analysis.ranks) > 0:
        scale = devices / len(analysis.ranks)  # several GPUs per rank (model parallel inside): all of them wait
        waste_hours = {k: v * scale for k, v in waste_hours.items()}
    if analysis.checkpoints_s:
        since = analysis.checkpoints_s[-1]
        reason = "since the last checkpoint"
    else:
        since = start_s
        reason = "no checkpoint recorded: the whole session"
    at_risk_hours = devices * max(0.0, end_s - since) / 3600.0
    return CostBreakdown(
        price_per_gpu_hour=price, price_source=source, currency=CURRENCY, devices=devices, unit=unit,
        assumption=assumption, duration_s=duration_s, device_hours=device_hours, cost_total=device_hours * price,
        waste_hours=waste_hours, waste_cost={k: v * price for k, v in waste_hours.items()},
        at_risk_since_s=since, at_risk_hours=at_risk_hours, at_risk_cost=at_risk_hours * price,
        at_risk_reason=reason,
        waste_measured=bool(analysis.steps_total == 0 or (~np.isnan(session.steps["compute_s"])).any()),
    )


def _devices(analysis: SessionAnalysis, session: SessionData) -> tuple[int, str, str]:
    """How many devices are paid for, in which unit, and the assumption behind it."""
    gpu = session.gpu
    sampled = len({(str(h), int(i)) for h, i in zip(gpu["host"], gpu["gpu_index"], strict=False)}) \
        if len(gpu["ts_s"]) else 0
    announced = sum(1 for h in session.agents for d in h.devices if _is_gpu(d))
    gpus = max(sampled, announced)
    ranks = max(len(analysis.ranks), 1 if analysis.steps_total else 0)
    if gpus > 0:
        return max(gpus, ranks), "GPU-hours", f"{max(gpus, ranks)} GPU(s) billed for the whole session"
    return ranks, "rank-hours", (f"no GPU in this run: each of the {ranks} rank(s) is priced as one GPU-hour per "
                                 f"hour (rank-hours), to show what the same run would cost on GPUs")


def _is_gpu(device: dict[str, object]) -> bool:
    """Whether an announced device dict describes a GPU (agents differ in the key they use)."""
    text = " ".join(str(device.get(k, "")) for k in ("kind", "type", "device_type", "name")).lower()
    return "gpu" in text or "cuda" in text


def waste_by_rank(session: SessionData) -> dict[int, float]:
    """Idle seconds per rank (data wait + exposed comm + other), for the views' top-N lists."""
    phases = phase_seconds(session.steps)
    idle = phases["data_wait"] + phases["comm_exposed"] + phases["other"]
    ranks = session.steps["rank"]
    return {int(r): float(idle[ranks == r].sum()) for r in np.unique(ranks)}

"""The four phases of a data-parallel step: names, labels, colors and descriptions — the single source.

Views (Qt) and reports (matplotlib, HTML) take their phase colors and words from here, so a phase looks the same
in every chart, table, tooltip and export (shared/UI.md: one color per phase everywhere). This module must stay
Qt-free and dependency-free: plain data only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True, slots=True)
class Phase:
    """One phase of a step: ``name`` is the key used in code (and the Step field stem), ``color`` a hex RGB."""

    name: str
    label: str
    color: str
    description: str


DATA_WAIT: Final = Phase(
    "data_wait", "Data wait", "#f28e2b",
    "Time the training loop was blocked waiting for its batch (data-loader idle).",
)
COMPUTE: Final = Phase(
    "compute", "Compute", "#4e79a7",
    "Forward + backward + optimizer work of the rank.",
)
COMM_EXPOSED: Final = Phase(
    "comm_exposed", "Exposed comm (AllReduce stall)", "#e15759",
    "Gradient all-reduce time the rank actually waited for, including waiting for the slowest rank.",
)
OTHER: Final = Phase(
    "other", "Other", "#bab0ac",
    "Step time not in the three measured phases (step − data wait − compute − exposed comm, never below 0).",
)

PHASES: Final[tuple[Phase, ...]] = (DATA_WAIT, COMPUTE, COMM_EXPOSED, OTHER)
"""In stacking order (bottom to top in columns, left to right in bars)."""

PHASE_BY_NAME: Final[dict[str, Phase]] = {p.name: p for p in PHASES}

IDLE_PHASES: Final[tuple[str, ...]] = (DATA_WAIT.name, COMM_EXPOSED.name, OTHER.name)
"""Phases in which the accelerator is not computing: the idle share that costs money (MEASURING.md)."""

NO_DATA_COLOR: Final = "#d9d9d9"
"""Grey for missing data (no data is not zero)."""

ALERT_COLOR: Final = "#d62728"
"""Red for an idle GPU or a flagged rank."""

CAUSE_COLORS: Final[dict[str, str]] = {
    "allreduce_stall": COMM_EXPOSED.color, "data_loader_idle": DATA_WAIT.color, "other": OTHER.color}
"""The colour of each cause of waste (``WASTE_CAUSES`` of ``analysis.cost``): its phase's colour."""

__all__ = ["ALERT_COLOR", "CAUSE_COLORS", "COMM_EXPOSED", "COMPUTE", "DATA_WAIT", "IDLE_PHASES", "NO_DATA_COLOR",
           "OTHER", "PHASES", "PHASE_BY_NAME", "Phase"]

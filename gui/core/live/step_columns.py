"""The live store's steps as columns, both ways: steps taken into the per-rank rings many at once, as a matrix (those
the collector handed over since the last frame, or a recording's when a session is reopened or the ingest process
restarted), and the rings' recent steps exported as ``SessionData`` columns (live cost and analysis).

What it owns: the layout of a rank's ring of recent steps (``RECENT_FIELDS`` plus ``step``, ``end_s`` and
``first_batch``, ``recent_steps`` slots per rank, slot = step count modulo the ring size; the store keeps them
slot-major, ``recent_steps`` x rank rows) as far as loading and exporting need it, and the health records as
columns.

Locking: no lock of its own; everything here is called with the owning ``LiveStore``'s ``_lock`` held.

What it must never do: import Qt, or turn a missing reading into 0 (it stays NaN).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from operator import attrgetter
from typing import Final

import numpy as np

from ringscope.agent.schema import FIELDS, Health, Step
from ringscope.gui.core.analysis.summary import phase_seconds
from ringscope.gui.core.session_data import Columns, empty_columns

log = logging.getLogger(__name__)

RECENT_FIELDS: Final = ("step_s", "data_wait_s", "compute_s", "comm_s", "comm_exposed_s", "samples", "loss")
"""The per-step figures each rank's ring keeps (float32, NaN when not reported)."""
PHASE_TOTALS: Final[tuple[str, ...]] = ("data_wait", "compute", "comm_exposed", "other", "unmeasured")
"""The phases ``SessionData.phase_totals`` sums (``phase_seconds``' keys)."""


STEP_COLUMNS: Final[tuple[str, ...]] = tuple(spec.name for spec in FIELDS["step"])
"""The columns of a step matrix (``step_matrix``, ``take_recent``): a step's fields in schema order."""
COLUMN: Final[dict[str, int]] = {name: i for i, name in enumerate(STEP_COLUMNS)}
_VALUES: Final = attrgetter(*STEP_COLUMNS)


def empty_recent(slots: int) -> dict[str, np.ndarray]:
    """Rings of ``slots`` recent steps, for no rank row yet (slot-major: slots x rank rows)."""
    recent: dict[str, np.ndarray] = {name: np.zeros((slots, 0), np.float32) for name in RECENT_FIELDS}
    recent.update(step=np.zeros((slots, 0), np.int64), end_s=np.zeros((slots, 0)),
                  first_batch=np.zeros((slots, 0), bool))
    return recent


def grown_recent(recent: dict[str, np.ndarray], cap: int, rows: int, filled: int) -> dict[str, np.ndarray]:
    """The rings with room for ``cap`` rank rows, the ``filled`` slots of the first ``rows`` copied. The rest is
    only reserved (zeroed memory the kernel maps when first written). Slot-major (slot k of every rank contiguous;
    a slot past a rank's ``count`` holds nothing and is never read): the first steps of 8 192 ranks map one slot's
    pages, not all 84 MB of rings as rank-major rows did."""
    def reserved(array: np.ndarray) -> np.ndarray:
        out = np.zeros((array.shape[0], cap), dtype=array.dtype)
        out[:filled, :rows] = array[:filled, :rows]
        return out

    return {name: reserved(array) for name, array in recent.items()}


def step_matrix(steps: Sequence[Step]) -> np.ndarray:
    """Steps as one float64 matrix (a row per step, ``STEP_COLUMNS``; NaN for a missing figure, 0/1 for a flag)."""
    values = _VALUES
    return np.array([values(s) for s in steps], dtype=np.float64).reshape(len(steps), len(STEP_COLUMNS))


def pending_matrix(pending: Sequence[tuple[str, Step]]) -> tuple[np.ndarray, list[str], int]:
    """Steps handed over as (agent id, step): their step matrix, their agents, and how many were left out because
    they cannot be one (a hand-made record; a decoded one always can): each of those alone is lost, and counted."""
    try:
        return step_matrix([step for _, step in pending]), [agent for agent, _ in pending], 0
    except (TypeError, ValueError):
        good = [item for item in pending if _fits(item[1])]
        return step_matrix([step for _, step in good]), [agent for agent, _ in good], len(pending) - len(good)


def _fits(step: Step) -> bool:
    try:
        step_matrix([step])
        return True
    except (TypeError, ValueError):
        log.debug("live store: could not take %r", step, exc_info=True)
        return False


def add_phase_totals(totals: dict[str, float], steps: Columns) -> float:
    """Each phase's seconds over these steps added to ``totals``, split as ``phase_seconds`` splits them; returns
    their latest finite end (NaN: none)."""
    for phase, seconds in phase_seconds(steps).items():
        totals[phase] += float(seconds.sum())
    end = steps["end_s"]
    finite = end[np.isfinite(end)]
    return float(finite.max()) if finite.size else math.nan


def into_ring(ring: np.ndarray, written: int, values: np.ndarray) -> None:
    """``values`` into a ring that has had ``written`` values so far (the newest ``ring.size`` of them fit)."""
    tail = values[-ring.size:]
    ring[(written + values.size - tail.size + np.arange(tail.size)) % ring.size] = tail


def columns_matrix(cols: Columns) -> np.ndarray:
    """Step columns (a recording's) as a step matrix; a column the recording lacks is NaN."""
    out = np.full((len(cols["rank"]), len(STEP_COLUMNS)), np.nan)
    for name, i in COLUMN.items():
        if name in cols:
            out[:, i] = np.asarray(cols[name], dtype=np.float64)
    return out


def take_recent(recent: dict[str, np.ndarray], rank: dict[str, np.ndarray], rows: np.ndarray,
                steps: np.ndarray) -> None:
    """Steps (a step matrix, in arrival order) of rank rows ``rows`` into the rings as taking them one by one
    would: each row's newest ``recent_steps`` go into its next slots; its step count, samples and current step
    (its last step's) follow. One pass over all of them, no loop per rank."""
    size_r = recent["step"].shape[0]  # slot-major: slots x rank rows
    n = rows.size
    order = np.argsort(rows, kind="stable")  # by row, arrival order within a row
    by_row = rows[order]
    first = np.r_[True, by_row[1:] != by_row[:-1]]
    group = np.cumsum(first) - 1
    starts = np.flatnonzero(first)
    sizes = np.diff(np.r_[starts, n])
    within = np.arange(n) - starts[group]
    keep = within >= sizes[group] - size_r  # a row given more steps than its ring holds keeps its newest
    slots = ((rank["count"][by_row].astype(np.int64) + within) % size_r)[keep]
    at, into = order[keep], by_row[keep]
    recent["step"][slots, into] = steps[at, COLUMN["step"]]
    recent["end_s"][slots, into] = steps[at, COLUMN["end_s"]]
    recent["first_batch"][slots, into] = steps[at, COLUMN["first_batch"]] > 0  # NaN (not sent): not a first batch
    for name in RECENT_FIELDS:
        recent[name][slots, into] = steps[at, COLUMN[name]]
    grown = by_row[starts]
    rank["count"][grown] += sizes
    rank["current_step"][grown] = steps[order[starts + sizes - 1], COLUMN["step"]]
    samples = steps[order, COLUMN["samples"]]
    have = ~np.isnan(samples)
    if have.any():  # NaN until a rank reports samples: "not reported" is not 0
        total = np.bincount(group[have], weights=samples[have], minlength=starts.size)
        reported = np.bincount(group[have], minlength=starts.size) > 0
        rows_reported = grown[reported]
        rank["samples"][rows_reported] = np.nan_to_num(rank["samples"][rows_reported]) + total[reported]


def recent_columns(rank_of_row: np.ndarray, recent: dict[str, np.ndarray], n: int) -> Columns:
    """The recent steps of the first ``n`` rank rows as step columns, sorted by rank and step. ``recent``: each
    field as (rank rows x slots), step -1 in a slot that holds no step."""
    if n == 0:
        return empty_columns("step")
    filled = recent["step"][:n] >= 0
    rows = np.nonzero(filled)
    out = empty_columns("step")
    length = len(rows[0])
    for name in out:
        out[name] = np.full(length, np.nan)
    out["rank"] = rank_of_row[:n][rows[0]].astype(np.float64)
    out["step"] = recent["step"][:n][filled].astype(np.float64)
    out["end_s"] = recent["end_s"][:n][filled]
    out["first_batch"] = recent["first_batch"][:n][filled].astype(np.float64)
    for name in RECENT_FIELDS:
        out[name] = recent[name][:n][filled].astype(np.float64)
    out["start_s"] = out["end_s"] - out["step_s"]
    order = np.lexsort((out["step"], out["rank"]))
    return {name: column[order] for name, column in out.items()}


def health_columns(records: Sequence[Health]) -> Columns:
    """The agents' latest health records as columns (NaN where a figure is missing)."""
    health = empty_columns("health")
    if records:
        health = {name: np.array([np.nan if getattr(h, name) is None else float(getattr(h, name))
                                  for h in records]) for name in health}
    return health

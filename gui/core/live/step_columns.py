"""The live store's steps as columns, both ways: a recording's steps loaded into the per-rank rings at once (a
reopened session, a restarted ingest process), and the rings' recent steps exported as ``SessionData`` columns (live
cost and analysis); and every step's phase seconds summed as it arrives (``add_phases``).

What it owns: the layout of a rank's ring of recent steps (``RECENT_FIELDS`` plus ``step``, ``end_s`` and
``first_batch``, ``recent_steps`` slots per rank, slot = step count modulo the ring size; the store keeps them
slot-major, ``recent_steps`` x rank rows) as far as loading and exporting need it, and the health records as
columns.

Locking: no lock of its own; everything here is called with the owning ``LiveStore``'s ``_lock`` held.

What it must never do: import Qt, or turn a missing reading into 0 (it stays NaN).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Final

import numpy as np

from ringscope.agent.schema import Health, Step
from ringscope.gui.core.analysis.summary import OTHER_RESOLUTION_S
from ringscope.gui.core.session_data import Columns, empty_columns

RECENT_FIELDS: Final = ("step_s", "data_wait_s", "compute_s", "comm_s", "comm_exposed_s", "samples", "loss")
"""The per-step figures each rank's ring keeps (float32, NaN when not reported)."""
PHASE_TOTALS: Final[tuple[str, ...]] = ("data_wait", "compute", "comm_exposed", "other", "unmeasured")
"""The phases ``SessionData.phase_totals`` sums (``phase_seconds``' keys)."""


def add_phases(totals: dict[str, float], s: Step) -> None:
    """One step into running phase totals, split as ``phase_seconds`` splits it (~0.5 µs; numpy would be ~20)."""
    step = s.step_s if s.step_s == s.step_s else 0.0  # NaN != NaN
    if s.compute_s is None or s.compute_s != s.compute_s:
        totals["unmeasured"] += step
        return
    data = s.data_wait_s if s.data_wait_s is not None and s.data_wait_s == s.data_wait_s else 0.0
    comm = s.comm_exposed_s if s.comm_exposed_s is not None and s.comm_exposed_s == s.comm_exposed_s else 0.0
    other = step - data - s.compute_s - comm
    totals["data_wait"] += data
    totals["compute"] += s.compute_s
    totals["comm_exposed"] += comm
    totals["other"] += other if other >= OTHER_RESOLUTION_S else 0.0


def load_recent(recent: dict[str, np.ndarray], rank: dict[str, np.ndarray], rows: np.ndarray, cols: Columns) -> None:
    """Each rank row's last steps of ``cols`` (the recorded steps, rows ``rows``) into its ring, in step order, as
    taking them one by one would; its step count, samples and current step follow."""
    size_r = recent["step"].shape[0]  # slot-major: slots x rank rows
    order = np.lexsort((cols["step"], rows))
    rows_sorted = rows[order]
    starts = np.flatnonzero(np.r_[True, rows_sorted[1:] != rows_sorted[:-1]])
    sizes = np.diff(np.r_[starts, rows_sorted.size])
    for start, size in zip(starts.tolist(), sizes.tolist(), strict=True):
        row = int(rows_sorted[start])
        before = int(rank["count"][row])
        take = order[start + max(0, size - size_r): start + size]
        slots = (before + max(0, size - size_r) + np.arange(take.size)) % size_r
        recent["step"][slots, row] = cols["step"][take].astype(np.int64)
        recent["end_s"][slots, row] = cols["end_s"][take]
        recent["first_batch"][slots, row] = np.nan_to_num(cols["first_batch"][take].astype(np.float64)) > 0
        for name in RECENT_FIELDS:
            recent[name][slots, row] = cols[name][take].astype(np.float64)
        rank["count"][row] = before + size
        samples = cols["samples"][order[start:start + size]].astype(np.float64)
        if not np.isnan(samples).all():
            rank["samples"][row] = np.nan_to_num(rank["samples"][row]) + float(np.nansum(samples))
        rank["current_step"][row] = float(np.nanmax(cols["step"][order[start:start + size]]))


def fitting_ranks(ranks: np.ndarray, known: Collection[int], room: int) -> np.ndarray:
    """Which of these steps' ranks have a row (``known``) or can still get one (the first ``room`` new ranks)."""
    known_set = set(known)
    new = [int(r) for r in np.unique(ranks).tolist() if int(r) not in known_set]
    allowed = known_set | set(new[:max(0, room)])
    return np.isin(ranks, np.fromiter(allowed, np.int64, len(allowed)))


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

"""Export time of a large session: analysis, HTML, PDF, CSV and trace for many ranks x steps.

    python -m benchmarks report

Builds a synchronous data-parallel session in memory (numpy, one straggler) and times each stage once, in one run.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from gui.core.analysis.summary import analyze
from gui.core.report import build_report, export
from gui.core.session_data import SessionData, empty_columns


def large_session(ranks: int, steps: int, seed: int = 0) -> SessionData:
    """``ranks`` x ``steps`` Step rows (rank 1 late by 20 ms), built column-wise."""
    rng = np.random.default_rng(seed)
    data = np.full((steps, ranks), 0.004)
    compute = 0.05 + rng.uniform(-5e-4, 5e-4, (steps, ranks))
    compute[:, 1] += 0.020
    ready = data + compute
    exposed = ready.max(axis=1, keepdims=True) + 0.02 - ready
    step_s = ready.max(axis=1) + 0.022
    starts = 1.7e9 + np.concatenate([[0.0], np.cumsum(step_s)[:-1]])
    columns = empty_columns("step")
    n = ranks * steps
    values = {
        "rank": np.tile(np.arange(ranks), steps), "step": np.repeat(np.arange(steps), ranks),
        "start_s": np.repeat(starts, ranks), "end_s": np.repeat(starts + step_s, ranks),
        "step_s": np.repeat(step_s, ranks), "data_wait_s": data.ravel(), "compute_s": compute.ravel(),
        "comm_s": exposed.ravel(), "comm_exposed_s": exposed.ravel(), "samples": np.full(n, 32.0),
    }
    for name, column in columns.items():
        if name in values:
            columns[name] = values[name].astype(np.float64)
        elif column.dtype == object:
            columns[name] = np.full(n, False if name == "first_batch" else None, dtype=object)
        else:
            columns[name] = np.full(n, np.nan)
    return SessionData(steps=columns, source="benchmark")


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Seconds per stage for one large session."""
    ranks, steps = (16, 500) if quick else (64, 2000)
    session = large_session(ranks, steps)
    rows: list[dict[str, Any]] = []
    note = f"{ranks} ranks x {steps} steps = {ranks * steps:,} step rows"
    started = time.perf_counter()
    analysis = analyze(session)
    rows.append({"benchmark": "report", "metric": "analyze", "value": time.perf_counter() - started, "unit": "s",
                 "note": note + f"; straggler found: rank {analysis.straggler.rank if analysis.straggler else None}"})
    report = build_report(session)
    with tempfile.TemporaryDirectory() as folder:
        for kind, name in (("html", "r.html"), ("pdf", "r.pdf"), ("csv", "csv"), ("trace", "t.json")):
            started = time.perf_counter()
            paths = export(report, kind, Path(folder) / name)
            elapsed = time.perf_counter() - started
            size = sum(p.stat().st_size for p in paths)
            rows.append({"benchmark": "report", "metric": f"export {kind}", "value": elapsed, "unit": "s",
                         "note": f"{note}; {size / 1e6:.1f} MB"})
    return rows


if __name__ == "__main__":
    for row in run(quick=True):
        print(row)

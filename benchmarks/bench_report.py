"""Export time of a large session: analysis, HTML, PDF, CSV and trace for many ranks x steps.

    python -m benchmarks report

Builds a synchronous data-parallel session in memory (numpy, one straggler) and times each stage once, in one run.
The full run adds what ``ringscope report S.db --html --pdf`` costs on a 1-hour 256-rank session file (2 steps/s per
rank, written by ``bench_reopen.write_session``): load, analysis, HTML, PDF.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.timing import seconds_row, timed
from ringscope.gui.core.analysis.summary import analyze
from ringscope.gui.core.report import build_report, export
from ringscope.gui.core.session_data import SessionData, empty_columns


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
    if not quick:
        rows += hour_rows()
    return rows


def hour_rows(ranks: int = 256, duration_s: float = 3600.0, steps_per_s: float = 2.0) -> list[dict[str, Any]]:
    """Seconds to load, analyze and export (HTML, PDF) a 1-hour session file of ``ranks`` ranks."""
    from benchmarks.bench_reopen import write_session
    from ringscope.gui.core.ingest.session_reader import load

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "hour.db"
        count = write_session(path, ranks, duration_s, steps_per_s)
        note = f"{ranks} ranks x {duration_s / 3600:g} h at {steps_per_s:g} steps/s = {count:,} step rows (file)"
        session, took = timed(lambda: load(path))
        rows.append(seconds_row("report", "1 h file: load", took, note))
        report, took = timed(lambda: build_report(session))
        rows.append(seconds_row("report", "1 h file: analysis", took, note))
        for kind in ("html", "pdf"):
            [written], took = timed(lambda kind=kind: export(report, kind, Path(folder) / f"hour.{kind}"))
            rows.append(seconds_row("report", f"1 h file: export {kind}", took,
                                    f"{note}; {written.stat().st_size / 1e6:.2f} MB"))
    return rows


if __name__ == "__main__":
    for row in run(quick=True):
        print(row)

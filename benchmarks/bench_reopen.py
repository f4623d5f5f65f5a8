"""Reopening a long recording: load a session file, rebuild its runs, and draw the whole run in the window.

    python -m benchmarks reopen

Writes a synthetic session file the way the recorder lays it out (one run, ``ranks`` agents, ``steps_per_s`` steps
per second per rank for ``duration_s``, rank 1 a straggler), then times, in one run: ``session.load``,
``replay.runs_from_session`` (the stores the window draws), and the window's frame time over the whole run and
zoomed into one minute (offscreen Qt).
"""

from __future__ import annotations

import json
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.timing import seconds_row, timed
from ringscope.agent.schema import FIELDS, schema_version_str
from ringscope.gui.core.ingest import blocks
from ringscope.gui.core.ingest.session_schema import FORMAT_NAME, INDEXES, create_statements, insert_statement

T0 = 1_700_000_000.0


def write_session(path: Path, ranks: int, duration_s: float, steps_per_s: float, seed: int = 0) -> int:
    """A closed session file with one DDP run; returns the number of step rows."""
    rng = np.random.default_rng(seed)
    steps = int(duration_s * steps_per_s)
    step_s = 1.0 / steps_per_s
    con = sqlite3.connect(path)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=OFF")
    for statement in create_statements():
        con.execute(statement)
    meta = {"format": FORMAT_NAME, "schema_version": schema_version_str(), "schema_major": "1",
            "created_s": repr(T0), "closed_s": repr(T0 + duration_s + 1), "updated_s": repr(T0 + duration_s + 1),
            "run_ids": json.dumps(["bench-run"])}
    con.executemany("INSERT INTO meta VALUES (?, ?)", meta.items())
    hello_cols = [s.name for s in FIELDS["hello"] if s.name != "agent_id"]
    for r in range(ranks):
        values = {"run_id": "bench-run", "host": f"node{r // 8}", "pid": 1000 + r, "rank": r, "local_rank": r % 8,
                  "world_size": ranks, "node_rank": r // 8, "ranks": json.dumps([r]), "framework": "pytorch",
                  "strategy": "ddp", "backend": "gloo", "devices": "[]", "agent_version": "0.1.0",
                  "schema_version": schema_version_str(), "clock_wall_s": T0, "clock_mono_s": 0.0, "started_s": T0}
        con.execute(insert_statement("hello"), (f"agent-{r}", T0, *(values.get(c) for c in hello_cols)))
    step_cols = [s.name for s in FIELDS["step"]]
    chunk = max(1, 200_000 // ranks)
    for lo in range(0, steps, chunk):
        k = np.arange(lo, min(steps, lo + chunk))
        end = T0 + (k + 1) * step_s
        rows = []
        for r in range(ranks):
            compute = step_s * (0.55 if r == 1 else 0.35) + rng.uniform(0, step_s * 0.02, k.size)
            comm = step_s * 0.6 - compute + step_s * 0.05
            data = np.full(k.size, step_s * 0.05)
            values = {"rank": np.full(k.size, r), "step": k, "start_s": end - step_s, "end_s": end,
                      "step_s": np.full(k.size, step_s), "data_wait_s": data, "compute_s": compute,
                      "comm_s": comm, "comm_exposed_s": comm, "samples": np.full(k.size, 32)}
            columns = [values[c].tolist() if c in values else [None] * k.size for c in step_cols]
            columns[step_cols.index("first_batch")] = [0] * k.size
            rows.extend(zip([f"agent-{r}"] * k.size, (end + 0.05).tolist(), *columns, strict=True))
        last = con.execute('SELECT IFNULL(MAX(rowid), 0) FROM "step"').fetchone()[0]
        con.executemany(insert_statement("step"), rows)
        blocks.write(con, rows, last + 1)  # as the recorder does
    for statement in INDEXES:
        con.execute(statement)
    con.commit()
    con.close()
    return steps * ranks


def run(quick: bool = False) -> list[dict[str, Any]]:
    """Seconds to load and rebuild a long session, and the window's frame time over it."""
    from ringscope.gui.core.ingest.session_reader import load
    from ringscope.gui.core.live.replay import runs_from_session

    ranks, duration_s, rate = (32, 600.0, 2.0) if quick else (256, 3600.0, 2.0)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "long.db"
        count, took = timed(lambda: write_session(path, ranks, duration_s, rate))
        note = (f"{ranks} ranks x {duration_s / 3600:g} h at {rate:g} steps/s per rank = {count:,} step rows, "
                f"{path.stat().st_size / 1e6:.0f} MB file")
        rows.append(seconds_row("reopen", "write synthetic session", took, note))
        data, took = timed(lambda: load(path))
        rows.append(seconds_row("reopen", "load session file", took, note))
        runs, took = timed(lambda: runs_from_session(data))
        rows.append(seconds_row("reopen", "rebuild runs for the window", took, "vectorized bulk load into the live "
                                                                                 "store"))
        store = runs.store("bench-run")
        assert store is not None
        snap = store.snapshot()
        rows.append({"benchmark": "reopen", "metric": "whole-run bucket width", "value": snap.bucket_s, "unit": "s",
                     "note": f"{int(np.isfinite(snap.cluster_phase_s['step']).sum())} buckets hold the run"})
        rows.extend(_frames(runs, quick))
    return rows


def _frames(runs: Any, quick: bool) -> list[dict[str, Any]]:
    """Frame time of the read-only window over the reopened run: whole run, then zoomed into one minute."""
    try:
        from ringscope.gui.app import build_viewer  # the window side of reopening (views)
    except ImportError:
        return [{"benchmark": "reopen", "metric": "window frame", "value": float("nan"), "unit": "ms",
                 "note": "ringscope.gui.app.build_viewer not available"}]
    import os

    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6 import QtWidgets

    app = QtWidgets.QApplication.instance() or QtWidgets.QApplication([])
    parts = build_viewer(runs=runs)
    window = parts.window
    window.resize(1600, 1000)
    window.show()
    out = []
    for label, zoom in (("whole run", None), ("zoomed to 60 s", 60.0)):
        if zoom is None:
            window.time_range.show_whole_run()
        else:
            window.zoom_to_last(zoom)
        times = []
        for _ in range(10 if quick else 30):
            window._last_full_render = 0.0  # force a full redraw, as when a run changes
            started = time.perf_counter()
            window.render_frame()
            app.processEvents()
            times.append((time.perf_counter() - started) * 1e3)
        out.append({"benchmark": "reopen", "metric": f"window frame, {label}", "value": float(np.median(times)),
                    "unit": "ms", "note": f"median of {len(times)} forced redraws, p95 "
                                          f"{float(np.percentile(times, 95)):.1f} ms"})
    parts.close()
    return out


if __name__ == "__main__":
    for row in run(quick=True):
        print(row)

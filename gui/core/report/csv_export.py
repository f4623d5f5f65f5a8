"""Raw CSV exports of a session: steps.csv, devices.csv (GPU samples), hosts.csv and events.csv.

Owns the column order of the CSV files (schema order, plus ``other_s`` on steps). Missing readings are written
as empty cells, never 0. Must never import Qt.
"""

from __future__ import annotations

import csv
import math
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ringscope.agent.schema import FIELD_NAMES
from ringscope.gui.core.analysis.summary import phase_seconds
from ringscope.gui.core.report.html import give_user_mode
from ringscope.gui.core.report.progress import Progress
from ringscope.gui.core.session_data import Columns, SessionData

ROWS_PER_PROGRESS: int = 20_000


def write_csv(session: SessionData, directory: str | Path, progress: Progress | None = None) -> list[Path]:
    """Write the CSV files into ``directory`` (created if needed); return their paths."""
    progress = progress or Progress()
    out_dir = Path(directory)
    out_dir.mkdir(parents=True, exist_ok=True)
    steps = dict(session.steps)
    steps["other_s"] = phase_seconds(session.steps)["other"]
    tables: list[tuple[str, Columns, Sequence[str]]] = [
        ("steps.csv", steps, [*FIELD_NAMES["step"], "other_s", *_extra(session.steps, "step")]),
        ("devices.csv", session.gpu, [*FIELD_NAMES["gpu"], *_extra(session.gpu, "gpu")]),
        ("hosts.csv", session.host, [*FIELD_NAMES["host"], *_extra(session.host, "host")]),
    ]
    # Every file goes to a temporary name first and all are renamed at the end: a cancelled export leaves
    # neither a half-written file nor a mix of new and old files.
    pending: list[tuple[Path, Path]] = []
    try:
        for number, (name, columns, names) in enumerate(tables):
            part = progress.slice(number / 4, (number + 1) / 4)
            pending.append((_write_table(out_dir / name, columns, names, part), out_dir / name))
        events_rows = [[getattr(e, f) for f in FIELD_NAMES["event"]] for e in session.events]
        pending.append((_write_table(out_dir / "events.csv", _as_columns(events_rows), FIELD_NAMES["event"],
                                     progress.slice(0.75, 1.0)), out_dir / "events.csv"))
        progress(1.0, "CSV written")
    except BaseException:
        for tmp, _ in pending:
            tmp.unlink(missing_ok=True)
        raise
    for tmp, final in pending:
        give_user_mode(tmp)
        os.replace(tmp, final)
    return [final for _, final in pending]


def _as_columns(rows: list[list[Any]]) -> Columns:
    names = FIELD_NAMES["event"]
    return {name: np.array([row[i] for row in rows], dtype=object) for i, name in enumerate(names)}


def _extra(columns: Columns, kind: str) -> list[str]:
    return [name for name in ("agent_id", "recv_s") if name in columns and name not in FIELD_NAMES[kind]]


def _cell(value: Any) -> Any:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    return value


def _write_table(path: Path, columns: Columns, names: Sequence[str], progress: Progress) -> Path:
    """Write one table to a temporary file next to ``path`` and return the temporary file's path."""
    count = len(next(iter(columns.values()))) if columns else 0
    arrays = [columns[n] for n in names]
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(names)
            for lo in range(0, count, ROWS_PER_PROGRESS):
                progress(lo / max(count, 1), f"writing {path.name}")
                chunk = [a[lo:lo + ROWS_PER_PROGRESS] for a in arrays]
                chunk = [c.tolist() if isinstance(c, np.ndarray) else list(c) for c in chunk]
                writer.writerows([[_cell(v) for v in row] for row in zip(*chunk, strict=True)])
    except BaseException:
        Path(tmp).unlink(missing_ok=True)  # a cancelled export leaves no half-written file
        raise
    return Path(tmp)

"""Queueing delay of each agent's messages (``ringscope.gui.core.ingest.transit``), whatever the hosts' clocks say."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from ringscope.gui.core.ingest import transit
from ringscope.gui.core.ingest.session_schema import INSERTS, TABLES


def test_queueing_delay_is_measured_above_the_smallest_transit_so_clock_offsets_cancel() -> None:
    tracker = transit.TransitTracker()
    skew = 7.5  # the agent's clock is 7.5 s behind the collector's
    for i in range(100):
        sent = 1000.0 + i
        tracker.observe("quiet", sent, sent + 0.0001)
        tracker.observe("queued", sent - skew, sent + (0.0001 if i < 20 else 0.030))  # 80 % queued ~30 ms
    rows = {row[0]: row for row in tracker.rows({"quiet", "queued"})}
    quiet, queued = (transit.Transit(rows[name][1], rows[name][2], json.loads(rows[name][3]))
                     for name in ("quiet", "queued"))
    assert quiet.quantile(0.5) is not None and quiet.quantile(0.5) < 0.0002
    assert queued.min_transit_s == pytest.approx(skew + 0.0001)
    assert 0.02 <= (queued.quantile(0.5) or 0) <= 0.05  # the 30 ms bin
    assert (queued.quantile(0.1) or 1) < 0.0002
    merged = quiet.merged(queued)
    assert merged.messages == 200 and sum(merged.counts) == 200


def test_the_table_round_trips_through_sqlite_and_damaged_rows_cost_only_themselves(tmp_path: Path) -> None:
    tracker = transit.TransitTracker()
    for i in range(10):
        tracker.observe("a", float(i), i + 0.001 * (i % 3))
    path = tmp_path / "s.db"
    with sqlite3.connect(path) as connection:
        assert transit.load(connection) == {}  # a file of an older version: no table, no figures
        connection.execute(TABLES["transit"])
        connection.executemany(INSERTS["transit"], tracker.rows({"a", "nobody"}))
        connection.execute(INSERTS["transit"], ("broken", 3, 0.1, "not json"))
    with sqlite3.connect(path) as connection:
        loaded = transit.load(connection)
    assert set(loaded) == {"a"} and loaded["a"].messages == 10 and sum(loaded["a"].counts) == 10

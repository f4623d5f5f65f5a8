"""What ``ringscope info`` prints about a session file (``ringscope.gui.core.analysis.info``)."""

from __future__ import annotations

import time
from pathlib import Path

from ringscope.gui.core.analysis.info import summarize
from tests.gui.core.ingest.test_session_reader import _record


def test_summary_has_what_info_prints(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    _record(path)
    summary = summarize(path)
    assert summary["run_ids"] == ["run-1"] and summary["steps_per_rank"] == {"0": 50, "1": 50}
    assert summary["events"] == {"checkpoint_saved": 2} and summary["rejected"] == {"version": 1}
    assert summary["time_span"]["start_s"] == 10.0 and summary["file_bytes"] > 0
    assert {a["host"] for a in summary["agents"]} == {"host0", "host1"} and summary["complete"] is True


def test_a_file_still_being_written_is_summarized_as_incomplete(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    recorder = _record(path, close=False)
    try:
        deadline = time.monotonic() + 10
        while recorder.rows_written < 104 and time.monotonic() < deadline:
            time.sleep(0.02)
        summary = summarize(path)
        assert summary["complete"] is False and summary["steps_total"] == 100
    finally:
        recorder.close()

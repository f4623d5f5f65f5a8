"""``ringscope info`` and ``ringscope report`` on a session holding two runs (a DDP run, then MirroredStrategy)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ringscope.gui.cli import main
from tests.gui.core.analysis.test_runs import _record


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("runs") / "s.db"
    _record(path)
    return path


def test_info_lists_every_run_with_its_identity(two_runs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", str(two_runs)]) == 0
    info = json.loads(capsys.readouterr().out)
    runs = {r["run_id"]: r for r in info["runs"]}
    assert set(runs) == {"run-ddp", "run-tf"}
    assert runs["run-tf"]["framework"] == "tensorflow" and runs["run-tf"]["world_size"] == 2
    assert runs["run-tf"]["state"] == "finished" and runs["run-tf"]["steps"] == 200
    assert set(runs["run-ddp"]) >= {"run_id", "framework", "strategy", "world_size", "ranks", "state", "start_s",
                                    "end_s", "steps", "exit_code"}


def test_report_asks_which_run_then_reports_the_one_named(two_runs: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    html = tmp_path / "r.html"
    assert main(["report", str(two_runs), "--html", str(html)]) == 2
    err = capsys.readouterr().err
    assert "2 runs" in err and "run-ddp" in err and "run-tf" in err and "--run" in err
    assert not html.exists()
    assert main(["report", str(two_runs), "--run", "run-tf", "--html", str(html)]) == 0
    text = html.read_text()
    assert "tensorflow / mirrored" in text and "pytorch / ddp" not in text
    assert "world size 2" in text
    both = tmp_path / "both.html"
    assert main(["report", str(two_runs), "--all-runs", "--html", str(both)]) == 0
    text = both.read_text()
    assert "tensorflow / mirrored" in text and "pytorch / ddp" in text


def test_info_prints_standard_json_for_a_file_holding_infinity(two_runs: Path, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    import shutil
    import sqlite3

    old = tmp_path / "old.db"
    shutil.copy(two_runs, old)
    con = sqlite3.connect(old)  # what a recorder before value checks let through
    con.execute('UPDATE "step" SET end_s = 1e999 WHERE rowid = (SELECT MAX(rowid) FROM "step")')
    con.commit()
    con.close()
    assert main(["info", str(old)]) == 0
    out = capsys.readouterr().out
    assert "Infinity" not in out and "NaN" not in out
    json.loads(out)

"""Exports from the window run on a worker thread with progress and cancel; the cost panel shows real figures."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from PySide6 import QtCore, QtWidgets

from ringscope.agent import wire
from ringscope.agent.schema import Hello, Step
from ringscope.gui.core.analysis.cost import estimate_cost
from ringscope.gui.core.analysis.summary import analyze
from ringscope.gui.core.ingest.recorder import Recorder
from ringscope.gui.views.qt_cost_panel import QtCostPanel
from ringscope.gui.views.qt_report_actions import QtReportExporter, compare_work
from tests.gui.core.analysis.test_analysis import make_session

WAIT_MS = 60_000


class _Gate(QtCore.QRunnable):
    """Occupies the pool's only thread until opened, so a test acts on a job before its worker starts."""

    def __init__(self) -> None:
        super().__init__()
        self.open = threading.Event()

    def run(self) -> None:
        self.open.wait(30)


def _gated_pool() -> tuple[QtCore.QThreadPool, _Gate]:
    pool = QtCore.QThreadPool()
    pool.setMaxThreadCount(1)
    gate = _Gate()
    pool.start(gate)
    return pool, gate


def test_export_runs_off_the_gui_thread_and_finishes(qtbot, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    parent = QtWidgets.QWidget()
    qtbot.addWidget(parent)
    pool, gate = _gated_pool()
    exporter = QtReportExporter(parent, pool)
    threads: list[threading.Thread] = []
    progress: list[float] = []
    job = exporter.start(make_session(ranks=4, steps=60), "html", str(tmp_path / "r.html"), 2.0)
    original = job._progress

    def spy(fraction: float, message: str) -> None:
        threads.append(threading.current_thread())
        original(fraction, message)

    job._progress = spy  # type: ignore[method-assign]
    job.sig_progressed.connect(lambda f, _m: progress.append(f))
    with qtbot.waitSignal(job.sig_finished, timeout=WAIT_MS) as finished:
        gate.open.set()
    assert finished.args == [[str(tmp_path / "r.html")]]
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")
    assert progress and progress[-1] == 1.0
    assert threads and all(t is not threading.main_thread() for t in threads)
    assert job.dialog.wasCanceled() is False  # type: ignore[attr-defined]
    assert exporter.jobs == []


def test_cancel_from_the_progress_dialog_stops_the_export(qtbot, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    parent = QtWidgets.QWidget()
    qtbot.addWidget(parent)
    pool, gate = _gated_pool()
    exporter = QtReportExporter(parent, pool)
    job = exporter.start(make_session(ranks=8, steps=400), "trace", str(tmp_path / "t.json"))
    finished: list[object] = []
    job.sig_finished.connect(finished.append)
    with qtbot.waitSignal(job.sig_cancelled, timeout=WAIT_MS):
        cancel_button = job.dialog.findChild(QtWidgets.QPushButton)  # type: ignore[attr-defined]
        assert cancel_button.text() == "Cancel"
        cancel_button.click()  # what the user does
        gate.open.set()
    assert finished == []
    assert not (tmp_path / "t.json").exists()
    assert not list(tmp_path.iterdir())


def test_failed_export_reports_the_reason(qtbot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    pool, gate = _gated_pool()  # the job runs only once the wait below listens: a fast failure is not missed
    exporter = QtReportExporter(None, pool)
    job = exporter.start(make_session(ranks=2, steps=20), "html", str(tmp_path / "missing" / "r.html"),
                         show_progress=False)
    with qtbot.waitSignal(job.sig_failed, timeout=WAIT_MS) as failed:
        gate.open.set()
    assert "html export to" in failed.args[0] and "missing" in failed.args[0]


def _recorded(path: Path, step_s: float) -> str:
    """A 2-rank session file, written by the real recorder, whose steps all take ``step_s``."""
    recorder = Recorder(path).start()
    for rank in (0, 1):
        hello = Hello("run", f"a{rank}", "host", 10 + rank, rank, rank, 2, 0, [rank], "pytorch", "ddp", "gloo", [],
                      "0.1.0", "1.0", 1.0, 2.0, 3.0)
        steps = [Step(rank, i, 10.0 + i * step_s, 10.0 + (i + 1) * step_s, step_s, 0.01, step_s - 0.03, 0.03, 0.02,
                      32) for i in range(60)]
        recorder.on_batch(wire.Batch(f"a{rank}", 0, 1.0, (1, 0), [hello, *steps]), 20.0)
    recorder.close()
    return str(path)


def test_compare_runs_off_the_gui_thread_and_names_both_sessions(qtbot, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    slow, fast = _recorded(tmp_path / "before.db", 0.2), _recorded(tmp_path / "after.db", 0.1)
    pool, gate = _gated_pool()
    exporter = QtReportExporter(None, pool)
    threads: list[threading.Thread] = []
    work = compare_work(slow, fast, str(tmp_path / "c.html"), 2.0)

    def spied(progress, cancel):  # type: ignore[no-untyped-def]
        threads.append(threading.current_thread())
        return work(progress, cancel)

    job = exporter.start_work("comparison", str(tmp_path / "c.html"), spied, show_progress=False)
    with qtbot.waitSignal(job.sig_finished, timeout=WAIT_MS) as finished:
        gate.open.set()
    assert finished.args == [[str(tmp_path / "c.html")]]
    assert threads and threads[0] is not threading.main_thread()
    text = (tmp_path / "c.html").read_text(encoding="utf-8")
    assert "before.db" in text and "after.db" in text
    assert "<td>200.0</td><td>100.0</td><td>down 50.0 %</td><td>B</td>" in text  # mean step time, ms
    figures = text[text.index("<section id='figures'>"):]
    figures = figures[:figures.index("</section>")]
    assert "e-1" not in figures  # no float residue such as a 3e-15 % "other" share


def test_compare_with_a_bad_session_file_says_which_and_why(qtbot, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    good = _recorded(tmp_path / "good.db", 0.1)
    broken = tmp_path / "broken.db"
    broken.write_bytes(b"not a database at all" * 100)
    pool, gate = _gated_pool()
    exporter = QtReportExporter(None, pool)
    job = exporter.start_work("comparison", str(tmp_path / "c.pdf"),
                              compare_work(good, str(broken), str(tmp_path / "c.pdf"), None), show_progress=False)
    with qtbot.waitSignal(job.sig_failed, timeout=WAIT_MS) as failed:
        gate.open.set()
    assert "broken.db" in failed.args[0]
    assert not (tmp_path / "c.pdf").exists()


def test_cost_panel_shows_cost_and_waste_by_cause(qtbot) -> None:  # type: ignore[no-untyped-def]
    panel = QtCostPanel()
    qtbot.addWidget(panel)
    session = make_session(ranks=4, steps=100, straggler=1, extra_compute_s=0.03, checkpoint_every=40)
    analysis = analyze(session)
    cost = estimate_cost(analysis, session, 3.0)
    panel.update_from(analysis, cost)
    assert panel.total.text() == f"${cost.cost_total:.4f} so far"
    assert f"${cost.waste_cost['allreduce_stall']:.4f}" in panel.waste["allreduce_stall"].text()
    assert "since the last checkpoint" in panel.at_risk.text()
    assert "4 × $3 per GPU-hour (argument)" in panel.price.text()
    empty = make_session(ranks=1, steps=0, gpu=False)
    panel.update_from(analyze(empty), estimate_cost(analyze(empty), empty))
    assert panel.total.text() == "no data"

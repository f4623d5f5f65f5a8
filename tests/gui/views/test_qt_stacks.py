"""Run ▸ Dump stacks and Run ▸ Telemetry settings… against a real collector (ZeroMQ, random port) and real agents
(``ringscope.agent.runtime``) whose training threads step in this process: the dialogs ask off the GUI thread,
fold what the agents answer, and say why when nothing can answer."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from PySide6 import QtWidgets
from pytestqt.qtbot import QtBot

from ringscope.agent import runtime
from ringscope.agent.heartbeat import COMPUTE
from ringscope.agent.keys import AgentKeys, CollectorKeys
from ringscope.gui.app import build_window
from ringscope.gui.core.ingest.ask import AskError, ask
from ringscope.gui.core.ingest.collector import Collector
from ringscope.gui.core.live.runs import LiveRuns
from ringscope.gui.views.qt_main_window import QtMainWindow
from ringscope.gui.views.qt_preferences import Preferences
from ringscope.gui.views.qt_stacks import QtStacksDialog

WAIT_MS = 20_000


def forward_backward(stop: threading.Event) -> None:
    """Where the training threads sit at first (the name the stacks must show)."""
    stop.wait(0.2)  # the line the stacks must show


def optimizer_step(stop: threading.Event) -> None:
    """Where they sit after ``Training.move_on`` (a Refresh must show this one)."""
    stop.wait(0.2)  # the second place


class Training:
    """``ranks`` real agents of run ``run_id``, each with a training thread stepping through ``self.work``."""

    def __init__(self, endpoint: str, ranks: int = 2, run_id: str = "r1", keys: AgentKeys | None = None) -> None:
        self.stop = threading.Event()
        self.work: Callable[[threading.Event], None] = forward_backward
        self.agents = [runtime.start(framework="custom", strategy="none", rank=rank, world_size=ranks, run_id=run_id,
                                     endpoint=endpoint, sample_devices=False, keys=keys) for rank in range(ranks)]
        self.threads = [threading.Thread(target=self._train, args=(rank,), name=f"train-{rank}", daemon=True)
                        for rank in range(ranks)]
        for thread in self.threads:
            thread.start()

    def _train(self, rank: int) -> None:
        agent, step = self.agents[rank], 0
        while not self.stop.is_set():
            started = time.time()
            agent.position().enter(COMPUTE, step)
            self.work(self.stop)
            agent.step(rank, step, started, time.time(), compute_s=0.02)
            step += 1

    def move_on(self) -> None:
        self.work = optimizer_step

    def stack_thresholds(self) -> list[float]:
        return [agent._heartbeat.stack_after_s for agent in self.agents]  # type: ignore[union-attr]

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(5)
        for agent in self.agents:
            agent.close(timeout_s=1.0)


@pytest.fixture
def live() -> Iterator[tuple[Collector, LiveRuns, Training]]:
    """A real collector feeding ``LiveRuns`` and two agents of run r1, heard from (so the collector can route)."""
    runs = LiveRuns()
    collector = Collector("tcp://127.0.0.1:0", [runs]).start()
    training = Training(collector.endpoint)
    try:
        deadline = time.monotonic() + 15
        while not any(row.run_id == "r1" and row.ranks == 2 and row.steps > 2 for row in runs.rows()):
            assert time.monotonic() < deadline, "the agents were not heard from"
            time.sleep(0.05)
        yield collector, runs, training
    finally:
        training.close()
        collector.close()


def _ranks_in(dialog: QtStacksDialog, function: str) -> set[int]:
    """The ranks whose training thread is in ``function``, whatever line below it (a rank caught waking from its
    wait, at another line of ``threading``, is a group of its own: folding is by the exact stack)."""
    assert dialog.folded is not None
    return {rank for group in dialog.folded.training if any(f[2] == function for f in group.frames)
            for rank in group.ranks}


def _answer(qtbot: QtBot, dialog: QtStacksDialog) -> None:
    qtbot.waitUntil(lambda: dialog.job is None and (dialog.folded is not None or dialog.error is not None),
                    timeout=WAIT_MS)


def test_the_stacks_dialog_folds_both_ranks_into_their_training_function_and_refresh_asks_again(
        qtbot: QtBot, live: tuple[Collector, LiveRuns, Training]) -> None:
    collector, _runs, training = live
    dialog = QtStacksDialog(collector.endpoint, "r1", agents=2)
    qtbot.addWidget(dialog)
    dialog.show()
    dialog.refresh()
    # the request runs off the GUI thread: the dialog says so at once and can be used meanwhile
    assert dialog.header.text() == "Asking 2 agents of run r1 for their stacks…"
    assert not dialog.busy.isHidden() and not dialog.refresh_button.isEnabled()
    _answer(qtbot, dialog)
    assert dialog.error is None and dialog.folded is not None
    assert "2 of 2 ranks answered in" in dialog.header.text() and "run r1" in dialog.header.text()
    assert _ranks_in(dialog, "forward_backward") == {0, 1}
    labels = dialog.group_labels()
    if len(dialog.folded.training) == 1:  # nearly always (see _ranks_in)
        assert labels[0] == "Training thread — 1 distinct stack"
        assert labels[1].startswith("  [1] 2 ranks 0-1, phase compute: training thread in wait (")
    else:
        assert labels[0] == f"Training thread — {len(dialog.folded.training)} distinct stacks"
        assert labels[1].startswith("  [1] 1 rank ")
    assert any(label.startswith("  ringscope-heartbeat") for label in labels), labels
    # the first group is selected: its frames, innermost last, with their source lines
    frames = dialog.detail.toPlainText()
    assert "in forward_backward\n    stop.wait(0.2)  # the line the stacks must show" in frames
    assert frames.index("in _train") < frames.index("in forward_backward") < frames.rindex("in wait")
    assert not dialog.busy.isVisible() and dialog.refresh_button.isEnabled()
    assert "forward_backward" in dialog.copy_text()
    assert "forward_backward" in QtWidgets.QApplication.clipboard().text()

    training.move_on()
    time.sleep(0.5)  # every rank is past the old function
    first = dialog.folded
    dialog.refresh_button.click()
    _answer(qtbot, dialog)
    assert dialog.folded is not first and dialog.error is None
    assert _ranks_in(dialog, "optimizer_step") == {0, 1} and not _ranks_in(dialog, "forward_backward")
    frames = dialog.detail.toPlainText()
    assert "in optimizer_step\n    stop.wait(0.2)  # the second place" in frames
    assert "forward_backward" not in frames


def test_an_unknown_run_shows_the_collectors_refusal_in_the_dialog(
        qtbot: QtBot, live: tuple[Collector, LiveRuns, Training]) -> None:
    collector, _runs, _training = live
    dialog = QtStacksDialog(collector.endpoint, "no-such-run")
    qtbot.addWidget(dialog)
    dialog.refresh()
    assert dialog.header.text() == "Asking the agents of run no-such-run for their stacks…"
    _answer(qtbot, dialog)
    assert dialog.folded is None and dialog.error is not None
    text = dialog.header.text()
    assert text.startswith("No stacks: no live agent of") and "no-such-run" in text and "live runs: r1" in text
    assert dialog.refresh_button.isEnabled() and not dialog.copy_button.isEnabled()


def test_no_collector_at_the_endpoint_is_said_in_the_dialog_not_raised(qtbot: QtBot) -> None:
    dialog = QtStacksDialog("tcp://127.0.0.1:1", "r1")
    qtbot.addWidget(dialog)
    dialog.refresh()  # nothing listens there: ask says so within ~3 s
    with pytest.raises(AskError) as raised:  # meanwhile: what the dialog must say, the words of the tools' error
        ask("tcp://127.0.0.1:1", "stacks", run_id="r1")
    qtbot.waitUntil(lambda: dialog.error is not None, timeout=WAIT_MS)
    assert "tcp://127.0.0.1:1" in str(raised.value)
    assert dialog.header.text() == f"No stacks: {raised.value}" and dialog.refresh_button.isEnabled()


def test_the_run_menu_and_the_hang_dialog_dump_the_selected_runs_stacks(
        qtbot: QtBot, live: tuple[Collector, LiveRuns, Training]) -> None:
    collector, runs, _training = live
    window = QtMainWindow(runs, endpoint=collector.endpoint)
    qtbot.addWidget(window)
    window.timer.stop()
    window.refresh_runs()
    assert window.selected_run_id == "r1"
    actions = window.agent_actions
    assert actions.action_stacks.isEnabled() and actions.action_settings.isEnabled()
    assert actions.action_stacks.shortcut().toString() == "Ctrl+D"
    actions.action_stacks.trigger()
    dialog = actions.stacks_dialogs["r1"]
    assert dialog.isVisible() and dialog.header.text() == "Asking 2 agents of run r1 for their stacks…"
    _answer(qtbot, dialog)
    assert _ranks_in(dialog, "forward_backward") == {0, 1}
    # Run ▸ Hang details… of a run that did not hang still offers the stacks as they are now
    hang = window.show_hang_details()
    assert hang is not None and hang.dump_button.isEnabled()
    answered = dialog.folded
    hang.dump_button.click()
    assert actions.stacks_dialogs["r1"] is dialog
    _answer(qtbot, dialog)
    assert dialog.folded is not answered and dialog.error is None
    hang.close()
    dialog.close()


def test_the_asking_actions_say_why_they_are_disabled() -> None:
    read_only = QtMainWindow(LiveRuns(), read_only="session.db")
    no_run = QtMainWindow(LiveRuns(), endpoint="tcp://127.0.0.1:5757")
    try:
        for action in (read_only.agent_actions.action_stacks, read_only.agent_actions.action_settings):
            assert not action.isEnabled()
            assert action.toolTip() == "read-only: a recorded session has no live agents to ask"
        assert not no_run.agent_actions.action_stacks.isEnabled()
        assert no_run.agent_actions.action_stacks.toolTip() == "no run selected: click a run in the runs table"
        assert no_run.agent_actions.dump_stacks() is None  # a shortcut press says why in the status bar
        assert "no run selected" in no_run.statusBar().currentMessage()
    finally:
        for window in (read_only, no_run):
            window.timer.stop()
            window.close()
            window.deleteLater()


def test_telemetry_settings_apply_through_the_windows_ingest_process_and_show_each_ranks_outcome(
        qtbot: QtBot, tmp_path: Path) -> None:
    parts = build_window(bind="tcp://127.0.0.1:0", record_to=tmp_path / "s.db", preferences=Preferences())
    qtbot.addWidget(parts.window)
    window = parts.window
    training = Training(parts.collector.endpoint)
    try:
        def selected() -> None:
            window.refresh_runs()
            assert window.selected_run_id == "r1" and window.run_row is not None and window.run_row.ranks == 2

        qtbot.waitUntil(selected, timeout=WAIT_MS)
        dialog = window.agent_actions.open_settings()
        assert dialog is not None and dialog.isVisible()
        assert not dialog.apply_button.isEnabled()  # nothing ticked: nothing to send
        dialog.stack_check.setChecked(True)
        dialog.stack_after.setValue(1.5)
        dialog.timing.setCurrentIndex(2)  # full: these processes have no DDP integration to take it
        assert dialog.settings() == {"timing": "full", "stack_after_s": 1.5}
        dialog.apply_button.click()
        assert dialog.status.text() == "Asking 2 agents of run r1 to apply DDP timing full, stack after 1.5 s…"
        qtbot.waitUntil(lambda: dialog.answer is not None or dialog.error is not None, timeout=WAIT_MS)
        assert dialog.error is None, dialog.error
        assert dialog.status.text().startswith("2 of 2 ranks answered in")
        assert dialog.status.text().endswith(": 0 applied everything asked")
        assert dialog.outcome.toPlainText() == ("ranks 0-1: applied stack after 1.5 s; refused DDP timing: not "
                                                "adjustable in this process (no integration registered it)")
        assert training.stack_thresholds() == [1.5, 1.5]  # the agents really took it
        dialog.timing.setCurrentIndex(0)
        dialog.stack_after.setValue(2.0)
        dialog.flush_check.setChecked(True)
        dialog.flush_interval.setValue(0.25)
        dialog.apply_button.click()
        qtbot.waitUntil(lambda: dialog.job is None, timeout=WAIT_MS)
        assert dialog.outcome.toPlainText() == "ranks 0-1: applied stack after 2 s, flush interval 0.25 s"
        assert dialog.status.text().endswith(": 2 applied everything asked")
        assert training.stack_thresholds() == [2.0, 2.0]
        assert [agent._publisher.flush_interval_s for agent in training.agents] == [0.25, 0.25]  # type: ignore[union-attr]
        dialog.close()
    finally:
        training.close()
        parts.close()


def test_a_secure_window_asks_with_its_own_access_token(qtbot: QtBot) -> None:
    keys = CollectorKeys.generate()
    parts = build_window(bind="tcp://127.0.0.1:0", record=False, keys=keys, preferences=Preferences())
    qtbot.addWidget(parts.window)
    window = parts.window
    training = Training(parts.collector.endpoint, keys=keys.agent_keys)
    try:
        def selected() -> None:
            window.refresh_runs()
            assert window.selected_run_id == "r1" and window.run_row is not None and window.run_row.ranks == 2

        qtbot.waitUntil(selected, timeout=WAIT_MS)
        dialog = window.agent_actions.dump_stacks()
        assert dialog is not None and dialog.keys == keys.agent_keys  # the window's token, parsed
        _answer(qtbot, dialog)
        assert dialog.error is None, dialog.error
        assert _ranks_in(dialog, "forward_backward") == {0, 1}
        dialog.close()
    finally:
        training.close()
        parts.close()


def test_capture_profile_asks_through_the_window_and_says_which_ranks_cannot_profile(
        qtbot: QtBot, live: tuple[Collector, LiveRuns, Training], tmp_path: Path) -> None:
    """These agents have no framework integration: each rank answers why it cannot profile, and the dialog shows it
    (the real torch/TensorFlow captures are tests/integration/test_runtime_control.py's)."""
    collector, runs, _training = live
    window = QtMainWindow(runs, endpoint=collector.endpoint)
    qtbot.addWidget(window)
    window.timer.stop()
    window.refresh_runs()
    actions = window.agent_actions
    assert actions.action_profile.isEnabled()
    dialog = actions.open_profile()
    assert dialog is not None and dialog.isVisible()
    dialog.ranks.setText("1-0")
    dialog.capture()
    assert "not a rank or a rising range" in dialog.status.text() and dialog.job is None
    dialog.ranks.setText("1")
    dialog.folder.setText(str(tmp_path / "profile"))
    dialog.steps.setValue(3)
    dialog.capture()
    assert dialog.status.text().startswith("Profiling the next 3 step(s) of ranks 1")
    qtbot.waitUntil(lambda: dialog.job is None, timeout=WAIT_MS)
    text = dialog.summary.toPlainText()
    assert "rank 1 (" in text and "no profiler in this process" in text and "rank 0" not in text, text
    assert dialog.status.text() == "No trace could be merged here; see below why"
    assert (tmp_path / "profile" / "summary.txt").read_text().strip() == text.strip()
    dialog.close()

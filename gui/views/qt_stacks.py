"""Run ▸ Dump stacks: every rank's Python stacks now, folded, as people read a dump.

``QtStacksDialog`` asks the window's collector (``ringscope.gui.core.ingest.ask``) for the stacks of every live
agent of one run, folds them (``ringscope.gui.core.analysis.stacks``: identical training-thread stacks grouped,
largest group first) and shows the groups in a tree; the group selected shows its frames below, innermost call
last, as Python prints a traceback. Other threads and the ranks that did not answer (with why, and the native stack
``py-spy`` read from outside when it could) have sections of their own. Copy as text gives the same text as
``ringscope stacks``.

``start_ask`` is the one way the views send a request: the blocking ``ask`` (up to its wait + 15 s) runs on a thread
of its own, never on the GUI thread, and its outcome arrives as a queued signal: the result map, or the
``AskError``'s words as a string. The dialog owns only its widgets and the request in flight.

``RunAgentActions`` puts the window's Run menu entries about one run's agents (Hang details…, Dump stacks, Telemetry
settings…) here rather than in the main window, which stays a composition of views.
"""

from __future__ import annotations

import logging
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from PySide6 import QtCore, QtGui, QtWidgets

from ringscope.agent.keys import AgentKeys
from ringscope.gui.core.analysis.stacks import FoldedStacks, StackGroup, Unanswered, fold, rank_ranges, render_text
from ringscope.gui.core.ingest.ask import AskError, ask
from ringscope.gui.core.launch import connect_endpoint
from ringscope.gui.core.report.profiles import merge
from ringscope.gui.views import theme
from ringscope.gui.views.qt_ask_dialog import QtAskDialog, fixed_pitch_view
from ringscope.gui.views.qt_hang import QtHangDialog
from ringscope.gui.views.qt_profile import PROFILE_TIP, QtProfileDialog
from ringscope.gui.views.qt_run_settings import QtRunSettingsDialog

log = logging.getLogger(__name__)
_running: set[AskJob] = set()  # requests in flight; a finished one is dropped by the next start_ask (GUI thread)

WAIT_S = 3.0
PROFILE_WAIT_S = 120.0  # the profiled steps must run, and the traces be written
"""How long the agents get to answer (as ``ringscope stacks --wait``); a live agent answers within ~0.1 s."""

_PHASE_COLORS = {"data_wait": theme.PHASE_COLORS["data_wait"], "compute": theme.PHASE_COLORS["compute"],
                 "collective": theme.PHASE_COLORS["comm_exposed"]}
"""An agent's position phase in the colour of the step phase it belongs to (a collective is exposed comm)."""

_DETAIL_ROLE = QtCore.Qt.ItemDataRole.UserRole
_Dialog = TypeVar("_Dialog", bound=QtWidgets.QDialog)
STACKS_TIP = "Every rank's Python stacks now, identical ones folded (what `ringscope stacks` prints)"
SETTINGS_TIP = "Change the run's DDP timing, stack threshold or device sampling while it trains"


# ---- Public API --------------------------------------------------------------------------------------------------

class AskJob(QtCore.QObject):
    """One request in flight on a daemon thread of its own (a request to a collector that died waits its whole
    timeout: it must not hold the application's exit)."""

    sig_done = QtCore.Signal(object)
    """The answer: the collector's result map, or a string saying why there is none."""

    def __init__(self, call: Callable[[], dict[str, Any]]) -> None:
        super().__init__()
        self._call = call
        self.outcome: dict[str, Any] | str | None = None
        self.finished = False

    def run(self) -> None:
        """Runs on the request's thread; the emit reaches the receiver queued, on the GUI thread."""
        try:
            self.outcome = self._call()
        except AskError as exc:
            self.outcome = str(exc)
        except Exception as exc:  # a bug: said in the dialog, never raised into a thread nobody watches
            log.exception("a request to the agents failed")
            self.outcome = f"the request failed: {type(exc).__name__}: {exc}"
        self.sig_done.emit(self.outcome)
        self.finished = True


def start_ask(endpoint: str, command: str, receiver: Callable[[Any], object], *, keys: AgentKeys | None,
              **request: Any) -> AskJob:
    """Send ``ask(endpoint, command, **request)`` off the GUI thread; ``receiver`` (a slot of a widget) gets the
    result map, or a string saying why there is none. It is connected before the request starts, so a refusal
    that comes back within a millisecond still reaches it."""
    return start_job(lambda: ask(endpoint, command, keys=keys, **request), receiver, command)


def start_job(call: Callable[[], dict[str, Any]], receiver: Callable[[Any], object], name: str) -> AskJob:
    """Run ``call`` on a daemon thread of its own; ``receiver`` gets its map or the text of its ``AskError``."""
    _running.difference_update([done for done in _running if done.finished])  # released here, on the GUI thread
    job = AskJob(call)
    job.sig_done.connect(receiver)
    _running.add(job)
    threading.Thread(target=job.run, name=f"ringscope-ask-{name}", daemon=True).start()
    return job


def agents_phrase(agents: int | None, run_id: str) -> str:
    """``"2 agents of run r1"`` (or ``"the agents of run r1"`` when the count is not known)."""
    if agents is None or agents <= 0:
        return f"the agents of run {run_id}"
    return f"{agents} agent{'s' if agents != 1 else ''} of run {run_id}"


class QtStacksDialog(QtAskDialog):
    """Non-modal: the window keeps drawing while the user reads. Asks at once when shown by ``refresh``."""

    NO_ANSWER = "No stacks: "

    sig_answered = QtCore.Signal(object)
    """An answer arrived and is shown (argument: the ``FoldedStacks``)."""

    def __init__(self, endpoint: str, run_id: str, *, keys: AgentKeys | None = None, agents: int | None = None,
                 wait_s: float = WAIT_S, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.endpoint, self.run_id, self.keys, self.agents, self.wait_s = endpoint, run_id, keys, agents, wait_s
        self.folded: FoldedStacks | None = None
        self.setWindowTitle(f"Stacks — run {run_id}")
        self.resize(980, 680)
        self.header = self.status_line = QtWidgets.QLabel()
        self.header.setWordWrap(True)
        self.header.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
        self.busy = QtWidgets.QProgressBar()
        self.busy.setRange(0, 0)  # indeterminate: the agents answer when they answer
        self.busy.setMaximumHeight(6)
        self.busy.setTextVisible(False)
        self.busy.hide()
        self.tree = QtWidgets.QTreeWidget()
        self.tree.setHeaderHidden(True)
        self.tree.setRootIsDecorated(True)
        self.tree.currentItemChanged.connect(self._show_detail)
        self.detail = fixed_pitch_view()
        self.detail.setPlaceholderText("The frames of the group selected above, innermost call last.")
        split = QtWidgets.QSplitter(QtCore.Qt.Orientation.Vertical)
        split.addWidget(self.tree)
        split.addWidget(self.detail)
        split.setSizes([230, 390])
        self.refresh_button = QtWidgets.QPushButton("Refresh")
        self.refresh_button.setToolTip("Ask every agent of the run again")
        self.refresh_button.clicked.connect(self.refresh)
        self.copy_button = QtWidgets.QPushButton("Copy as text")
        self.copy_button.setToolTip("The whole dump, as `ringscope stacks` prints it, for a ticket")
        self.copy_button.clicked.connect(self.copy_text)
        self._lay_out([self.header, self.busy], split, [self.refresh_button], [self.copy_button])
        self.copy_button.setEnabled(False)

    def refresh(self) -> None:
        """Ask the run's agents for their stacks (off the GUI thread); the dialog says it is waiting meanwhile."""
        if self.job is not None:
            return  # one request at a time: its answer is on its way
        self._set_status(f"Asking {agents_phrase(self.agents, self.run_id)} for their stacks…")
        self.busy.show()
        self.refresh_button.setEnabled(False)
        self.job = start_ask(self.endpoint, "stacks", self._answered, keys=self.keys, run_id=self.run_id,
                             wait_s=self.wait_s)

    def show_result(self, result: dict[str, Any]) -> None:
        """Show a collector's ``stacks`` result (folded)."""
        self._idle()
        self.error = None
        folded = fold(result)
        self.folded = folded
        answered = folded.ranks - len(folded.unanswered)
        took = f" in {folded.elapsed_s:.2f} s" if folded.elapsed_s is not None else ""
        stamp = result.get("ts_s")
        when = time.strftime("%H:%M:%S", time.localtime(float(stamp))) if isinstance(stamp, int | float) else "?"
        text = (f"<b>{answered} of {folded.ranks} rank{'s' if folded.ranks != 1 else ''} answered{took}</b>"
                f" · run {self.run_id} · asked at {when} · {len(folded.training)} distinct training-thread "
                f"stack{'s' if len(folded.training) != 1 else ''}")
        self._set_status(text, alert=bool(folded.unanswered))
        self._fill_tree(folded)
        self.copy_button.setEnabled(True)
        self.sig_answered.emit(folded)

    def copy_text(self) -> str:
        """Put the folded dump on the clipboard as plain text; returns it ('' before an answer)."""
        text = render_text(self.folded) if self.folded is not None else ""
        if text:
            QtWidgets.QApplication.clipboard().setText(f"Run {self.run_id}: {text}")
        return text

    def group_labels(self) -> list[str]:
        """The tree's lines, sections first then their items (what a reader sees; tests read it)."""
        out = []
        iterator = QtWidgets.QTreeWidgetItemIterator(self.tree)
        while (item := iterator.value()) is not None:
            out.append(("  " if item.parent() is not None else "") + item.text(0))
            iterator += 1
        return out

    # ---- Internals -----------------------------------------------------------------------------------------------

    def _idle(self) -> None:
        self.job = None
        self.busy.hide()
        self.refresh_button.setEnabled(True)

    def _fill_tree(self, folded: FoldedStacks) -> None:
        self.tree.clear()
        first: QtWidgets.QTreeWidgetItem | None = None
        training = self._section(f"Training thread — {len(folded.training)} distinct stack"
                                 f"{'s' if len(folded.training) != 1 else ''}")
        for index, group in enumerate(folded.training, 1):
            item = self._item(training, _training_label(index, group), _group_detail(group), group.phases)
            first = first or item
        if folded.unanswered:
            missing = self._section(f"Did not answer — {len(folded.unanswered)} rank"
                                    f"{'s' if len(folded.unanswered) != 1 else ''}")
            for entry in folded.unanswered:
                label = f"rank {entry.rank} (pid {entry.pid} on {entry.host or '?'}): {entry.note.split('. ')[0]}"
                item = self._item(missing, label, _unanswered_detail(entry), ())
                item.setForeground(0, QtGui.QBrush(QtGui.QColor(theme.ALERT_COLOR)))
                first = first or item
        if folded.others:
            others = self._section(f"Other threads — {len(folded.others)}")
            others.setExpanded(len(folded.others) <= 6)
            for group in folded.others:
                self._item(others, f"{group.thread}: {_ranks(group.ranks)}, in {group.innermost}",
                           _group_detail(group), ())
        if first is not None:
            self.tree.setCurrentItem(first)
        else:
            self.detail.setPlainText("No rank answered and none could be read from outside.")

    def _section(self, title: str) -> QtWidgets.QTreeWidgetItem:
        section = QtWidgets.QTreeWidgetItem(self.tree, [title])
        font = section.font(0)
        font.setBold(True)
        section.setFont(0, font)
        section.setFlags(section.flags() & ~QtCore.Qt.ItemFlag.ItemIsSelectable)
        section.setExpanded(True)
        return section

    def _item(self, section: QtWidgets.QTreeWidgetItem, label: str, detail: str,
              phases: tuple[str, ...]) -> QtWidgets.QTreeWidgetItem:
        item = QtWidgets.QTreeWidgetItem(section, [label])
        item.setData(0, _DETAIL_ROLE, detail)
        item.setToolTip(0, label)
        if len(phases) == 1:
            item.setIcon(0, _phase_icon(phases[0]))
        return item

    def _show_detail(self, item: QtWidgets.QTreeWidgetItem | None, _previous: object = None) -> None:
        detail = item.data(0, _DETAIL_ROLE) if item is not None else None
        if isinstance(detail, str):
            self.detail.setPlainText(detail)


class RunAgentActions(QtCore.QObject):
    """The Run menu's dialogs about the selected run's agents: Hang details… (what the watcher saw), and Dump stacks
    and Telemetry settings… (asking the agents now, through the window's collector).

    ``window``: the ``QtMainWindow`` (its collector endpoint and access token, the selected run, its hang verdicts).
    Both asking actions are disabled, with a tooltip saying why, in a read-only window (a recording has no live
    agents) and while no run is selected. One stacks dialog and one settings dialog per run, reused.
    """

    def __init__(self, window: Any, run_menu: QtWidgets.QMenu) -> None:
        super().__init__(window)
        self.window = window
        self.stacks_dialogs: dict[str, QtStacksDialog] = {}
        self.settings_dialogs: dict[str, QtRunSettingsDialog] = {}
        self.action_stacks = self._add(run_menu, "Dump &stacks", "Ctrl+D", self.dump_stacks)
        self.action_settings = self._add(run_menu, "Telemetry se&ttings…", "", self.open_settings)
        self.action_profile = self._add(run_menu, "Capture &profile…", "", self.open_profile)
        self.profile_dialogs: dict[str, QtProfileDialog] = {}
        window.sig_run_selected.connect(self.refresh_actions)
        self.refresh_actions()

    def unavailable(self, run_id: str | None) -> str:
        """Why the selected run's agents cannot be asked now ('' when they can)."""
        window = self.window
        if window.read_only is not None:
            return "read-only: a recorded session has no live agents to ask"
        if not window.endpoint:
            return "this window has no collector to ask through"
        if window.ingest_failure is not None:
            return "the collector stopped (see the status bar): nothing can reach the agents"
        if run_id is None:
            return "no run selected: click a run in the runs table"
        return ""

    def refresh_actions(self, *_args: object) -> None:
        """Enable the asking actions, or disable them with the reason as their tooltip."""
        reason = self.unavailable(self.window.selected_run_id)
        for action, tip in ((self.action_stacks, STACKS_TIP), (self.action_settings, SETTINGS_TIP),
                            (self.action_profile, PROFILE_TIP)):
            action.setEnabled(not reason)
            action.setToolTip(reason or tip)
            action.setStatusTip(reason or tip)

    def dump_stacks(self, run_id: str | None = None) -> QtStacksDialog | None:
        """Show the stacks dialog of ``run_id`` (default: the selected run) and ask its agents again."""
        dialog = self._show_dialog(self.stacks_dialogs, run_id, self._stacks_dialog)
        if dialog is not None:
            dialog.refresh()
        return dialog

    def open_settings(self, run_id: str | None = None) -> QtRunSettingsDialog | None:
        """Show the telemetry settings dialog of ``run_id`` (default: the selected run)."""
        return self._show_dialog(self.settings_dialogs, run_id, self._settings_dialog)

    def open_profile(self, run_id: str | None = None) -> QtProfileDialog | None:
        """Show the Capture profile dialog of ``run_id`` (default: the selected run)."""
        return self._show_dialog(self.profile_dialogs, run_id, self._profile_dialog)

    def show_hang_details(self) -> QtHangDialog | None:
        """Show the selected run's hang verdict and the stuck ranks' stacks (the last one, if it recovered)."""
        run_id = self.window.selected_run_id
        if run_id is None:
            return None
        live = self.window.current_hang()
        dialog = QtHangDialog(run_id, live or self.window.hangs.get(run_id), self.window, still_hung=live is not None,
                              stacks=self)
        dialog.setAttribute(QtCore.Qt.WidgetAttribute.WA_DeleteOnClose)  # one per opening: freed when closed
        dialog.show()
        return dialog

    def _show_dialog(self, dialogs: dict[str, _Dialog], run_id: str | None,
                     make: Callable[[str], _Dialog]) -> _Dialog | None:
        """The dialog of ``run_id`` (default: the selected run) in ``dialogs``, made by ``make`` the first time,
        shown and raised; None when its agents cannot be asked (the status bar says why)."""
        run_id = self._askable(run_id)
        if run_id is None:
            return None
        dialog = dialogs.get(run_id)
        if dialog is None:
            dialog = dialogs[run_id] = make(run_id)
        _bring_up(dialog)
        return dialog

    def _stacks_dialog(self, run_id: str) -> QtStacksDialog:
        return QtStacksDialog(connect_endpoint(self.window.endpoint), run_id, keys=self._keys(),
                              agents=self._agents(run_id), parent=self.window)

    def _settings_dialog(self, run_id: str) -> QtRunSettingsDialog:
        endpoint, keys = connect_endpoint(self.window.endpoint), self._keys()

        def send(settings: dict[str, Any], receiver: Callable[[Any], object]) -> AskJob:
            return start_ask(endpoint, "set", receiver, keys=keys, run_id=run_id, settings=settings, wait_s=WAIT_S)

        return QtRunSettingsDialog(run_id, send, agents_phrase=agents_phrase(self._agents(run_id), run_id),
                                   parent=self.window)

    def _profile_dialog(self, run_id: str) -> QtProfileDialog:
        endpoint, keys = connect_endpoint(self.window.endpoint), self._keys()

        def send(steps: int, ranks: list[int] | None, folder: Path, receiver: Callable[[Any], object]) -> AskJob:
            def capture() -> dict[str, Any]:  # on the request's thread: ask, then merge the traces
                result = ask(endpoint, "profile", keys=keys, run_id=run_id, ranks=ranks, steps=steps,
                             wait_s=PROFILE_WAIT_S)
                summary = merge(result, folder)
                return {"text": summary.text(), "trace": str(summary.trace or ""), "folder": str(folder)}
            return start_job(capture, receiver, "profile")

        folder = Path(tempfile.gettempdir()) / "ringscope-profiles" / f"{run_id}-{time.strftime('%H%M%S')}"
        return QtProfileDialog(run_id, send, folder, parent=self.window)

    def _askable(self, run_id: str | None) -> str | None:
        run_id = run_id or self.window.selected_run_id
        reason = self.unavailable(run_id)
        if reason:
            self.window.statusBar().showMessage(f"Cannot ask the agents: {reason}", 10_000)
            self.refresh_actions()
            return None
        return run_id

    def _keys(self) -> AgentKeys | None:
        token = self.window.access_token
        return AgentKeys.from_token(token, "this window's access token") if token else None

    def _agents(self, run_id: str) -> int | None:
        row = self.window.run_row
        return int(row.ranks) if row is not None and row.run_id == run_id else None

    def _add(self, menu: QtWidgets.QMenu, text: str, shortcut: str, slot: Any) -> QtGui.QAction:
        action = QtGui.QAction(text, self.window)
        if shortcut:
            action.setShortcut(QtGui.QKeySequence(shortcut))
        action.triggered.connect(lambda: slot())
        menu.setToolTipsVisible(True)
        menu.addAction(action)
        self.window.addAction(action)
        return action


def _bring_up(dialog: QtWidgets.QDialog) -> None:
    dialog.show()
    dialog.raise_()
    dialog.activateWindow()


def _ranks(ranks: tuple[int, ...]) -> str:
    count = len(set(ranks))  # several agents in one process each report the process's threads
    return f"{count} rank{'s' if count != 1 else ''} {rank_ranges(ranks)}"


def _training_label(index: int, group: StackGroup) -> str:
    phases = f", phase {'/'.join(group.phases)}" if group.phases else ""
    runs = f" of {', '.join(group.runs)}" if len(group.runs) > 1 else ""
    return f"[{index}] {_ranks(group.ranks)}{runs}{phases}: training thread in {group.innermost}"


def _group_detail(group: StackGroup) -> str:
    """The group's frames as Python prints a traceback: outermost first, innermost call last."""
    phases = f", phase {'/'.join(group.phases)}" if group.phases else ""
    lines = [f"{group.thread} of {_ranks(group.ranks)}{phases} (most recent call last):"]
    for file, line, function, source in group.frames:
        lines.append(f'  File "{file}", line {line}, in {function}')
        if source.strip():
            lines.append(f"    {source.strip()}")
    if not group.frames:
        lines.append("  (no Python frame)")
    return "\n".join(lines)


def _unanswered_detail(entry: Unanswered) -> str:
    where = f"pid {entry.pid} on {entry.host or 'an unknown host'}"
    lines = [f"rank {entry.rank} ({where}, run {entry.run_id}):", textwrap.fill(entry.note, 100), ""]
    if entry.native:
        lines.append("Native stack, read from outside by the collector (py-spy dump --native):")
        lines.extend("  " + line for line in entry.native.rstrip().splitlines())
    else:
        lines.append("No native stack: py-spy reads only processes on the collector's host, and needs permission "
                     "to attach (ptrace).")
    return "\n".join(lines)


def _phase_icon(phase: str) -> QtGui.QIcon:
    pixmap = QtGui.QPixmap(12, 12)
    pixmap.fill(QtGui.QColor(_PHASE_COLORS.get(phase, theme.PHASE_COLORS["other"])))
    return QtGui.QIcon(pixmap)

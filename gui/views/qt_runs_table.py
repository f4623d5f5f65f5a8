"""The runs table (like W&B's runs list): one row per training of the session, newest first, and which run the
window shows.

``RunsTableModel`` holds the latest ``RunRow`` list (``ringscope.gui.core.live.runs.LiveRuns.rows``) and the price; it
adds new runs as new rows (selections stay on their run) and repaints the rest in place. ``QtRunsTable`` is the view:
a click picks the run every card and chart shows (``sig_run_picked``), several rows can be selected for a
comparison (``sig_compare_requested``: the button above the table, the context menu, Ctrl+Shift+R). The view
owns no run state: rows come from the window's timer a few times a second.
"""

from __future__ import annotations

import math
import time
from typing import Any

from PySide6 import QtCore, QtGui, QtWidgets

from ringscope.gui.core.analysis.cost import CURRENCY, DEFAULT_PRICE_PER_GPU_HOUR
from ringscope.gui.core.analysis.runs import STATE_TEXT
from ringscope.gui.core.live.run_rows import RunRow
from ringscope.gui.views import theme
from ringscope.gui.views.qt_plot_tools import format_share
from ringscope.gui.views.qt_table_model import RIGHT_ALIGNED, ColumnsTableModel, bold_font

COLUMNS: tuple[tuple[str, str], ...] = (
    ("run", "The run id every agent of the training announced (RINGSCOPE_RUN_ID, torchrun's rendezvous id...), and "
            "the Slurm job it runs in (SLURM_JOB_ID)."),
    ("framework / strategy", "From the agents' hello messages."),
    ("ranks", "World size: the ranks (replicas) that take part in each step."),
    ("state", "\n".join(f"{state}: {text}" for state, text in STATE_TEXT.items())),
    ("started", "When its first agent started (local time)."),
    ("duration", "From the first agent's start to the end of the run (or to now while it runs)."),
    ("steps", "Steps received, all ranks together."),
    ("samples/s", "Throughput over the last 5 s, or over the run's last seconds once it ended."),
    ("idle", "Share of step time the accelerators were not computing (last 20 steps of each rank)."),
    ("cost", "Price per device-hour x devices x time priced so far (up to the last message while it runs, to its end "
             "after: it never goes down)."),
)
STATE_COLORS: dict[str, str] = {
    "running": theme.OK_COLOR,
    "finished": "#76b7b2",
    "stopped": "#f2c14e",
    "failed": theme.ALERT_COLOR,
    "lost": theme.ALERT_COLOR,
    "hung": theme.ALERT_COLOR,
    "unfinished": theme.LOST_COLOR,
}
_Role = QtCore.Qt.ItemDataRole
COMPARE_SHORTCUT = "Ctrl+Shift+R"


class RunsTableModel(ColumnsTableModel):
    """Rows of the runs table, newest first. ``RunIdRole`` (UserRole) gives a row's run id."""

    COLUMNS = COLUMNS
    RunIdRole = _Role.UserRole

    def __init__(self) -> None:
        super().__init__()
        self._rows: list[RunRow] = []  # newest first
        self._price: float = DEFAULT_PRICE_PER_GPU_HOUR
        self._price_source = "default"

    # ---- Public API ----------------------------------------------------------------------------------------------

    def set_rows(self, rows: list[RunRow], price_per_device_hour: float | None = None) -> None:
        """Show ``rows`` (oldest first, as ``LiveRuns.rows`` gives them); new runs are inserted at the top."""
        self._price = price_per_device_hour or DEFAULT_PRICE_PER_GPU_HOUR
        self._price_source = "Preferences" if price_per_device_hour else "default"
        newest_first = list(reversed(rows))
        known = {row.run_id for row in self._rows}
        added = [row for row in newest_first if row.run_id not in known]
        if [r.run_id for r in newest_first[len(added):]] != [r.run_id for r in self._rows]:
            self.beginResetModel()  # rows vanished or moved (not expected from LiveRuns): start over
            self._rows = newest_first
            self.endResetModel()
            return
        if added:
            self.beginInsertRows(QtCore.QModelIndex(), 0, len(added) - 1)
            self._rows = newest_first
            self.endInsertRows()
        else:
            self._rows = newest_first
        self.repaint_rows(len(self._rows))

    def row_of(self, run_id: str) -> int | None:
        """The table row of a run (None when not shown)."""
        return next((i for i, row in enumerate(self._rows) if row.run_id == run_id), None)

    def run_at(self, row: int) -> RunRow | None:
        """The run shown at ``row``."""
        return self._rows[row] if 0 <= row < len(self._rows) else None

    def run(self, run_id: str) -> RunRow | None:
        """The row of ``run_id``, or None."""
        row = self.row_of(run_id)
        return None if row is None else self._rows[row]

    def cost(self, row: RunRow) -> float:
        """What a run cost so far at the price in use."""
        return row.cost(self._price)

    def text(self, row: int, column: int) -> str:
        """A cell's text (what the table shows)."""
        run = self._rows[row]
        return _cell_text(run, column, self.cost(run))

    # ---- QAbstractTableModel -------------------------------------------------------------------------------------

    def rowCount(self, parent: QtCore.QModelIndex | QtCore.QPersistentModelIndex = QtCore.QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self._rows)

    def data(self, index: QtCore.QModelIndex | QtCore.QPersistentModelIndex, role: int = _Role.DisplayRole) -> Any:
        if not index.isValid() or not 0 <= index.row() < len(self._rows):
            return None
        run, column = self._rows[index.row()], index.column()
        if role == _Role.DisplayRole:
            return _cell_text(run, column, self.cost(run))
        if role == self.RunIdRole:
            return run.run_id
        if role == _Role.ForegroundRole and column == 3:
            return QtGui.QBrush(QtGui.QColor(STATE_COLORS.get(run.state, theme.LOST_COLOR)))
        if role == _Role.FontRole and column == 3:
            return bold_font()
        if role == _Role.TextAlignmentRole and column in (2, 5, 6, 7, 8, 9):
            return RIGHT_ALIGNED
        if role == _Role.ToolTipRole:
            return self._tooltip(run, column)
        return None

    def _tooltip(self, run: RunRow, column: int) -> str:
        if column == 3:
            text = STATE_TEXT.get(run.state, run.state)
            return text + (f" (exit code {run.exit_code})" if run.exit_code is not None else "") + (
                f"\nrestarted: {run.attempts_text} (ringscope info lists each attempt)" if run.attempts > 1 else "") + (
                f"\nSlurm: {run.scheduler}" if run.scheduler else "")
        if column == 9:
            return (f"{run.devices} {run.device_unit}s x {run.priced_s / 3600:.3f} h x {CURRENCY}{self._price:g} per "
                    f"{run.device_unit}-hour ({self._price_source} price)"
                    + ("" if run.in_memory else "; released from memory, figures as of then"))
        if column == 0:
            return run.run_id + (f"\nSlurm {run.job_text}" if run.job_ids else "") + (
                "" if run.in_memory else " (released from memory: its recording keeps it)")
        return COLUMNS[column][1]


def _cell_text(run: RunRow, column: int, cost: float) -> str:
    if column == 0:
        return run.run_id + (f" · {run.job_text}" if run.job_ids else "")
    if column == 1:
        return f"{run.framework} / {run.strategy}"
    if column == 2:
        return str(run.world_size)
    if column == 3:
        return "● " + run.state + (f" ({run.exit_code})" if run.state == "failed" and run.exit_code is not None
                                   else "") + (f" · {run.attempts_text}" if run.attempts > 1 else "") + (
            f" · Slurm: {run.scheduler_word}" if run.scheduler_word not in ("", run.state) else "")
    if column == 4:
        return _when(run.started_s)
    if column == 5:
        return _clock(run.duration_s)
    if column == 6:
        return f"{run.steps:,}"
    if column == 7:
        return "—" if not math.isfinite(run.samples_per_s) else f"{run.samples_per_s:,.0f}"
    if column == 8:
        return "—" if not math.isfinite(run.idle_share) else format_share(run.idle_share)
    return f"{CURRENCY}{cost:,.2f}"


def _when(ts_s: float) -> str:
    if not math.isfinite(ts_s):
        return "—"
    local = time.localtime(ts_s)
    today = time.localtime()
    same_day = (local.tm_year, local.tm_yday) == (today.tm_year, today.tm_yday)
    return time.strftime("%H:%M:%S" if same_day else "%Y-%m-%d %H:%M", local)


def _clock(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "—"
    whole = max(0, int(seconds))
    return f"{whole // 3600:d}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


class QtRunsTable(QtWidgets.QWidget):
    """The runs list with a "Compare selected runs" button; a click picks the run the window shows."""

    sig_run_picked = QtCore.Signal(str)
    """The user picked a run (clicked its row or moved to it with the keyboard); argument: its run id."""

    sig_compare_requested = QtCore.Signal(list)
    """The user asked to compare the selected runs; argument: their run ids (two), in table order."""

    def __init__(self, model: RunsTableModel, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.model = model
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.setSpacing(2)
        bar = QtWidgets.QHBoxLayout()
        self.hint = QtWidgets.QLabel("Click a run to show it; select two (Ctrl+click) to compare them.")
        self.hint.setObjectName("cardDetail")
        self.compare_button = QtWidgets.QPushButton("Compare selected runs")
        self.compare_button.setToolTip(f"Step breakdown of two runs side by side and the differences "
                                       f"({COMPARE_SHORTCUT})")
        self.compare_button.clicked.connect(self.request_compare)
        bar.addWidget(self.hint, 1)
        bar.addWidget(self.compare_button)
        layout.addLayout(bar)
        self.view = QtWidgets.QTableView()
        self.view.setModel(model)
        self.view.setSelectionBehavior(QtWidgets.QAbstractItemView.SelectionBehavior.SelectRows)
        self.view.setSelectionMode(QtWidgets.QAbstractItemView.SelectionMode.ExtendedSelection)
        self.view.setEditTriggers(QtWidgets.QAbstractItemView.EditTrigger.NoEditTriggers)
        self.view.setAlternatingRowColors(True)
        self.view.verticalHeader().setVisible(False)
        self.view.verticalHeader().setDefaultSectionSize(20)
        self.view.setWordWrap(False)
        self.view.setTextElideMode(QtCore.Qt.TextElideMode.ElideLeft)  # run ids differ at their end
        for column, width in enumerate((230, 190, 50, 110, 80, 75, 80, 85, 65, 80)):
            self.view.setColumnWidth(column, width)
        self.view.horizontalHeader().setSectionResizeMode(1, QtWidgets.QHeaderView.ResizeMode.Stretch)
        # "● finished · 3 attempts · hang, failure" must be read whole (a few runs: sizing to them is cheap)
        self.view.horizontalHeader().setSectionResizeMode(3, QtWidgets.QHeaderView.ResizeMode.ResizeToContents)
        self.view.setContextMenuPolicy(QtCore.Qt.ContextMenuPolicy.ActionsContextMenu)
        self.compare_action = QtGui.QAction("Compare selected runs", self.view)
        self.compare_action.setShortcut(QtGui.QKeySequence(COMPARE_SHORTCUT))
        self.compare_action.setShortcutContext(QtCore.Qt.ShortcutContext.WindowShortcut)
        self.compare_action.triggered.connect(self.request_compare)
        self.view.addAction(self.compare_action)
        layout.addWidget(self.view, 1)
        self._programmatic = False
        self.view.selectionModel().currentRowChanged.connect(self._current_changed)
        self.view.selectionModel().selectionChanged.connect(self._update_button)  # a lambda over self: a leak
        self._update_button()

    # ---- Public API ----------------------------------------------------------------------------------------------

    def show_run(self, run_id: str) -> None:
        """Make ``run_id`` the current row (the window chose it, not the user: no ``sig_run_picked``)."""
        row = self.model.row_of(run_id)
        if row is None:
            return
        current = self.view.selectionModel().currentIndex()
        if current.isValid() and current.row() == row:
            return
        self._programmatic = True
        try:
            flags = (QtCore.QItemSelectionModel.SelectionFlag.ClearAndSelect
                     | QtCore.QItemSelectionModel.SelectionFlag.Rows)
            self.view.selectionModel().setCurrentIndex(self.model.index(row, 0), flags)
        finally:
            self._programmatic = False

    def selected_run_ids(self) -> list[str]:
        """The run ids of the selected rows, oldest first."""
        rows = sorted({index.row() for index in self.view.selectionModel().selectedRows()}, reverse=True)
        return [run.run_id for row in rows if (run := self.model.run_at(row)) is not None]

    def select_runs(self, run_ids: list[str]) -> None:
        """Select these runs' rows (for a comparison); the first becomes current without being "picked"."""
        selection = QtCore.QItemSelection()
        for run_id in run_ids:
            row = self.model.row_of(run_id)
            if row is not None:
                selection.select(self.model.index(row, 0), self.model.index(row, len(COLUMNS) - 1))
        self._programmatic = True
        try:
            self.view.selectionModel().select(selection, QtCore.QItemSelectionModel.SelectionFlag.ClearAndSelect)
        finally:
            self._programmatic = False

    def request_compare(self) -> None:
        """Emit ``sig_compare_requested`` with the selected runs (exactly two), or say what to select."""
        ids = self.selected_run_ids()
        if len(ids) != 2:
            QtWidgets.QToolTip.showText(self.compare_button.mapToGlobal(QtCore.QPoint(0, 0)),
                                        f"Select exactly two runs to compare ({len(ids)} selected): click one, "
                                        "then Ctrl+click the other.", self.compare_button)
            return
        self.sig_compare_requested.emit(ids)

    # ---- Internals -----------------------------------------------------------------------------------------------

    def _current_changed(self, current: QtCore.QModelIndex, _previous: QtCore.QModelIndex) -> None:
        if self._programmatic or not current.isValid():
            return
        run = self.model.run_at(current.row())
        if run is not None:
            self.sig_run_picked.emit(run.run_id)

    def _update_button(self) -> None:
        count = len(self.view.selectionModel().selectedRows())
        self.compare_button.setEnabled(count == 2)
        self.compare_action.setEnabled(count == 2)

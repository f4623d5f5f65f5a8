"""The ranks table: one row per rank — host, state, last seen, step, step time, data wait, stall, drops, gaps.

``RanksTableModel`` reads the current snapshot (it copies nothing) and sorts itself with numpy (a row permutation):
a ``QSortFilterProxyModel`` sorting 1024 rows calls the Python ``data()`` ~20 000 times (~60 ms, once a second, a
visible hitch). ``QtRanksTable`` is the view over it. Lost ranks are greyed, the straggler is marked, missing values
say "—" (never 0).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from PySide6 import QtCore, QtGui, QtWidgets

from ringscope.agent.schema import field_doc
from ringscope.gui.core.live.store import STATE_FINISHED, STATE_LOST, Snapshot
from ringscope.gui.views import theme
from ringscope.gui.views.qt_table_model import RIGHT_ALIGNED, ColumnsTableModel, bold_font

COLUMNS: tuple[tuple[str, str], ...] = (
    ("rank", "Global rank (replica)."),
    ("host", "Host the rank runs on (from its agent's hello)."),
    ("state", "running; lost = no message for longer than the lost-rank timeout; finished = sent 'finished'."),
    ("last seen (s ago)", "Seconds since the last message from this rank's agent."),
    ("step", "Last step number reported."),
    ("step time (ms)", field_doc("step_s") + " Mean of the last 20 steps."),
    ("data wait (ms)", field_doc("data_wait_s") + " Mean of the last 20 steps."),
    ("stall (ms)", field_doc("comm_exposed_s") + " Mean of the last 20 steps."),
    ("drops", "Records this rank's agent had to drop (queue full or collector unreachable), cumulative."),
    ("gaps", "Messages from this rank's agent that never arrived (sequence numbers skipped), cumulative."),
)
_Role = QtCore.Qt.ItemDataRole
_ROLES_ANSWERED = frozenset({_Role.DisplayRole, _Role.UserRole, _Role.ForegroundRole, _Role.FontRole,
                             _Role.TextAlignmentRole, _Role.ToolTipRole})


class RanksTableModel(ColumnsTableModel):
    """Table model over the latest snapshot. ``SortRole`` (UserRole) gives numbers for sorting."""

    COLUMNS = COLUMNS
    SortRole = _Role.UserRole

    def __init__(self) -> None:
        super().__init__()
        self._snap: Snapshot | None = None
        self._straggler: int | None = None  # snapshot row of the straggler
        self._order = np.zeros(0, np.int64)  # view row -> snapshot row
        self._sort_column = 0
        self._descending = False
        self._host: str | None = None  # only this host's ranks (the timelines' drill-down); None: every rank

    # ---- Public API ----------------------------------------------------------------------------------------------

    def set_snapshot(self, snap: Snapshot) -> None:
        """Show a new snapshot (resets the model only when the rank set changed; keeps the row order otherwise)."""
        old = self._snap
        same_rows = old is not None and old.ranks.shape == snap.ranks.shape and np.array_equal(old.ranks, snap.ranks)
        if not same_rows:
            self.beginResetModel()
            self._snap = snap
            self._straggler = snap.straggler_row()
            self._order = self._sorted_order()
            self.endResetModel()
            return
        self._snap = snap
        self._straggler = snap.straggler_row()
        self.repaint_rows(len(self._order))

    def set_host(self, host: str | None) -> None:
        """Show only the ranks of ``host`` (None: every rank)."""
        if host == self._host:
            return
        self.beginResetModel()
        self._host = host
        self._order = self._sorted_order()
        self.endResetModel()

    @property
    def host(self) -> str | None:
        """The host whose ranks are shown, or None for all."""
        return self._host

    def held_ranks(self) -> int:
        """Ranks in the snapshot shown (all of them, whatever the host filter)."""
        return 0 if self._snap is None else len(self._snap.ranks)

    def sort(self, column: int, order: QtCore.Qt.SortOrder = QtCore.Qt.SortOrder.AscendingOrder) -> None:
        """Order the rows by a column (numbers numerically, "—" first when ascending), keeping selections."""
        self._sort_column = column if 0 <= column < len(COLUMNS) else 0
        self._descending = order == QtCore.Qt.SortOrder.DescendingOrder
        if self._snap is None:
            return
        self.layoutAboutToBeChanged.emit()
        persistent = self.persistentIndexList()
        rows_before = [int(self._order[i.row()]) for i in persistent]
        self._order = self._sorted_order()
        position = np.full(len(self._snap.ranks), -1, np.int64)  # snapshot row -> view row (-1: filtered out)
        position[self._order] = np.arange(self._order.size)
        self.changePersistentIndexList(persistent, [self.index(int(position[r]), i.column()) if position[r] >= 0
                                                    else QtCore.QModelIndex()
                                                    for r, i in zip(rows_before, persistent, strict=True)])
        self.layoutChanged.emit()

    def snapshot_row(self, row: int) -> int:
        """The snapshot row (index into ``snap.ranks``) shown at table row ``row``."""
        return int(self._order[row])

    def rowCount(self, parent: QtCore.QModelIndex | QtCore.QPersistentModelIndex = QtCore.QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() or self._snap is None else len(self._order)

    def data(self, index: QtCore.QModelIndex | QtCore.QPersistentModelIndex, role: int = _Role.DisplayRole) -> Any:
        snap = self._snap
        # A repaint asks every visible cell for ~10 roles; most are ones this model never sets (decoration, check
        # state, size hint...): answer those before any other work (~800 calls a repaint with 1024 ranks).
        if snap is None or role not in _ROLES_ANSWERED or not index.isValid():
            return None
        row, col = int(self._order[index.row()]), index.column()
        if role == _Role.DisplayRole:
            return self._text(snap, row, col)
        if role == self.SortRole:
            return self._number(snap, row, col)
        if role == _Role.ForegroundRole:
            if row == self._straggler:
                return QtGui.QBrush(QtGui.QColor(theme.STRAGGLER_COLOR))
            if snap.state[row] in (STATE_LOST, STATE_FINISHED):
                return QtGui.QBrush(QtGui.QColor(theme.LOST_COLOR))
            return None
        if role == _Role.FontRole and row == self._straggler:
            return bold_font()
        if role == _Role.TextAlignmentRole and col not in (1, 2):
            return RIGHT_ALIGNED
        if role == _Role.ToolTipRole and row == self._straggler and snap.straggler is not None:
            return snap.straggler.reason
        return None

    # ---- Cells ---------------------------------------------------------------------------------------------------

    def _number(self, snap: Snapshot, row: int, col: int) -> Any:
        if col == 0:
            return int(snap.ranks[row])
        if col in (1, 2):
            return self._text(snap, row, col)
        value = self._value(snap, row, col)
        return -1.0 if not np.isfinite(value) else float(value)

    def _sorted_order(self) -> np.ndarray:
        snap = self._snap
        if snap is None or not len(snap.ranks):
            return np.zeros(0, np.int64)
        col = self._sort_column
        key: np.ndarray
        if col == 0:
            key = snap.ranks
        elif col in (1, 2):
            key = np.array(snap.hosts if col == 1 else snap.state, dtype=str)
        else:
            key = self._column_values(snap, col)
            key = np.where(np.isfinite(key), key, -1.0)  # as SortRole: "—" sorts before every value
        order = np.argsort(key, kind="stable")
        order = (order[::-1] if self._descending else order).astype(np.int64)
        if self._host is not None:
            order = order[np.asarray(snap.hosts, dtype=object)[order] == self._host]
        return order

    @staticmethod
    def _column_values(snap: Snapshot, col: int) -> np.ndarray:
        return np.asarray({
            3: lambda: snap.now_s - snap.last_seen_s, 4: lambda: snap.current_step,
            5: lambda: 1000.0 * snap.recent_step_s, 6: lambda: 1000.0 * snap.recent_data_wait_s,
            7: lambda: 1000.0 * snap.recent_comm_exposed_s, 8: lambda: snap.drops, 9: lambda: snap.gaps,
        }[col](), dtype=np.float64)

    def _value(self, snap: Snapshot, row: int, col: int) -> float:
        return float({
            3: snap.now_s - snap.last_seen_s[row], 4: snap.current_step[row],
            5: 1000.0 * snap.recent_step_s[row], 6: 1000.0 * snap.recent_data_wait_s[row],
            7: 1000.0 * snap.recent_comm_exposed_s[row], 8: snap.drops[row], 9: snap.gaps[row],
        }[col])

    def _text(self, snap: Snapshot, row: int, col: int) -> str:
        if col == 0:
            mark = "  ◀ straggler" if row == self._straggler else ""
            return f"{int(snap.ranks[row])}{mark}"
        if col == 1:
            return snap.hosts[row]
        if col == 2:
            return snap.state[row]
        value = self._value(snap, row, col)
        if not np.isfinite(value):
            return "—"
        if col in (4, 8, 9):
            return f"{int(value):,}"
        return f"{value:.1f}"


class QtRanksTable(QtWidgets.QTableView):
    """Sortable table view over a ``RanksTableModel``; ``refresh(snap)`` shows a snapshot."""

    RESORT_S = 1.0

    def __init__(self, model: RanksTableModel) -> None:
        super().__init__()
        self.source_model = model
        self.setModel(model)  # the model sorts itself (numpy); no proxy
        self.setSortingEnabled(True)
        self.sortByColumn(0, QtCore.Qt.SortOrder.AscendingOrder)
        self.setAlternatingRowColors(True)
        self.setSelectionBehavior(QtWidgets.QAbstractItemView.SelectionBehavior.SelectRows)
        self.verticalHeader().setVisible(False)
        self.verticalHeader().setDefaultSectionSize(20)
        self.horizontalHeader().setStretchLastSection(False)
        header = self.horizontalHeader()
        header.setSectionResizeMode(QtWidgets.QHeaderView.ResizeMode.Interactive)
        for column, width in enumerate((110, 120, 80, 120, 70, 110, 110, 90, 70, 70)):
            self.setColumnWidth(column, width)
        self._last_sort = 0.0

    def refresh(self, snap: Snapshot) -> None:
        """Show a snapshot; keep the user's sort order (re-applied at most once a second, so rows do not jump)."""
        self.source_model.set_snapshot(snap)
        if snap.now_s - self._last_sort >= self.RESORT_S:
            self._last_sort = snap.now_s
            header = self.horizontalHeader()
            self.source_model.sort(header.sortIndicatorSection(), header.sortIndicatorOrder())

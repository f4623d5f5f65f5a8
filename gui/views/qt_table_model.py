"""``ColumnsTableModel``: what the window's table models (``RanksTableModel``, ``RunsTableModel``) share.

A fixed tuple of ``(title, tooltip)`` columns as the horizontal header and the column count, one signal that
repaints the rows shown, and the bold font and right alignment their cells use. The rows, their text and their
roles are each model's own.
"""

from __future__ import annotations

from typing import Any, ClassVar

from PySide6 import QtCore, QtGui

_Role = QtCore.Qt.ItemDataRole
RIGHT_ALIGNED = QtCore.Qt.AlignmentFlag.AlignRight | QtCore.Qt.AlignmentFlag.AlignVCenter
"""The alignment of number cells."""


class ColumnsTableModel(QtCore.QAbstractTableModel):
    """A table model whose columns are ``COLUMNS``: ``(title, tooltip)`` each, set by the subclass."""

    COLUMNS: ClassVar[tuple[tuple[str, str], ...]] = ()

    def columnCount(self, parent: QtCore.QModelIndex | QtCore.QPersistentModelIndex = QtCore.QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self.COLUMNS)

    def headerData(self, section: int, orientation: QtCore.Qt.Orientation, role: int = _Role.DisplayRole) -> Any:
        if orientation != QtCore.Qt.Orientation.Horizontal or not 0 <= section < len(self.COLUMNS):
            return None
        if role == _Role.DisplayRole:
            return self.COLUMNS[section][0]
        if role == _Role.ToolTipRole:
            return self.COLUMNS[section][1]
        return None

    def repaint_rows(self, rows: int) -> None:
        """Every cell of the first ``rows`` rows changed: one signal (the view repaints only the rows it shows)."""
        if rows:
            self.dataChanged.emit(self.index(0, 0), self.index(rows - 1, len(self.COLUMNS) - 1))


def bold_font() -> QtGui.QFont:
    """The font of a marked cell."""
    font = QtGui.QFont()
    font.setBold(True)
    return font

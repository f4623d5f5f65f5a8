"""File ▸ Agent access token…: the token agents need to reach a ``--secure`` window, with a Copy button.

Owns nothing but the dialog's widgets.
"""

from __future__ import annotations

from PySide6 import QtWidgets


def show_access_token(parent: QtWidgets.QWidget, token: str) -> QtWidgets.QDialog:
    """Show ``token`` in a non-modal dialog over ``parent``; returns the dialog (shown)."""
    dialog = QtWidgets.QDialog(parent)
    dialog.setWindowTitle("Agent access token")
    layout = QtWidgets.QVBoxLayout(dialog)
    text = QtWidgets.QLabel(
        "This window accepts only agents that hold this token (telemetry is encrypted, ZeroMQ CURVE). "
        "Trainings launched from here get it automatically; give others "
        "<code>RINGSCOPE_KEY=&lt;token&gt;</code>, or <code>RINGSCOPE_KEY_FILE</code> pointing at the file "
        "<code>ringscope keys</code> names. Treat it like a password.")
    text.setWordWrap(True)
    field = QtWidgets.QLineEdit(token)
    field.setReadOnly(True)
    field.setMinimumWidth(560)
    copy = QtWidgets.QPushButton("Copy")
    copy.clicked.connect(lambda: QtWidgets.QApplication.clipboard().setText(token))
    row = QtWidgets.QHBoxLayout()
    row.addWidget(field, 1)
    row.addWidget(copy)
    layout.addWidget(text)
    layout.addLayout(row)
    dialog.show()
    return dialog

"""The status bar: messages/s, drops and gaps, rejected messages (by reason in the tooltip), recording file and size,
and what the last export wrote (with Open / Show in folder).

Receives a snapshot and the recorder's figures; owns only its labels.
"""

from __future__ import annotations

from pathlib import Path

from PySide6 import QtCore, QtGui, QtWidgets

from ringscope.gui.core.live.store import Snapshot


def _show(label: QtWidgets.QLabel, text: str, style: str | None = None, tooltip: str | None = None) -> None:
    """Set only what changed: the status bar is rendered every frame, and a re-polish or relayout is not free."""
    if label.text() != text:
        label.setText(text)
    if style is not None and label.styleSheet() != style:
        label.setStyleSheet(style)
    if tooltip is not None and label.toolTip() != tooltip:
        label.setToolTip(tooltip)


class QtStatusBar(QtWidgets.QStatusBar):
    """Ingest health at a glance."""

    def __init__(self) -> None:
        super().__init__()
        self.endpoint = QtWidgets.QLabel("")
        self.endpoint.setToolTip("Where agents send telemetry (set RINGSCOPE_ENDPOINT in the trainings to this).")
        self.rate = QtWidgets.QLabel("0 msg/s")
        self.rate.setToolTip("Messages received per second (last 5 s).")
        self.loss = QtWidgets.QLabel("drops 0 · gaps 0")
        self.loss.setToolTip("drops: records the agents had to drop; gaps: messages that never arrived.")
        self.rejected = QtWidgets.QLabel("rejected 0")
        self.recording = QtWidgets.QLabel("not recording")
        for label in (self.endpoint, self.rate, self.loss, self.rejected):
            self.addWidget(label)
        self.export_notice = QtExportNotice()
        self.addPermanentWidget(self.export_notice)
        self.addPermanentWidget(self.recording)

    # ---- Public API ----------------------------------------------------------------------------------------------

    def render(self, snap: Snapshot, endpoint: str, recording_path: str | None, recording_bytes: int | None,
               secure: bool = False, read_only: str | None = None, write_errors: int = 0,
               last_write_error: str | None = None) -> None:
        """Show one snapshot and the recorder's file figures; ``secure``: agents must hold the access token;
        ``read_only``: the recording a read-only window shows (it listens to nobody); ``write_errors``: rows the
        recorder could not write (loud: red, with the last error in the tooltip); a ``last_write_error`` without
        any is trouble that cost no row (a recorder process replaced): said in amber."""
        if read_only is not None:
            _show(self.endpoint, f"read-only: {read_only}", tooltip="A recorded session: nothing is received, "
                                                                       "launched or recorded in this window.")
        elif not endpoint:
            _show(self.endpoint, "not listening")
        elif secure:
            _show(self.endpoint, f"listening on {endpoint} · encrypted, token required", tooltip=(
                "Agents send telemetry here; the channel is encrypted (ZeroMQ CURVE) and only agents with this "
                "window's access token (File ▸ Agent access token…) get in. Others count as rejected."))
        else:
            _show(self.endpoint, f"listening on {endpoint}")
        _show(self.rate, f"{snap.messages_per_s:,.0f} msg/s")
        drops = int(snap.drops.sum()) if snap.drops.size else 0
        gaps = snap.counters.get("missing_messages", 0)
        _show(self.loss, f"drops {drops:,} · gaps {gaps:,}", "color: #e15759;" if drops or gaps else "")
        rejected: dict[str, int] = snap.counters.get("rejected", {})
        total = sum(rejected.values())
        _show(self.rejected, f"rejected {total:,}", "color: #e15759;" if total else "",
              "Rejected messages by reason:\n" + (
                  "\n".join(f"{reason}: {count:,}" for reason, count in sorted(rejected.items())) or "none"))
        size = "" if recording_bytes is None else f" ({_size(recording_bytes)})"
        if recording_path and write_errors:
            _show(self.recording, f"recording {recording_path}: {write_errors:,} row(s) NOT WRITTEN", "color: #e15759;",
                  f"The recorder could not write {write_errors:,} row(s) to {recording_path} (last error: "
                  f"{last_write_error or 'unknown'}); it goes on with the rest. Check the disk's free space.")
        elif recording_path and last_write_error:  # trouble that cost nothing (a writer replaced, a retried batch)
            note = last_write_error if len(last_write_error) <= 90 else last_write_error[:89] + "…"
            _show(self.recording, f"recording {recording_path}{size} · {note}", "color: #f28e2b;",
                  f"{recording_path}\nThe recorder had trouble and recovered, every row written: {last_write_error}")
        elif recording_path:
            _show(self.recording, f"recording {recording_path}{size}", "", tooltip=recording_path)
        else:
            _show(self.recording, "not recording")


class QtExportNotice(QtWidgets.QWidget):
    """"Exported …/report.html  [Open] [Show in folder] [×]": shown after an export, until dismissed or replaced."""

    def __init__(self) -> None:
        super().__init__()
        layout = QtWidgets.QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(4)
        self.label = QtWidgets.QLabel("")
        self.label.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
        self.open_button = QtWidgets.QToolButton()
        self.open_button.setText("Open")
        self.open_button.setToolTip("Open the exported file with the desktop's default application")
        self.folder_button = QtWidgets.QToolButton()
        self.folder_button.setText("Show in folder")
        self.folder_button.setToolTip("Open the folder that holds it")
        self.close_button = QtWidgets.QToolButton()
        self.close_button.setText("×")
        self.close_button.setToolTip("Hide this message")
        for widget in (self.label, self.open_button, self.folder_button, self.close_button):
            layout.addWidget(widget)
        # bound methods, not lambdas over self: a lambda held by a child's connection kept the notice alive forever
        self.open_button.clicked.connect(self._open_target)
        self.folder_button.clicked.connect(self._open_folder)
        self.close_button.clicked.connect(self.hide)
        self.target: Path | None = None
        self.folder: Path | None = None
        self.hide()

    def show_paths(self, paths: list[str], what: str = "Exported") -> None:
        """Name what was written (one file, or the folder of several) and offer to open it."""
        if not paths:
            return
        files = [Path(p) for p in paths]
        if len(files) == 1:
            self.target, self.folder = files[0], files[0].parent
            text = f"{what} {files[0]}"
        else:
            self.folder = Path(*_common_parts(files)) if _common_parts(files) else files[0].parent
            self.target = self.folder
            text = f"{what} {len(files)} files to {self.folder}"
        self.label.setText(text)
        self.label.setToolTip("\n".join(paths))
        self.label.setStyleSheet("")
        self.open_button.show()
        self.folder_button.show()
        self.show()

    def show_failure(self, text: str, what: str = "Export failed") -> None:
        """Name the failure (its first line; the whole text in the tooltip) in red, with nothing to open."""
        self.target = self.folder = None
        self.label.setText(f"{what}: {text.splitlines()[0] if text else 'unknown error'}")
        self.label.setToolTip(text)
        self.label.setStyleSheet("color: #d62728")
        self.open_button.hide()
        self.folder_button.hide()
        self.show()

    def _open_target(self) -> None:
        self._open(self.target)

    def _open_folder(self) -> None:
        self._open(self.folder)

    @staticmethod
    def _open(path: Path | None) -> None:
        if path is not None:
            QtGui.QDesktopServices.openUrl(QtCore.QUrl.fromLocalFile(str(path)))


def _common_parts(files: list[Path]) -> tuple[str, ...]:
    parts = [f.parent.parts for f in files]
    common: list[str] = []
    for group in zip(*parts, strict=False):
        if len(set(group)) != 1:
            break
        common.append(group[0])
    return tuple(common)


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"

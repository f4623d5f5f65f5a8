"""The status bar: messages/s, drops and gaps, rejected messages (by reason in the tooltip), recording file and size.

Receives a snapshot and the recorder's figures; owns only its labels.
"""

from __future__ import annotations

from PySide6 import QtWidgets

from gui.core.live.store import Snapshot


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
        self.addPermanentWidget(self.recording)

    # ---- Public API ----------------------------------------------------------------------------------------------

    def render(self, snap: Snapshot, endpoint: str, recording_path: str | None, recording_bytes: int | None,
               secure: bool = False) -> None:
        """Show one snapshot and the recorder's file figures; ``secure``: agents must hold the access token."""
        if not endpoint:
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
        if recording_path:
            size = "" if recording_bytes is None else f" ({_size(recording_bytes)})"
            _show(self.recording, f"recording {recording_path}{size}", tooltip=recording_path)
        else:
            _show(self.recording, "not recording")


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"

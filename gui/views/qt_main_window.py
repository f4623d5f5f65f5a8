"""The master-node window: overview on top, per-GPU and per-rank charts below, ranks table, status bar.

Views receive the store (and the optional recorder / launcher) in ``__init__``; nothing here holds telemetry. One
QTimer (~30 Hz) takes ``store.snapshot()`` and hands it to every view (``setData`` on existing items); the collector
thread never touches a widget. Without a launcher the launch and stop actions are disabled, with a tooltip.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from PySide6 import QtCore, QtGui, QtWidgets

from gui.core.live.store import STATE_LOST, LiveStore, Snapshot
from gui.views.qt_gpu_panel import QtGpuPanel
from gui.views.qt_overview import QtOverview
from gui.views.qt_preferences import Preferences, QtPreferencesDialog, save_preferences
from gui.views.qt_process_panel import QtProcessPanel
from gui.views.qt_rank_timeline import QtRankTimeline
from gui.views.qt_ranks_table import QtRanksTable, RanksTableModel
from gui.views.qt_report_actions import compare_sessions, export_report
from gui.views.qt_status_bar import QtStatusBar
from gui.views.qt_step_breakdown import QtStepBreakdown

log = logging.getLogger(__name__)

FRAME_INTERVAL_MS = 30  # ~33 Hz, so that a late tick still leaves >= 30 FPS
TABLE_INTERVAL_S = 0.25
TEXT_INTERVAL_S = 0.25  # overview cards and status bar: numbers are read, not watched; a card repaint is ~2.5 ms
STAGGER_ABOVE_RANKS = 256  # beyond this many ranks the charts are redrawn in turns
HEAVY_BUDGET_S = 0.010  # many ranks: charts are redrawn in turn while the tick has used less than this
IDLE_REDRAW_S = 0.5  # when nothing arrives, still redraw this often: states (lost) and time axes move


class QtMainWindow(QtWidgets.QMainWindow):
    """The Ringscope window over a ``LiveStore``.

    Args:
        store: the live store the collector feeds.
        endpoint: the collector's bound endpoint (shown in the status bar).
        preferences: current preferences (price, lost timeout...).
        recorder: an object with ``path`` and ``file_bytes`` (the session file), or None.
        launcher: a ``gui.core.launch.Launcher`` for the launch / stop actions, or None.
        cost_panel: a widget that replaces the overview's built-in cost-of-waiting card, or None. It is
            injected (not built here) because it needs whole-session figures, which the live store does not keep.
        access_token: the token agents need when the collector requires authentication (``--secure``), or None;
            File > Agent access token… shows it and the status bar says the channel is encrypted.
    """

    sig_frame_rendered = QtCore.Signal(object)
    """Emitted after each frame with the snapshot it showed (benchmarks measure latency from it)."""

    def __init__(self, store: LiveStore, *, endpoint: str = "", preferences: Preferences | None = None,
                 recorder: Any = None, launcher: Any = None,
                 cost_panel: QtWidgets.QWidget | None = None, analyzer: Any = None,
                 session_source: Callable[[], Any] | None = None, access_token: str | None = None) -> None:
        super().__init__()
        self.store = store
        self.endpoint = endpoint
        self.access_token = access_token
        self.preferences = preferences or Preferences()
        self.recorder = recorder
        self.launcher = launcher
        self.cost_panel = cost_panel
        self.analyzer = analyzer
        self.session_source = session_source or store.to_session_data
        self._figures_version = 0
        self.frames = 0
        self.last_snapshot: Snapshot | None = None
        self._last_full_render = 0.0
        self._last_table_render = 0.0
        self._last_text_render = 0.0
        self._text_key: tuple[object, ...] = ()
        self._heavy_turn = 0
        self.charts_last_tick = 0  # how many charts the last tick redrew (benchmarks report it)
        self.setWindowTitle("Ringscope — data-parallel training")
        self.resize(1600, 1000)
        self.overview = QtOverview(cost_panel)
        self.gpu_panel = QtGpuPanel()
        self.breakdown = QtStepBreakdown()
        self.stall = QtRankTimeline("comm_exposed")
        self.data_idle = QtRankTimeline("data_wait")
        self.ranks_model = RanksTableModel()
        self.ranks_table = QtRanksTable(self.ranks_model)
        self.status = QtStatusBar()
        self.setStatusBar(self.status)
        self._build_layout()
        self._build_actions()
        self.timer = QtCore.QTimer(self)
        self.timer.setInterval(FRAME_INTERVAL_MS)
        self.timer.setTimerType(QtCore.Qt.TimerType.PreciseTimer)  # a coarse timer drifts to ~25 Hz
        self.timer.timeout.connect(self.render_frame)
        self.timer.start()
        self.cost_timer = QtCore.QTimer(self)  # whole-session figures change slowly: pick them up once a second
        self.cost_timer.setInterval(1000)
        self.cost_timer.timeout.connect(self.render_cost)
        self.cost_timer.start()

    # ---- Public API ----------------------------------------------------------------------------------------------

    def render_frame(self) -> Snapshot:
        """Take a snapshot and redraw every view from it (the timer calls this ~30 times a second)."""
        started = time.perf_counter()
        snap = self.store.snapshot()
        changed = self.last_snapshot is None or snap.version != self.last_snapshot.version
        now = time.monotonic()
        if changed or now - self._last_full_render >= IDLE_REDRAW_S:
            self._last_full_render = now
            recording = str(self.recorder.path) if self.recorder is not None else "off"
            # Text is redrawn at 4 Hz (at once when ranks appear, get lost or the straggler changes): numbers that
            # change 30 times a second cannot be read, and each card repaint re-renders the styled parents.
            text_key = (len(snap.ranks), snap.state.count(STATE_LOST), snap.straggler and snap.straggler.rank,
                        snap.no_gpu, snap.framework)
            # 1024 rows at 30 Hz are not free either; table and text take alternate ticks so they never add up
            table_due = (self.ranks_model.rowCount() != len(snap.ranks)
                         or now - self._last_table_render >= TABLE_INTERVAL_S)
            text_due = text_key != self._text_key or (now - self._last_text_render >= TEXT_INTERVAL_S
                                                      and not table_due)
            if table_due:
                self._last_table_render = now
                self.ranks_table.refresh(snap)
            if text_due:
                self._text_key = text_key
                self._last_text_render = now
                self.overview.render(snap, recording, self.preferences.price_per_gpu_hour or None)
                size = _safe(lambda: int(self.recorder.file_bytes)) if self.recorder is not None else None
                self.status.render(snap, self.endpoint, recording if self.recorder is not None else None, size,
                                   secure=bool(self.access_token))
            self._render_charts(snap, started)  # after the text: the charts get what is left of the budget
            self.frames += 1
            self.last_snapshot = snap
            self.sig_frame_rendered.emit(snap)
        return snap

    def render_cost(self) -> None:
        """Show the analyzer's latest whole-session figures in the cost panel, if they are new."""
        figures = self.analyzer.latest() if self.analyzer is not None else None
        if figures is None or self.cost_panel is None or figures.version == self._figures_version:
            return
        self._figures_version = figures.version
        self.cost_panel.update_from(figures.analysis, figures.cost)

    def _render_charts(self, snap: Snapshot, started: float) -> None:
        heavy = (self.gpu_panel, self.breakdown, self.stall, self.data_idle)
        if len(snap.ranks) <= STAGGER_ABOVE_RANKS or self.last_snapshot is None:
            for view in heavy:
                view.render(snap)
            self.charts_last_tick = len(heavy)
            return
        # Many ranks: the charts take turns, as many per tick as fit in the budget (at least one, so each chart
        # still redraws >= 7.5 times a second); the tick stays within the frame interval on a loaded machine and
        # the overview, table and status bar keep their rates. A fast machine redraws all four every tick.
        self.charts_last_tick = 0
        while self.charts_last_tick < len(heavy):
            heavy[self._heavy_turn].render(snap)
            self._heavy_turn = (self._heavy_turn + 1) % len(heavy)
            self.charts_last_tick += 1
            if time.perf_counter() - started > HEAVY_BUDGET_S:
                break

    def apply_preferences(self, prefs: Preferences) -> None:
        """Use new preferences now (the lost-rank timeout and price apply at once; endpoint and theme at restart)."""
        self.preferences = prefs
        self.store.lost_timeout_s = prefs.lost_timeout_s
        if self.analyzer is not None:
            self.analyzer.refresh()  # the price may have changed
        self._last_full_render = 0.0

    # ---- Layout and actions --------------------------------------------------------------------------------------

    def _build_layout(self) -> None:
        central = QtWidgets.QWidget()
        layout = QtWidgets.QVBoxLayout(central)
        layout.setContentsMargins(8, 8, 8, 4)
        layout.addWidget(self.overview)
        grid = QtWidgets.QSplitter(QtCore.Qt.Orientation.Vertical)
        top = QtWidgets.QSplitter(QtCore.Qt.Orientation.Horizontal)
        top.addWidget(self.gpu_panel)
        top.addWidget(self.breakdown)
        bottom = QtWidgets.QSplitter(QtCore.Qt.Orientation.Horizontal)
        bottom.addWidget(self.stall)
        bottom.addWidget(self.data_idle)
        grid.addWidget(top)
        grid.addWidget(bottom)
        grid.setSizes([400, 500])
        layout.addWidget(grid, 1)
        self.setCentralWidget(central)
        self.ranks_dock = QtWidgets.QDockWidget("Ranks", self)
        self.ranks_dock.setObjectName("ranksDock")
        self.ranks_dock.setWidget(self.ranks_table)
        self.addDockWidget(QtCore.Qt.DockWidgetArea.BottomDockWidgetArea, self.ranks_dock)
        self.resizeDocks([self.ranks_dock], [200], QtCore.Qt.Orientation.Vertical)  # the charts get the height
        self.process_dock: QtWidgets.QDockWidget | None = None
        self.process_panel: QtProcessPanel | None = None
        if self.launcher is not None:
            self.process_panel = QtProcessPanel(self.launcher)
            self.process_dock = QtWidgets.QDockWidget("Processes", self)
            self.process_dock.setObjectName("processDock")
            self.process_dock.setWidget(self.process_panel)
            self.addDockWidget(QtCore.Qt.DockWidgetArea.BottomDockWidgetArea, self.process_dock)
            self.tabifyDockWidget(self.ranks_dock, self.process_dock)
            self.ranks_dock.raise_()

    def _build_actions(self) -> None:
        menu = self.menuBar()
        file_menu = menu.addMenu("&File")
        no_launcher = "" if self.launcher is not None else "no launcher in this window"
        self.action_launch = self._action(file_menu, "&Launch…", "Ctrl+L", self._launch, no_launcher)
        self.action_stop = self._action(file_menu, "&Stop training", "Ctrl+.", self._stop, no_launcher)
        file_menu.addSeparator()
        self.action_export = self._action(file_menu, "&Export report…", "Ctrl+E", self._export, "")
        self.action_compare = self._action(file_menu, "&Compare sessions…", "Ctrl+Shift+C", self._compare, "")
        file_menu.addSeparator()
        self.action_token = self._action(
            file_menu, "Agent &access token…", "", self.show_access_token,
            "" if self.access_token else "this window accepts agents without a token (start it with --secure)")
        file_menu.addSeparator()
        self.action_preferences = self._action(file_menu, "&Preferences…", "Ctrl+,", self.open_preferences, "")
        self._action(file_menu, "&Quit", "Ctrl+Q", self.close, "")
        view_menu = menu.addMenu("&View")
        view_menu.addAction(self.ranks_dock.toggleViewAction())
        if self.process_dock is not None:
            view_menu.addAction(self.process_dock.toggleViewAction())

    def _action(self, menu: QtWidgets.QMenu, text: str, shortcut: str, slot: Callable[[], object],
                unavailable: str) -> QtGui.QAction:
        action = QtGui.QAction(text, self)
        action.setShortcut(QtGui.QKeySequence(shortcut))
        action.triggered.connect(slot)
        if unavailable:
            action.setEnabled(False)
            action.setToolTip(unavailable)
            action.setStatusTip(unavailable)
        menu.setToolTipsVisible(True)
        menu.addAction(action)
        self.addAction(action)
        return action

    # ---- Slots ---------------------------------------------------------------------------------------------------

    def open_preferences(self) -> None:
        """Show the preferences dialog; save and apply what the user accepts."""
        dialog = QtPreferencesDialog(self.preferences, self)
        if dialog.exec() == QtWidgets.QDialog.DialogCode.Accepted:
            prefs = dialog.result_preferences()
            save_preferences(prefs)
            self.apply_preferences(prefs)

    def _launch(self) -> None:
        if self.process_panel is None:  # no launcher: the action is disabled, with a tooltip saying so
            return
        self.process_panel.open_launch_dialog()  # it validates, remembers recent launches and shows errors
        if self.process_dock is not None:
            self.process_dock.raise_()

    def start_launch(self, spec: Any) -> None:
        """Start a launch spec (the demo, a dialog's result) and show the processes dock.

        A spec the launcher refuses (``LaunchError``: bad options, port in use...) is shown to the user, not raised.
        """
        if self.process_panel is None:
            return
        try:
            self.process_panel.start(spec)
            if self.process_dock is not None:
                self.process_dock.raise_()
        except Exception as exc:  # LaunchError carries .errors; anything else still must not kill the window
            errors = getattr(exc, "errors", None) or [str(exc)]
            QtWidgets.QMessageBox.warning(self, "Launch refused", "\n".join(f"• {e}" for e in errors))

    def _stop(self) -> None:
        if self.launcher is not None:
            self.launcher.request_stop(None)  # SIGTERM to every run now, SIGKILL after the grace period

    def _export(self) -> None:
        export_report(self, self.session_source)  # the whole session (the recording), loaded on the export thread

    def _compare(self) -> None:
        compare_sessions(self)

    def show_access_token(self) -> QtWidgets.QDialog | None:
        """Show the token agents need (``--secure``), with a Copy button; returns the dialog (shown, non-modal)."""
        if not self.access_token:
            return None
        dialog = QtWidgets.QDialog(self)
        dialog.setWindowTitle("Agent access token")
        layout = QtWidgets.QVBoxLayout(dialog)
        text = QtWidgets.QLabel(
            "This window accepts only agents that hold this token (telemetry is encrypted, ZeroMQ CURVE). "
            "Trainings launched from here get it automatically; give others "
            "<code>RINGSCOPE_KEY=&lt;token&gt;</code>, or <code>RINGSCOPE_KEY_FILE</code> pointing at the file "
            "<code>ringscope keys</code> names. Treat it like a password.")
        text.setWordWrap(True)
        field = QtWidgets.QLineEdit(self.access_token)
        field.setReadOnly(True)
        field.setMinimumWidth(560)
        copy = QtWidgets.QPushButton("Copy")
        copy.clicked.connect(lambda: QtWidgets.QApplication.clipboard().setText(self.access_token or ""))
        row = QtWidgets.QHBoxLayout()
        row.addWidget(field, 1)
        row.addWidget(copy)
        layout.addWidget(text)
        layout.addLayout(row)
        dialog.show()
        return dialog


def _safe(read: Callable[[], int]) -> int | None:
    try:
        return read()
    except Exception:  # the recorder may be closing; the size is only informative
        return None

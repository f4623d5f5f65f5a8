"""The master-node window: the runs of the session on top, the selected run's overview, its per-GPU and per-rank
charts over run time, ranks table, status bar.

Views receive the runs (``LiveRuns``: one live store per training) or a single ``LiveStore``, and the optional
recorder / launcher, in ``__init__``; nothing here holds telemetry. One QTimer (~37 Hz) takes the *selected run's*
``store.snapshot()`` and hands it to every view (``setData`` on existing items), and a few times a second refreshes
the runs table from ``runs.rows()``; the collector thread never touches a widget. With an ingest process, a tick
asks it for the next frame and a watch on the frames socket draws that frame as soon as it arrives.

Which run is shown: the one the user clicked in the runs table; new runs take over by the rule of
``ringscope.gui.views.qt_run_selection`` (not within a minute of the user's pick).

Time charts share one x axis in run time (seconds since the run started) that follows the run live, or stays where
the user zoomed / panned (``TimeRange``); a read-only window (``read_only``: a reopened recording) has no launcher.

The menus and what they do (launch, sweep, export, compare, preferences...) are ``WindowActions``
(``ringscope.gui.views.qt_window_actions``), a mixin of this window.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any

from PySide6 import QtCore, QtWidgets

from ringscope.gui.core.analysis.hang import HangVerdict
from ringscope.gui.core.live.run_rows import RunRow
from ringscope.gui.core.live.runs import LiveRuns
from ringscope.gui.core.live.store import STATE_LOST, LiveStore, Snapshot
from ringscope.gui.core.service.remote import RemoteRuns, RemoteStore
from ringscope.gui.core.session_data import SessionData
from ringscope.gui.views.qt_background import BackgroundJob
from ringscope.gui.views.qt_gpu_panel import QtGpuPanel
from ringscope.gui.views.qt_overview import QtOverview
from ringscope.gui.views.qt_preferences import Preferences
from ringscope.gui.views.qt_process_panel import QtProcessPanel
from ringscope.gui.views.qt_rank_timeline import QtRankTimeline
from ringscope.gui.views.qt_ranks_table import QtRanksTable, RanksTableModel
from ringscope.gui.views.qt_report_actions import ExportJob
from ringscope.gui.views.qt_run_compare import QtRunCompare
from ringscope.gui.views.qt_run_selection import RunSelection
from ringscope.gui.views.qt_runs_table import QtRunsTable, RunsTableModel
from ringscope.gui.views.qt_status_bar import QtStatusBar
from ringscope.gui.views.qt_step_breakdown import QtStepBreakdown
from ringscope.gui.views.qt_sweep import QtSweepDialog
from ringscope.gui.views.qt_time_range import QtHistoryBar, TimeRange, run_end
from ringscope.gui.views.qt_window_actions import WindowActions

log = logging.getLogger(__name__)

# ~37 Hz. At 30 ms (~33 Hz) a loaded 2-core machine served 29.5-30.7 frames/s at 1 024 ranks: ticks that start late
# use up the headroom. 27 ms served 31.9-34.5 (4 interleaved pairs: frames x1.10, x1.06-x1.13; latency p99 x0.90).
# The window's CPU rose by about 1 % of a core, because ticks with nothing new skip the redraw.
FRAME_INTERVAL_MS = 27
FRAME_PACE = 0.9  # a frame drawn on arrival asks for the next one at the next tick, not before 0.9 of an interval
TABLE_INTERVAL_S = 0.25
TEXT_INTERVAL_S = 0.25  # overview cards and status bar: numbers are read, not watched; a card repaint is ~2.5 ms
RUNS_INTERVAL_S = 0.3  # the runs table (and every run's lifecycle decision): ~3 Hz
STAGGER_ABOVE_RANKS = 256  # beyond this many ranks the charts are redrawn in turns
HEAVY_BUDGET_S = 0.010  # many ranks: charts are redrawn in turn while the tick has used less than this
IDLE_REDRAW_S = 0.5  # when nothing arrives, still redraw this often: states (lost) and time axes move


class QtMainWindow(WindowActions, QtWidgets.QMainWindow):
    """The Ringscope window over a session's runs (``LiveRuns``) or over one ``LiveStore``.

    Args:
        source: the runs the collector feeds (the runs table picks which one is shown), or one live store.
        endpoint: the collector's bound endpoint (shown in the status bar).
        preferences: current preferences (price, lost timeout...).
        recorder: an object with ``path`` and ``file_bytes`` (the session file), or None.
        launcher: a ``ringscope.gui.core.launch.Launcher`` for the launch / stop actions, or None.
        cost_panel: a widget that replaces the overview's built-in cost-of-waiting card, or None. It is
            injected (not built here) because it needs whole-session figures, which the live store does not keep.
        analyzer: a ``LiveAnalyzer`` feeding the cost panel (told which run to analyze), or None.
        session_source: loads the whole session (the recording) — called on worker threads for exports and
            comparisons, which take the selected runs out of it. None: the runs' live stores are used.
        access_token: the token agents need when the collector requires authentication (``--secure``), or None;
            File > Agent access token… shows it and the status bar says the channel is encrypted.
        read_only: the recording this window shows (a reopened session: nothing is received or launched), or None.
    """

    sig_frame_rendered = QtCore.Signal(object)
    """Emitted after each frame with the snapshot it showed (benchmarks measure latency from it)."""

    sig_run_selected = QtCore.Signal(str)
    """The window shows another run now (argument: its run id), picked by the user or selected automatically."""

    sig_open_requested = QtCore.Signal(str)
    """File > Open session… chose a recording (argument: its path); the app opens it in a read-only window."""

    def __init__(self, source: LiveRuns | RemoteRuns | LiveStore, *, endpoint: str = "",
                 preferences: Preferences | None = None, recorder: Any = None, launcher: Any = None,
                 cost_panel: QtWidgets.QWidget | None = None, analyzer: Any = None,
                 session_source: Callable[[], SessionData] | None = None, access_token: str | None = None,
                 read_only: str | None = None, watcher: Any = None,
                 metrics: Callable[[int], str] | None = None) -> None:
        super().__init__()
        self.runs: LiveRuns | RemoteRuns | None = None if isinstance(source, LiveStore) else source
        self.store: LiveStore | RemoteStore = source if isinstance(source, LiveStore) else LiveStore()
        self.ingest_failure: str | None = None  # why the ingest process ended, once it did (shown, never fatal)
        self.ingest_restarted: tuple[int, str] | None = None  # (restarts, what to say) of the last one shown
        self.endpoint = endpoint
        self.access_token = access_token
        self.preferences = preferences or Preferences()
        self.recorder = recorder
        self.launcher = launcher
        self.cost_panel = cost_panel
        self.analyzer = analyzer
        self.session_source = session_source
        self.read_only = read_only
        self.watcher = watcher  # decides run states on the runs-table clock and records hangs
        self.metrics = metrics  # (re)starts the metrics endpoint on a port (0: off); returns what to tell the user
        self.hangs: dict[str, HangVerdict] = {}  # the last hang verdict of each run that hung
        self.selected_run_id: str | None = None
        self.run_row: RunRow | None = None
        self.selection = RunSelection()
        self.launch_outcomes: dict[str, Any] = {}  # run id -> LaunchOutcome, once the app noted how it ended
        self._last_runs_refresh = -math.inf
        self._figures_version = 0
        self.frames = 0
        self.last_snapshot: Snapshot | None = None
        self._last_full_render = 0.0
        self._last_table_render = 0.0
        self._last_text_render = 0.0
        self._text_key: tuple[object, ...] = ()
        self._heavy_turn = 0
        self._chart_key: tuple[object, ...] | None = None
        self.charts_last_tick = 0  # how many charts the last tick redrew (benchmarks report it)
        self.compare_dialog: QtRunCompare | None = None
        self.compare_job: BackgroundJob | None = None
        self.export_job: ExportJob | None = None
        self.sweep_dialog: QtSweepDialog | None = None
        self.resize(1600, 1000)
        self.overview = QtOverview(cost_panel)
        self.gpu_panel = QtGpuPanel()
        self.breakdown = QtStepBreakdown()
        self.stall = QtRankTimeline("comm_exposed")
        self.data_idle = QtRankTimeline("data_wait")
        self.time_range = TimeRange()
        for plot in (self.breakdown.columns_plot, *self.stall.time_plots, *self.data_idle.time_plots,
                     self.gpu_panel.series_plot):
            self.time_range.attach(plot)
        self.ranks_model = RanksTableModel()
        self.ranks_table = QtRanksTable(self.ranks_model)
        for timeline in (self.stall, self.data_idle):  # a host picked in one timeline: both, and the ranks table
            timeline.sig_focus_host.connect(self.focus_host)
        self.runs_model = RunsTableModel()
        self.runs_table = QtRunsTable(self.runs_model)
        self.runs_table.sig_run_picked.connect(lambda run_id: self.select_run(run_id, by_user=True))
        self.runs_table.sig_compare_requested.connect(self.compare_runs)
        self.status = QtStatusBar()
        self.setStatusBar(self.status)
        self._build_layout()
        self._build_actions()
        self._update_title()
        self.timer = QtCore.QTimer(self)
        self.timer.setInterval(FRAME_INTERVAL_MS)
        self.timer.setTimerType(QtCore.Qt.TimerType.PreciseTimer)  # a coarse timer drifts to ~25 Hz
        self.timer.timeout.connect(self.render_frame)
        self.timer.start()
        self._frames_watch: QtCore.QSocketNotifier | None = None  # draws a frame from the ingest process on arrival
        self._watched: Connection | None = None  # the frames connection it watches
        self._in_frame = False
        self.cost_timer = QtCore.QTimer(self)  # whole-session figures change slowly: pick them up once a second
        self.cost_timer.setInterval(1000)
        self.cost_timer.timeout.connect(self.render_cost)
        self.cost_timer.start()

    # ---- Public API ----------------------------------------------------------------------------------------------

    def render_frame(self) -> Snapshot:
        """Take a snapshot of the selected run and redraw every view from it (the timer calls this ~37 times a
        second, and the frames socket's watcher when a frame arrives); a few times a second, refresh the runs table
        first (a new run may become the selected one)."""
        self._in_frame = True
        try:
            return self._draw_frame()
        finally:
            self._in_frame = False
            self._watch_frames()

    def stop_frames(self) -> None:
        """Stop drawing frames: the timer and the watch on the frames socket (before the ingest process closes)."""
        self.timer.stop()
        self._watch_frames()

    def _draw_frame(self) -> Snapshot:
        started = time.perf_counter()
        now = time.monotonic()
        if self.runs is not None and now - self._last_runs_refresh >= RUNS_INTERVAL_S:
            self.refresh_runs()
        snap = self.store.snapshot()
        changed = self.last_snapshot is None or snap.version != self.last_snapshot.version
        if changed or now - self._last_full_render >= IDLE_REDRAW_S:
            forced = self._last_full_render == 0.0  # a new run shown, new preferences: everything is redrawn
            self._last_full_render = now
            recording = str(self.recorder.path) if self.recorder is not None else (
                "read-only" if self.read_only is not None else "off")
            self.time_range.update(run_end(snap), snap.bucket_s, snap.ended)  # before the charts: they read the x range
            # Text is redrawn at 4 Hz (at once when ranks appear, get lost or the straggler changes): numbers that
            # change 30 times a second cannot be read, and each card repaint re-renders the styled parents.
            text_key = (len(snap.ranks), snap.state.count(STATE_LOST), snap.straggler and snap.straggler.rank,
                        snap.no_gpu, snap.framework, snap.run_id, snap.run_state)
            # 1024 rows at 30 Hz are not free either; table and text take alternate ticks so they never add up
            table_due = (self.ranks_model.held_ranks() != len(snap.ranks)
                         or now - self._last_table_render >= TABLE_INTERVAL_S)
            text_due = text_key != self._text_key or (now - self._last_text_render >= TEXT_INTERVAL_S
                                                      and not table_due)
            if table_due:
                self._last_table_render = now
                self.ranks_table.refresh(snap)
            if text_due:
                self._text_key = text_key
                self._last_text_render = now
                self.overview.render(snap, recording, self.preferences.price_per_gpu_hour or None, self.run_row,
                                     hang=self.current_hang())
                size = _safe(lambda: int(self.recorder.file_bytes)) if self.recorder is not None else None
                self.status.render(snap, self.endpoint, recording if self.recorder is not None else None, size,
                                   secure=bool(self.access_token), read_only=self.read_only,
                                   write_errors=int(getattr(self.recorder, "write_errors", 0) or 0),
                                   last_write_error=getattr(self.recorder, "last_write_error", None))
            # an ended run's charts change only when the user moves them: no redraw twice a second for nothing
            chart_key = (snap.version, snap.run_id, self.time_range.visible()) if snap.ended else None
            if forced or chart_key is None or chart_key != self._chart_key:
                self._chart_key = chart_key
                self._render_charts(snap, started)  # after the text: the charts get what is left of the budget
            self.frames += 1
            self.last_snapshot = snap
            self.sig_frame_rendered.emit(snap)
        return snap

    def _watch_frames(self) -> None:
        """Watch the ingest process's frames socket while the timer runs, so that a frame is drawn when it arrives,
        not at the next tick (it waited for up to a tick there: 10-20 ms more latency at the median, 1 024 ranks).
        Follows the channel of a process that replaced a crashed one, and stops watching one that cannot be read: a
        closed or broken socket stays readable and would wake the event loop for nothing."""
        channel_of = getattr(self.runs, "frames_channel", None)
        channel = channel_of() if channel_of is not None and self.timer.isActive() else None
        connection = channel.connection if channel is not None and channel.usable else None
        if connection is self._watched:
            return
        if self._frames_watch is not None:
            self._frames_watch.setEnabled(False)
            self._frames_watch.deleteLater()
            self._frames_watch = None
        self._watched = connection
        if channel is not None and connection is not None:
            channel.pace_s = FRAME_PACE * FRAME_INTERVAL_MS / 1000  # the next request waits for the next tick
            self._frames_watch = QtCore.QSocketNotifier(connection.fileno(), QtCore.QSocketNotifier.Type.Read, self)
            self._frames_watch.activated.connect(self._frame_arrived)

    def _frame_arrived(self) -> None:
        if not self._in_frame:  # a handler of sig_frame_rendered that runs the event loop: the socket stays readable
            self.render_frame()

    def refresh_runs(self) -> list[RunRow]:
        """Refresh the runs table from ``runs.rows()`` (which also decides every run's state) and select a new run
        when the rule in the module docstring says so. Returns the rows, oldest first."""
        if self.runs is None:
            return []
        self._last_runs_refresh = time.monotonic()
        failure = getattr(self.runs, "failure", None)
        if failure is not None and failure != self.ingest_failure:
            self.ingest_failure = failure
            where = f"; the recording up to then is intact: {self.recorder.path}" if self.recorder is not None else ""
            self.status.export_notice.show_failure(  # the first line shows, all of it in the tooltip
                f"{failure}\nNo more telemetry is received; the window keeps what it shows{where}.",
                what="Collector stopped")
            log.error("%s", failure)
        restarted = getattr(self.runs, "restarted", None)
        if restarted is not None and restarted != self.ingest_restarted:
            self.ingest_restarted = restarted
            self.status.showMessage(restarted[1], 60_000)
        if self.watcher is not None:
            for notice in self.watcher.tick():  # refreshes the run states
                self.hangs[notice.run_id] = notice.verdict
                self.status.showMessage(f"Run {notice.run_id} {notice.verdict.summary(time.time())} — Run ▸ Hang "
                                        "details… (Ctrl+H) shows the stacks", 30_000)
        rows = self.runs.rows(refresh=self.watcher is None)
        self.runs_model.set_rows(rows, self.preferences.price_per_gpu_hour or None)
        shown = self.selected_run_id
        target = self.selection.choose([row.run_id for row in rows], shown,
                                       shown is not None and self.runs.store(shown) is not None)
        if target is not None:
            self.select_run(target)
        previous = self.run_row
        self.run_row = self.runs_model.run(self.selected_run_id) if self.selected_run_id is not None else None
        if self.run_row is not None and (previous is None or previous.state != self.run_row.state):
            # the Run card says the run's state: redraw the text at the next tick, even if no telemetry moves
            self._text_key = ()
            self._last_full_render = min(self._last_full_render, time.monotonic() - IDLE_REDRAW_S)
        self._update_title()
        return rows

    def focus_host(self, host: str | None) -> None:
        """Drill down to ``host``'s ranks in both timelines and the ranks table (None: every host again)."""
        for timeline in (self.stall, self.data_idle):
            timeline.set_focus_host(host)
        self.ranks_model.set_host(host)
        self.ranks_dock.setWindowTitle("Ranks" if host is None else f"Ranks on {host}")

    def select_run(self, run_id: str, *, by_user: bool = False) -> bool:
        """Show ``run_id`` in every card and chart. False when the run is unknown or no longer in memory."""
        if by_user:
            self.selection.note_picked()
        store = self.runs.store(run_id) if self.runs is not None else None
        if store is None:
            if by_user:
                self.status.showMessage(f"Run {run_id} is no longer held in memory (more than the window keeps); "
                                        "its recording still has it: File ▸ Open session…", 10_000)
            return False
        self.runs_table.show_run(run_id)
        if run_id == self.selected_run_id and store is self.store:
            return True
        self.selected_run_id = run_id
        self.store = store
        self.run_row = self.runs_model.run(run_id)
        for view in (self.breakdown, self.stall, self.data_idle, self.gpu_panel):
            view.reset()  # what they kept (heat columns by stamp, last drawn) belongs to the previous run
        self.last_snapshot = None
        self.overview.show_network(None)  # the previous run's verdict; the analyzer brings this run's
        self._chart_key = None
        self._text_key = ()
        self._last_full_render = 0.0
        self.time_range.follow(True)
        if self.analyzer is not None and hasattr(self.analyzer, "select"):
            self.analyzer.select(run_id)
            if self.cost_panel is not None and hasattr(self.cost_panel, "show_pending"):
                self.cost_panel.show_pending(f"analyzing run {run_id}…")
        self._update_title()
        self.sig_run_selected.emit(run_id)
        return True

    def note_launched(self, run_id: str) -> None:
        """A launch from this window started: its run is shown once its first agent says hello."""
        self.selection.note_launched(run_id)

    def zoom_to_last(self, seconds: float) -> None:
        """Show the last ``seconds`` of the selected run in every time chart (stops following live)."""
        snap = self.store.snapshot()
        self.time_range.update(run_end(snap), snap.bucket_s, snap.ended)
        self.time_range.show_last(seconds)

    def render_cost(self) -> None:
        """Show the analyzer's latest whole-session figures in the cost panel, if they are new."""
        figures = self.analyzer.latest() if self.analyzer is not None else None
        if figures is None or self.cost_panel is None or figures.version == self._figures_version:
            return
        if self.runs is not None and getattr(figures, "run_id", None) != self.selected_run_id:
            return  # figures of a run no longer shown
        self._figures_version = figures.version
        self.cost_panel.update_from(figures.analysis, figures.cost)
        verdict = self.overview.network_verdict
        self.overview.show_network(figures.analysis)
        if self.overview.network_verdict != verdict:
            self._text_key = ()  # the cards are redrawn at the next tick even if no telemetry arrives

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
        """Use new preferences now (the lost-rank timeout, price and metrics port apply at once; endpoint and theme
        at restart)."""
        if self.metrics is not None and prefs.metrics_port != self.preferences.metrics_port:
            self.status.showMessage(self.metrics(prefs.metrics_port), 15_000)
        self.preferences = prefs
        if self.runs is not None:
            self.runs.lost_timeout_s = prefs.lost_timeout_s
        self.store.lost_timeout_s = prefs.lost_timeout_s
        if self.analyzer is not None:
            self.analyzer.refresh()  # the price may have changed
        self._last_full_render = 0.0
        self._last_runs_refresh = -math.inf

    def runs_data(self, run_ids: Sequence[str | None]) -> list[SessionData]:
        """The whole data of these runs (called on worker threads): from the recording when there is one (loaded
        once), else from each run's live store (its recent steps). ``None``: the store shown (no runs)."""
        if self.session_source is not None:
            data = self.session_source()
            return [data.for_run(run_id) if run_id is not None else data for run_id in run_ids]
        out = []
        for run_id in run_ids:
            store = self.runs.store(run_id) if self.runs is not None and run_id is not None else self.store
            if store is None:
                raise LookupError(f"run {run_id} is no longer held in memory and this window records nothing")
            out.append(store.to_session_data())
        return out

    def _update_title(self) -> None:
        title = "Ringscope — data-parallel training"
        if self.selected_run_id is not None:
            row = self.run_row
            what = f" ({row.framework} / {row.strategy}, {row.state})" if row is not None else ""
            title = f"Ringscope — run {self.selected_run_id}{what}"
        if self.read_only is not None:
            title += f" — read-only: {self.read_only}"
        if self.windowTitle() != title:
            self.setWindowTitle(title)

    def current_hang(self) -> HangVerdict | None:
        """The selected run's hang verdict while it is hung, else None."""
        if self.runs is None or self.selected_run_id is None:
            return None
        return self.runs.hang(self.selected_run_id)

    # ---- Layout --------------------------------------------------------------------------------------

    def _build_layout(self) -> None:
        central = QtWidgets.QWidget()
        layout = QtWidgets.QVBoxLayout(central)
        layout.setContentsMargins(8, 8, 8, 4)
        layout.addWidget(self.overview)
        self.history_bar = QtHistoryBar(self.time_range)
        self.follow_button, self.whole_button = self.history_bar.follow_button, self.history_bar.whole_button
        layout.addWidget(self.history_bar)
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
        self.runs_dock = QtWidgets.QDockWidget("Runs", self)
        self.runs_dock.setObjectName("runsDock")
        self.runs_dock.setWidget(self.runs_table)
        self.addDockWidget(QtCore.Qt.DockWidgetArea.TopDockWidgetArea, self.runs_dock)
        self.resizeDocks([self.runs_dock], [150], QtCore.Qt.Orientation.Vertical)
        self.runs_dock.setVisible(self.runs is not None)  # a single store has no runs to list
        self.ranks_dock = QtWidgets.QDockWidget("Ranks", self)
        self.ranks_dock.setObjectName("ranksDock")
        self.ranks_dock.setWidget(self.ranks_table)
        self.addDockWidget(QtCore.Qt.DockWidgetArea.BottomDockWidgetArea, self.ranks_dock)
        self.resizeDocks([self.ranks_dock], [200], QtCore.Qt.Orientation.Vertical)  # the charts get the height
        self.process_dock: QtWidgets.QDockWidget | None = None
        self.process_panel: QtProcessPanel | None = None
        if self.launcher is not None:
            self.process_panel = QtProcessPanel(self.launcher)
            self.process_panel.sig_run_started.connect(self.note_launched)
            self.process_panel.sig_sweep_requested.connect(lambda values: self.open_sweep_dialog().prefill(values))
            if self.runs is not None:
                self.process_panel.sig_stop_requested.connect(self.runs.note_stop_requested)
            self.process_dock = QtWidgets.QDockWidget("Processes", self)
            self.process_dock.setObjectName("processDock")
            self.process_dock.setWidget(self.process_panel)
            self.addDockWidget(QtCore.Qt.DockWidgetArea.BottomDockWidgetArea, self.process_dock)
            self.tabifyDockWidget(self.ranks_dock, self.process_dock)
            self.ranks_dock.raise_()


def _safe(read: Callable[[], int]) -> int | None:
    try:
        return read()
    except Exception:  # the recorder may be closing; the size is only informative
        return None

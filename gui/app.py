"""Composition root: builds the collector, the live runs, the recorder and the main window, and wires them together.

Nothing else creates these objects for the window. ``build_window`` is usable by tests without ``app.exec()``;
``run`` is what ``ringscope`` / ``ringscope window`` calls. ``build_viewer`` / ``run_viewer`` show a recorded
session read-only in the same window (``ringscope open S.db``, File ▸ Open session…): no collector, no launcher,
no recorder.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from PySide6 import QtCore, QtWidgets

from ringscope.agent.keys import ENV_KEY, CollectorKeys
from ringscope.gui.core.analysis.runs import launch_outcome
from ringscope.gui.core.ingest.collector import CollectorError
from ringscope.gui.core.ingest.session_reader import load as load_session
from ringscope.gui.core.launch import Launcher, connect_endpoint, remote_endpoint
from ringscope.gui.core.live.live_analysis import LIVE_GPU_READINGS, LIVE_LEAST, LIVE_STEPS, LiveAnalyzer
from ringscope.gui.core.live.runs import LiveRuns
from ringscope.gui.core.live.store import LiveStore
from ringscope.gui.core.service.process import IngestError, IngestProcess
from ringscope.gui.core.service.remote import RemoteCollector, RemoteRecorder, RemoteRuns, RemoteStore, RemoteWatcher
from ringscope.gui.core.service.server import IngestSetup
from ringscope.gui.core.session_data import SessionData
from ringscope.gui.views import theme
from ringscope.gui.views.qt_background import start_background
from ringscope.gui.views.qt_cost_panel import QtCostPanel
from ringscope.gui.views.qt_gc import collect_on_gui_thread
from ringscope.gui.views.qt_main_window import QtMainWindow
from ringscope.gui.views.qt_preferences import Preferences, load_preferences

log = logging.getLogger(__name__)


def default_session_path() -> Path:
    """``~/.local/share/ringscope/sessions/<timestamp>.db`` (``XDG_DATA_HOME`` respected)."""
    base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / "ringscope" / "sessions" / f"{time.strftime('%Y%m%d-%H%M%S')}.db"


@dataclass
class WindowParts:
    """Everything ``build_window`` made; ``close()`` stops it in the right order.

    The collector, the live runs and the recorder live in the ingest process (``ingest``); ``runs``,
    ``collector`` and ``recorder`` are the window's stand-ins for them (``ringscope.gui.core.service.remote``).
    ``store`` is the store of the run the window shows now (an empty store before any run).
    """

    window: QtMainWindow
    runs: RemoteRuns
    collector: RemoteCollector
    recorder: RemoteRecorder | None
    launcher: Any = None
    analyzer: LiveAnalyzer | None = None
    simulation_stop: threading.Event = field(default_factory=threading.Event)
    simulation: threading.Thread | None = None
    ingest: IngestProcess | None = None

    @property
    def store(self) -> LiveStore | RemoteStore:
        """The selected run's store (what every card and chart shows)."""
        return self.window.store

    def close(self) -> dict[str, Any]:
        """Stop the simulation, the timer, the launches, then the ingest process (its collector, then its
        recorder, so the recording gets every last record). Returns the ingest process's closing figures."""
        self.simulation_stop.set()
        self.window.stop_frames()
        self.window.cost_timer.stop()
        if self.analyzer is not None:
            self.analyzer.close()
        if self.launcher is not None and hasattr(self.launcher, "close"):
            self.runs.note_stop_requested(None)
            self.launcher.close()
            _note_launch_outcomes(self.window, self.runs, self.recorder)  # runs stopped by closing the window
        if self.simulation is not None:
            self.simulation.join(10)
        return self.ingest.close() if self.ingest is not None else {}


@dataclass
class ViewerParts:
    """A read-only window over a recorded session (``build_viewer``)."""

    window: QtMainWindow
    runs: LiveRuns
    path: Path | None
    analyzer: LiveAnalyzer | None = None

    @property
    def store(self) -> LiveStore:
        """The selected run's store."""
        return self.window.store

    def close(self) -> None:
        """Stop the timers and the analyzer."""
        self.window.stop_frames()
        self.window.cost_timer.stop()
        if self.analyzer is not None:
            self.analyzer.close()


def build_window(*, bind: str | None = None, record_to: str | Path | None = None, record: bool = True,
                 preferences: Preferences | None = None, simulate_ranks: int | None = None,
                 simulate_kwargs: dict[str, Any] | None = None, keys: CollectorKeys | None = None) -> WindowParts:
    """Build (but do not ``exec``) the window with a running collector. A QApplication must exist.

    ``record=False`` keeps the session in memory only. ``simulate_ranks`` feeds the window from
    ``ringscope.agent.simulate.run_cluster`` (real agents, real sockets) in a background thread. ``keys`` makes the
    collector require CURVE; the trainings the window launches (and the simulation) get the access token.
    """
    prefs = preferences or load_preferences()
    if bind:
        prefs = replace(prefs, endpoint=bind)
    record_path: Path | None = None
    if record:
        record_path = Path(record_to) if record_to else default_session_path()
    ingest = IngestProcess(IngestSetup(bind=prefs.endpoint, record_to=str(record_path) if record_path else None,
                                       meta={"command": " ".join(sys.argv)}, keys=keys,
                                       lost_timeout_s=prefs.lost_timeout_s)).start()  # raises CollectorError
    runs = RemoteRuns(ingest, prefs.lost_timeout_s)
    collector = RemoteCollector(ingest)
    recorder = RemoteRecorder(ingest, ingest.recording_path) if ingest.recording_path is not None else None
    launcher = Launcher(connect_endpoint(collector.endpoint),
                        agent_env={ENV_KEY: keys.agent_keys.token} if keys is not None else None,
                        remote_endpoint=remote_endpoint(collector.endpoint))
    window_ref: list[QtMainWindow] = []
    session_source = _session_source(recorder)
    # the shown run's live store, also while recording: its phase totals price every step's waiting, and a pass
    # reads a bounded part of it (reading the recording made each pass, and the window, grow with the run)
    analyzer = LiveAnalyzer(_live_source(window_ref),
                            _price_reader(window_ref, prefs), priced_until=runs.priced_until)
    ingest.price = _price_reader(window_ref, prefs)

    def serve_metrics(port: int) -> str:
        try:
            return str(ingest.call("service", "serve_metrics", port))
        except IngestError as exc:
            return f"metrics endpoint not started: {exc}"

    window = QtMainWindow(runs, endpoint=collector.endpoint, preferences=prefs, recorder=recorder,
                          launcher=launcher, cost_panel=QtCostPanel(), analyzer=analyzer,
                          session_source=session_source,
                          access_token=keys.agent_keys.token if keys is not None else None,
                          watcher=RemoteWatcher(ingest), metrics=serve_metrics)
    window_ref.append(window)
    if prefs.metrics_port:
        log.info("%s", serve_metrics(prefs.metrics_port))
    if window.process_panel is not None:
        window.process_panel.sig_run_finished.connect(
            lambda run_id, _ok: _note_launch_outcomes(window, runs, recorder, run_id))
    window.sig_open_requested.connect(lambda path: open_viewer(path, prefs))
    analyzer.start()
    parts = WindowParts(window, runs, collector, recorder, launcher, analyzer, ingest=ingest)
    if simulate_ranks:
        parts.simulation = _start_simulation(parts, simulate_ranks, simulate_kwargs or {}, keys)
    return parts


def build_viewer(path: str | Path | None = None, *, runs: LiveRuns | None = None, data: SessionData | None = None,
                 preferences: Preferences | None = None) -> ViewerParts:
    """A read-only window over a recorded session (no collector, launcher or recorder). A QApplication must exist.

    Give the session file (``path``), or its loaded ``data``, or the ``runs`` rebuilt from it already
    (``ringscope.gui.core.live.replay.runs_from_session``). Raises ``SessionFileError`` for a file that is not a
    session.
    """
    from ringscope.gui.core.live.replay import runs_from_session

    prefs = preferences or load_preferences()
    if data is None and path is not None and runs is None:
        data = load_session(path)
    if runs is None:
        runs = runs_from_session(data if data is not None else SessionData(), lost_timeout_s=prefs.lost_timeout_s)
    window_ref: list[QtMainWindow] = []
    loaded = data
    source = (lambda: loaded) if loaded is not None else None
    analyzer = LiveAnalyzer(source or _live_source(window_ref),
                            _price_reader(window_ref, prefs), priced_until=runs.priced_until)
    label = str(path) if path is not None else "recorded session"
    window = QtMainWindow(runs, preferences=prefs, cost_panel=QtCostPanel(), analyzer=analyzer,
                          session_source=source, read_only=label)
    window_ref.append(window)
    window.sig_open_requested.connect(lambda other: open_viewer(other, prefs))
    analyzer.start()
    window.refresh_runs()  # rows and the latest run selected before the first paint
    return ViewerParts(window, runs, Path(path) if path is not None else None, analyzer)


_viewers: list[ViewerParts] = []


def open_viewer(path: str | Path, preferences: Preferences | None = None) -> None:
    """Open a recording in a new read-only window (File ▸ Open session…): loaded on a worker thread, shown when
    ready; a file that is not a session is reported in a message box."""
    from ringscope.gui.core.live.replay import runs_from_session

    prefs = preferences or load_preferences()

    def load() -> tuple[SessionData, LiveRuns]:
        data = load_session(path)
        return data, runs_from_session(data, lost_timeout_s=prefs.lost_timeout_s)

    def show(result: tuple[SessionData, LiveRuns]) -> None:
        data, runs = result
        parts = build_viewer(path, runs=runs, data=data, preferences=prefs)
        _viewers.append(parts)
        parts.window.setAttribute(QtCore.Qt.WidgetAttribute.WA_DeleteOnClose)
        parts.window.destroyed.connect(lambda *_a, p=parts: _forget_viewer(p))
        parts.window.show()

    job = start_background(load, f"opening {path}")
    job.sig_done.connect(show)
    job.sig_failed.connect(lambda text: QtWidgets.QMessageBox.warning(
        None, "Open session", f"Could not open {path}:\n{text.split(chr(10) * 2)[0]}"))


def _start_qt() -> tuple[QtWidgets.QApplication, Preferences] | None:
    """The application object with its names and theme, or None (said on stderr) when no window can open here."""
    problem = missing_display()
    if problem:
        print(f"ringscope: {problem}", file=sys.stderr)
        return None
    app = QtWidgets.QApplication.instance() or QtWidgets.QApplication(sys.argv[:1])
    app.setOrganizationName("Ringscope")
    app.setApplicationName("Ringscope")
    prefs = load_preferences()
    theme.apply_theme(app, prefs.theme)  # before any plot is created: pyqtgraph reads its defaults then
    collect_on_gui_thread()  # a widget in a reference cycle must never be destroyed on a worker thread
    return app, prefs  # type: ignore[return-value]


def run_viewer(path: str | Path, *, data: SessionData | None = None) -> int:
    """``ringscope open S.db``: show a recorded session (``data``: loaded already) read-only until the window
    closes. Returns the exit code."""
    started = _start_qt()
    if started is None:
        return 2
    app, prefs = started
    parts = build_viewer(path, data=data, preferences=prefs)
    parts.window.show()
    _quit_on_signals(app)
    try:
        return int(app.exec())
    finally:
        parts.close()
        for viewer in list(_viewers):
            viewer.close()


def run(*, bind: str | None = None, record_to: str | None = None, demo: object | None = None,
        simulate_ranks: int | None = None, keys: CollectorKeys | None = None) -> int:
    """Open the window and run the Qt event loop until it closes. Returns the process exit code."""
    started = _start_qt()
    if started is None:
        return 2
    app, prefs = started
    try:
        parts = build_window(bind=bind, record_to=record_to, preferences=prefs, simulate_ranks=simulate_ranks,
                             keys=keys)
    except CollectorError as exc:  # the endpoint was checked before Qt, but another process may have taken it since
        hint = "start with --bind tcp://127.0.0.1:0 to pick a free port, or close the other Ringscope window"
        print(f"ringscope: {exc}; {hint}", file=sys.stderr)
        QtWidgets.QMessageBox.critical(None, "Ringscope", f"{exc}\n\n{hint[0].upper()}{hint[1:]}.")
        return 2
    parts.window.show()
    _quit_on_signals(app)
    if demo is not None:
        QtCore.QTimer.singleShot(0, lambda: _start_demo(parts, demo))
    try:
        return int(app.exec())
    finally:
        parts.close()
        for viewer in list(_viewers):  # recordings opened from the window (File > Open session…)
            viewer.close()


def missing_display() -> str | None:
    """Why no window can open here, or None: no X11/Wayland display and no Qt platform chosen, or Qt's xcb
    libraries missing (Qt would abort inside ``QApplication``); the message names the packages to install."""
    from ringscope.gui.core.display import display_problem

    return display_problem(os.environ)


def _quit_on_signals(app: QtWidgets.QApplication) -> None:
    """Ctrl-C in the terminal or SIGTERM (e.g. a session manager) closes the window cleanly: the recorder flushes.

    Python runs signal handlers only between bytecodes, and Qt's event loop is C++: a cheap timer lets it in.
    """
    def quit_app(signum: int, _frame: object) -> None:
        log.info("received signal %d: closing the window and flushing the recording", signum)
        app.quit()

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, quit_app)
    heartbeat = QtCore.QTimer(app)
    heartbeat.timeout.connect(lambda: None)
    heartbeat.start(200)


def _session_source(recorder: RemoteRecorder | None) -> Callable[[], SessionData] | None:
    """Where whole-run figures come from: the recording (complete); None without one (the runs' live stores)."""
    if recorder is None:
        return None
    path = recorder.path
    return lambda: load_session(path)


def _live_source(window_ref: list[QtMainWindow]) -> Callable[[], SessionData]:
    """What the live analysis reads: the shown run's live store, within the analysis's budgets (its newest steps
    and GPU readings, and every step's phase totals; an export of the run reads the recording, or the store's
    own budget without one)."""
    return lambda: window_ref[0].store.to_session_data(LIVE_STEPS, LIVE_GPU_READINGS, LIVE_LEAST)


def _price_reader(window_ref: list[QtMainWindow], prefs: Preferences) -> Callable[[], float | None]:
    def price() -> float | None:  # read on the analyzer's thread: a float attribute, no Qt call
        current = window_ref[0].preferences if window_ref else prefs
        return current.price_per_gpu_hour or None

    return price


def _note_launch_outcomes(window: QtMainWindow, runs: LiveRuns | RemoteRuns, recorder: RemoteRecorder | None,
                          run_id: str | None = None) -> None:
    """Tell the runs and the recording how launched runs ended (all of a run's processes final): stopped from the
    window, failed (a process exited non-zero on its own) or finished. ``None``: every launched run that ended."""
    launcher = window.launcher
    if launcher is None:
        return
    for run in launcher.runs:
        if (run_id is not None and run.run_id != run_id) or run.alive or run.run_id in window.launch_outcomes:
            continue
        outcome = launch_outcome([(p.state, p.returncode, p.stop_requested_s is not None) for p in run.processes],
                                 time.time())
        window.launch_outcomes[run.run_id] = outcome
        runs.note_launch(run.run_id, outcome)
        if recorder is not None:
            recorder.note_launch(run.run_id, outcome.state, outcome.exit_code, outcome.ts_s, outcome.detail)


def _forget_viewer(parts: ViewerParts) -> None:
    parts.close()
    if parts in _viewers:
        _viewers.remove(parts)


def _start_demo(parts: WindowParts, demo: object) -> None:
    parts.window.start_launch(demo)


def _start_simulation(parts: WindowParts, ranks: int, kwargs: dict[str, Any], keys: CollectorKeys | None
                      ) -> threading.Thread:
    from ringscope.agent.simulate import run_cluster


    def body() -> None:
        try:
            run_cluster(ranks, endpoint=parts.collector.endpoint, stop=parts.simulation_stop,
                        keys=keys.agent_keys if keys is not None else None, **kwargs)
        except Exception:
            log.exception("simulation stopped with an error")

    thread = threading.Thread(target=body, name="ringscope-simulate", daemon=True)
    thread.start()
    return thread

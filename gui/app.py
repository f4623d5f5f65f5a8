"""Composition root: builds the collector, live store, recorder and main window, and wires them together.

Nothing else creates these objects for the window. ``build_window`` is usable by tests without ``app.exec()``;
``run`` is what ``ringscope`` / ``ringscope window`` calls.
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

from agent.keys import ENV_KEY, CollectorKeys
from gui.core.ingest.collector import Collector, CollectorError
from gui.core.ingest.recorder import Recorder
from gui.core.ingest.session import load as load_session
from gui.core.launch import Launcher, connect_endpoint
from gui.core.live.live_analysis import LiveAnalyzer
from gui.core.live.store import LiveStore
from gui.core.session_data import SessionData
from gui.views import theme
from gui.views.qt_cost_panel import QtCostPanel
from gui.views.qt_main_window import QtMainWindow
from gui.views.qt_preferences import Preferences, load_preferences

log = logging.getLogger(__name__)


def default_session_path() -> Path:
    """``~/.local/share/ringscope/sessions/<timestamp>.db`` (``XDG_DATA_HOME`` respected)."""
    base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / "ringscope" / "sessions" / f"{time.strftime('%Y%m%d-%H%M%S')}.db"


@dataclass
class WindowParts:
    """Everything ``build_window`` made; ``close()`` stops it in the right order."""

    window: QtMainWindow
    store: LiveStore
    collector: Collector
    recorder: Recorder | None
    launcher: Any = None
    analyzer: LiveAnalyzer | None = None
    simulation_stop: threading.Event = field(default_factory=threading.Event)
    simulation: threading.Thread | None = None

    def close(self) -> None:
        """Stop the simulation, the timer, the collector, then the recorder (so it gets every last record)."""
        self.simulation_stop.set()
        self.window.timer.stop()
        self.window.cost_timer.stop()
        if self.analyzer is not None:
            self.analyzer.close()
        if self.launcher is not None and hasattr(self.launcher, "close"):
            self.launcher.close()
        if self.simulation is not None:
            self.simulation.join(10)
        self.collector.close()
        if self.recorder is not None:
            self.recorder.close()


def build_window(*, bind: str | None = None, record_to: str | Path | None = None, record: bool = True,
                 preferences: Preferences | None = None, simulate_ranks: int | None = None,
                 simulate_kwargs: dict[str, Any] | None = None, keys: CollectorKeys | None = None) -> WindowParts:
    """Build (but do not ``exec``) the window with a running collector. A QApplication must exist.

    ``record=False`` keeps the session in memory only. ``simulate_ranks`` feeds the window from
    ``agent.simulate.run_cluster`` (real agents, real sockets) in a background thread. ``keys`` makes the
    collector require CURVE; the trainings the window launches (and the simulation) get the access token.
    """
    prefs = preferences or load_preferences()
    if bind:
        prefs = replace(prefs, endpoint=bind)
    store = LiveStore(lost_timeout_s=prefs.lost_timeout_s)
    collector = Collector(prefs.endpoint, sinks=[store], keys=keys)
    recorder: Recorder | None = None
    if record:
        path = Path(record_to) if record_to else default_session_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        recorder = Recorder(path, meta={"command": " ".join(sys.argv)}).start()
        collector.add_sink(recorder)
    try:
        collector.start()
    except CollectorError:
        if recorder is not None:
            recorder.close()
        raise
    launcher = Launcher(connect_endpoint(collector.endpoint),
                        agent_env={ENV_KEY: keys.agent_keys.token} if keys is not None else None)
    session_source = _session_source(store, recorder)
    window_ref: list[QtMainWindow] = []

    def price() -> float | None:  # read on the analyzer's thread: a float attribute, no Qt call
        current = window_ref[0].preferences if window_ref else prefs
        return current.price_per_gpu_hour or None

    analyzer = LiveAnalyzer(session_source, price)
    window = QtMainWindow(store, endpoint=collector.endpoint, preferences=prefs, recorder=recorder,
                          launcher=launcher, cost_panel=QtCostPanel(), analyzer=analyzer,
                          session_source=session_source,
                          access_token=keys.agent_keys.token if keys is not None else None)
    window_ref.append(window)
    analyzer.start()
    parts = WindowParts(window, store, collector, recorder, launcher, analyzer)
    if simulate_ranks:
        parts.simulation = _start_simulation(parts, simulate_ranks, simulate_kwargs or {}, keys)
    return parts


def run(*, bind: str | None = None, record_to: str | None = None, demo: object | None = None,
        simulate_ranks: int | None = None, keys: CollectorKeys | None = None) -> int:
    """Open the window and run the Qt event loop until it closes. Returns the process exit code."""
    problem = missing_display()
    if problem:
        print(f"ringscope: {problem}", file=sys.stderr)
        return 2
    app = QtWidgets.QApplication.instance() or QtWidgets.QApplication(sys.argv[:1])
    app.setOrganizationName("Ringscope")
    app.setApplicationName("Ringscope")
    prefs = load_preferences()
    theme.apply_theme(app, prefs.theme)  # before any plot is created: pyqtgraph reads its defaults then
    try:
        parts = build_window(bind=bind, record_to=record_to, preferences=prefs, simulate_ranks=simulate_ranks,
                             keys=keys)
    except CollectorError as exc:
        QtWidgets.QMessageBox.critical(None, "Ringscope", f"{exc}\n\nStart with --bind tcp://127.0.0.1:0 to pick a "
                                                          "free port, or close the other Ringscope window.")
        return 2
    parts.window.show()
    _quit_on_signals(app)
    if demo is not None:
        QtCore.QTimer.singleShot(0, lambda: _start_demo(parts, demo))
    try:
        return int(app.exec())
    finally:
        parts.close()


def missing_display() -> str | None:
    """Why no window can open here, or None: no X11/Wayland display and no Qt platform chosen, or Qt's xcb
    libraries missing (Qt would abort inside ``QApplication``); the message names the packages to install."""
    from gui.core.display import display_problem

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


def _session_source(store: LiveStore, recorder: Recorder | None) -> Callable[[], SessionData]:
    """Where whole-session figures come from: the recording (complete) or, without one, the live store (recent)."""
    if recorder is None:
        return store.to_session_data
    path = recorder.path
    return lambda: load_session(path)


def _start_demo(parts: WindowParts, demo: object) -> None:
    parts.window.start_launch(demo)


def _start_simulation(parts: WindowParts, ranks: int, kwargs: dict[str, Any], keys: CollectorKeys | None
                      ) -> threading.Thread:
    from agent.simulate import run_cluster


    def body() -> None:
        try:
            run_cluster(ranks, endpoint=parts.collector.endpoint, stop=parts.simulation_stop,
                        keys=keys.agent_keys if keys is not None else None, **kwargs)
        except Exception:
            log.exception("simulation stopped with an error")

    thread = threading.Thread(target=body, name="ringscope-simulate", daemon=True)
    thread.start()
    return thread

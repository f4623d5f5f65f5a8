"""``ringscope window``: options parse, and the command opens the window, records a session file in the per-user
data folder, and exits 0 when the event loop ends.

The end-to-end run is a subprocess: ``app.exec()`` / ``quit()`` leave the test process's QApplication in a quitting
state that would break the tests after it.
"""

from __future__ import annotations

import os
import subprocess
import sys

from ringscope.gui.cli import build_parser

_SCRIPT = """
import sys
from PySide6 import QtCore, QtWidgets
app = QtWidgets.QApplication(sys.argv[:1])
QtCore.QSettings.setPath(QtCore.QSettings.Format.NativeFormat, QtCore.QSettings.Scope.UserScope, sys.argv[1])
def look_and_quit():
    shown = [w for w in app.topLevelWidgets() if w.isVisible() and type(w).__name__ == "QtMainWindow"]
    print("windows", len(shown), flush=True)
    app.quit()
QtCore.QTimer.singleShot(2500, look_and_quit)
from ringscope.gui.cli import main
sys.exit(main(["window", "--bind", "tcp://127.0.0.1:0", "--simulate", "2"]))
"""


def test_window_options_parse() -> None:
    args = build_parser().parse_args(["window", "--bind", "tcp://127.0.0.1:0", "--record", "x.db", "--simulate", "4"])
    assert (args.bind, args.record, args.simulate) == ("tcp://127.0.0.1:0", "x.db", 4)


def test_window_command_opens_records_and_exits(tmp_path) -> None:  # type: ignore[no-untyped-def]
    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path / "data"), QT_QPA_PLATFORM="offscreen")
    done = subprocess.run([sys.executable, "-c", _SCRIPT, str(tmp_path / "config")], env=env, capture_output=True,
                          text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "windows 1" in done.stdout
    sessions = list((tmp_path / "data" / "ringscope" / "sessions").glob("*.db"))
    assert len(sessions) == 1 and sessions[0].stat().st_size > 0


def test_sigterm_closes_the_window_cleanly_and_the_recording_is_complete(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json
    import signal
    import time

    from ringscope.gui.core.ingest.session_reader import load

    session = tmp_path / "s.db"
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    proc = subprocess.Popen([sys.executable, "-m", "ringscope.gui.cli", "window", "--bind", "tcp://127.0.0.1:0",
                             "--record",
                             str(session), "--simulate", "2"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        steps = 0
        while time.monotonic() < deadline and steps < 20:
            time.sleep(0.5)
            try:
                steps = len(load(session).steps["step"])
            except Exception:  # not created / no table yet
                steps = 0
        assert steps >= 20, "no telemetry reached the recording"
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, output[-2000:]
    info = subprocess.run([sys.executable, "-m", "ringscope.gui.cli", "info", str(session)], capture_output=True,
                          text=True,
                          timeout=60)
    summary = json.loads(info.stdout)
    assert summary["complete"] is True, summary
    assert summary["steps_total"] >= steps


def test_without_a_display_the_window_command_says_what_to_do() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    done = subprocess.run([sys.executable, "-m", "ringscope.gui.cli", "window", "--bind", "tcp://127.0.0.1:0"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "no display" in done.stderr and "xvfb-run" in done.stderr and "ringscope record" in done.stderr

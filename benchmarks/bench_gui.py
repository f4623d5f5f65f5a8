"""Window frame rate and telemetry-to-screen latency with a simulated cluster (real agents, real collector).

Latency = wall time when a frame that includes a step has been painted (``repaint()`` returned) minus that step's
``end_s`` on the agent side, so it includes the agent's batching (50 ms flush), ZeroMQ, the store, the snapshot
and the paint; its p99 note splits it at the moment the ingest process built the frame. Refresh rate = the window's
own ~37 Hz timer ticks served (each asks the ingest process for a frame, which is drawn when it arrives), while the
collector, the store and the simulated agents share the same cores.

``RINGSCOPE_BENCH_PROFILE=/tmp/gui.prof`` also writes a cProfile of the GUI thread's measured frames (snapshot,
views, paint) for ``python -m pstats``.
"""

from __future__ import annotations

import cProfile
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Final

import numpy as np

from ringscope.gui.core.ingest.recorder_process import wanted as recorder_process_wanted

RUNS: Final[int] = 5
"""Full mode measures this many runs, each with a fresh window, ingest process and simulated cluster."""
TARGET_FPS: Final[float] = 30.0
TARGET_P99_MS: Final[float] = 250.0
LARGE_RANKS: Final[int] = 4096
"""From this many ranks on (``--ranks``), the targets are issue 29's for 8 192 ranks: >= 10 frames/s, p99 <= 1 s,
every rank visible within 10 s, each process <= 1.5 GB; runs last 30 s."""
LARGE_TARGETS: Final[tuple[float, float]] = (10.0, 1000.0)
VISIBLE_TARGET_S: Final[float] = 10.0
START_TIMEOUT_S: Final[float] = 90.0
"""How long a run waits for every rank to be on screen before measuring anyway (the count is in the note)."""


def run(quick: bool = False, ranks: int | None = None, rate: float | None = None, record: bool = False) -> list[dict]:
    """Measure; quick mode: one run, 64 ranks for 6 s; full mode: ``RUNS`` runs of 1024 ranks at 10 steps/s for 20 s
    each, every figure the median of the runs with each run's value in the note. ``ranks`` and ``rate`` (steps per
    second per rank) change the cluster; its rows are then named ``gui <ranks>x<rate>`` so that the results keep
    the default rows too."""
    default_ranks, seconds, runs = (64, 6.0, 1) if quick else (1024, 20.0, RUNS)
    ranks = ranks or default_ranks
    rate = rate or 10.0
    if ranks >= LARGE_RANKS and not quick:
        seconds = 30.0
    name = "gui" if (ranks, rate) == (default_ranks, 10.0) else f"gui {ranks}x{rate:g}"
    name += " recorded" if record else ""
    name += " (recorder process)" if record and recorder_process_wanted() else ""
    target_fps, target_p99 = _targets(ranks)
    per_run = [[{**row, "benchmark": name} for row in _measure_in_new_process(ranks, seconds, rate, record)]
               for _ in range(runs)]
    if runs == 1:
        return per_run[0]
    rows = []
    for first in per_run[0]:
        values = [next((row["value"] for row in r if row["metric"] == first["metric"]), float("nan")) for r in per_run]
        shown = ", ".join(f"{v:.3g}" for v in values)
        rows.append({**first, "value": float(np.median(values)),
                     "note": f"median of {runs} runs ({shown}); " + first["note"]})
    fps = [next(r["value"] for r in rows_ if r["metric"] == "refresh_rate") for rows_ in per_run]
    p99 = [next(r["value"] for r in rows_ if r["metric"] == "latency_p99") for rows_ in per_run]
    rows.insert(0, {"benchmark": name, "metric": "runs_at_target", "value": float(sum(
        f >= target_fps and p <= target_p99 for f, p in zip(fps, p99, strict=True))), "unit": f"of {runs}",
        "note": f"runs with >= {target_fps:.0f} frames/s and p99 <= {target_p99:.0f} ms (target {runs} of {runs}); "
        f"frames/s {', '.join(f'{v:.1f}' for v in fps)}; p99 ms {', '.join(f'{v:.0f}' for v in p99)}"})
    return rows


def _targets(ranks: int) -> tuple[float, float]:
    """Frames/s and p99 latency (ms) targets for ``ranks``."""
    return LARGE_TARGETS if ranks >= LARGE_RANKS else (TARGET_FPS, TARGET_P99_MS)


def _measure_in_new_process(ranks: int, seconds: float, rate: float, record: bool = False) -> list[dict]:
    """:func:`_measure` in a Python process of its own, as a user starts the app: one run's windows, pyqtgraph
    objects and garbage do not slow the next (in one process, five runs in a row got slower one after the other:
    GUI-thread CPU 10.5, 11.2, 11.7, 12.7, 12.9 ms a frame)."""
    command = [sys.executable, "-m", "benchmarks.bench_gui", "--measure", str(ranks), str(seconds), str(rate)]
    done = subprocess.run(command + (["--record"] if record else []), capture_output=True, text=True,
                          timeout=START_TIMEOUT_S + seconds + 120,
                          cwd=Path(__file__).resolve().parent.parent, check=False)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"gui benchmark run failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}")
    rows: list[dict] = json.loads(lines[-1])
    # the window's and the ingest process's stderr (the ingest process inherits it): any traceback is a defect
    tracebacks = [part.strip().splitlines()[-1] for part in done.stderr.split("Traceback (most recent call last)")[1:]
                  if part.strip()]
    rows.append({"benchmark": "gui", "metric": "exceptions", "value": float(len(tracebacks)), "unit": "tracebacks",
                 "note": "in the window's and the ingest process's output (target 0)"
                 + (f"; the last: {tracebacks[-1][:200]}" if tracebacks else "")})
    return rows


def _measure(ranks: int, seconds: float, rate: float = 10.0, record: bool = False) -> list[dict]:
    """One run: a window with its ingest process and a simulated cluster of ``ranks`` stepping ``rate`` times a
    second each, measured for ``seconds``; ``record``: into a session file in a temporary folder."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6 import QtCore, QtWidgets

    from ringscope.gui.app import build_window
    from ringscope.gui.views import theme
    from ringscope.gui.views.qt_gc import collect_on_gui_thread
    from ringscope.gui.views.qt_preferences import Preferences

    app = QtWidgets.QApplication.instance() or QtWidgets.QApplication([])
    theme.apply_theme(app, "dark")
    # as the window's process does (app._start_qt); RINGSCOPE_BENCH_GC=auto: Python's default collector instead
    if os.environ.get("RINGSCOPE_BENCH_GC", "gui") == "gui":
        collect_on_gui_thread()
    folder = tempfile.TemporaryDirectory(prefix="ringscope-bench-gui-") if record else None
    record_to = Path(folder.name) / "session.db" if folder is not None else None
    parts = build_window(bind="tcp://127.0.0.1:0", record=record, record_to=record_to, preferences=Preferences(),
                         simulate_ranks=ranks, simulate_kwargs={"steps_per_second": rate})
    window = parts.window
    window.resize(1600, 1000)
    window.show()
    frame_costs: list[float] = []
    shown: list[tuple[float, int, float]] = []  # per frame with new data: (painted, steps the store had, built)
    builds: list[tuple[float, float]] = []  # the ingest process's build of each new frame: wall, CPU seconds
    seen = {"measuring": False, "frames": 0, "version": -1}

    def on_frame(snap: object) -> None:
        started = time.perf_counter()
        # Paint what the frame changed now (as the event loop would next), so "shown" means painted.
        # (graphics scenes queue their dirty-item processing, so it takes two passes)
        app.processEvents()
        app.processEvents()
        painted = time.time()
        frame_costs.append(time.perf_counter() - started)
        version = getattr(snap, "version", -1)
        if seen["measuring"] and version != seen["version"]:
            seen["frames"] += 1
            shown.append((painted, int(getattr(snap, "steps_total", 0)), float(getattr(snap, "now_s", math.nan))))
            if parts.ingest is not None and parts.ingest.frames is not None:
                builds.append(parts.ingest.frames.build_s)
        seen["version"] = version

    window.sig_frame_rendered.connect(on_frame)
    render_costs: list[float] = []
    charts: list[int] = []  # charts redrawn per tick (they take turns within a budget with many ranks)
    render_cpu: list[float] = []  # CPU time of the GUI thread: the frame's own cost, without waiting for a core

    profile_to = os.environ.get("RINGSCOPE_BENCH_PROFILE")  # a path: cProfile of the GUI thread's frames
    profiler = cProfile.Profile(time.thread_time) if profile_to else None  # GUI-thread CPU, not waits

    render_frame = window.render_frame
    ticks = {"served": 0}

    def timed_frame() -> Any:  # the cost of the calls that drew (a tick whose frame has not arrived only asks)
        drawn = window.frames
        started = time.perf_counter()
        cpu_started = time.thread_time()
        if profiler is not None and seen["measuring"]:
            profiler.enable()
            snap = render_frame()
            profiler.disable()
        else:
            snap = render_frame()
        if seen["measuring"] and window.frames != drawn:
            render_costs.append(time.perf_counter() - started)
            render_cpu.append(time.thread_time() - cpu_started)
            charts.append(getattr(window, "charts_last_tick", 4))
        return snap

    def tick() -> None:
        if seen["measuring"]:
            ticks["served"] += 1
        timed_frame()

    # The same slots, timed (snapshot + setData + paint): the timer's ticks, and the frames the watch on the frames
    # socket draws when they arrive (it calls the window's render_frame)
    window.timer.timeout.disconnect(window.render_frame)
    window.render_frame = timed_frame  # type: ignore[method-assign]
    window.timer.timeout.connect(tick)
    try:
        launched = time.monotonic()
        deadline = launched + START_TIMEOUT_S  # start-up: simulator processes and thousands of agents connecting
        all_visible_s = float("nan")
        while time.monotonic() < deadline:
            app.processEvents()
            snap = window.last_snapshot
            if snap is not None and len(snap.ranks) >= ranks:
                if math.isnan(all_visible_s):  # first time every rank is on screen
                    all_visible_s = time.monotonic() - launched
                if snap.steps_total > 5 * ranks:
                    break
            time.sleep(0.005)
        ranks_seen = len(window.last_snapshot.ranks) if window.last_snapshot is not None else 0
        ends = _EndTimes(parts.store)  # end_s of every step the store takes from now, fetched off the GUI thread
        frame_costs.clear()
        render_costs.clear()
        render_cpu.clear()
        seen["measuring"] = True
        ingest_pid = parts.ingest.pid if parts.ingest is not None else None
        recorder_pid = _child_of(ingest_pid)  # the recorder's own process (recorded sessions)
        ingest_cpu, recorder_cpu = _cpu_s(ingest_pid), _cpu_s(recorder_pid)
        gui_cpu = _cpu_s(os.getpid())
        started = time.monotonic()
        loop = QtCore.QEventLoop()  # the real event loop, as app.exec() runs it
        QtCore.QTimer.singleShot(int(seconds * 1000), loop.quit)
        loop.exec()
        elapsed = time.monotonic() - started
        ingest_cpu = _cpu_s(ingest_pid) - ingest_cpu
        recorder_cpu = _cpu_s(recorder_pid) - recorder_cpu
        gui_cpu = _cpu_s(os.getpid()) - gui_cpu
        rss = (_rss_mb(os.getpid()), _rss_mb(ingest_pid), _rss_mb(recorder_pid))
        ends.stop()
    finally:
        closing = parts.close()
        window.deleteLater()  # the next run's window is a new one: this one's memory must not count there
        app.processEvents()
        file_mb = record_to.stat().st_size / 1e6 if record_to is not None and record_to.exists() else float("nan")
        if folder is not None:
            folder.cleanup()
    if profiler is not None and profile_to:
        profiler.dump_stats(profile_to)
    lat, to_frame = ends.latencies(shown)
    served = ticks["served"] / elapsed  # timer ticks served: the refresh rate the user gets
    fps = seen["frames"] / elapsed  # ticks that had new data to draw (agents send in bursts, once per step)
    note = f"{ranks_seen}/{ranks} ranks at {rate:g} steps/s, {seconds:.0f} s, offscreen 1600x1000"
    target_fps, target_p99 = _targets(ranks)
    rows = [
        {"benchmark": "gui", "metric": "refresh_rate", "value": served, "unit": "frames/s",
         "note": note + f" (target >= {target_fps:.0f}; timer ticks served: each asks for a frame, drawn when it "
                        "arrives)"},
        {"benchmark": "gui", "metric": "fps_new_data", "value": fps, "unit": "frames/s",
         "note": "frames that had new telemetry to draw (a tick with nothing new skips the redraw)"},
        {"benchmark": "gui", "metric": "charts_per_tick", "value": float(np.mean(charts)) if charts else float("nan"),
         "unit": "of 4", "note": f"each chart redrawn ~{fps * float(np.mean(charts or [0])) / 4:.1f} times/s "
         "(GPU panel at most 4/s, per-rank bars 4/s past 256 ranks; overview, status 4/s; table 4/s)"},
        {"benchmark": "gui", "metric": "frame_cost_p50", "value": 1000 * float(np.median(render_costs or [np.nan])),
         "unit": "ms", "note": "snapshot + setData of the views due + paint, per frame drawn (on arrival, or at "
         "a tick)"},
        {"benchmark": "gui", "metric": "frame_cost_p95", "value": 1000 * float(np.percentile(render_costs, 95))
         if render_costs else float("nan"), "unit": "ms", "note": f"paint of the changed widgets p50 "
         f"{1000 * float(np.median(frame_costs or [np.nan])):.1f} ms"},
        {"benchmark": "gui", "metric": "frame_cost_p99", "value": 1000 * float(np.percentile(render_costs, 99))
         if render_costs else float("nan"), "unit": "ms", "note": "wall time of the slowest 1 % of frames drawn"},
        {"benchmark": "gui", "metric": "frame_cpu_p50", "value": 1000 * float(np.median(render_cpu or [np.nan])),
         "unit": "ms", "note": "GUI-thread CPU time per frame; wall time above also waits for cores and the GIL "
         "(collector thread, simulator processes on the same machine)"},
        {"benchmark": "gui", "metric": "latency_p50", "value": 1000 * float(np.percentile(lat, 50)) if lat.size
         else float("nan"), "unit": "ms", "note": f"{lat.size} steps: agent end_s -> painted frame"},
        {"benchmark": "gui", "metric": "latency_p90", "value": 1000 * float(np.percentile(lat, 90)) if lat.size
         else float("nan"), "unit": "ms", "note": "includes the agents' 50 ms batching (flush interval) and the wait "
         "for the next request (~37 Hz ticks)"},
        {"benchmark": "gui", "metric": "latency_p99", "value": 1000 * float(np.percentile(lat, 99)) if lat.size
         else float("nan"), "unit": "ms", "note": f"target <= {target_p99:.0f} ms; " + _split(lat, to_frame)},
    ]
    rows.append({"benchmark": "gui", "metric": "ingest_process_cpu", "value": 100 * ingest_cpu / elapsed,
                 "unit": "% of a core", "note": f"collector, stores, recorder-less frames; the window's process: "
                 f"{100 * gui_cpu / elapsed:.0f} % (GUI thread, simulation driver); 2 cores in all"})
    rows.append({"benchmark": "gui", "metric": "window_process_rss", "value": rss[0], "unit": "MB",
                 "note": f"VmRSS at the end of the run; the ingest process: {rss[1]:.0f} MB (its hour-long figure: "
                 "the memory topic)"})
    rows.append({"benchmark": "gui", "metric": "ingest_process_rss", "value": rss[1], "unit": "MB",
                 "note": "VmRSS of the ingest process at the end of the run"})
    rows.append({"benchmark": "gui", "metric": "all_ranks_visible", "value": all_visible_s, "unit": "s",
                 "note": f"from the window's start (simulator processes started with it) until every rank is in a "
                 f"frame; NaN: not all within {START_TIMEOUT_S:.0f} s (target for 8 192 ranks: each rank within "
                 f"{VISIBLE_TARGET_S:.0f} s of its first step)"})
    if record:
        rows.append({"benchmark": "gui", "metric": "recorded_rows", "value": float(closing.get("rows_written", 0)),
                     "unit": "rows", "note": f"written by the ingest process's recorder by its close; write errors "
                     f"{closing.get('write_errors', 'unknown')}; {file_mb:.0f} MB file"})
    if record and recorder_pid is not None:
        rows.append({"benchmark": "gui", "metric": "recorder_process_cpu", "value": 100 * recorder_cpu / elapsed,
                     "unit": "% of a core", "note": f"the recorder's own process (a child of the ingest process, "
                     f"RINGSCOPE_RECORDER_PROCESS=1 or >= 4 cores); VmRSS {rss[2]:.0f} MB at the end of the run"})
    if builds:
        wall, cpu = np.array(builds).T
        rows.insert(7, {"benchmark": "gui", "metric": "ingest_frame_build_p50", "value": 1000 * float(np.median(wall)),
                        "unit": "ms", "note": f"snapshot + frame encoding in the ingest process (CPU p50 "
                        f"{1000 * float(np.median(cpu)):.1f} ms; p95 wall {1000 * float(np.percentile(wall, 95)):.1f} "
                        "ms): off the GUI thread"})
    return rows


def _child_of(pid: int | None) -> int | None:
    """The first child process of ``pid`` (None when it has none or is unknown)."""
    if pid is None:
        return None
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return None
    return int(children[0]) if children else None


def _cpu_s(pid: int | None) -> float:
    """User + system CPU seconds of a process so far (0 when unknown)."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mb(pid: int | None) -> float:
    """VmRSS of a process in MB (NaN when unknown)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return float("nan")


class _EndTimes:
    """Collects ``end_s`` of the steps a store takes, by ingest order, on a thread of its own (4 times a second:
    the store keeps the last 65 536), so that frames can be matched to the steps they showed."""

    def __init__(self, store: Any) -> None:
        self._store = store
        _, self.first = store.step_end_times(1 << 62)  # where collecting starts: the store's count now
        self._chunks: list[np.ndarray] = []
        self._next = self.first
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-end-times", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            self._fetch()

    def _fetch(self) -> None:
        values, total = self._store.step_end_times(self._next)
        if total - self._next > values.size:  # fell behind the store's ring: pad what was lost with NaN
            self._chunks.append(np.full(total - self._next - values.size, np.nan))
        self._chunks.append(values)
        self._next = total

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._fetch()

    def latencies(self, shown: list[tuple[float, int, float]]) -> tuple[np.ndarray, np.ndarray]:
        """Per step first shown in a frame: painted - end_s, and the part of it until the ingest process built that
        frame, built - end_s (steps taken before collecting started are left out)."""
        ends = np.concatenate(self._chunks) if self._chunks else np.zeros(0)
        out, to_frame, before = [], [], self.first
        for painted, total, built in shown:
            if total > before:
                new = ends[max(before - self.first, 0):total - self.first]
                new = new[np.isfinite(new)]
                out.append(painted - new)
                to_frame.append(built - new)
                before = total
        if not out:
            return np.zeros(0), np.zeros(0)
        return np.concatenate(out), np.concatenate(to_frame)


def _split(lat: np.ndarray, to_frame: np.ndarray) -> str:
    """Where the latency goes: until the ingest process built the frame (agent batching, transport, collector,
    store, the wait for the window's request), and from there to the screen (the frame's trip, the wait for the
    next tick, the paint), at the median and among the slowest 1 % of steps."""
    if not lat.size:
        return "no step shown"
    tail = lat >= np.percentile(lat, 99)
    return (f"until the frame was built p50 {1000 * float(np.median(to_frame)):.0f} ms, then to the screen "
            f"{1000 * float(np.median(lat - to_frame)):.0f} ms; in the slowest 1 %: "
            f"{1000 * float(np.median(to_frame[tail])):.0f} + {1000 * float(np.median((lat - to_frame)[tail])):.0f} ms")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--measure"]:  # one run, for _measure_in_new_process: its rows as the last line of JSON
        print(json.dumps(_measure(int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), "--record" in sys.argv)))
    else:
        for row in run(quick=True):
            print(row)

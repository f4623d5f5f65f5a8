"""The ingest process: the collector, the live runs, the recorder, the run watcher and the metrics endpoint, in a
process of their own (on machines with cores to spare the recorder's writer runs in a child of it:
``ringscope.gui.core.ingest.recorder_process``), serving the window compact frames
(``ringscope.gui.core.service.frames``) over a socket pair.

Why a process: decoding ~10 000 records a second, updating the stores and building a 1024-rank snapshot cost the
window's GUI thread most of a core and the GIL; here they run beside it, and the GUI thread only draws. And a crash
of either side does not take the other down: the window reports a dead ingest process and keeps what it shows; an
ingest process whose window died keeps recording until its agents go quiet, then closes the file properly.

Started by ``ringscope.gui.core.service.process.IngestProcess`` as ``python -m ringscope.gui.core.service.server
FRAMES_FD CALLS_FD``. Two channels (``multiprocessing.connection.Connection`` over the inherited sockets):

- frames (the GUI thread's): request ``("frame", run_id, base, want_rows, price)`` -> a reply dict with the
  encoded snapshot of ``run_id`` (None when the run is not held), and, when asked or when new, the runs table rows,
  the run ids held, the hang notices since the last reply and the recorder's figures;
- calls (any window thread, serialised by the client): ``(target, name, args)`` -> ``("ok", value)`` or
  ``("error", text)``, for the few things the window asks rarely (``ringscope.gui.core.service.calls.EXPOSED``
  declares them all: methods, settings, figures).

The first message on calls is the setup dict (``IngestSetup``: bind, keys, recording path, ...; keys travel here,
never on a command line); the reply is ``("ready", endpoint, recording path)`` or ``("error", text)``.

A process that replaces one that crashed (``IngestSetup.resume_reason``, set by the window's client) continues the
same recording as a new segment (``Recorder.reopen``), drops what the agents send again that the file already holds
(``Collector.continue_from``), and reloads the recording's runs before it listens, so the window's charts keep
their history and the runs that were going go on live.

What it must never do: import Qt, exit without closing the recorder (every exit path closes it: close request,
SIGTERM, the window gone and the agents quiet), or let a bad request stop it (answered with an error).
"""

from __future__ import annotations

import logging
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Final

from ringscope.agent import wire
from ringscope.agent.control import AttemptNote
from ringscope.agent.keys import CollectorKeys
from ringscope.agent.schema import SCHEMA_VERSION, EventKind, shifted
from ringscope.gui.core.analysis.runs import runs_of
from ringscope.gui.core.ingest import gc_policy
from ringscope.gui.core.ingest.collector import Collector, CollectorError
from ringscope.gui.core.ingest.recorder import Recorder
from ringscope.gui.core.ingest.recorder_process import RecorderProcess
from ringscope.gui.core.ingest.recorder_process import wanted as recorder_process_wanted
from ringscope.gui.core.ingest.session_reader import load as load_session
from ringscope.gui.core.live.replay import fill_store
from ringscope.gui.core.live.runs import LiveRuns
from ringscope.gui.core.live.store import LiveStore
from ringscope.gui.core.live.watch import HangNotice, RunWatcher
from ringscope.gui.core.metrics import DEFAULT_METRICS_BIND, MetricsError, MetricsServer
from ringscope.gui.core.service.calls import exposed
from ringscope.gui.core.service.frames import FrameEncoder
from ringscope.gui.core.session_data import SessionData

log = logging.getLogger(__name__)

WATCH_INTERVAL_S: Final[float] = 0.25
"""How often run states are decided and hangs recorded (whether or not a window asks)."""
ORPHAN_QUIET_S: Final[float] = 30.0
"""With its window gone, the process records until no message arrived for this long, then closes the file."""
FRAME_CPU_SHARE: Final[float] = 0.25
"""At most this share of the ingest process's time goes to building frames (the collector has the rest): frames
come as fast as the window asks while they are cheap, less often when each costs more (many ranks)."""
TERM_GRACE_S: Final[float] = 5.0
"""A SIGTERM is usually sent to the window too (its process group: GNU ``timeout``, job control; its cgroup:
systemd), which then closes this process in order, its last launch notes included: it closes itself only when no such
close came within this long, or at once when its window is gone."""
SWITCH_INTERVAL_S: Final[float] = float(os.environ.get("RINGSCOPE_INGEST_SWITCH_S", "0.001"))
"""The ingest process's GIL switch interval (seconds)."""


@dataclass(frozen=True)
class IngestSetup:
    """What the window asks the ingest process to run."""

    bind: str
    record_to: str | None = None  # None: keep the session in memory only
    meta: dict[str, str] = field(default_factory=dict)
    keys: CollectorKeys | None = None
    lost_timeout_s: float = 5.0
    metrics_port: int = 0
    orphan_quiet_s: float = ORPHAN_QUIET_S  # with the window gone: close after this long without a message
    # set when this process replaces one that crashed (why, in words): continue ``record_to`` as a new segment
    resume_reason: str | None = None
    # record through a process of its own (``recorder_process``); None: where cores are to spare (``wanted``)
    recorder_process: bool | None = None


class IngestService:
    """The ingest side, built from an ``IngestSetup`` (usable in-process by tests of the protocol)."""

    def __init__(self, setup: IngestSetup) -> None:
        self.setup = setup
        self._reloaded: dict[str, LiveStore] = {}  # runs refilled from the recording, until their agents register
        self.runs = LiveRuns(lost_timeout_s=setup.lost_timeout_s, store_factory=self._store_for)
        self.collector = Collector(setup.bind, sinks=[self.runs], keys=setup.keys)
        self.recorder: Recorder | RecorderProcess | None = None
        self.price: float | None = None
        self.metrics: MetricsServer | None = None
        self._encoder = FrameEncoder()
        self._frame_started, self._frame_cpu_s = -math.inf, 0.0  # the last frame build: when it began, its CPU
        self._lock = threading.Lock()  # rows, notices and the watcher
        self._watcher: RunWatcher | None = None
        self._rows: list[Any] = []
        self._rows_version = 0
        self._notices: list[HangNotice] = []
        self._stop = threading.Event()
        self._watch_thread: threading.Thread | None = None
        self._quiet = (-1, time.monotonic())  # (message count, when it last moved)

    def start(self) -> IngestService:
        """Open the recording and bind the collector; raises ``CollectorError`` / ``OSError`` with the reason."""
        if self.setup.record_to is not None:
            path = Path(self.setup.record_to)
            path.parent.mkdir(parents=True, exist_ok=True)
            if self.setup.resume_reason is not None and path.exists():
                self.recorder = self._recorder(path).reopen(self.setup.resume_reason)
                self._reload_runs(path)
                self.collector.continue_from(self.recorder.committed_seqs())
            else:
                self.recorder = self._recorder(path).start()
            self.collector.add_sink(self.recorder)
        try:
            self.collector.start()
        except CollectorError:
            if self.recorder is not None:
                self.recorder.close()
            raise
        self._watcher = RunWatcher(self.runs, self.recorder.note_event if self.recorder is not None else None)
        self._tick()
        self._watch_thread = threading.Thread(target=self._watch_loop, name="ringscope-watch", daemon=True)
        self._watch_thread.start()
        if self.setup.metrics_port:
            log.info("%s", self.serve_metrics(self.setup.metrics_port))
        return self

    # ---- Requests ------------------------------------------------------------------------------------------------

    def frame(self, run_id: str | None, base: int, want_rows: int, price: float | None) -> dict[str, Any]:
        """One reply on the frames channel (``want_rows``: the rows version the window holds, -1 for none)."""
        self.price = price
        # Frames take turns with the collector for this process's one GIL: a build that cost c seconds of CPU is
        # followed by at least c / FRAME_CPU_SHARE before the next, so the collector keeps up with what agents
        # send (8 192 ranks x 2 steps/s: a build costs ~40 ms CPU, ~5 new frames a second, and the latency p50 fell
        # from 3.4 s at a share of 0.4 to 0.4 s; 1 024 ranks: ~5 ms, ~23 new frames a second).
        wait = self._frame_cpu_s / FRAME_CPU_SHARE - (time.perf_counter() - self._frame_started)
        if wait > 0:
            self._stop.wait(min(wait, 1.0))
        started, cpu_started = time.perf_counter(), time.thread_time()
        self._frame_started = started
        store = self.runs.store(run_id) if run_id else None
        frame = self._encoder.encode(store.snapshot(), base) if store is not None else None
        self._frame_cpu_s = time.thread_time() - cpu_started
        reply: dict[str, Any] = {"frame": frame, "heat_columns": self._encoder.last_heat_columns,
                                 "build_s": (time.perf_counter() - started, self._frame_cpu_s),
                                 "hang": self.runs.hang(run_id) if store is not None and run_id else None}
        with self._lock:
            if want_rows != self._rows_version:
                reply["rows"] = (self._rows_version, self._rows, self.runs.run_ids())
            if self._notices:
                reply["notices"], self._notices = self._notices, []
        if self.recorder is not None:
            recorder = self.recorder
            reply["recorder"] = {"file_bytes": _safe(lambda: recorder.file_bytes),
                                 "write_errors": recorder.write_errors, "last_write_error": recorder.last_write_error,
                                 "rows_written": recorder.rows_written, "dropped_records": recorder.dropped_records}
        return reply

    def call(self, target: str, name: str, args: tuple[Any, ...]) -> Any:
        """One call on the calls channel, as ``calls.EXPOSED`` declares it (nothing else is answered)."""
        how = exposed(target, name)
        held, args = self._held(target, args)
        if held is None:
            return None  # no recorder: the session is kept in memory only
        if how.kind == "method":
            return getattr(held, name)(*args)
        if how.kind == "setting" and args:
            setattr(held, name, args[0])
            return None
        return getattr(held, name)

    def pid(self) -> int:
        """This process's pid (tests check that calls reach a restarted process)."""
        return os.getpid()

    def crash(self) -> None:
        """The tests' way to kill this process mid-session, as a segfault would."""
        os.abort()

    def serve_metrics(self, port: int) -> str:
        """Serve the metrics endpoint on ``port`` (0: stop); what happened, in words for the status bar."""
        if self.metrics is not None:
            self.metrics.close()
            self.metrics = None
        if not port:
            return "metrics endpoint off"
        server = MetricsServer(self.runs, lambda: self.collector.counters, DEFAULT_METRICS_BIND, port,
                               recorder=self.recorder, price_per_gpu_hour=lambda: self.price)
        try:
            self.metrics = server.start()
        except MetricsError as exc:
            return f"metrics endpoint not started: {exc}"
        return f"metrics on {self.metrics.url} (Prometheus / OpenMetrics)"

    def quiet_for_s(self) -> float:
        """Seconds since the collector's message count last moved (or since this was first asked)."""
        messages, now = self.collector.counters.messages, time.monotonic()
        if messages != self._quiet[0]:
            self._quiet = (messages, now)
        return now - self._quiet[1]

    def close(self) -> dict[str, Any]:
        """Stop the watcher, the metrics endpoint and the collector, then the recorder (it gets every last record).
        Returns the closing figures."""
        self._stop.set()
        if self._watch_thread is not None:
            self._watch_thread.join(2.0)
        if self.metrics is not None:
            self.metrics.close()
        self.collector.close()
        figures: dict[str, Any] = {"messages": self.collector.counters.messages}
        if self.recorder is not None:
            self.recorder.close()
            figures.update(rows_written=self.recorder.rows_written, write_errors=self.recorder.write_errors)
        return figures

    # ---- Internals -----------------------------------------------------------------------------------------------

    def _held(self, target: str, args: tuple[Any, ...]) -> tuple[Any, tuple[Any, ...]]:
        """The object a call's target names, and the call's arguments for it (a ``store`` call's first argument is
        its run id)."""
        if target == "store":
            store = self.runs.store(str(args[0]))
            if store is None:
                raise KeyError(f"run {args[0]} is not held in memory")
            return store, args[1:]
        targets = {"runs": self.runs, "recorder": self.recorder, "collector": self.collector, "service": self}
        return targets[target], args

    def _recorder(self, path: Path) -> Recorder | RecorderProcess:
        chosen = self.setup.recorder_process
        in_child = recorder_process_wanted() if chosen is None else chosen
        return RecorderProcess(path, meta=self.setup.meta) if in_child else Recorder(path, meta=self.setup.meta)

    def _store_for(self, run_id: str) -> LiveStore:
        """The store of a run that registers: the one refilled from the recording, else a new one."""
        store = self._reloaded.pop(run_id, None)
        return store if store is not None else LiveStore(lost_timeout_s=self.runs.lost_timeout_s, run_id=run_id)

    def _reload_runs(self, path: Path) -> None:
        """The recording's runs back in memory, before the collector listens: ended runs frozen as recorded (as a
        reopened session shows them), the others filled and registered again so the frames that follow continue
        them. A recording that cannot be read back costs the charts their history, never the recording."""
        try:
            data = load_session(path)
            for info in runs_of(data, lost_timeout_s=self.runs.lost_timeout_s):
                run = data.for_run(info.run_id)
                store = LiveStore(lost_timeout_s=self.runs.lost_timeout_s, run_id=info.run_id)
                if info.ended:
                    fill_store(store, run)
                    self.runs.add_recorded(info, store, run.agents)
                else:
                    self._rejoin(run, store, info.last_seen_s)
            for run_id, notes in data.counters.get("attempts", {}).items():  # the runs table's attempts column
                for note in notes:
                    self.runs.on_attempt(run_id, AttemptNote(int(note["attempt"]), str(note["event"]),
                                                             float(note["ts_s"]), note["reason"] or "",
                                                             note["exit_code"], note["detail"] or ""))
        except Exception:  # the recording goes on whatever this finds in the file
            log.exception("could not reload the runs of %s; the window shows them from now on", path)

    def _rejoin(self, run: SessionData, store: LiveStore, last_seen_s: float) -> None:
        """A run that was going at the crash: its store filled, its agents registered as their Hello would (their
        next one may be 5 s away), with their goodbyes, which the runs count (not into the store twice)."""
        goodbyes = {agent: event for event, agent in zip(run.events, run.event_agents, strict=False)
                    if event.event == EventKind.FINISHED}
        kept = [(event, agent) for event, agent in zip(run.events, run.event_agents, strict=False)
                if event.event != EventKind.FINISHED]
        fill_store(store, replace(run, events=[e for e, _ in kept], event_agents=[a for _, a in kept]))
        self._reloaded[store.run_id] = store
        offsets: dict[str, float] = run.counters.get("clock_offsets", {})
        transits = run.counters.get("transit", {})
        for hello in run.agents:
            transit = transits.get(hello.agent_id)
            if transit is None or not math.isfinite(transit.min_transit_s):
                continue  # never a guessed clock offset: the agent's own next Hello registers it
            # the recording's records are on the collector's clock; the runs align what arrives: give them the
            # agent's own clock and a send time that teaches them the offset the recording found
            offset = offsets.get(hello.agent_id, 0.0)
            records = [shifted(r, -offset) for r in (hello, goodbyes.get(hello.agent_id)) if r is not None]
            seen = last_seen_s if math.isfinite(last_seen_s) else hello.started_s
            self.runs.on_batch(wire.Batch(hello.agent_id, 0, seen - transit.min_transit_s, SCHEMA_VERSION, records),
                               seen)

    def _watch_loop(self) -> None:
        while not self._stop.wait(WATCH_INTERVAL_S):
            try:
                self._tick()
            except Exception:  # a bug here must not stop the states from moving for good
                log.exception("run watcher tick failed")

    def _tick(self) -> None:
        assert self._watcher is not None
        notices = self._watcher.tick()
        rows = self.runs.rows(refresh=False)
        with self._lock:
            self._notices.extend(notices)
            del self._notices[:-100]  # a window that stopped asking does not make this grow
            if rows != self._rows:
                self._rows, self._rows_version = rows, self._rows_version + 1


def serve(frames: Connection, calls: Connection) -> int:
    """Run the ingest process on its two channels until told to close (0), or until its window is gone and its
    agents are quiet (0); 2 when the setup failed (the window has the reason)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C in a terminal reaches both: the window closes us in order
    # The frames thread and the collector thread share this process's GIL; with the default 5 ms switch interval a
    # 7 ms frame build waited ~50 ms (p95) behind the collector's decoding at 1024 ranks.
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    gc_policy.tune_for_ingest()  # 1.36 s of collections in 30 s at 1024 ranks, recorded, with the default: 17 ms
    stop, terminated = threading.Event(), threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: terminated.set())
    try:
        setup: IngestSetup = calls.recv()
        service = IngestService(setup).start()
    except (CollectorError, OSError, ValueError, EOFError) as exc:
        _send(calls, ("error", str(exc) or type(exc).__name__))
        return 2
    _send(calls, ("ready", service.collector.endpoint,
                  str(service.recorder.path) if service.recorder is not None else None))
    window_gone = threading.Event()
    threading.Thread(target=_serve, args=(frames, lambda r: _answer_frame(service, r), window_gone),
                     name="ringscope-frames",
                     daemon=True).start()
    threading.Thread(target=_serve, args=(calls, lambda r: _answer_call(service, r), window_gone, stop),
                     name="ringscope-calls",
                     daemon=True).start()
    terminated_at: float | None = None
    while not stop.wait(0.2):
        if terminated.is_set():
            terminated_at = terminated_at or time.monotonic()
            if window_gone.is_set() or time.monotonic() - terminated_at >= TERM_GRACE_S:
                log.warning("SIGTERM and no close from the window: closing the recording")
                break
        if window_gone.is_set() and service.quiet_for_s() >= setup.orphan_quiet_s:
            log.warning("the window is gone and no agent sent for %.0f s: closing the recording",
                        setup.orphan_quiet_s)
            break
    figures = service.close()
    _send(calls, ("closed", figures))
    return 0


def _serve(connection: Connection, answer: Callable[[Any], Any], window_gone: threading.Event,
           stop: threading.Event | None = None) -> None:
    """Answer each request on ``connection`` until the window is gone (or, on calls, asks to close)."""
    while True:
        try:
            request = connection.recv()
        except (EOFError, OSError):
            window_gone.set()
            return
        if stop is not None and request == ("close",):
            stop.set()
            return
        if not _send(connection, answer(request)):
            window_gone.set()
            return


def _answer_frame(service: IngestService, request: Any) -> dict[str, Any]:
    try:
        _, run_id, base, want_rows, price = request
        return service.frame(run_id, base, want_rows, price)
    except Exception as exc:  # answered, not fatal: the window shows the error
        log.exception("frame request failed")
        return {"frame": None, "error": f"{type(exc).__name__}: {exc}"}


def _answer_call(service: IngestService, request: Any) -> tuple[str, Any]:
    try:
        target, method, args = request
        return ("ok", service.call(target, method, tuple(args)))
    except Exception as exc:
        return ("error", f"{type(exc).__name__}: {exc}")


def _send(connection: Connection, message: Any) -> bool:
    try:
        connection.send(message)
    except (OSError, ValueError):
        return False
    return True


def _safe(read: Callable[[], int]) -> int | None:
    try:
        return int(read())
    except (OSError, ValueError):
        return None


def main(argv: list[str] | None = None) -> int:
    """``python -m ringscope.gui.core.service.server FRAMES_FD CALLS_FD`` (started by the window, not by users)."""
    args = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.WARNING, format="ringscope ingest: %(levelname)s %(name)s: %(message)s")
    frames, calls = (Connection(int(fd)) for fd in args[:2])
    return serve(frames, calls)


if __name__ == "__main__":
    sys.exit(main())

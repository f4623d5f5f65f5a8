"""The recorder in a process of its own: ``RecorderProcess`` is the ingest process's ``IngestSink`` for it.

Why: in the ingest process the recorder's writer thread (turning records into rows, SQLite) takes a share of the GIL
that the collector and the frame builder need (~23 % of it at 8 192 ranks on a slow day, when that GIL saturated and
the window's latency went from ~0.6 s to 2-5 s). Here the writer has a process and a GIL of its own, and the ingest
process only forwards each accepted message's bytes (``wire.Batch.raw``): one ZeroMQ send. A crash of the writer
(SQLite, memory) no longer takes the live view down either.

The price is CPU: the child decodes each message again and both sides pass it through ZeroMQ (~+9 % of a core at
1 024 ranks x 10 steps/s fed from a script: 29.6 % against 20.7 % in-process), and a writer that runs beside the
collector instead of taking turns with it takes cores from the window where there are none to spare. The child runs
at niceness ``NICE``. On 2 cores (the window, the ingest process, the recorder and a simulated cluster on one
machine) the window then gets ~18 % more frames with new telemetry and a ~9 % lower p99 latency, but serves ~3 %
fewer frames (5 % at worst; 10 % at 8 192 ranks); the 30 frames/s target sits inside that margin there, so the ingest
process uses it where cores are to spare (``wanted``: at least ``MIN_CORES``) and records in-process (``Recorder``)
on smaller machines; ``RINGSCOPE_RECORDER_PROCESS=1`` / ``0`` decides instead.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import pickle
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import msgpack
import zmq

from ringscope.agent import wire
from ringscope.agent.control import AttemptNote
from ringscope.agent.schema import Event
from ringscope.gui.core.ingest import gc_policy, session_schema
from ringscope.gui.core.ingest.recorder import CLOSE_STALL_S, Recorder
from ringscope.gui.core.ingest.sink import Gap, Rejection

log = logging.getLogger(__name__)

REPLAY_CAPACITY_BYTES: Final[int] = 128 * 1024 * 1024
"""Bytes of forwarded messages the parent keeps until the child reports them committed; past it batches are
dropped and counted. The child's ``Recorder`` queue has its own bound (``recorder.QUEUE_CAPACITY_BYTES``, decoded
batches: ~3x the bytes of the same messages), so at most ~400 MB wait in the two processes together."""
REPORT_INTERVAL_S: Final[float] = 0.1
"""How often the child reports what it committed (acks to the agents wait at least this long more)."""
START_TIMEOUT_S: Final[float] = 60.0
"""How long the parent waits for a child to open the file (a reopen waits for the lock, ``LOCK_WAIT_S``)."""
LOCK_WAIT_S: Final[float] = 45.0
"""How long a child waits for the file's lock held by an earlier writer that is still finishing."""
MAX_RESTARTS: Final[int] = 5
"""Children replaced in one session before the recording is given up (counted, and said in the status bar)."""

MIN_CORES: Final[int] = 4
"""The fewest usable cores on which the window's ingest process records through a process of its own (``wanted``).
Measured on 2 cores (2026-12-07, the window benchmark recorded, interleaved pairs, the child at ``NICE``): at 1 024
ranks (4 pairs) frames served x0.97 (x0.95-x0.97), frames with new telemetry x1.18 (x1.16-x1.22), latency p99 x0.91
(x0.87-x0.98); at 8 192 ranks (2 pairs) frames served x0.86 and x0.94, new ones x1.21 and x1.40, p99 x0.95 and
x0.81. Without the niceness frames served fell ~12 % at 1 024 ranks."""
ENVIRONMENT_VARIABLE: Final[str] = "RINGSCOPE_RECORDER_PROCESS"
NICE: Final[int] = 10
"""The child's niceness: it writes from a buffer and may fall seconds behind, the window's frames and the collector
may not (see ``MIN_CORES``: it took the process's cost to the frames served at 1 024 ranks from ~12 % to ~3 %; the
8 192-rank runs wrote as many rows, 0 write errors)."""

_ITEM_BYTES: Final[int] = 256  # what a forwarded non-batch item costs the budget
_HEADER: Final = struct.Struct("<qd")  # item number, receive time
_BATCH, _OTHER, _CLOSE = b"b", b"o", b"c"
_READY, _REPORT, _CLOSED, _FAILED = "ready", "report", "closed", "failed"


def wanted(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the window's ingest process should record through a ``RecorderProcess``: as
    ``RINGSCOPE_RECORDER_PROCESS`` says (``1`` / ``0``), else when this process may use ``MIN_CORES`` cores or more
    (its CPU affinity: a container's or ``taskset``'s limit counts)."""
    said = environ.get(ENVIRONMENT_VARIABLE, "").strip().lower()
    if said in ("1", "true", "yes", "on"):
        return True
    if said in ("0", "false", "no", "off"):
        return False
    return len(os.sched_getaffinity(0)) >= MIN_CORES


class RecorderProcess:
    """An ``IngestSink`` (durable: ``committed_seqs``) that has a child process record the session file.

    Same figures as ``Recorder`` (``rows_written``, ``dropped_records``, ``write_errors``, ``last_write_error``,
    ``file_bytes``), as of the child's last report. ``start()`` (a new file) or ``reopen(reason)`` (continue one)
    before adding it to a collector; ``close()`` last.
    """

    def __init__(self, path: str | Path, *, meta: Mapping[str, str] | None = None,
                 replay_capacity_bytes: int = REPLAY_CAPACITY_BYTES, lock_wait_s: float = LOCK_WAIT_S) -> None:
        self.path = Path(path)
        self._lock_wait_s = lock_wait_s
        self._meta = {str(k): str(v) for k, v in (meta or {}).items()}
        self._capacity = replay_capacity_bytes
        self._context: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
        self._folder = Path(tempfile.mkdtemp(prefix="ringscope-recorder-"))
        self._stream = uuid.uuid4().hex  # names this parent's items in the file's replay mark
        self._reports = self._context.socket(zmq.PULL)
        self._reports.linger = 0
        self._reports_endpoint = f"ipc://{self._folder}/reports"
        self._reports.bind(self._reports_endpoint)
        self._lock = threading.Lock()  # the items socket, the replay buffer and its counters
        self._items: zmq.Socket | None = None
        # (number, frames, cost in bytes, records) of what the child has not reported committed
        self._buffer: deque[tuple[int, list[bytes], int, int]] = deque()
        self._buffered_bytes = 0
        self._next = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._children = 0
        self._accepting = True  # False once closing, or given up
        self._closing = False
        self._closed = threading.Event()
        self._watcher: threading.Thread | None = None
        self._committed: dict[str, int] = {}
        self._figures: dict[str, Any] = {"rows_written": 0, "dropped_records": 0, "write_errors": 0,
                                         "last_write_error": None, "progress": 0}
        self._rows_before = 0  # rows written by the children this session replaced (as they last reported)
        self._dropped_here = 0  # records the full replay buffer refused (collector's thread)
        self._lost_here = 0  # records given up with a child that could not be replaced
        self._problem: str | None = None  # trouble that cost records (given up)
        self._note: str | None = None  # trouble that cost none (a child replaced)

    # ---- Public API ----------------------------------------------------------------------------------------------

    def start(self) -> RecorderProcess:
        """Create the session file (refused if it exists: ``FileExistsError``) in a new child process."""
        if self.path.exists():
            raise FileExistsError(f"session file {self.path} already exists; choose a new --out path or delete it")
        return self._begin(None)

    def reopen(self, reason: str) -> RecorderProcess:
        """Continue an existing session file as a new segment (``Recorder.reopen``) in a new child process."""
        if not self.path.is_file():
            raise FileNotFoundError(f"session file {self.path} does not exist; nothing to continue recording into")
        return self._begin(reason)

    def committed_seqs(self) -> Mapping[str, int]:
        """Per agent, the highest sequence number the child committed (what the collector acknowledges)."""
        return self._committed

    @property
    def rows_written(self) -> int:
        """Record rows committed so far (all kinds, every child of this session together)."""
        return self._rows_before + int(self._figures["rows_written"])

    @property
    def dropped_records(self) -> int:
        """Records dropped because the writer fell too far behind (0 in a healthy session)."""
        return int(self._figures["dropped_records"]) + self._dropped_here

    @property
    def write_errors(self) -> int:
        """Rows that could not be written (0 in a healthy session), with those a dead child took along."""
        return int(self._figures["write_errors"]) + self._lost_here

    @property
    def last_write_error(self) -> str | None:
        """The most recent write error in words (the recorder process's own trouble included), or None."""
        return self._problem or self._figures["last_write_error"] or self._note

    @property
    def file_bytes(self) -> int:
        """Size of the session on disk, including the write-ahead log."""
        return session_schema.file_bytes(self.path)

    @property
    def pid(self) -> int | None:
        """The child's pid (tests kill it to check that it is replaced)."""
        process = self._process
        return process.pid if process is not None else None

    def close(self, timeout_s: float = CLOSE_STALL_S) -> None:
        """Have the child write everything it was sent, build the indexes and close the file; wait for it.
        Idempotent. Gives up on a child that made no progress for ``timeout_s`` + 5 s (a hung disk): what it had
        not committed is counted in ``write_errors``."""
        with self._lock:
            if self._closing:
                return
            self._closing, self._accepting = True, False
            self._send_locked([_CLOSE])
        last, idle_since = None, time.monotonic()
        while not self._closed.wait(0.25):
            mark = (self._figures["progress"], self._figures["rows_written"], len(self._buffer))
            if mark != last:
                last, idle_since = mark, time.monotonic()
            elif time.monotonic() - idle_since >= timeout_s + 5.0:
                self._give_up(f"the recorder process made no progress for {timeout_s + 5:g} s at close (is the "
                              "disk hung?)")
                break
        if self._watcher is not None:
            self._watcher.join(5.0)
        self._shut()

    # ---- IngestSink (collector's thread) -------------------------------------------------------------------------

    def on_batch(self, batch: wire.Batch, recv_s: float) -> None:
        """Forward the message's bytes; drop (and count) it when the child is hopelessly behind."""
        raw = batch.raw if batch.raw is not None else wire.encode(batch.agent_id, batch.seq, batch.sent_s,
                                                                  batch.records)
        if not self._forward(_BATCH, recv_s, raw, len(raw) + 64, len(batch.records)):
            self._dropped_here += len(batch.records)

    def on_gap(self, gap: Gap) -> None:
        self._other("on_gap", gap)

    def on_joined_late(self, gap: Gap) -> None:
        self._other("on_joined_late", gap)

    def on_rejection(self, rejection: Rejection) -> None:
        self._other("on_rejection", rejection)

    def on_attempt(self, run_id: str, note: AttemptNote) -> None:
        self._other("on_attempt", run_id, note)

    # ---- Run lifecycle (any thread) ------------------------------------------------------------------------------

    def note_launch(self, run_id: str, state: str, exit_code: int | None, ts_s: float, detail: str = "") -> None:
        """Record how a run the window launched ended (``Recorder.note_launch``)."""
        self._other("note_launch", run_id, state, exit_code, ts_s, detail)

    def note_event(self, agent_id: str, event: Event) -> None:
        """Record an event the app observed about an agent's run (``Recorder.note_event``)."""
        self._other("note_event", agent_id, event)

    # ---- Internals -----------------------------------------------------------------------------------------------

    def _other(self, method: str, *args: Any) -> None:
        payload = pickle.dumps((method, args), protocol=pickle.HIGHEST_PROTOCOL)
        self._forward(_OTHER, time.time(), payload, _ITEM_BYTES + len(payload))

    def _forward(self, kind: bytes, ts_s: float, payload: bytes, cost: int, records: int = 0) -> bool:
        with self._lock:
            if not self._accepting or self._buffered_bytes + cost > self._capacity:
                return False
            frames = [kind, _HEADER.pack(self._next, ts_s), payload]
            self._buffer.append((self._next, frames, cost, records))
            self._buffered_bytes += cost
            self._next += 1
            self._send_locked(frames)
            return True

    def _send_locked(self, frames: list[bytes]) -> None:
        if self._items is not None:
            try:
                self._items.send_multipart(frames, zmq.NOBLOCK)
            except zmq.ZMQError:  # cannot happen with an unlimited queue; the buffer sends it again if it does
                pass

    def _begin(self, reason: str | None) -> RecorderProcess:
        """Start the first child and wait until it holds the file; raises with the child's reason if it cannot."""
        self._spawn(reason)
        report = self._read_report(START_TIMEOUT_S)
        if report is None or report.get("kind") != _READY:
            error = str(report.get("error") or "unknown error") if report else "it did not answer"
            self._kill()
            self._shut()
            if report is not None and report.get("type") == "FileExistsError":  # created meanwhile by another
                raise FileExistsError(error)
            raise ValueError(f"cannot record into {self.path}: {error}")
        self._apply(report)
        self._watcher = threading.Thread(target=self._watch, name="ringscope-recorder-watch", daemon=True)
        self._watcher.start()
        return self

    def _spawn(self, reason: str | None) -> None:
        """A new child and a new items socket, sent everything not yet committed (under the lock: in order)."""
        endpoint = f"ipc://{self._folder}/items-{self._children}"
        setup = {"path": str(self.path), "meta": self._meta, "reason": reason, "items": endpoint,
                 "reports": self._reports_endpoint, "lock_wait_s": self._lock_wait_s,
                 "nice": NICE, "stream": self._stream}
        self._children += 1
        self._rows_before += int(self._figures["rows_written"])
        self._figures["rows_written"] = 0
        with self._lock:
            if self._items is not None:
                self._items.close(linger=0)
            items = self._context.socket(zmq.PUSH)
            items.sndhwm = 0  # the replay buffer is the bound
            items.linger = 0
            items.connect(endpoint)  # a connecting socket queues what it is sent until the child binds
            self._items = items
            for item in self._buffer:
                self._send_locked(item[1])
            if self._closing:
                self._send_locked([_CLOSE])
            self._process = subprocess.Popen(
                [sys.executable, "-m", "ringscope.gui.core.ingest.recorder_process", json.dumps(setup)],
                stdin=subprocess.DEVNULL, start_new_session=False)

    def _read_report(self, timeout_s: float) -> dict[str, Any] | None:
        """The child's next report, or None after ``timeout_s`` (sooner when the child has exited)."""
        deadline = time.monotonic() + timeout_s
        while not self._reports.poll(int(min(0.2, timeout_s) * 1000)):
            process = self._process
            if time.monotonic() >= deadline or (process is not None and process.poll() is not None
                                                and not self._reports.poll(0)):
                return None
        report: dict[str, Any] = msgpack.unpackb(self._reports.recv(), raw=False, strict_map_key=False)
        return report

    def _apply(self, report: dict[str, Any]) -> None:
        """Take in a report: the figures, the committed sequence numbers, what the buffer may forget."""
        self._committed.update(report.get("committed") or {})
        for name in self._figures:
            if name in report:
                self._figures[name] = report[name]
        through = report.get("through", -1)
        with self._lock:
            buffer = self._buffer
            while buffer and buffer[0][0] <= through:
                self._buffered_bytes -= buffer.popleft()[2]

    def _watch(self) -> None:
        """The child's reports, and its end: a child that died is replaced (up to ``MAX_RESTARTS``)."""
        while True:
            try:
                report = self._read_report(0.2)
            except (zmq.ZMQError, ValueError):
                return
            if report is not None:
                self._apply(report)
                if report.get("kind") == _CLOSED:
                    self._wait_exit()
                    self._closed.set()
                    return
                continue
            process = self._process
            if process is None or process.poll() is None:
                continue
            if not self._replace(process.returncode):
                self._closed.set()
                return

    def _replace(self, code: int | None) -> bool:
        """A child died before it closed the file: start another that continues it. False when given up."""
        pending = len(self._buffer)
        if self._children > MAX_RESTARTS:
            self._give_up(f"the recorder process died {self._children} times (last exit code {code}); recording "
                          "stopped, the file holds what was committed")
            return False
        why = f"the recorder process ended unexpectedly (exit code {code})"
        log.error("%s; a new one continues %s, sent again the %d item(s) not committed", why, self.path, pending)
        self._note = f"{why}; replaced, nothing lost"
        try:
            self._spawn(why)
        except OSError as exc:
            self._give_up(f"{why}, and a new one could not start: {exc}")
            return False
        return True

    def _give_up(self, why: str) -> None:
        with self._lock:
            lost = sum(item[3] for item in self._buffer)
            self._buffer.clear()
            self._buffered_bytes = 0
            self._accepting = False
        self._lost_here += lost
        self._problem = f"{why}: {lost} record(s) not written"
        log.error("%s: %s", self.path, self._problem)
        self._kill()

    def _wait_exit(self) -> None:
        process = self._process
        if process is not None:
            try:
                process.wait(5.0)
            except subprocess.TimeoutExpired:
                process.kill()

    def _kill(self) -> None:
        process = self._process
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()

    def _shut(self) -> None:
        with self._lock:
            if self._items is not None:
                self._items.close(linger=0)
                self._items = None
        self._reports.close(linger=0)
        shutil.rmtree(self._folder, ignore_errors=True)


# ---- The child -----------------------------------------------------------------------------------------------------


def serve(setup: dict[str, Any]) -> int:
    """Record what the parent forwards until it says close, or dies; 0, or 2 when the file could not be opened."""
    # Ctrl-C and a SIGTERM to the whole group (timeout, job control, systemd) reach this process too: the parent
    # closes it in order after them, or it sees the parent gone; until then it keeps recording what comes.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.nice(int(setup["nice"]))  # a writer with a buffer can wait; the window and the collector cannot
    parent = os.getppid()
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
    reports = context.socket(zmq.PUSH)
    reports.linger = 10_000
    reports.connect(setup["reports"])
    items = context.socket(zmq.PULL)
    items.linger = 0
    path = Path(setup["path"])
    try:
        recorder = Recorder(path, meta=setup["meta"])
        if setup["reason"] is not None:
            lock = _lock(path, wait_s=float(setup["lock_wait_s"]))
            recorder.reopen(setup["reason"])
        else:
            recorder.start()
            lock = _lock(path, wait_s=0.0)
        items.bind(setup["items"])
    except (OSError, ValueError, zmq.ZMQError) as exc:
        reports.send(msgpack.packb({"kind": _FAILED, "type": type(exc).__name__, "error": str(exc)}))
        reports.close()
        return 2
    held = dict(recorder.committed_seqs())  # a batch sent again that the file already holds is not written twice
    through = recorder.resume_marks(str(setup["stream"]))  # nor anything else up to this item sent again
    sent: dict[str, int] = {}

    def report(kind: str) -> None:
        committed = recorder.committed_seqs()
        changed = {agent: seq for agent, seq in list(committed.items()) if sent.get(agent) != seq}
        sent.update(changed)
        reports.send(msgpack.packb({
            "kind": kind, "through": recorder.marked, "committed": changed, "rows_written": recorder.rows_written,
            "dropped_records": recorder.dropped_records, "write_errors": recorder.write_errors,
            "last_write_error": recorder.last_write_error, "progress": recorder.progress}))

    report(_READY)
    last_report, number = time.monotonic(), -1
    closing = False
    while not closing:
        if items.poll(int(REPORT_INTERVAL_S * 1000)):
            for _ in range(1000):
                try:
                    frames = items.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                if frames[0] == _CLOSE:
                    closing = True
                    break
                number, ts_s = _HEADER.unpack(frames[1])
                _take(recorder, frames[0], frames[2], ts_s, held, number, through)
            recorder.mark(number)
        if os.getppid() != parent:  # the parent died: write what came, close the file
            log.warning("the ingest process is gone: closing %s with what it sent", path)
            closing = True
        if time.monotonic() - last_report >= REPORT_INTERVAL_S or closing:
            last_report = time.monotonic()
            report(_REPORT)
    closer = threading.Thread(target=recorder.close, name="ringscope-recorder-close")
    closer.start()
    while closer.is_alive():  # progress while it writes the backlog and builds the indexes
        closer.join(REPORT_INTERVAL_S * 5)
        report(_REPORT)
    report(_CLOSED)
    reports.close()
    items.close()
    lock.close()
    return 0


def _take(recorder: Recorder, kind: bytes, payload: bytes, ts_s: float, held: dict[str, int], number: int,
          through: int) -> None:
    """One forwarded item into the recorder (decoded here: the parent checked it already). Items other than batches
    (gaps, rejections, launch notes, events) are each committed with their own mark, so one that the child this one
    replaces committed (``number <= through``) is not written twice."""
    if kind == _BATCH:
        try:
            batch = wire.decode(payload)
        except wire.WireError as exc:  # the parent accepted it, so this is a bug: count it, never stop
            recorder.on_rejection(Rejection(exc.reason, f"recorder process: {exc.detail}", ts_s, len(payload)))
            return
        if batch.seq <= held.get(batch.agent_id, -1):
            return  # committed by the child this one replaces, after its last report
        recorder.on_batch(batch, ts_s)
        return
    if number <= through:
        return
    method, args = pickle.loads(payload)  # from our own parent only: a private socket in a private folder
    recorder.mark_next = number  # what this call queues is committed together with its number (Recorder._put)
    getattr(recorder, method)(*args)
    recorder.mark_next = None  # a call that queued nothing (a rejection past the stored ones) leaves none pending


def _lock(path: Path, *, wait_s: float) -> Any:
    """An exclusive ``flock`` on the session file itself (SQLite's own locks are POSIX record locks, which Linux
    keeps apart from ``flock``), held until the returned file is closed or this process ends; a reopen waits for an
    earlier writer that is still finishing (up to ``wait_s``)."""
    handle = open(path, "rb")  # noqa: SIM115 - held for the process's life
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return handle
        except BlockingIOError:
            if time.monotonic() >= deadline:
                handle.close()
                raise OSError(f"{path} is still being written by another recorder process (it holds the file's "
                              "lock); close that window or wait for it to finish") from None
            time.sleep(0.1)


def main(argv: list[str] | None = None) -> int:
    """``python -m ringscope.gui.core.ingest.recorder_process SETUP_JSON`` (started by ``RecorderProcess``)."""
    args = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.WARNING, format="ringscope recorder: %(levelname)s %(name)s: %(message)s")
    gc_policy.tune_for_ingest()
    return serve(json.loads(args[0]))


if __name__ == "__main__":
    sys.exit(main())

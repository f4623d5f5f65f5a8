"""The app's ingest end: one ZeroMQ ROUTER socket that many agents connect to, validation, gaps, fan-out to sinks,
and the reply path back to the agents.

What it owns: a ZeroMQ context and ROUTER socket (bound, default loopback only), one receive thread, per-agent
sequence tracking, the session's caps (agents, ranks, run ids) and the ``IngestCounters``. Every telemetry message
goes through ``ringscope.agent.wire.decode``; what is accepted is handed to each ``IngestSink`` on the receive
thread.

The reply path (``ringscope.agent.control``), on the same socket and so under the same CURVE security:

* **acks**: every ``ACK_INTERVAL_S`` each agent is told the highest sequence number that is safe: committed
  by every durable sink (one with ``committed_seqs``, the recorder), or, with none, handed to the sinks. Agents keep
  what is not acknowledged and send it again after a reconnect; a message this collector already has (a sequence
  number below the next one expected) is dropped and counted as a duplicate.
* **requests**: a tool (``ringscope stacks``, the window) sends a control message; the collector forwards it to the
  live agents of the run (``ringscope.gui.core.ingest.requests``), gathers their answers and replies to the tool.
  Malformed, oversized and unknown-run requests are refused, counted and answered with the reason.

Memory is bounded per connection: ZeroMQ queues at most ``RECEIVE_HWM`` messages of at most ``MAX_FRAME_BYTES``
for each connected peer (then it stops reading that peer's TCP stream: a real agent keeps its records in its own
bounded queue meanwhile), and what the collector keeps per agent is capped by ``max_agents`` / ``max_ranks`` /
``max_run_ids``: a message that would exceed a cap is rejected and counted ("too_many_agents", ...). The caps hold
for the whole session (a collector never forgets an agent, so a returning one is not mistaken for a new one). The
caps and the sequence numbers live in ``ringscope.gui.core.ingest.admission``; binding, the open-file limit and
CURVE in ``ringscope.gui.core.ingest.socket_setup``.

What it must never do: raise on bad input (bad messages are counted by reason, logged rate-limited and passed to
``on_rejection``), let one sink's exception stop the others, block indefinitely (the loop polls with a timeout so
``close`` always returns), or import Qt / frameworks.
"""

from __future__ import annotations

import errno
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Final

import msgpack
import zmq
from zmq.auth.thread import ThreadAuthenticator
from zmq.utils import monitor as zmq_monitor

from ringscope.agent import control, wire
from ringscope.agent.devices import host_name
from ringscope.agent.keys import CollectorKeys
from ringscope.agent.schema import Event, EventKind, Hello
from ringscope.gui.core.ingest.admission import Admission
from ringscope.gui.core.ingest.agent_settings import agent_settings_for
from ringscope.gui.core.ingest.requests import LIVE_S, Requests, Routes
from ringscope.gui.core.ingest.sink import JOINED_LATE, IngestCounters, IngestSink, Rejection
from ringscope.gui.core.ingest.socket_setup import (
    is_local_endpoint,
    raise_open_file_limit,
    release,
    secure,
    zmq_endpoint,
)

log = logging.getLogger(__name__)

DEFAULT_BIND: Final[str] = "tcp://127.0.0.1:5757"
"""Loopback only: listening on other interfaces is an explicit choice (``--bind tcp://0.0.0.0:5757``)."""

WANTED_OPEN_FILES: Final[int] = 4096
"""Soft open-file limit the collector asks for: 2x the 2048 agents we aim to serve (one TCP connection each)."""

RECEIVE_HWM: Final[int] = 8
"""Messages ZeroMQ queues per connected peer. An agent sends about one message per 50 ms flush; when the collector
falls behind, the agent's socket stops being writable and its records wait (batched) in its own bounded queue, so
a small number here loses nothing and bounds what one peer can make the collector hold."""

MAX_FRAME_BYTES: Final[int] = 2 * wire.MAX_MESSAGE_BYTES
"""ZeroMQ's MAXMSGSIZE. Messages up to this size are received and rejected as "oversized" by ``wire.decode``
(counted); a larger one makes ZeroMQ drop the connection and what it had queued, which the agent's next message
shows as a sequence gap. Agents split their batches below ``wire.MAX_MESSAGE_BYTES``."""

MAX_AGENTS: Final[int] = 4096
MAX_RANKS: Final[int] = 65_536
MAX_RUN_IDS: Final[int] = 256
"""Default caps per session: distinct agent ids, distinct ranks (in Hello.ranks and records), distinct run ids."""

ACK_INTERVAL_S: Final[tuple[float, float]] = (0.25, 2.0)
"""How often agents are told what is safe: every 0.25 s, slower with many agents (at most ~4 000 acks a second:
8 192 agents get one every 2 s). Agents keep up to 30 s of unacknowledged messages; what a collector killed between
a commit and its ack had committed is sent again, so the next file holds it too (up to one interval of it)."""
_ACKS_PER_S: Final[int] = 4000
REPLY_HWM: Final[int] = 32
"""Control messages ZeroMQ queues towards one peer; past it acks are skipped (the next one covers them)."""

_POLL_MS: Final[int] = 100  # how long close() may wait for the loop to notice
_COALESCE_S: Final[float] = 0.002
_COALESCE_BELOW: Final[int] = 64
"""After a wake-up that found fewer than ``_COALESCE_BELOW`` messages, the receive thread sleeps ``_COALESCE_S``
before polling again, so messages arriving one by one (an agent per rank, each flushing every 50 ms) are read a
few at a time: a wake-up per message cost more than handling it (256 one-rank agents: the process's CPU -23 %, at
most 2 ms more latency). A backlog is read without a pause."""
_DRAIN_MAX: Final[int] = 1000  # messages handled per poll wake-up before re-checking the stop flag
SETTINGS_REQUEST_ID: Final[str] = "collector-settings"
"""The request id of the settings a collector sends every agent (``agent_settings``); the agents' answers, recorded
as ``control`` events, carry it."""
_READ_SLICE_S: Final[float] = 0.1  # and at most this long, so the reply path keeps its pace under a backlog
_QUIET_MS: Final[int] = 100  # at close: this long without a message means everything on its way has arrived
CLOSE_DRAIN_S: Final[float] = 2.0
"""How long ``close`` reads messages still on their way at most (agents still sending keep it that long)."""
_LOG_EVERY_S: Final[float] = 10.0  # rate limit of repeated warnings (per reason)
_HANDSHAKE_FAILED: Final[int] = (zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                                 | zmq.EVENT_HANDSHAKE_FAILED_AUTH)


class CollectorError(RuntimeError):
    """The collector could not start (e.g. the address is in use); the message says what to do."""


class Collector:
    """Receives telemetry from many agents and hands validated batches to sinks.

    Args:
        bind: ZeroMQ endpoint to bind, e.g. ``tcp://127.0.0.1:5757``; port ``0`` or ``*`` picks a free port
            (read it back from ``endpoint``).
        sinks: consumers called on the receive thread (``add_sink`` adds more, before or after ``start``).
        keys: require CURVE (``ringscope.agent.keys``): connections are encrypted and only agents holding
            ``keys.agent_keys.token`` get in. Failed handshakes are counted as rejected: "unauthenticated" with
            keys, "handshake" without (an agent holding a token at a collector that does not ask for one).
        max_agents, max_ranks, max_run_ids: the session's caps (see the module docstring).
    """

    def __init__(self, bind: str = DEFAULT_BIND, sinks: Sequence[IngestSink] = (),
                 keys: CollectorKeys | None = None, *, max_agents: int = MAX_AGENTS, max_ranks: int = MAX_RANKS,
                 max_run_ids: int = MAX_RUN_IDS, agent_settings: Mapping[str, object] | None = None) -> None:
        self._bind = bind
        # sent to every agent once, when its Hello arrives (``control.SETTINGS``), e.g. a headless recorder's
        # longer flush interval; checked here so that a bad value is the caller's error, not every agent's
        self._agent_settings = control.check_settings(dict(agent_settings)) if agent_settings else None
        self._to_configure: list[tuple[str, dict[str, object]]] = []  # (agent id, settings) not sent yet
        self._keys = keys
        self._authenticator: ThreadAuthenticator | None = None
        self._monitor: zmq.Socket | None = None
        self._sinks: tuple[IngestSink, ...] = tuple(sinks)
        self._lock = threading.Lock()  # guards _counters (written by the loop, copied by readers)
        self._counters = IngestCounters()
        self._admission = Admission(max_agents=max_agents, max_ranks=max_ranks, max_run_ids=max_run_ids)
        self._context: zmq.Context | None = None
        self._socket: zmq.Socket | None = None
        self._endpoint = ""
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._closed = False
        self._drain_until = 0.0
        self._last_log: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}
        # reply path (receive thread only)
        self._routes = Routes()
        self._requests = Requests(host_name())
        self._received: dict[str, int] = {}  # agent_id -> highest seq handed to the sinks
        self._acked: dict[str, int] = {}  # agent_id -> highest seq acknowledged to it
        self._next_ack = 0.0

    # ---- Public API ----------------------------------------------------------------------------------------------

    def add_sink(self, sink: IngestSink) -> None:
        """Register another consumer; it sees messages received from now on."""
        # Replacing the tuple (not mutating it) lets the loop iterate without a lock.
        self._sinks = (*self._sinks, sink)

    def continue_from(self, committed: Mapping[str, int]) -> None:
        """Continue a session another collector recorded (before ``start``): ``committed`` is, per agent, the
        highest sequence number already in the recording. Agents send again what that collector had not
        acknowledged; what it had committed is then dropped as a duplicate, and the next message is no gap."""
        self._admission.continue_from(committed)

    def start(self) -> Collector:
        """Bind and start the receive thread. Raises ``CollectorError`` when the endpoint cannot be bound."""
        if self._thread is not None:
            return self
        raise_open_file_limit(WANTED_OPEN_FILES)
        context = zmq.Context()
        socket = context.socket(zmq.ROUTER)
        socket.setsockopt(zmq.LINGER, 0)
        socket.setsockopt(zmq.RCVHWM, RECEIVE_HWM)  # per peer: see RECEIVE_HWM and MAX_FRAME_BYTES
        socket.setsockopt(zmq.SNDHWM, REPLY_HWM)
        socket.setsockopt(zmq.ROUTER_MANDATORY, 1)  # a reply to a peer that left raises (and is skipped)
        socket.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME_BYTES)
        if self._keys is not None:
            self._authenticator = secure(context, socket, self._keys)
        # Failed handshakes are invisible otherwise: count them (a wrong or missing token on a --secure collector,
        # or an agent with a token talking to one that is not --secure).
        self._monitor = socket.get_monitor_socket(_HANDSHAKE_FAILED)
        try:
            socket.bind(zmq_endpoint(self._bind))
        except zmq.ZMQError as exc:
            release(context, socket, self._monitor, self._authenticator)
            hint = "; choose another --bind" if exc.errno == errno.EADDRINUSE else ""
            what = "address in use" if exc.errno == errno.EADDRINUSE else str(exc)
            raise CollectorError(f"cannot bind {self._bind}: {what}{hint}") from None
        self._endpoint = socket.getsockopt_string(zmq.LAST_ENDPOINT)
        self._context, self._socket = context, socket
        self._thread = threading.Thread(target=self._run, name="ringscope-collector", daemon=True)
        self._thread.start()
        log.info("collector listening on %s", self._endpoint)
        if self._keys is None and not is_local_endpoint(self._bind):
            log.warning("collector on %s accepts plaintext telemetry from anyone who can reach this address on the "
                        "network; use --secure to admit only agents holding this machine's access token",
                        self._endpoint)
        return self

    @property
    def endpoint(self) -> str:
        """The bound endpoint (with the real port), or '' before ``start``."""
        return self._endpoint

    @property
    def counters(self) -> IngestCounters:
        """A consistent copy of the cumulative counters."""
        with self._lock:
            return replace(self._counters, rejected=dict(self._counters.rejected))

    def close(self, timeout_s: float = 2.0, drain_s: float = CLOSE_DRAIN_S) -> None:
        """Stop receiving and release the socket. Idempotent; returns within about ``timeout_s + drain_s``.

        What is already on its way (queued in ZeroMQ for this socket, in the agents' pipes and TCP buffers) is read
        first, until nothing arrived for ``_QUIET_MS`` or for at most ``drain_s``: stopping right after the agents
        sent everything loses nothing (closing the socket would drop those messages, uncounted: no later message
        shows their gap).
        """
        if self._closed:
            return
        self._closed = True
        self._drain_until = time.monotonic() + drain_s
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s + drain_s)
            if self._thread.is_alive():
                log.warning("collector thread did not stop within %.1f s (a sink is blocking?)", timeout_s + drain_s)
                return  # the thread still owns the socket; it is a daemon and dies with the process
        if self._context is not None:
            release(self._context, self._socket, self._monitor, self._authenticator)

    def __enter__(self) -> Collector:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- Handshakes ----------------------------------------------------------------------------------------------

    def _handshake_failed(self) -> None:
        assert self._monitor is not None
        while True:
            try:
                event = zmq_monitor.recv_monitor_message(self._monitor, zmq.NOBLOCK)
            except zmq.Again:
                return
            where = event.get("endpoint", b"")
            where_text = where.decode(errors="replace") if isinstance(where, bytes) else str(where)
            where_text = where_text or self._endpoint
            if self._keys is not None:
                self._reject("unauthenticated", f"a connection to {where_text} failed the CURVE handshake: the "
                             "agent has no RINGSCOPE_KEY or a wrong one (give it this collector's access token)",
                             time.time(), 0)
            else:
                self._reject("handshake", f"a connection to {where_text} failed the handshake: an agent with "
                             "RINGSCOPE_KEY set talks to a collector started without --secure (unset it, or "
                             "start this one with --secure), or the peer is not a Ringscope agent",
                             time.time(), 0)

    # ---- Receive thread ------------------------------------------------------------------------------------------

    def _run(self) -> None:
        socket = self._socket
        assert socket is not None
        poller = zmq.Poller()
        poller.register(socket, zmq.POLLIN)
        if self._monitor is not None:
            poller.register(self._monitor, zmq.POLLIN)
        while not self._stop.is_set():
            try:
                ready = dict(poller.poll(_POLL_MS))
                if self._monitor is not None and self._monitor in ready:
                    self._handshake_failed()
                if ready and self._read_ready(socket) < _COALESCE_BELOW:
                    time.sleep(_COALESCE_S)
                self._reply_path(socket)
            except zmq.ZMQError as exc:
                if self._stop.is_set():
                    break
                self._warn("zmq", f"receive failed: {exc}")
            except Exception as exc:  # never let one bad message end ingest
                self._warn("internal", f"unexpected error while handling a message: {exc!r}")
                log.debug("collector error", exc_info=True)
        self._drain(socket)

    def _drain(self, socket: zmq.Socket) -> None:
        """At close: read what is on its way until the socket is quiet (see ``close``)."""
        read = 0
        try:
            while True:
                left_s = self._drain_until - time.monotonic()
                if not socket.poll(_QUIET_MS if left_s > 0 else 0, zmq.POLLIN):
                    break  # quiet: everything that was on its way has arrived
                if left_s <= 0:
                    log.warning("collector: agents were still sending when it closed; %d message(s) read while "
                                "closing, later ones are not received", read)
                    break
                read += self._read_ready(socket)
        except Exception as exc:  # closing must finish: what could not be read is the agents' to report as dropped
            log.warning("collector: reading the last messages at close failed: %r", exc)
        if read:
            log.info("collector: %d message(s) that were on their way read at close", read)

    def _read_ready(self, socket: zmq.Socket) -> int:
        """Handle the messages waiting on ``socket``, at most ``_DRAIN_MAX`` or for ``_READ_SLICE_S``; returns how
        many."""
        until = time.monotonic() + _READ_SLICE_S
        for read in range(_DRAIN_MAX):
            if read & 15 == 15 and time.monotonic() >= until:
                return read  # a backlog: acks and replies go out on time (agents wait for the acks at close)
            try:
                # [routing identity, telemetry] or [routing identity, CONTROL_MARKER, request] (copying small
                # frames is faster than Frame objects)
                frames = socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return read
            if len(frames) == 2:
                self._handle(frames[1], frames[0])
            elif control.is_control(frames[1:]):
                self._handle_control(socket, frames[0], frames[1:])
            else:
                self._reject("malformed", f"a message of {len(frames) - 1} frames; telemetry has one, control "
                             "messages two", time.time(), sum(len(f) for f in frames[1:]))
        return _DRAIN_MAX

    def _handle(self, data: bytes, identity: bytes = b"") -> None:
        recv_s = time.time()
        size = len(data)
        try:
            batch = wire.decode(data)
        except wire.WireError as exc:
            self._reject(exc.reason, exc.detail, recv_s, size)
            return
        admission = self._admission
        refusal = admission.admit(batch)
        if refusal is not None:
            self._reject(*refusal, recv_s, size)
            return
        if admission.is_duplicate(batch):
            with self._lock:  # sent again after a reconnect, and already here: drop it
                self._counters.duplicates += 1
            return
        gap = admission.track(batch.agent_id, batch.seq, recv_s)
        self._route(batch, identity, recv_s)
        with self._lock:
            counters = self._counters
            counters.messages += 1
            counters.records += len(batch.records)
            counters.bytes += size
            counters.agents = admission.agents
            if gap is not None and gap.kind == JOINED_LATE:
                counters.joined_late += 1
                counters.missing_before_join += gap.missing
            elif gap is not None:
                counters.gaps += 1
                counters.missing_messages += gap.missing
            if batch.skipped:
                counters.rejected["unknown_kind"] = counters.rejected.get("unknown_kind", 0) + 1
        if gap is not None and gap.kind == JOINED_LATE:
            self._warn("joined_late", f"agent {gap.agent_id} joined late: its messages 0..{gap.got_seq - 1} were "
                                      "sent before this collector heard from it (to an earlier collector, or lost)")
            self._fan_out("on_joined_late", gap)
        elif gap is not None:
            self._warn("gap", f"agent {gap.agent_id} lost {gap.missing} message(s) (seq {gap.expected_seq}.."
                              f"{gap.got_seq - 1}); its queue was full or the network dropped them")
            self._fan_out("on_gap", gap)
        if batch.skipped:
            self._fan_out("on_rejection", Rejection(
                "unknown_kind", f"{batch.skipped} record(s) of kinds this app does not know from agent "
                f"{batch.agent_id} (schema {batch.version[0]}.{batch.version[1]}); upgrade the app to see them",
                recv_s, size))
        self._fan_out("on_batch", batch, recv_s)

    # ---- Reply path ----------------------------------------------------------------------------------------------

    def _route(self, batch: wire.Batch, identity: bytes, recv_s: float) -> None:
        """Remember how to reach the agent, who it is, and what it answered to a request in flight."""
        route = self._routes.heard(batch.agent_id, identity, recv_s)
        transit = recv_s - batch.sent_s  # the smallest is the agent clock's offset (+ the one-way delay)
        if transit < route.min_transit_s:
            route.min_transit_s = transit
        self._received[batch.agent_id] = batch.seq
        for record in batch.records:
            if isinstance(record, Hello):
                route.run_id, route.ranks, route.host, route.pid = (record.run_id, tuple(record.ranks or [record.rank]),
                                                                    record.host, record.pid)
                if not route.configured:
                    settings = agent_settings_for(self._agent_settings, record)
                    if settings:
                        route.configured = True
                        self._to_configure.append((batch.agent_id, settings))
            elif isinstance(record, Event):
                if record.event == EventKind.FINISHED:
                    route.finished = True
                elif self._requests:
                    self._requests.answer(batch.agent_id, record)

    def _handle_control(self, socket: zmq.Socket, identity: bytes, frames: list[bytes]) -> None:
        """A tool's request: forward it to the run's live agents (the reply goes when they answered)."""
        recv_s = time.time()
        size = len(frames[1])
        try:
            message = control.decode(frames)
            if message.command in control.COLLECTOR_REQUESTS:
                self._answer_itself(socket, identity, message)
                return
            if message.command not in control.REQUESTS:
                takes = ", ".join(sorted(control.REQUESTS | control.COLLECTOR_REQUESTS))
                raise control.ControlError("control_malformed", f"a collector takes {takes} requests, not "
                                                                f"{message.command!r}")
        except control.ControlError as exc:
            self._reject(exc.reason, exc.detail, recv_s, size)
            self._send(socket, identity, control.encode(control.REPLY, id=_request_id(frames), ok=False,
                                                        error=f"refused ({exc.reason}): {exc.detail}"))
            return
        targets = self._routes.live(recv_s, message.run_id, message.ranks)
        if not targets:
            runs = self._routes.run_ids(recv_s)
            which = f"run {message.run_id!r}" if message.run_id else "any run"
            detail = (f"no live agent of {which}" + (f" with ranks {list(message.ranks)[:8]}" if message.ranks else "")
                      + f" (heard from in the last {LIVE_S:.0f} s); live runs: {', '.join(runs[:10]) or 'none'}")
            self._reject("unknown_run", detail, recv_s, size)
            self._send(socket, identity, control.encode(control.REPLY, id=message.request_id, ok=False,
                                                        error=detail))
            return
        pending = self._requests.open(identity, message, targets, time.monotonic())
        with self._lock:
            self._counters.requests += 1
        body = {"id": pending.request_id, "settings": message.settings or None, "steps": message.steps}
        for route in targets.values():
            self._send(socket, route.identity, control.encode(message.command, **body))

    def _answer_itself(self, socket: zmq.Socket, identity: bytes, message: control.Control) -> None:
        """A request for the collector itself: a run's status, or a supervisor's attempt note (recorded)."""
        assert message.run_id is not None  # decode requires it for these
        if message.command == control.ATTEMPT:
            self._fan_out("on_attempt", message.run_id, message.attempt)
            result: dict[str, Any] = {"recorded": True}
        else:
            result = {"state": None}  # no sink knows the run (yet): no agent of it said hello
            for sink in self._sinks:
                status = getattr(sink, "run_status", None)
                try:
                    answer = status(message.run_id) if status is not None else None
                except Exception as exc:  # a sink must never break the reply path
                    self._warn(f"sink:{type(sink).__name__}", f"{type(sink).__name__}.run_status failed: {exc!r}")
                    answer = None
                if answer is not None:
                    result = answer
                    break
        self._send(socket, identity, control.encode(control.REPLY, id=message.request_id, ok=True, result=result))

    def _reply_path(self, socket: zmq.Socket) -> None:
        """Acks (see ``ACK_INTERVAL_S``), and the replies of finished requests."""
        now = time.monotonic()
        if self._to_configure:
            self._configure(socket)
        if self._requests:
            for reply in self._requests.due(now):
                self._send(socket, reply.tool, control.encode(control.REPLY, **reply.body))
        if now < self._next_ack:
            return
        low, high = ACK_INTERVAL_S
        self._next_ack = now + min(high, max(low, len(self._received) / _ACKS_PER_S))
        durable = [committed() for sink in self._sinks if (committed := getattr(sink, "committed_seqs", None))]
        acked = self._acked
        for agent_id, received in list(self._received.items()):
            safe: int | None = received
            for seqs in durable:
                committed_seq = seqs.get(agent_id)
                safe = None if committed_seq is None else min(safe, committed_seq)  # type: ignore[type-var]
                if safe is None:
                    break
            route = self._routes.get(agent_id)
            if safe is None or route is None or safe <= acked.get(agent_id, -1):
                continue
            if self._send(socket, route.identity, control.encode(control.ACK, q=safe)):
                acked[agent_id] = safe

    def _configure(self, socket: zmq.Socket) -> None:
        """Send the agent settings to the agents heard from since the last wake (their answers are recorded)."""
        for agent_id, settings in self._to_configure:  # a few µs each, once per agent
            frames = control.encode(control.SET, id=SETTINGS_REQUEST_ID, settings=settings)
            route = self._routes.get(agent_id)
            if route is not None and not self._send(socket, route.identity, frames):
                route.configured = False  # its queue is full: the next Hello (every 5 s) tries again
        self._to_configure.clear()

    def _send(self, socket: zmq.Socket, identity: bytes, frames: list[bytes]) -> bool:
        """Send to one peer without ever blocking; False when it is gone or not reading."""
        try:
            socket.send_multipart([identity, *frames], zmq.NOBLOCK)
            return True
        except zmq.ZMQError:  # Again (its queue is full) or EHOSTUNREACH (it left): the next ack covers it
            return False

    def _reject(self, reason: str, detail: str, recv_s: float, size: int) -> None:
        with self._lock:
            rejected = self._counters.rejected
            rejected[reason] = rejected.get(reason, 0) + 1
        what = f"a {size}-byte message" if size else "a connection"
        self._warn(f"rejected:{reason}", f"rejected {what} ({reason}): {detail}")
        self._fan_out("on_rejection", Rejection(reason, detail, recv_s, size))

    def _fan_out(self, method: str, *args: object) -> None:
        for sink in self._sinks:
            try:
                handler = getattr(sink, method, None)
                if handler is not None:  # on_joined_late is optional (see ringscope.gui.core.ingest.sink)
                    handler(*args)
            except Exception as exc:
                self._warn(f"sink:{type(sink).__name__}", f"{type(sink).__name__}.{method} failed: {exc!r}")

    def _warn(self, key: str, message: str) -> None:
        """Log a warning at most once per ``_LOG_EVERY_S`` per key, saying how many were suppressed."""
        now = time.monotonic()
        if now - self._last_log.get(key, -_LOG_EVERY_S) < _LOG_EVERY_S:
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return
        suppressed = self._suppressed.pop(key, 0)
        self._last_log[key] = now
        more = f" (+{suppressed} similar in the last {_LOG_EVERY_S:.0f} s)" if suppressed else ""
        log.warning("%s%s", message, more)


# ---- Helpers -----------------------------------------------------------------------------------------------------


def _request_id(frames: list[bytes]) -> str:
    """The ``id`` of a request that was refused, when it can be read at all (so the tool can match the refusal)."""
    try:
        body = msgpack.unpackb(frames[1][: control.MAX_CONTROL_BYTES], raw=False)
        request_id = body.get("id", "") if isinstance(body, dict) else ""
        return request_id[: control.MAX_REQUEST_ID_CHARS] if isinstance(request_id, str) else ""
    except Exception:
        return ""

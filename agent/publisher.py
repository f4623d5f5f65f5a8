"""The agent's background sender: a bounded queue the training thread puts into, and one thread that sends.

What it owns: one ZeroMQ DEALER socket (connected, never bound, so many agents can reach one collector) and its
monitor, one daemon thread, a bounded ``deque``, one pending ``Hello`` and one pending ``Health`` (a newer one
replaces an unsent older one, so they never grow the queue), sequence numbers and drop counters, and the messages
sent but not yet acknowledged.

The reply path (``ringscope.agent.control``): the collector answers on the same connection. Its acks say which
messages are committed to disk; the rest are kept (at most ``UNACKED_MAX_BYTES`` and ``UNACKED_MAX_AGE_S``) and
sent again, in order and with their own sequence numbers, when the connection comes back (a collector restarted
on the same endpoint): the collector drops what it already has. Its requests (stacks, settings) go to the
``on_control`` handler, called on this sender thread, never the training thread.

What it must never do: block, raise into, or do I/O on the caller's thread. ``put`` is an O(1) append or a counted
drop. Sends are ``NOBLOCK``; while the socket's high-water mark is reached (collector slow or absent) records wait
in the bounded queue and what does not fit is dropped and counted; the counts travel in the next ``Health`` record
so the app can show them. A batch whose message would exceed ``wire.MAX_MESSAGE_BYTES`` is split, never sent to be
rejected. Connections that drop are counted (``Health.disconnects``): what was in flight then is lost without
acknowledgement unless the agent still holds it unacknowledged (then it is sent again at the reconnect).

At close (``close(timeout_s)``): what is queued is sent while a collector takes it, then the agent waits for the
acks of everything sent, all within ``timeout_s``. What no collector took is counted in ``dropped_records``; what
was sent and never acknowledged is counted in ``unconfirmed_at_close`` and logged, never passed off as delivered
(ZeroMQ discards what is still in its queue when the socket closes).
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import fields
from typing import Final

import zmq
from zmq.utils import monitor as zmq_monitor

from ringscope.agent import control, wire
from ringscope.agent.keys import AgentKeys
from ringscope.agent.schema import Health, Hello, PublisherStats, Record, shifted

log = logging.getLogger(__name__)

DEFAULT_ENDPOINT: Final[str] = "tcp://127.0.0.1:5757"
_TEST_CLOCK_SKEW_S: Final[float] = float(os.environ.get("RINGSCOPE_TEST_CLOCK_SKEW_S") or 0.0)
"""Test-only: every wall time this process sends is moved by this many seconds, as if its host's clock were off
(a library that fakes the clock breaks Python's sleeps). Unset in real use: one falsy check per message."""
FLUSH_INTERVAL_S: Final[float] = 0.05
"""How long a record waits on the agent before it is sent, by default (the window's live latency); a headless
recorder asks for longer (``ringscope record --agent-flush``), and ``ringscope control --flush-interval`` changes it."""
CLOSE_FLUSH_S: Final[float] = 0.5
"""How long ``close`` waits for a collector to connect (or to make room) before counting what is still queued
dropped; while the collector keeps taking messages, ``close`` goes on sending until its own ``timeout_s``."""
CLOSE_ACK_STALL_S: Final[float] = 3.0
"""At close, how long to wait for the next acknowledgement before giving up on the rest (a collector acks every
0.25-2 s; one that stopped answering does not hold the training's exit for the whole ``timeout_s``)."""
_CLOSE_MARGIN_S: Final[float] = 0.2
"""Of ``close``'s ``timeout_s``, kept for closing the socket and the context after the last wait."""
UNACKED_MAX_BYTES: Final[int] = 8 * 1024 * 1024
UNACKED_MAX_AGE_S: Final[float] = 30.0
"""Sent messages kept until the collector acknowledges them: at most this many bytes, none older than this. A
collector acknowledges within about a second of receiving (its writer commits every 0.2 s), so these bounds cover
a collector that dies and comes back within ``UNACKED_MAX_AGE_S``; past them the oldest are forgotten (counted in
``PublisherStats.unacked_expired``: they were sent, and are lost only if that collector lost them too)."""
CONTROL_PER_WAKE: Final[int] = 64
"""Control messages handled per sender wake-up at most (the rest wait in ZeroMQ's bounded queue)."""
_CONTROL_RCVHWM: Final[int] = 64
_EXPIRED_KEPT: Final[int] = 16_384


ControlHandler = Callable[[control.Control], object]


class Publisher:
    """Batches records from any thread and sends them to ``endpoint`` from a background thread.

    Args:
        endpoint: ZeroMQ endpoint of the collector, e.g. ``tcp://10.0.0.1:5757``.
        agent_id: unique id of this agent (goes in every message).
        hello: called on the sender thread to get the identity record, sent first and every ``hello_interval_s``
            so that a collector started later still learns who this agent is.
        queue_capacity: records held before ``put`` starts dropping (and counting) new ones (the pending Hello and
            Health are kept apart: at most one of each).
        batch_max: most records per message (at most ``wire.MAX_RECORDS_PER_MESSAGE`` - 2, leaving room for the
            Hello and Health).
        flush_interval_s: how long records may wait before being sent; an unclean exit loses at most this much.
        send_hwm: messages ZeroMQ may buffer per connection; past it records wait in the queue.
        keys: CURVE keys of a collector that requires authentication (``ringscope.agent.keys``); None: plaintext.
        on_control: called on the sender thread with each request from the collector (``stacks``, ``set``); an
            exception in it is logged and counted (``control_refused``), never raised.
    """

    def __init__(
        self,
        endpoint: str,
        agent_id: str,
        *,
        hello: Callable[[], Hello] | None = None,
        queue_capacity: int = 65_536,
        batch_max: int = 512,
        flush_interval_s: float = FLUSH_INTERVAL_S,
        send_hwm: int = 200,
        hello_interval_s: float = 5.0,
        health_interval_s: float = 1.0,
        keys: AgentKeys | None = None,
        on_control: ControlHandler | None = None,
    ) -> None:
        if queue_capacity < 1 or not 1 <= batch_max <= wire.MAX_RECORDS_PER_MESSAGE - 2 or flush_interval_s <= 0:
            raise ValueError(
                f"queue_capacity ({queue_capacity}) must be >= 1, batch_max ({batch_max}) within "
                f"1..{wire.MAX_RECORDS_PER_MESSAGE - 2} and flush_interval_s ({flush_interval_s}) > 0"
            )
        self.endpoint = endpoint
        self.agent_id = agent_id
        self._hello = hello
        # called on the sender thread at every wake-up, before sending: integrations turn what the training thread
        # left them (e.g. a step's raw timestamps) into records there, off the training thread
        self._producers: list[Callable[[], object]] = []
        self._capacity = queue_capacity
        self._batch_max = batch_max
        self._flush_interval_s = flush_interval_s
        self._send_hwm = send_hwm
        self._hello_interval_s = hello_interval_s
        self._health_interval_s = health_interval_s
        self._keys = keys
        self._queue: deque[Record] = deque()
        # Re-sent periodically; a newer one replaces one that could not be sent yet (kept out of the bounded queue).
        self._pending_hello: Hello | None = None
        self._pending_health: Health | None = None
        self._disconnects = 0
        self._warned_too_large = False
        self._dropped = 0  # written by producers (queue full) and the sender (too large, or nobody took it at close)
        self._sent_records = 0
        self._sent_batches = 0
        self._failed_batches = 0
        self._seq = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._owner_pid = os.getpid()
        self._closed = False
        self.on_control = on_control
        # (seq, payload, sent monotonic, records) of messages sent and not acknowledged, oldest first
        self._unacked: deque[tuple[int, bytes, float, int]] = deque()
        self._unacked_bytes = 0
        self._acked_seq = -1
        self._resend_at: int | None = None  # index into _unacked of the next message to send again
        self._resent = 0
        self._unacked_expired = 0
        self._control_received = 0
        self._control_refused = 0
        self._close_deadline = 0.0  # monotonic time by which the sender thread must have finished closing
        self._unconfirmed_at_close = 0
        self._report_close = True  # close(report=False): the counts are kept, the caller says them
        self._confirm_close = True  # close(confirm=False): no wait for acknowledgements (the process is ending)
        # (seq, records) of messages forgotten unacknowledged: a later ack still confirms them (at most
        # _EXPIRED_KEPT; older ones stay counted in _expired_records)
        self._expired: deque[tuple[int, int]] = deque()
        self._expired_records = 0

    # ---- Public API ----------------------------------------------------------------------------------------------

    def put(self, record: Record) -> bool:
        """Queue a record for sending. Never blocks; returns False (and counts a drop) when the queue is full."""
        queue = self._queue
        if len(queue) >= self._capacity:
            self._dropped += 1
            return False
        queue.append(record)
        return True

    def set_flush_interval(self, seconds: float) -> None:
        """Change how long records may wait before being sent (from the next wake-up on). Raises ``ValueError``
        unless ``seconds`` > 0."""
        if not seconds > 0:
            raise ValueError(f"flush_interval_s must be > 0, not {seconds}")
        self._flush_interval_s = float(seconds)

    @property
    def flush_interval_s(self) -> float:
        """How long records may wait before being sent."""
        return self._flush_interval_s

    def add_producer(self, produce: Callable[[], object]) -> None:
        """Call ``produce()`` on the sender thread at every wake-up (every ``flush_interval_s``), before sending;
        it may ``put`` records. An exception in it is logged once and that producer is dropped."""
        self._producers.append(produce)

    def remove_producer(self, produce: Callable[[], object]) -> None:
        """Stop calling ``produce`` (its owner flushes what is left itself)."""
        try:
            self._producers.remove(produce)
        except ValueError:
            pass

    def _produce(self) -> None:
        for produce in list(self._producers):
            try:
                produce()
            except Exception:  # never let an integration's bug stop the sender
                log.exception("ringscope: a telemetry producer failed; it is dropped")
                self.remove_producer(produce)

    def start(self) -> Publisher:
        """Start the sender thread (idempotent). Returns self."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="ringscope-publisher", daemon=True)
            self._thread.start()
            atexit.register(self.close)
        return self

    def close(self, timeout_s: float = 2.0, *, report: bool = True, confirm: bool = True) -> None:
        """Flush what is queued, wait for the collector to confirm it, and stop, all within ``timeout_s``.

        What is still queued when no collector takes it is counted in ``dropped_records``; what was sent but not
        acknowledged by a collector that acknowledges is counted in ``unconfirmed_at_close`` and, with ``report``,
        logged (a caller closing many agents reports their counts once instead). ``confirm=False`` sends what is
        queued and hands it to ZeroMQ's linger without waiting for acknowledgements (a process that is being
        killed: nothing could be sent again anyway, and an acknowledgement takes up to an ack interval). Safe to
        call twice and from ``atexit``: a second call while the first is still sending (SIGTERM arriving during
        ``atexit``'s close) waits for it, within its own ``timeout_s``, ``report`` and ``confirm``, instead of
        returning at once and letting the process end before the first has handed over what was queued."""
        if os.getpid() != self._owner_pid:
            return  # a forked child (e.g. a data-loader worker) must not touch the parent's socket
        if self._closed:
            self._await_close(timeout_s, report, confirm)
            return
        # set before _closed: a second close (SIGTERM's handler interrupting this one) reads them
        self._close_deadline = time.monotonic() + max(0.0, timeout_s - _CLOSE_MARGIN_S)
        self._report_close = report
        self._confirm_close = confirm
        self._closed = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive() and report:
                log.warning("ringscope: sender did not finish within %.1f s; %d records left", timeout_s,
                            len(self._queue))

    def _await_close(self, timeout_s: float, report: bool, confirm: bool) -> None:
        """A close already under way: tighten its budget to this caller's and wait for the sender to finish."""
        thread = self._thread
        if thread is None or thread is threading.current_thread() or not thread.is_alive():
            return
        if not report:
            self._report_close = False
        if not confirm:
            self._confirm_close = False  # the sender reads it in its wait for acknowledgements: it stops waiting
        self._close_deadline = min(self._close_deadline, time.monotonic() + max(0.0, timeout_s - _CLOSE_MARGIN_S))
        self._stop.set()  # a signal handler may have interrupted the first close right after it set _closed
        thread.join(timeout_s)

    @property
    def stats(self) -> PublisherStats:
        """A snapshot of the counters (cheap; safe from any thread)."""
        return PublisherStats(
            ts_s=time.time(),
            queue_len=len(self._queue),
            queue_capacity=self._capacity,
            dropped_records=self._dropped,
            sent_records=self._sent_records,
            sent_batches=self._sent_batches,
            failed_batches=self._failed_batches,
            last_seq=self._seq - 1,
            disconnects=self._disconnects,
            unacked=len(self._unacked),
            unacked_bytes=self._unacked_bytes,
            acked_seq=self._acked_seq,
            resent_batches=self._resent,
            unacked_expired=self._unacked_expired,
            control_received=self._control_received,
            control_refused=self._control_refused,
            unconfirmed_at_close=self._unconfirmed_at_close,
        )

    # ---- Sender thread -------------------------------------------------------------------------------------------

    def _run(self) -> None:
        context = zmq.Context()
        socket = context.socket(zmq.DEALER)
        socket.setsockopt(zmq.SNDHWM, self._send_hwm)
        socket.setsockopt(zmq.RCVHWM, _CONTROL_RCVHWM)  # control messages waiting for the sender thread
        # a collector is trusted (CURVE authenticates it), but a control message over this size is a bug: ZeroMQ
        # drops that connection rather than allocate it (the agent reconnects)
        socket.setsockopt(zmq.MAXMSGSIZE, 16 * control.MAX_CONTROL_BYTES)
        socket.setsockopt(zmq.LINGER, 0)
        # Queue messages only on a completed connection: while no collector listens the socket is not writable,
        # records wait in our bounded deque (a collector started later still gets them) and nothing piles up
        # inside ZeroMQ that close() would have to wait for.
        socket.setsockopt(zmq.IMMEDIATE, 1)
        try:
            if self._keys is not None:
                self._keys.apply(socket)
            socket.connect(self.endpoint)
        except zmq.ZMQError as exc:
            log.error("ringscope: cannot connect to %s (%s); telemetry is disabled for this process",
                      self.endpoint, exc)
            socket.close(0)
            context.term()
            return
        monitor: zmq.Socket | None
        try:
            monitor = socket.get_monitor_socket(zmq.EVENT_DISCONNECTED)  # read at every wake-up: resends
        except zmq.ZMQError as exc:  # disconnects then go uncounted; telemetry itself is unaffected
            log.debug("ringscope: no socket monitor (%s)", exc)
            monitor = None
        next_hello = 0.0
        next_health = time.monotonic() + self._health_interval_s
        try:
            while True:
                stopping = self._stop.wait(self._flush_interval_s)
                now = time.monotonic()
                if self._hello is not None and now >= next_hello:
                    self._pending_hello = self._hello()
                    next_hello = now + self._hello_interval_s
                if monitor is not None and monitor.poll(0):  # before sending: a reconnect resends first
                    self._count_disconnects(monitor)
                if stopping or now >= next_health:
                    self._pending_health = self._health()
                    next_health = now + self._health_interval_s
                self._receive_control(socket)
                self._forget_unacked(now)
                self._produce()
                self._drain(socket)
                if stopping:
                    self._flush_before_close(socket)
                    self._confirm_before_close(socket)
                    break
        except Exception:  # the sender must never take the training down; log and go quiet
            log.exception("ringscope: telemetry sender failed; telemetry is disabled for this process")
        finally:
            # Give ZeroMQ a bounded moment to deliver the last messages (what close could not wait to see
            # confirmed), but only when a collector is there to take them and within close's budget: lingering
            # towards nobody would keep this thread inside libzmq while the interpreter exits, and a daemon thread
            # killed inside C++ code aborts the whole process ("terminate called without an active exception") —
            # the training's exit code must never depend on telemetry.
            connected = bool(socket.poll(0, zmq.POLLOUT))
            left_ms = int(1000 * (self._close_deadline - time.monotonic())) if self._closed else 1000
            socket.setsockopt(zmq.LINGER, max(0, min(1000, left_ms)) if connected else 0)
            if monitor is not None:
                socket.disable_monitor()
                monitor.close(0)
            socket.close()
            context.term()

    def _flush_before_close(self, socket: zmq.Socket) -> None:
        """At close, send what is still queued while a collector takes it (within close's budget); a collector
        that is absent, or takes nothing for ``CLOSE_FLUSH_S``, gets no longer."""
        stall_at = time.monotonic() + CLOSE_FLUSH_S
        while self._has_pending() or self._resend_at is not None:
            now = time.monotonic()
            if now >= min(stall_at, self._close_deadline):
                break
            self._receive_control(socket)  # acks free room; a request is still answered
            if socket.poll(20, zmq.POLLOUT):
                sent = self._sent_batches + self._resent
                self._drain(socket)
                if self._sent_batches + self._resent > sent:
                    stall_at = time.monotonic() + CLOSE_FLUSH_S
        self._drop_pending()

    def _drop_pending(self) -> None:
        """What is still queued at the end of close: nobody took it; counted, never silently lost."""
        self._dropped += len(self._queue) + (self._pending_hello is not None) + (self._pending_health is not None)
        self._queue.clear()
        self._pending_hello = self._pending_health = None

    def _confirm_before_close(self, socket: zmq.Socket) -> None:
        """At close, wait (within close's budget; not with ``confirm=False``) until the collector has confirmed every
        message sent; count and log what it has not (messages forgotten unacknowledged before and never acknowledged
        since included).
        Messages ZeroMQ still holds are lost with the socket unless the collector takes them during the final
        linger, and a collector behind on its writes has not written them yet: never silently, here."""
        # a collector that has acknowledged before gets CLOSE_ACK_STALL_S per ack; one not heard from yet (just
        # started, or behind on its writes) CLOSE_FLUSH_S for its first
        stall_at = time.monotonic() + (CLOSE_ACK_STALL_S if self._acked_seq >= 0 else CLOSE_FLUSH_S)
        while (self._confirm_close and (self._unacked or self._has_pending())
               and time.monotonic() < min(stall_at, self._close_deadline)):
            acked = self._acked_seq
            if socket.poll(50, zmq.POLLIN):
                self._receive_control(socket)  # acks; a request answered now puts its answer in the queue
            if (self._has_pending() or self._resend_at is not None) and socket.poll(0, zmq.POLLOUT):
                self._drain(socket)  # the answer goes too (and waits for its ack like the rest), as does a refused send
            if self._acked_seq > acked:
                stall_at = time.monotonic() + CLOSE_ACK_STALL_S
        self._drop_pending()
        waiting = sum(message[3] for message in self._unacked)
        self._unconfirmed_at_close = unconfirmed = waiting + self._expired_records
        if unconfirmed and self._report_close:
            log.warning("ringscope: %d record(s) sent were never confirmed by the collector (%d still waiting at "
                        "close, %d forgotten unacknowledged before); it may have written them: the recording says "
                        "what it holds", unconfirmed, waiting, self._expired_records)

    def _has_pending(self) -> bool:
        return bool(self._queue) or self._pending_hello is not None or self._pending_health is not None

    def _drain(self, socket: zmq.Socket) -> None:
        if self._resend_at is not None and not self._resend(socket):
            return  # new messages go after the ones sent again, so the collector sees them in order
        queue = self._queue
        while self._has_pending():
            # Encoding a batch only to have ZeroMQ refuse it wastes CPU (and the GIL) in the training process
            # whenever the collector is absent or slow; leave the records queued instead: the bounded queue then
            # counts the drops in put(), and a collector that catches up still gets them.
            if not socket.poll(0, zmq.POLLOUT):
                break
            batch: list[Record] = []
            if self._pending_hello is not None:  # identity first, so a new collector knows who is speaking
                batch.append(self._pending_hello)
                self._pending_hello = None
            batch.extend(queue.popleft() for _ in range(min(self._batch_max, len(queue))))
            if not queue and self._pending_health is not None:
                batch.append(self._pending_health)
                self._pending_health = None
            if not self._send(socket, batch):
                return  # what follows goes after it, in order

    def _send(self, socket: zmq.Socket, batch: list[Record]) -> bool:
        """Send one batch as one message, or as several when it would exceed the collector's size limit.

        False when ZeroMQ refused it although the poll said there was room: the connection went away in between
        (a collector killed at that instant). The message keeps its number and waits with the unacknowledged ones,
        first in line to go again, so the collector still sees every number in order; dropping it left a one-message
        gap in a restarted recording, and sending the next ones first would make the new collector drop it as a
        duplicate when it came."""
        sent_s = time.time()
        if _TEST_CLOCK_SKEW_S:  # a host whose clock is off, for the clock-alignment tests (off in real use)
            batch, sent_s = [shifted(record, _TEST_CLOCK_SKEW_S) for record in batch], sent_s + _TEST_CLOCK_SKEW_S
        payload = wire.encode(self.agent_id, self._seq, sent_s, batch)
        if len(payload) > wire.MAX_MESSAGE_BYTES:
            if len(batch) > 1:
                half = len(batch) // 2
                if not self._send(socket, batch[:half]):
                    self._queue.extendleft(reversed(batch[half:]))  # not numbered yet: they wait their turn
                    return False
                return self._send(socket, batch[half:])
            self._dropped += 1
            if not self._warned_too_large:
                self._warned_too_large = True
                log.warning("ringscope: a %s record of %d bytes exceeds the message limit (%d bytes) and was "
                            "dropped; shorten its text fields", batch[0].KIND, len(payload), wire.MAX_MESSAGE_BYTES)
            return True
        self._seq += 1
        self._sent_batches += 1
        self._sent_records += len(batch)
        now = time.monotonic()
        unacked = self._unacked
        unacked.append((self._seq - 1, payload, now, len(batch)))
        self._unacked_bytes += len(payload)
        if self._unacked_bytes > UNACKED_MAX_BYTES:  # before the send, which lets other threads read the stats
            self._forget_unacked(now)
        try:
            socket.send(payload, zmq.NOBLOCK, copy=False)
        except zmq.Again:
            self._failed_batches += 1
            if self._resend_at is None:
                self._resend_at = len(unacked) - 1  # this one, the newest
            return False
        return True

    # ---- Reply path ----------------------------------------------------------------------------------------------

    def _resend(self, socket: zmq.Socket) -> bool:
        """Send the unacknowledged messages again after a reconnect, oldest first; True when all went."""
        unacked = self._unacked
        while self._resend_at is not None and self._resend_at < len(unacked):
            if not socket.poll(0, zmq.POLLOUT):
                return False
            try:
                socket.send(unacked[self._resend_at][1], zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return False
            self._resend_at += 1
            self._resent += 1
        self._resend_at = None
        return True

    def _receive_control(self, socket: zmq.Socket) -> None:
        """Handle what the collector sent: acks, and requests for the ``on_control`` handler (bounded per wake)."""
        for _ in range(CONTROL_PER_WAKE):
            if not socket.poll(0, zmq.POLLIN):
                return
            try:
                frames = socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            self._control_received += 1
            try:
                message = control.decode(frames)
            except control.ControlError as exc:
                self._control_refused += 1
                log.warning("ringscope: refused a control message from the collector (%s)", exc)
                continue
            if message.command == control.ACK:
                self._acknowledged(message.seq or 0)
            elif message.command != control.REPLY and self.on_control is not None:
                try:
                    self.on_control(message)
                except Exception:
                    self._control_refused += 1
                    log.exception("ringscope: handling a %r request failed", message.command)
            else:
                self._control_refused += 1

    def _acknowledged(self, seq: int) -> None:
        """The collector committed every message up to ``seq``: forget them."""
        if seq > self._acked_seq:
            self._acked_seq = seq
        expired = self._expired
        while expired and expired[0][0] <= seq:  # forgotten, but the collector has them after all
            self._expired_records -= expired.popleft()[1]
        unacked = self._unacked
        while unacked and unacked[0][0] <= seq:
            self._unacked_bytes -= len(unacked.popleft()[1])
            if self._resend_at is not None:
                self._resend_at = max(0, self._resend_at - 1)

    def _forget_unacked(self, now: float) -> None:
        """Keep what waits for an ack within its bounds (a collector that never acknowledges costs no more)."""
        unacked = self._unacked
        oldest = now - UNACKED_MAX_AGE_S
        while unacked and (self._unacked_bytes > UNACKED_MAX_BYTES or unacked[0][2] < oldest):
            seq, payload, _, records = unacked.popleft()
            self._unacked_bytes -= len(payload)
            self._unacked_expired += 1
            self._expired_records += records
            if len(self._expired) < _EXPIRED_KEPT:
                self._expired.append((seq, records))
            if self._resend_at is not None:
                self._resend_at = max(0, self._resend_at - 1)

    def _count_disconnects(self, monitor: zmq.Socket) -> None:
        while monitor.poll(0):  # a poll costs far less than the zmq.Again a non-blocking receive raises
            try:
                event = zmq_monitor.recv_monitor_message(monitor, zmq.NOBLOCK)
            except zmq.Again:
                return
            if event.get("event") == zmq.EVENT_DISCONNECTED:
                self._disconnects += 1
                if self._unacked:  # what the lost collector may not have committed goes again, first
                    self._resend_at = 0

    def _health(self) -> Health:
        """The ``Health`` record: the wire's fields of ``stats``."""
        stats = self.stats
        return Health(**{field.name: getattr(stats, field.name) for field in fields(Health)})


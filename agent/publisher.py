"""The agent's background sender: a bounded queue the training thread puts into, and one thread that sends.

What it owns: one ZeroMQ PUSH socket (connected, never bound, so many agents can reach one collector) and its
monitor, one daemon thread, a bounded ``deque``, one pending ``Hello`` and one pending ``Health`` (a newer one
replaces an unsent older one, so they never grow the queue), sequence numbers and drop counters.

What it must never do: block, raise into, or do I/O on the caller's thread. ``put`` is an O(1) append or a counted
drop. Sends are ``NOBLOCK``; while the socket's high-water mark is reached (collector slow or absent) records wait
in the bounded queue and what does not fit is dropped and counted; the counts travel in the next ``Health`` record
so the app can show them. A batch whose message would exceed ``wire.MAX_MESSAGE_BYTES`` is split, never sent to be
rejected. Connections that drop are counted (``Health.disconnects``): what was in flight then is lost without
acknowledgement, and the collector sees it in the sequence numbers.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import zmq
from zmq.utils import monitor as zmq_monitor

from ringscope.agent import wire
from ringscope.agent.keys import AgentKeys
from ringscope.agent.schema import Health, Hello, Record, shifted

log = logging.getLogger(__name__)

DEFAULT_ENDPOINT: Final[str] = "tcp://127.0.0.1:5757"
_TEST_CLOCK_SKEW_S: Final[float] = float(os.environ.get("RINGSCOPE_TEST_CLOCK_SKEW_S") or 0.0)
"""Test-only: every wall time this process sends is moved by this many seconds, as if its host's clock were off
(a library that fakes the clock breaks Python's sleeps). Unset in real use: one falsy check per message."""
CLOSE_FLUSH_S: Final[float] = 0.5
"""How long ``close`` waits for a collector to connect and take the last records before counting them dropped."""


@dataclass(frozen=True, slots=True)
class PublisherStats:
    """Cumulative counters of one publisher."""

    queued: int
    capacity: int
    dropped_records: int
    sent_records: int
    sent_batches: int
    failed_batches: int
    last_seq: int
    disconnects: int = 0


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
        send_hwm: messages ZeroMQ may buffer per connection before sends fail (and are counted as drops).
        keys: CURVE keys of a collector that requires authentication (``ringscope.agent.keys``); None: plaintext.
    """

    def __init__(
        self,
        endpoint: str,
        agent_id: str,
        *,
        hello: Callable[[], Hello] | None = None,
        queue_capacity: int = 65_536,
        batch_max: int = 512,
        flush_interval_s: float = 0.05,
        send_hwm: int = 200,
        hello_interval_s: float = 5.0,
        health_interval_s: float = 1.0,
        keys: AgentKeys | None = None,
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
        self._dropped = 0  # written by producers (queue full) and the sender (failed sends)
        self._sent_records = 0
        self._sent_batches = 0
        self._failed_batches = 0
        self._seq = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._owner_pid = os.getpid()
        self._closed = False

    # ---- Public API ----------------------------------------------------------------------------------------------

    def put(self, record: Record) -> bool:
        """Queue a record for sending. Never blocks; returns False (and counts a drop) when the queue is full."""
        queue = self._queue
        if len(queue) >= self._capacity:
            self._dropped += 1
            return False
        queue.append(record)
        return True

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

    def close(self, timeout_s: float = 2.0) -> None:
        """Flush what is queued and stop, within ``timeout_s``. Safe to call twice and from ``atexit``."""
        if self._closed or os.getpid() != self._owner_pid:
            return  # a forked child (e.g. a data-loader worker) must not touch the parent's socket
        self._closed = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                log.warning("ringscope: sender did not finish within %.1f s; %d records left", timeout_s,
                            len(self._queue))

    @property
    def stats(self) -> PublisherStats:
        """A snapshot of the counters (cheap; safe from any thread)."""
        return PublisherStats(
            queued=len(self._queue),
            capacity=self._capacity,
            dropped_records=self._dropped,
            sent_records=self._sent_records,
            sent_batches=self._sent_batches,
            failed_batches=self._failed_batches,
            last_seq=self._seq - 1,
            disconnects=self._disconnects,
        )

    # ---- Sender thread -------------------------------------------------------------------------------------------

    def _run(self) -> None:
        context = zmq.Context()
        socket = context.socket(zmq.PUSH)
        socket.setsockopt(zmq.SNDHWM, self._send_hwm)
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
            monitor = socket.get_monitor_socket(zmq.EVENT_DISCONNECTED)
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
                if stopping or now >= next_health:
                    if monitor is not None:  # read with the Health that reports them, not on every wake-up
                        self._count_disconnects(monitor)
                    self._pending_health = self._health()
                    next_health = now + self._health_interval_s
                self._produce()
                self._drain(socket)
                if stopping:
                    self._flush_before_close(socket)
                    break
        except Exception:  # the sender must never take the training down; log and go quiet
            log.exception("ringscope: telemetry sender failed; telemetry is disabled for this process")
        finally:
            # Give ZeroMQ a bounded moment to deliver the last messages, but only when a collector is there to take
            # them: lingering towards nobody would keep this thread inside libzmq while the interpreter exits, and a
            # daemon thread killed inside C++ code aborts the whole process ("terminate called without an active
            # exception") — the training's exit code must never depend on telemetry.
            connected = bool(socket.poll(0, zmq.POLLOUT))
            socket.setsockopt(zmq.LINGER, 1000 if connected else 0)
            if monitor is not None:
                socket.disable_monitor()
                monitor.close(0)
            socket.close()
            context.term()

    def _flush_before_close(self, socket: zmq.Socket) -> None:
        """At close, give a collector that is (re)connecting a bounded moment to take what is still queued."""
        deadline = time.monotonic() + CLOSE_FLUSH_S
        while self._has_pending() and time.monotonic() < deadline:
            if socket.poll(20, zmq.POLLOUT):
                self._drain(socket)
        # nobody took them: counted, never silently lost
        self._dropped += len(self._queue) + (self._pending_hello is not None) + (self._pending_health is not None)
        self._queue.clear()
        self._pending_hello = self._pending_health = None

    def _has_pending(self) -> bool:
        return bool(self._queue) or self._pending_hello is not None or self._pending_health is not None

    def _drain(self, socket: zmq.Socket) -> None:
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
            self._send(socket, batch)

    def _send(self, socket: zmq.Socket, batch: list[Record]) -> None:
        """Send one batch as one message, or as several when it would exceed the collector's size limit."""
        sent_s = time.time()
        if _TEST_CLOCK_SKEW_S:  # a host whose clock is off, for the clock-alignment tests (off in real use)
            batch, sent_s = [shifted(record, _TEST_CLOCK_SKEW_S) for record in batch], sent_s + _TEST_CLOCK_SKEW_S
        payload = wire.encode(self.agent_id, self._seq, sent_s, batch)
        if len(payload) > wire.MAX_MESSAGE_BYTES:
            if len(batch) > 1:
                half = len(batch) // 2
                self._send(socket, batch[:half])
                self._send(socket, batch[half:])
                return
            self._dropped += 1
            if not self._warned_too_large:
                self._warned_too_large = True
                log.warning("ringscope: a %s record of %d bytes exceeds the message limit (%d bytes) and was "
                            "dropped; shorten its text fields", batch[0].KIND, len(payload), wire.MAX_MESSAGE_BYTES)
            return
        self._seq += 1  # consumed even when the send fails, so the receiver sees the gap
        try:
            socket.send(payload, zmq.NOBLOCK, copy=False)
        except zmq.Again:
            self._failed_batches += 1
            self._dropped += len(batch)
            return
        self._sent_batches += 1
        self._sent_records += len(batch)

    def _count_disconnects(self, monitor: zmq.Socket) -> None:
        while monitor.poll(0):  # a poll costs far less than the zmq.Again a non-blocking receive raises
            try:
                event = zmq_monitor.recv_monitor_message(monitor, zmq.NOBLOCK)
            except zmq.Again:
                return
            if event.get("event") == zmq.EVENT_DISCONNECTED:
                self._disconnects += 1

    def _health(self) -> Health:
        return Health(
            ts_s=time.time(),
            queue_len=len(self._queue),
            queue_capacity=self._capacity,
            dropped_records=self._dropped,
            sent_records=self._sent_records,
            sent_batches=self._sent_batches,
            failed_batches=self._failed_batches,
            last_seq=self._seq - 1,
            disconnects=self._disconnects,
        )


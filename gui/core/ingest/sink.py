"""The contract between the collector and whatever consumes what it receives (live store, recorder).

The collector thread calls every registered ``IngestSink``; sinks must be fast and thread-safe (they run on the
collector's thread, never the Qt thread) and must never raise (an exception in one sink is logged by the
collector and does not stop the others).

Optional: a durable sink (the recorder) defines ``committed_seqs() -> Mapping[str, int]``, per agent the highest
sequence number it has committed; the collector acknowledges to agents only what every durable sink committed.

Optional hook: a sink may also define ``on_joined_late(gap: Gap)``; the collector calls it (and only it) when an
agent's first message to this collector has ``seq > 0`` (``Gap.kind == JOINED_LATE``): messages this collector never
saw, sent before it listened or to an earlier collector — not a loss inside the session, so ``on_gap`` is not called.

Optional, for restart supervisors (``ringscope run --restart``): ``on_attempt(run_id, note: AttemptNote)`` records
what a supervisor says about an attempt of a run, and ``run_status(run_id) -> dict | None`` says how the sink judges
the run now (the live runs: state, hang verdict, lost ranks); the collector answers a ``status`` request with the
first sink's answer that is not None.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Protocol

from ringscope.agent.wire import Batch

LOST: Final[str] = "lost"
"""``Gap.kind`` of messages lost during the session (sequence numbers skipped)."""
JOINED_LATE: Final[str] = "joined_late"
"""``Gap.kind`` of messages an agent sent before this collector first heard from it (``expected_seq`` is 0)."""


@dataclass(frozen=True, slots=True)
class Gap:
    """Messages from one agent this collector never received: sequence numbers ``expected_seq .. got_seq - 1``."""

    agent_id: str
    expected_seq: int
    got_seq: int
    ts_s: float
    kind: str = LOST  # LOST or JOINED_LATE

    @property
    def missing(self) -> int:
        """How many messages are missing."""
        return self.got_seq - self.expected_seq


@dataclass(frozen=True, slots=True)
class Rejection:
    """A message that was not accepted: why (stable short code), in words, and when."""

    # ringscope.agent.wire.REASONS, or the collector's: unknown_kind, too_many_*, handshake, unauthenticated
    reason: str
    detail: str
    ts_s: float
    size_bytes: int


@dataclass(slots=True)
class IngestCounters:
    """Cumulative counters of one collector (read by the status bar and ``ringscope info``)."""

    messages: int = 0
    records: int = 0
    bytes: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    gaps: int = 0  # gap events
    missing_messages: int = 0  # messages lost in those gaps
    agents: int = 0
    joined_late: int = 0  # agents whose first message here had seq > 0
    missing_before_join: int = 0  # messages those agents sent before this collector heard from them
    duplicates: int = 0  # messages sent again after a reconnect that this collector already had (dropped)
    requests: int = 0  # tool requests forwarded to agents (stacks, settings)

    @property
    def rejected_total(self) -> int:
        """All rejected messages, whatever the reason."""
        return sum(self.rejected.values())


class IngestSink(Protocol):
    """Receives what the collector accepted, on the collector's thread."""

    def on_batch(self, batch: Batch, recv_s: float) -> None:
        """A validated message arrived (``recv_s`` = ``time.time()`` at receipt)."""

    def on_gap(self, gap: Gap) -> None:
        """Messages from an agent were lost (sequence numbers skipped)."""

    def on_rejection(self, rejection: Rejection) -> None:
        """A message was rejected; ``rejection.detail`` says why in words a user can act on."""

"""What the collector lets in: the session's caps (agents, ranks, run ids) and each agent's sequence numbers.

What it owns: the agents ever heard from with the sequence number expected next from each (a collector never forgets
an agent, so a returning one is not mistaken for a new one), the ranks and run ids seen, and the rules: a message
that would exceed a cap is refused before anything is remembered; a message below the expected sequence number is a
duplicate (sent again after a reconnect); one above it leaves a gap, and an agent's first message with a sequence
number above 0 joined late.

Locking: none; the collector's receive thread is its only user (``continue_from`` comes before ``start``).

What it must never do: import Qt, or change state for a message it refuses.
"""

from __future__ import annotations

from collections.abc import Mapping

from ringscope.agent import wire
from ringscope.agent.schema import Hello
from ringscope.gui.core.ingest.sink import JOINED_LATE, Gap


class Admission:
    """The session's caps and sequence tracking (see the module docstring)."""

    def __init__(self, *, max_agents: int, max_ranks: int, max_run_ids: int) -> None:
        self._next_seq: dict[str, int] = {}  # per agent ever heard from: the sequence number expected next
        self._ranks: set[int] = set()
        self._run_ids: set[str] = set()
        self._max_agents, self._max_ranks, self._max_run_ids = max_agents, max_ranks, max_run_ids

    @property
    def agents(self) -> int:
        """Agents heard from in this session."""
        return len(self._next_seq)

    def continue_from(self, committed: Mapping[str, int]) -> None:
        """Per agent, the highest sequence number a recording already holds: the next one is expected."""
        for agent_id, seq in committed.items():
            self._next_seq[agent_id] = max(self._next_seq.get(agent_id, 0), int(seq) + 1)

    def admit(self, batch: wire.Batch) -> tuple[str, str] | None:
        """Apply the session's caps; (reason, detail) when the message would exceed one, else remember what is new.

        Checked before anything is remembered, so a refused message changes no state (but its sequence number: a
        refused message is counted as rejected, not as a gap at the agent's next one).
        """
        agent_id = batch.agent_id
        if agent_id not in self._next_seq and len(self._next_seq) >= self._max_agents:
            return "too_many_agents", (
                f"agent {agent_id[:80]!r} would be agent {len(self._next_seq) + 1} of this session, which accepts "
                f"at most {self._max_agents}; record further trainings into a new session file")
        known_ranks = self._ranks
        new_ranks: set[int] = set()
        new_runs: set[str] = set()
        for record in batch.records:
            rank = getattr(record, "rank", None)
            if rank is not None and rank not in known_ranks:
                new_ranks.add(rank)
            if isinstance(record, Hello):
                new_ranks.update(r for r in record.ranks if r not in known_ranks)
                if record.run_id not in self._run_ids:
                    new_runs.add(record.run_id)
        refusal = None
        if len(known_ranks) + len(new_ranks) > self._max_ranks:
            refusal = "too_many_ranks", (
                f"agent {agent_id[:80]!r} names {len(new_ranks)} new rank(s); this session already has "
                f"{len(known_ranks)} and accepts at most {self._max_ranks}; record further trainings into a new "
                "session file")
        elif len(self._run_ids) + len(new_runs) > self._max_run_ids:
            refusal = "too_many_runs", (
                f"agent {agent_id[:80]!r} names run id(s) {sorted(new_runs)[:3]!r:.120}; this session already has "
                f"{len(self._run_ids)} and accepts at most {self._max_run_ids}; record further trainings into a "
                "new session file")
        if refusal is not None:
            if agent_id in self._next_seq:
                self._next_seq[agent_id] = batch.seq + 1
            return refusal
        known_ranks.update(new_ranks)
        self._run_ids.update(new_runs)
        return None

    def is_duplicate(self, batch: wire.Batch) -> bool:
        """Whether the message is already here (sent again after a reconnect): below the expected number."""
        expected = self._next_seq.get(batch.agent_id)
        return expected is not None and batch.seq < expected

    def track(self, agent_id: str, seq: int, recv_s: float) -> Gap | None:
        """Update the agent's expected sequence number; a Gap when messages were skipped.

        An agent's first message with ``seq > 0`` is a JOINED_LATE gap: what it sent before this collector heard
        from it (to an earlier collector that crashed or stopped, or lost) is accounted for, never invisible.
        """
        expected = self._next_seq.get(agent_id)
        self._next_seq[agent_id] = seq + 1
        if expected is None:
            return Gap(agent_id, 0, seq, recv_s, JOINED_LATE) if seq > 0 else None
        if seq == expected:
            return None
        return Gap(agent_id, expected, seq, recv_s)  # (seq < expected is a duplicate, dropped before this)

"""The run watcher: decides the runs' states on a clock and writes what the agents cannot say into the recording.

What it owns: one ``tick`` (the window's timer and ``ringscope record``'s loop call it a few times a second) that
refreshes ``LiveRuns`` and, when a run becomes hung, writes a ``hang`` event with the verdict and the stuck ranks'
stacks into the session file, attributed to the agent of the first stuck rank so the event belongs to its run.

What it must never do: import Qt, block (the recorder's sink methods only queue), or write the same hang twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from ringscope.agent.schema import MAX_TEXT_CHARS, Event, EventKind
from ringscope.gui.core.analysis.hang import HangVerdict
from ringscope.gui.core.analysis.runs import HUNG
from ringscope.gui.core.live.runs import LiveRuns


@dataclass(frozen=True, slots=True)
class HangNotice:
    """A run that just became hung, for whoever shows it (window status bar, ``record``'s output)."""

    run_id: str
    verdict: HangVerdict
    text: str


class RunWatcher:
    """Refreshes run states and records hangs.

    Args:
        runs: the live runs.
        record: where to write events about an agent's run (``Recorder.note_event``), or None.
    """

    def __init__(self, runs: LiveRuns, record: Callable[[str, Event], None] | None = None) -> None:
        self._runs = runs
        self._record = record
        self._reported: dict[str, float] = {}  # run id -> stalled_since_s of the hang already written
        self.transitions: list[tuple[str, str, str]] = []  # the last tick's (run id, old state, new state)

    def tick(self, now_s: float | None = None) -> list[HangNotice]:
        """Refresh the runs; returns the hangs that started since the last tick (each is written once). The state
        changes of the tick are in ``transitions``."""
        now = time.time() if now_s is None else now_s
        self.transitions = self._runs.refresh(now)
        notices = []
        for run_id in self._runs.run_ids():
            verdict = self._runs.hang(run_id)
            if verdict is None or self._reported.get(run_id) == verdict.stalled_since_s:
                continue
            self._reported[run_id] = verdict.stalled_since_s
            text = hang_text(verdict, now)
            notices.append(HangNotice(run_id, verdict, text))
            if self._record is not None:
                self._write(run_id, verdict, text, now)
        return notices

    def _write(self, run_id: str, verdict: HangVerdict, text: str, now: float) -> None:
        first = verdict.stuck[0] if verdict.stuck else (verdict.waiting[0] if verdict.waiting else None)
        agent = self._runs.agent_of_rank(run_id, first.rank) if first is not None else None
        if agent is None or self._record is None:
            return
        if len(text) > MAX_TEXT_CHARS:
            text = text[: MAX_TEXT_CHARS - 20] + " ...[truncated]"
        self._record(agent, Event(now, EventKind.HANG, first.rank if first else None, first.step if first else None,
                                  now - verdict.stalled_since_s, None, text))


def hang_text(verdict: HangVerdict, now_s: float) -> str:
    """The verdict in words, then each stuck rank's stack (what the event, ``info`` and reports show)."""
    parts = [verdict.summary(now_s), f"device-hours burnt waiting so far: {verdict.device_hours(now_s):.3f}"]
    for rank, stack in sorted(verdict.stacks.items()):
        parts.append(f"\nrank {rank} (training thread), most recent call last:\n{stack}")
    return "\n".join(parts)


__all__ = ["HUNG", "HangNotice", "RunWatcher", "hang_text"]

"""Restart policy: when a run hangs, fails or loses a rank, keep the evidence, stop it all, start it again.

One rule for every launcher (``ringscope run --restart``, the window's *Restart automatically*):

* ``RestartPolicy``: on which faults to restart (``hang``, ``failure``, ``lost``), how many times at most, after what
  delay; ``decide`` says whether an attempt that just ended is started again, and why (or why not) in words.
* ``CollectorLink``: what a supervisor asks the collector the agents report to (the window's ingest process or
  ``ringscope record``) over its reply path: the run's state as the collector judges it (``status``: hung, lost,
  with the latest attempt it concerns), every rank's stacks before the job is stopped (kept in the recording), and
  the supervisor's notes on each attempt (recorded in the session's ``attempts`` table). Every call is bounded in
  time and never raises: a supervisor without a collector still restarts on failures (exit codes), it only cannot
  see hangs and lost ranks.

An attempt is one start of the same command under the same run id. Its processes get ``RINGSCOPE_ATTEMPT=k``
(``ENV_ATTEMPT``), which the agents put into their Hello (``Hello.attempt``), so the recording knows which steps
each attempt made; the training script resumes from its own latest checkpoint, as torchrun's elastic restarts
expect. A clean exit, a stop by the user (Ctrl-C, Stop in the window) or an exhausted budget never restarts.

Never imports Qt or a training framework.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Final

from ringscope.agent.control import AttemptNote
from ringscope.agent.keys import AgentKeys
from ringscope.agent.runtime import ENV_ATTEMPT

log = logging.getLogger(__name__)

HANG: Final = "hang"
FAILURE: Final = "failure"
LOST: Final = "lost"
FAULTS: Final[tuple[str, ...]] = (HANG, FAILURE, LOST)
"""What a policy may restart on: the run hung (no rank completes a step), a process exited with an error, a rank
fell silent without saying goodbye."""
FINISHED: Final = "finished"
STOPPED: Final = "stopped"
END_REASONS: Final[tuple[str, ...]] = (*FAULTS, FINISHED, STOPPED)
"""Why an attempt ended (``AttemptNote.reason``)."""

DEFAULT_MAX_RESTARTS: Final[int] = 3
DEFAULT_DELAY_S: Final[float] = 1.0
MAX_RESTARTS_LIMIT: Final[int] = 1000
STOP_GRACE_S: Final[float] = 3.0
"""How long a faulted attempt gets to exit after SIGINT/SIGTERM before it is killed: a hung rank in a collective
never returns to Python, so waiting longer only burns the GPUs."""
STATUS_INTERVAL_S: Final[float] = 1.0
"""How often a supervisor asks the collector how its run stands (hangs are judged within 10 s; this adds ≤ 1 s)."""

__all__ = ["ENV_ATTEMPT", "FAULTS", "CollectorLink", "Decision", "RestartPolicy", "parse_faults"]


def parse_faults(text: str) -> frozenset[str]:
    """``"hang,failure,lost"`` -> the faults; raises ``ValueError`` naming what is wrong and what is accepted."""
    words = [word.strip().lower() for word in text.split(",") if word.strip()]
    if not words:
        raise ValueError(f"expected a comma-separated list of {', '.join(FAULTS)}, got {text!r}")
    unknown = [word for word in words if word not in FAULTS]
    if unknown:
        raise ValueError(f"unknown fault {unknown[0]!r}; restart on any of {', '.join(FAULTS)} "
                         f"(e.g. --restart hang,failure,lost)")
    return frozenset(words)


@dataclass(frozen=True, slots=True)
class Decision:
    """Whether the attempt that just ended is followed by another, and the sentence that says why."""

    restart: bool
    text: str


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    """Restart on ``on`` faults, at most ``max_restarts`` times, ``delay_s`` after the previous attempt ended."""

    on: frozenset[str] = frozenset(FAULTS)
    max_restarts: int = DEFAULT_MAX_RESTARTS
    delay_s: float = DEFAULT_DELAY_S

    def __post_init__(self) -> None:
        unknown = sorted(set(self.on) - set(FAULTS))
        if unknown or not self.on:
            raise ValueError(f"restart on any of {', '.join(FAULTS)}; got {sorted(self.on)}")
        if not 0 <= self.max_restarts <= MAX_RESTARTS_LIMIT:
            raise ValueError(f"max restarts must be 0..{MAX_RESTARTS_LIMIT}, got {self.max_restarts}")
        if not 0 <= self.delay_s <= 3600:
            raise ValueError(f"restart delay must be 0..3600 s, got {self.delay_s}")

    def describe(self) -> str:
        """``"hang, failure, lost; at most 3 restarts, 1 s apart"``."""
        return (f"{', '.join(f for f in FAULTS if f in self.on)}; at most {self.max_restarts} restart(s), "
                f"{self.delay_s:g} s apart")

    def decide(self, attempt: int, reason: str) -> Decision:
        """After attempt number ``attempt`` (1 = the first start) ended for ``reason`` (``END_REASONS``)."""
        if reason == FINISHED:
            return Decision(False, f"attempt {attempt} finished: no restart")
        if reason == STOPPED:
            return Decision(False, f"attempt {attempt} was stopped by the user: no restart")
        if reason not in self.on:
            return Decision(False, f"attempt {attempt} ended by {reason}, which this policy does not restart on "
                                   f"({', '.join(sorted(self.on))})")
        if attempt > self.max_restarts:
            return Decision(False, f"attempt {attempt} ended by {reason}; the run was restarted "
                                   f"{self.max_restarts} time(s) already (max restarts {self.max_restarts}): "
                                   "giving up")
        return Decision(True, f"attempt {attempt} ended by {reason}: starting attempt {attempt + 1} "
                              f"(restart {attempt} of {self.max_restarts}) in {self.delay_s:g} s")


class CollectorLink:
    """A supervisor's questions to the collector at ``endpoint``: bounded in time, never raising.

    Call from a thread that may wait a few seconds (never the GUI thread): each call opens one short connection.
    """

    def __init__(self, endpoint: str, keys: AgentKeys | None = None, timeout_s: float = 3.0) -> None:
        self.endpoint = endpoint
        self.keys = keys
        self.timeout_s = timeout_s
        self.last_error = ""

    def status(self, run_id: str) -> dict[str, Any] | None:
        """The run as the collector judges it (``LiveRuns.run_status``), ``{"state": None}`` before any agent of it
        said hello, None when the collector cannot be asked (``last_error`` says why)."""
        return self._ask("status", run_id, timeout_s=self.timeout_s)

    def note(self, run_id: str, note: AttemptNote) -> bool:
        """Record ``note`` in the collector's session; False when it could not be delivered."""
        return self._ask("attempt", run_id, attempt=note, timeout_s=self.timeout_s) is not None

    def stacks(self, run_id: str, wait_s: float = 2.0) -> dict[str, Any] | None:
        """Every live rank's stacks (stored in the recording by the collector as ``stacks`` events), or None."""
        return self._ask("stacks", run_id, wait_s=wait_s, timeout_s=wait_s + 3.0)

    def _ask(self, command: str, run_id: str, **kwargs: Any) -> dict[str, Any] | None:
        from ringscope.gui.core.ingest.ask import AskError, ask

        started = time.monotonic()
        try:
            result = ask(self.endpoint, command, run_id=run_id, keys=self.keys, **kwargs)
        except AskError as exc:
            self.last_error = str(exc)
            log.debug("%s for run %s: %s (%.2f s)", command, run_id, exc, time.monotonic() - started)
            return None
        self.last_error = ""
        return result

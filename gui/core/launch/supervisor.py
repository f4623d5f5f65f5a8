"""``RestartSupervisor``: runs the attempts of one run under a ``RestartPolicy``, driven by its owner's clock.

Used by ``ringscope run --restart`` (a loop that calls ``tick`` every 0.1 s) and by the window's launcher (its
process-panel timer). One attempt goes through these phases::

    running ──(processes ended: exit 0 / error / stopped by the user)───────────────────────────┐
       └──(the collector says: hung, or a rank lost)──> evidence ──> stopping ──(all ended)──────┤
                                                                                                 v
                                              decide (RestartPolicy) ── restart: waiting (delay) ─> running
                                                                     └─ no restart: done

* **evidence**: every live rank's stacks are asked for (the collector stores the answers in the recording as
  ``stacks`` events), on a thread of its own, for at most ``EVIDENCE_S``; the hang verdict and its stuck ranks'
  stacks are already recorded by the collector's run watcher.
* **stopping**: SIGTERM (SIGINT for torchrun, which forwards it) to every process group, SIGKILL to the groups and
  every descendant seen once ``STOP_GRACE_S`` has passed (``ManagedProcess``), on every host for a run over SSH.
* Notes on each attempt (started, ended with its reason and exit code) go to the collector (``CollectorLink.note``)
  on a worker thread, so a missing collector never delays a restart.

The collector's status is polled on a thread of its own every ``STATUS_INTERVAL_S``; only a status about this
supervisor's current attempt (``status["attempt"]``) can end it, so the verdict on an attempt that was already
stopped never stops the next one. Never imports Qt; never blocks its owner longer than a signal send.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from ringscope.agent.control import AttemptNote
from ringscope.gui.core.launch.process import ManagedProcess, shell_exit_code
from ringscope.gui.core.launch.restart import (
    FAILURE,
    FINISHED,
    HANG,
    LOST,
    STATUS_INTERVAL_S,
    STOP_GRACE_S,
    STOPPED,
    CollectorLink,
    RestartPolicy,
)

EVIDENCE_S: Final[float] = 3.0
"""Longest wait for the ranks' stacks before a faulted attempt is stopped anyway."""

Phase = Literal["running", "evidence", "stopping", "waiting", "done"]
StartAttempt = Callable[[int], Sequence[ManagedProcess]]
"""Starts attempt number k (1, 2, ...) and returns its processes (each already in its own process group)."""
StopAttempt = Callable[[Sequence[ManagedProcess], float], None]
"""Asks an attempt's processes to stop (grace period in seconds); the default sends SIGTERM to each."""


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """One attempt as the supervisor saw it (Unix seconds)."""

    attempt: int
    started_s: float
    ended_s: float | None = None
    reason: str = ""
    exit_code: int | None = None
    detail: str = ""


class RestartSupervisor:
    """Runs attempts of ``run_id`` until one finishes, the user stops it, or the policy gives up.

    Args:
        policy: when to restart.
        run_id: the run every attempt reports as.
        start: starts an attempt (``StartAttempt``).
        link: the collector to ask (status, stacks) and tell (attempt notes); None: restart on exit codes only.
        stop: how to stop an attempt's processes (``StopAttempt``); default SIGTERM to each process group.
        say: where the supervisor's sentences go (``ringscope run``: stderr; the window: its process panel).
    """

    def __init__(self, policy: RestartPolicy, run_id: str, start: StartAttempt, *, link: CollectorLink | None = None,
                 stop: StopAttempt | None = None, say: Callable[[str], None] = lambda text: None) -> None:
        self.policy = policy
        self.run_id = run_id
        self._start = start
        self._stop = stop or _terminate
        self._link = link
        self._say = say
        self.attempt = 0
        self.phase: Phase = "waiting"
        self.processes: list[ManagedProcess] = []
        self.attempts: list[AttemptRecord] = []
        self.exit_code: int | None = None
        self.verdict_s: float | None = None  # when the latest fault was seen (hang/lost), Unix seconds
        self._next_start = time.monotonic()
        self._phase_deadline = 0.0
        self._fault: tuple[str, str] | None = None
        self._user_stop = False
        self._status: dict[str, Any] | None = None
        self._status_lock = threading.Lock()
        self._closed = threading.Event()
        self._evidence: threading.Thread | None = None
        self._notes: queue.SimpleQueue[AttemptNote | None] = queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._send_notes, name="ringscope-attempt-notes", daemon=True)]
        if link is not None:
            self._threads.append(threading.Thread(target=self._poll_status, name="ringscope-run-status", daemon=True))
        for thread in self._threads:
            thread.start()

    # ---- Public API ------------------------------------------------------------------------------------------

    @property
    def stop_requested(self) -> bool:
        """True once the user asked the run to stop."""
        return self._user_stop

    @property
    def done(self) -> bool:
        """True once no further attempt will start and the last one ended."""
        return self.phase == "done"

    def request_stop(self) -> None:
        """The user stops the run (Ctrl-C, Stop): the current attempt is stopped and nothing restarts."""
        self._user_stop = True
        if self.phase in ("running", "evidence"):
            self._stop(self.processes, STOP_GRACE_S * 3)
            self.phase = "stopping"
        elif self.phase == "waiting":
            self._finish_run(None)

    def tick(self) -> None:
        """Advance: processes' states, the collector's verdict, the phase. Call every ~0.1 s from one thread."""
        for process in self.processes:
            process.update()
        now = time.monotonic()
        if self.phase == "waiting" and now >= self._next_start:
            self._begin()
        elif self.phase == "running":
            if not any(p.alive for p in self.processes):
                self._ended(self._exit_reason())
            elif (fault := self._fault_seen()) is not None:
                self._fault = fault
                self.verdict_s = time.time()
                self._say(f"attempt {self.attempt}: {fault[1]}; keeping the evidence (every rank's stacks), then "
                          "stopping the job")
                self._evidence = threading.Thread(target=self._keep_evidence, name="ringscope-evidence", daemon=True)
                self._evidence.start()
                self._phase_deadline = now + EVIDENCE_S + 1.0
                self.phase = "evidence"
        elif self.phase == "evidence":
            if not (self._evidence and self._evidence.is_alive()) or now >= self._phase_deadline:
                self._stop(self.processes, STOP_GRACE_S)
                self.phase = "stopping"
        elif self.phase == "stopping" and not any(p.alive for p in self.processes):
            reason = STOPPED if self._user_stop else (self._fault[0] if self._fault else self._exit_reason())
            self._ended(reason)

    def close(self, timeout_s: float = 3.0) -> None:
        """Stop the helper threads (after the last notes went out, for at most ``timeout_s``)."""
        self._closed.set()
        self._notes.put(None)
        for thread in self._threads:
            thread.join(timeout_s)

    # ---- Phases ----------------------------------------------------------------------------------------------

    def _begin(self) -> None:
        self.attempt += 1
        self._fault = None
        with self._status_lock:
            self._status = None
        started = time.time()
        self.processes = list(self._start(self.attempt))
        self.attempts.append(AttemptRecord(self.attempt, started))
        self._notes.put(AttemptNote(self.attempt, "started", started))
        self.phase = "running"

    def _ended(self, reason: str) -> None:
        code = self._exit_code()
        detail = self._fault[1] if self._fault else ""
        ended = time.time()
        current = self.attempts[-1]
        self.attempts[-1] = AttemptRecord(current.attempt, current.started_s, ended, reason, code, detail)
        self._notes.put(AttemptNote(self.attempt, "ended", ended, reason, code, detail))
        decision = self.policy.decide(self.attempt, STOPPED if self._user_stop else reason)
        self._say(decision.text)
        if decision.restart:
            self.phase = "waiting"
            self._next_start = time.monotonic() + self.policy.delay_s
        else:
            self._finish_run(code)

    def _finish_run(self, code: int | None) -> None:
        self.exit_code = code if code is not None else self._exit_code()
        self.phase = "done"

    # ---- Helpers ---------------------------------------------------------------------------------------------

    def _exit_reason(self) -> str:
        if self._user_stop:
            return STOPPED
        return FINISHED if all(p.state == "exited" for p in self.processes) else FAILURE

    def _exit_code(self) -> int | None:
        """The attempt's exit code: the first non-zero one of its processes (128 + N for a signal N), else 0."""
        codes = [p.returncode for p in self.processes if p.returncode is not None]
        bad = [shell_exit_code(c) for c in codes if c != 0]
        if bad:
            return bad[0]
        return 0 if codes else None

    def _fault_seen(self) -> tuple[str, str] | None:
        with self._status_lock:
            status = self._status
        if not status or status.get("attempt") != self.attempt:
            return None
        state = status.get("state")
        if state == "hung" and HANG in self.policy.on:
            return HANG, f"the run hung ({status.get('hang') or 'no rank completes a step'})"
        if state == "lost" and LOST in self.policy.on:
            ranks = status.get("lost_ranks") or []
            return LOST, f"rank(s) {', '.join(map(str, ranks)) or '?'} fell silent without saying goodbye (lost)"
        return None

    def _keep_evidence(self) -> None:
        if self._link is not None:
            answer = self._link.stacks(self.run_id)
            if answer is None:
                self._say(f"could not get the ranks' stacks: {self._link.last_error}")

    def _poll_status(self) -> None:
        assert self._link is not None
        warned = False
        while not self._closed.wait(STATUS_INTERVAL_S):
            if self.phase != "running":
                continue
            status = self._link.status(self.run_id)
            if status is None and not warned:
                warned = True
                self._say(f"cannot ask the collector how the run stands ({self._link.last_error}); restarts on "
                          "failure still work, hangs and lost ranks are not seen")
            with self._status_lock:
                self._status = status

    def _send_notes(self) -> None:
        warned = False
        while (note := self._notes.get()) is not None:
            if self._link is not None and not self._link.note(self.run_id, note) and not warned:
                warned = True
                self._say(f"attempt notes are not recorded: {self._link.last_error}")


def _terminate(processes: Sequence[ManagedProcess], grace_s: float) -> None:
    for process in processes:
        process.request_stop(grace_s)

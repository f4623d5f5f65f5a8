"""Running a sweep: each configuration in turn, all reporting to one collector, each under its own run id.

Owns the order (one configuration at a time, so runs never compete for the cores they are measured on), the wait
for each run (bounded by a timeout; its processes stopped and, if need be, killed), the wait for its last telemetry
to arrive, and reading each run's ``RINGSCOPE_RESULT`` line (a reference trainer's run without one failed; a user
script prints none, so its run succeeded when its processes exited cleanly). The processes are the launcher's
(``ManagedProcess``: own process group, bounded output buffer). The collector and the session file belong to the
caller. It never imports Qt or a framework, and never leaves a process behind: ``run`` stops what it started, also
when interrupted.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from ringscope.gui.core.analysis.runs import FAILED, FINISHED, STOPPED
from ringscope.gui.core.launch.process import ManagedProcess
from ringscope.gui.core.sweep.plan import Configuration, SweepPlan, process_plans

RESULT_PREFIX: Final[str] = "RINGSCOPE_RESULT "
"""Start of the line a reference trainer prints at its end (``ringscope.trainers.common.RESULT_PREFIX``; a test keeps
them equal: ``ringscope.gui.core`` does not import the trainers)."""
POLL_S: Final[float] = 0.1
STOP_GRACE_S: Final[float] = 5.0
SETTLE_QUIET_S: Final[float] = 0.5  # telemetry is complete once nothing arrived for this long after the run ended
SETTLE_MAX_S: Final[float] = 5.0
OUTPUT_LINES: Final[int] = 400


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """How one configuration's run went.

    ``results`` holds the ``RINGSCOPE_RESULT`` objects its processes printed (one for torchrun or a
    MirroredStrategy process, one per worker for MultiWorker); ``message`` says what went wrong ("" when ``ok``).
    """

    configuration: Configuration
    run_id: str
    ok: bool
    exit_codes: tuple[int | None, ...]
    wall_s: float
    results: tuple[dict[str, Any], ...] = ()
    message: str = ""
    ended_s: float = field(default_factory=time.time)
    interrupted: bool = False

    @property
    def state(self) -> str:
        """How the run ended, in the session's words (``ringscope.gui.core.analysis.runs``): finished, stopped or
        failed."""
        return FINISHED if self.ok else STOPPED if self.interrupted else FAILED

    @property
    def exit_code(self) -> int | None:
        """The first non-zero exit code of its processes (0 when all exited cleanly, None when none exited)."""
        codes = [code for code in self.exit_codes if code is not None]
        return next((code for code in codes if code != 0), 0 if codes else None)


class SweepRunner:
    """Runs the configurations of a plan one after the other.

    Args:
        plan: what to run.
        endpoint: the collector the trainers report to.
        records: reads how many records the collector has received (the wait for a run's last telemetry).
        timeout_s: a run still going after this long is stopped and counted as failed.
        on_progress: called with one line per start and end of a run.
        on_outcome: called with each run's outcome as it ends (e.g. to note it in the session file).
    """

    def __init__(self, plan: SweepPlan, endpoint: str, *, records: Callable[[], int], timeout_s: float = 600.0,
                 on_progress: Callable[[str], None] = lambda line: None,
                 on_outcome: Callable[[RunOutcome], None] = lambda outcome: None) -> None:
        self.plan = plan
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self._records = records
        self._on_progress = on_progress
        self._on_outcome = on_outcome
        self._stop = threading.Event()
        self._stamp = time.strftime("%Y%m%d-%H%M%S")

    # ---- Public API ----------------------------------------------------------------------------------------------

    def run(self) -> list[RunOutcome]:
        """Run every configuration in turn; returns their outcomes (fewer after ``stop``)."""
        outcomes = []
        configurations = self.plan.configurations()
        for number, configuration in enumerate(configurations, start=1):
            if self._stop.is_set():
                break
            self._on_progress(f"[{number}/{len(configurations)}] {configuration.label}: starting")
            outcome = self.run_one(configuration)
            outcomes.append(outcome)
            self._on_outcome(outcome)
            self._on_progress(f"[{number}/{len(configurations)}] {configuration.label}: "
                              + (f"done in {outcome.wall_s:.1f} s" if outcome.ok else outcome.message))
        return outcomes

    def stop(self) -> None:
        """Stop the run in progress and skip the rest (safe from a signal handler or another thread)."""
        self._stop.set()

    @property
    def stopped(self) -> bool:
        """True once ``stop`` was called."""
        return self._stop.is_set()

    def run_id(self, configuration: Configuration) -> str:
        """The run id of a configuration: ``sweep-<start time>-<framework>-<ranks>``."""
        return f"sweep-{self._stamp}-{configuration.framework}-{configuration.ranks}"

    def run_one(self, configuration: Configuration) -> RunOutcome:
        """Start one configuration, wait for it (bounded), wait for its telemetry; never leaves a process running."""
        run_id = self.run_id(configuration)
        started = time.monotonic()
        processes = [ManagedProcess(plan, run_id, OUTPUT_LINES)
                     for plan in process_plans(self.plan, configuration, run_id, self.endpoint)]
        timed_out = False
        try:
            while any(process.alive for process in processes):
                if self._stop.is_set() or time.monotonic() - started > self.timeout_s:
                    timed_out = not self._stop.is_set()
                    break
                for process in processes:
                    process.update()
                time.sleep(POLL_S)
        finally:
            _stop_all(processes)
        wall_s = time.monotonic() - started
        self._settle()
        results = tuple(result for process in processes if (result := _result(process.last_lines(OUTPUT_LINES))))
        codes = tuple(process.returncode for process in processes)
        ok = not timed_out and not self._stop.is_set() and all(p.state == "exited" for p in processes)
        stopped = self._stop.is_set()
        needs_result = not self.plan.uses_script
        return RunOutcome(configuration, run_id, ok and (bool(results) or not needs_result), codes, wall_s, results,
                          _failure(processes, timed_out, self.timeout_s, stopped, ok, results, needs_result),
                          interrupted=stopped)

    # ---- Internals -----------------------------------------------------------------------------------------------

    def _settle(self) -> None:
        """Wait until the collector received nothing for ``SETTLE_QUIET_S`` (the run's last records and goodbyes are
        in), at most ``SETTLE_MAX_S``."""
        deadline = time.monotonic() + SETTLE_MAX_S
        last, quiet_since = self._records(), time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(POLL_S)
            now, count = time.monotonic(), self._records()
            if count != last:
                last, quiet_since = count, now
            elif now - quiet_since >= SETTLE_QUIET_S:
                return


def _stop_all(processes: list[ManagedProcess]) -> None:
    """Stop every process still alive (SIGTERM/SIGINT, then SIGKILL after the grace), waiting for them to end."""
    for process in processes:
        if process.alive:
            process.request_stop(STOP_GRACE_S)
    deadline = time.monotonic() + STOP_GRACE_S + 6.0
    while any(process.alive for process in processes) and time.monotonic() < deadline:
        for process in processes:
            process.update()
        time.sleep(POLL_S)
    for process in processes:
        if process.alive:
            process.kill()


def _result(lines: list[str]) -> dict[str, Any] | None:
    """The last ``RINGSCOPE_RESULT`` object in a process's output (torchrun relays rank 0's), or None."""
    for line in reversed(lines):
        index = line.find(RESULT_PREFIX)
        if index >= 0:
            try:
                parsed = json.loads(line[index + len(RESULT_PREFIX):])
            except ValueError:
                return None
            return parsed if isinstance(parsed, dict) else None
    return None


def _failure(processes: list[ManagedProcess], timed_out: bool, timeout_s: float, stopped: bool, exited: bool,
             results: tuple[dict[str, Any], ...], needs_result: bool = True) -> str:
    """What went wrong, in words ("" when nothing did)."""
    if stopped:
        return "stopped before it finished (interrupted)"
    if timed_out:
        steps = "--steps" if needs_result else "the script's steps (--script-args)"
        return f"still running after {timeout_s:g} s: stopped (raise --timeout-per-run, or lower {steps})"
    if not exited:
        failed = next((p for p in processes if p.state != "exited"), processes[0])
        return "failed: " + failed.describe(lines=8).replace("\n", " | ")
    if not results and needs_result:
        return "failed: the trainer ended without its RINGSCOPE_RESULT line"
    return ""

"""``Launcher``: starts validated launches, tracks their processes, stops them without ever hanging.

The launcher is driven by one owner thread (the process panel's timer in the app): ``start``, ``poll``,
``request_stop`` and ``stop`` are called from there. Reader threads only fill output buffers. It never imports Qt.
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass, field, replace
from typing import Final

from ringscope.gui.core.launch.plan import build_commands
from ringscope.gui.core.launch.process import ManagedProcess, StateChange
from ringscope.gui.core.launch.remote import remote_stop_plans
from ringscope.gui.core.launch.spec import LaunchSpec, new_run_id
from ringscope.gui.core.launch.validation import validate

DEFAULT_GRACE_S: Final[float] = 10.0
KILL_WAIT_S: Final[float] = 5.0  # after SIGKILL, how long stop() waits for the kernel to reap
# A remote run's ssh clients are killed this long after the remote stop's own SIGKILL deadline (time for the
# stop's ssh connection and for the clients to pass on the last lines and the exit status).
REMOTE_STOP_MARGIN_S: Final[float] = 4.0


class LaunchError(ValueError):
    """A launch was refused; ``errors`` lists every problem found by ``validate``."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("cannot launch: " + "; ".join(errors))
        self.errors = errors


@dataclass(slots=True)
class Run:
    """One launch: its spec (with run id), its processes, and when it started.

    ``stop_processes`` are the ``ssh HOST`` commands that stopped a multi-node run on its hosts (not part of the
    run's own outcome; a failed one is reported by ``Launcher.poll``).
    """

    run_id: str
    spec: LaunchSpec
    processes: list[ManagedProcess] = field(default_factory=list)
    started_s: float = field(default_factory=time.time)
    stop_processes: list[ManagedProcess] = field(default_factory=list)

    @property
    def alive(self) -> bool:
        """True while any of its processes has not ended."""
        return any(process.alive for process in self.processes)

    @property
    def ok(self) -> bool:
        """True when every process ended by itself with exit code 0."""
        return not self.alive and all(process.state == "exited" for process in self.processes)


class Launcher:
    """Starts trainings that report to ``endpoint`` (the window's collector) and manages their processes."""

    def __init__(self, endpoint: str, buffer_lines: int = 2000, agent_env: dict[str, str] | None = None,
                 remote_endpoint: str | None = None) -> None:
        self.endpoint = endpoint
        # The collector as other hosts reach it (multi-node runs over SSH); None: ``endpoint``, which must then
        # not be a loopback address (validation says so).
        self.remote_endpoint = remote_endpoint
        self.buffer_lines = buffer_lines
        # Added to every launched process after the spec's own environment, e.g. the access token
        # (RINGSCOPE_KEY) of a collector that requires authentication.
        self.agent_env = dict(agent_env or {})
        self._runs: list[Run] = []

    # ---- Public API ------------------------------------------------------------------------------------------

    @property
    def runs(self) -> list[Run]:
        """All launches so far, oldest first."""
        return list(self._runs)

    @property
    def processes(self) -> list[ManagedProcess]:
        """Every process of every run, in start order."""
        return [process for run in self._runs for process in run.processes]

    def run(self, run_id: str) -> Run | None:
        """The run with ``run_id``, or None."""
        return next((run for run in self._runs if run.run_id == run_id), None)

    def validate(self, spec: LaunchSpec) -> list[str]:
        """``validate(spec)`` including this launcher's collector endpoint."""
        return validate(spec, self.endpoint_for(spec))

    def endpoint_for(self, spec: LaunchSpec) -> str:
        """The collector address ``spec``'s processes are given: the remote one for a run on hosts."""
        return (self.remote_endpoint or self.endpoint) if spec.hosts else self.endpoint

    def start(self, spec: LaunchSpec) -> Run:
        """Validate and start ``spec`` (with a fresh run id if it has none). Raises ``LaunchError`` if invalid.

        A process that cannot even be exec'd is reported as ``failed`` (not raised), like one that dies at once.
        """
        errors = self.validate(spec)
        if errors:
            raise LaunchError(errors)
        spec = replace(spec, run_id=spec.run_id or new_run_id())
        assert spec.run_id is not None
        run = Run(spec.run_id, spec)
        self._runs.append(run)
        for plan in build_commands(spec, self.endpoint_for(spec), self.agent_env):
            run.processes.append(ManagedProcess(plan, spec.run_id, self.buffer_lines))
        return run

    def rerun(self, run_id: str) -> Run:
        """Start the same request as ``run_id`` again, under a new run id."""
        previous = self.run(run_id)
        if previous is None:
            raise KeyError(f"no run {run_id!r} to re-run; known runs: {[r.run_id for r in self._runs]}")
        return self.start(previous.spec.with_new_run_id())

    def poll(self) -> list[StateChange]:
        """Advance every process (state, forced kills whose grace has passed); returns what changed."""
        changes = []
        for process in self.processes:
            change = process.update()
            if change is not None:
                changes.append(change)
        for run in self._runs:
            for process in run.stop_processes:
                change = process.update()
                if change is not None and change.new == "failed":
                    changes.append(change)  # the run's processes on that host may still be running
        return changes

    def request_stop(self, run_id: str | None = None, grace_s: float = DEFAULT_GRACE_S) -> None:
        """Non-blocking stop of one run (or all): SIGTERM now, SIGKILL from ``poll`` after ``grace_s``.

        torchrun gets SIGINT, which it forwards to its ranks as a clean shutdown. A run on hosts is stopped on
        each host over a second ssh connection (``remote_stop_plans``: SIGTERM, SIGKILL after ``grace_s``); its ssh
        clients are left to end with the remote processes and are killed only if they outlive that.
        """
        for run in self._selected(run_id):
            if run.spec.hosts:
                if run.alive and not run.stop_processes:
                    self._stop_remote(run, grace_s)
                for process in run.processes:
                    process.request_stop(grace_s + REMOTE_STOP_MARGIN_S, None)
                continue
            for process in run.processes:
                sig = signal.SIGINT if run.spec.kind == "ddp" else signal.SIGTERM
                process.request_stop(grace_s, sig)

    def kill(self, run_id: str | None = None) -> None:
        """SIGKILL one run (or all) now (on its hosts too: a remote stop with no grace period)."""
        for run in self._selected(run_id):
            if run.spec.hosts and run.alive:
                self._stop_remote(run, 0.0)
            for process in run.processes:
                process.kill()

    def stop(self, run_id: str | None = None, grace_s: float = DEFAULT_GRACE_S) -> list[StateChange]:
        """Blocking stop: graceful, then forced after ``grace_s``; returns within about ``grace_s + 6`` s."""
        self.request_stop(run_id, grace_s)
        changes: list[StateChange] = []
        deadline = time.monotonic() + grace_s + KILL_WAIT_S + 1.0
        runs = self._selected(run_id)
        while time.monotonic() < deadline and any(
                run.alive or any(p.alive for p in run.stop_processes) for run in runs):
            changes += self.poll()
            time.sleep(0.05)
        return changes

    def close(self, grace_s: float = 3.0) -> None:
        """Stop everything still running (the app calls this when the window closes)."""
        self.stop(None, grace_s)

    # ---- Internals -------------------------------------------------------------------------------------------

    def _stop_remote(self, run: Run, grace_s: float) -> None:
        for plan in remote_stop_plans(run.spec, grace_s):
            run.stop_processes.append(ManagedProcess(plan, run.run_id, self.buffer_lines))

    def _selected(self, run_id: str | None) -> list[Run]:
        return [run for run in self._runs if run_id is None or run.run_id == run_id]

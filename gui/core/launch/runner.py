"""``Launcher``: starts validated launches, tracks their processes, stops them without ever hanging.

The launcher is driven by one owner thread (the process panel's timer in the app): ``start``, ``poll``,
``request_stop`` and ``stop`` are called from there. Reader threads only fill output buffers. It never imports Qt.
"""

from __future__ import annotations

import logging
import signal
import time
from dataclasses import dataclass, field, replace
from typing import Final

from ringscope.agent.keys import AccessKeyError, agent_keys_from_env
from ringscope.agent.runtime import ENV_ATTEMPT
from ringscope.gui.core.launch.commands import build_commands
from ringscope.gui.core.launch.process import ManagedProcess, StateChange
from ringscope.gui.core.launch.remote import remote_stop_plans
from ringscope.gui.core.launch.restart import DEFAULT_DELAY_S, FAULTS, CollectorLink, RestartPolicy
from ringscope.gui.core.launch.slurm import batch_script as slurm_batch_script
from ringscope.gui.core.launch.slurm import cancel_plans
from ringscope.gui.core.launch.spec import LaunchSpec, new_run_id
from ringscope.gui.core.launch.supervisor import RestartSupervisor
from ringscope.gui.core.launch.validation import validate

log = logging.getLogger(__name__)

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

    supervisor: RestartSupervisor | None = None  # a run with a restart policy: it starts each attempt

    @property
    def alive(self) -> bool:
        """True while any of its processes has not ended (or its supervisor may still start another attempt)."""
        return any(process.alive for process in self.processes) or (
            self.supervisor is not None and not self.supervisor.done)

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
        return (self.remote_endpoint or self.endpoint) if spec.hosts or spec.slurm else self.endpoint

    def batch_script(self, spec: LaunchSpec) -> str:
        """The Slurm batch script ``spec`` (with ``slurm`` settings) submits from this launcher (its collector)."""
        return slurm_batch_script(replace(spec, run_id=spec.run_id or new_run_id()), self.endpoint_for(spec),
                                  self.agent_env)

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
        if spec.restart_max > 0:
            self._supervise(run)
            return run
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
        for run in self._runs:
            if run.supervisor is not None and not run.supervisor.done:
                run.supervisor.tick()  # may stop a faulted attempt or start the next one
                run.processes = list(run.supervisor.processes)  # the panel shows the current attempt's
                if run.supervisor.done:
                    run.supervisor.close(0.0)  # its threads end on their own; never wait on the owner's thread
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
            if run.supervisor is not None and not run.supervisor.done:
                run.supervisor.request_stop()  # no further attempt; it stops the current one (_stop_processes)
            self._stop_processes(run, run.processes, grace_s)

    def _stop_processes(self, run: Run, processes: list[ManagedProcess], grace_s: float) -> None:
        if run.spec.hosts:
            if any(p.alive for p in processes) and not any(p.alive for p in run.stop_processes):
                self._stop_remote(run, grace_s)
            for process in processes:
                process.request_stop(grace_s + REMOTE_STOP_MARGIN_S, None)
            return
        for process in processes:
            sig = signal.SIGINT if run.spec.kind == "ddp" else signal.SIGTERM
            process.request_stop(grace_s, sig)

    def kill(self, run_id: str | None = None) -> None:
        """SIGKILL one run (or all) now (on its hosts too: a remote stop with no grace period)."""
        for run in self._selected(run_id):
            if run.supervisor is not None and not run.supervisor.done:
                run.supervisor.request_stop()
            if run.spec.hosts and run.alive:
                self._stop_remote(run, 0.0)
            if run.spec.slurm is not None and run.alive:  # the follower dies before it can scancel: cancel by name
                run.stop_processes += [ManagedProcess(plan, run.run_id, self.buffer_lines)
                                       for plan in cancel_plans(run.spec)]
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

    def _supervise(self, run: Run) -> None:
        """Start ``run`` under a restart supervisor: each attempt is the spec's processes with RINGSCOPE_ATTEMPT."""
        spec = run.spec
        endpoint = self.endpoint_for(spec)

        def start(attempt: int) -> list[ManagedProcess]:
            env = {**self.agent_env, ENV_ATTEMPT: str(attempt)}
            processes = [ManagedProcess(plan, run.run_id, self.buffer_lines)
                         for plan in build_commands(spec, endpoint, env)]
            if attempt > 1 and processes:
                processes[0].output.append(f"ringscope: attempt {attempt} of run {run.run_id} "
                                           f"(restart {attempt - 1} of {spec.restart_max})")
            return processes

        def say(text: str) -> None:
            log.info("run %s: %s", run.run_id, text)
            if run.processes:
                run.processes[0].output.append(f"ringscope: {text}")

        try:
            keys = agent_keys_from_env(self.agent_env)
        except AccessKeyError:
            keys = None
        policy = RestartPolicy(frozenset(FAULTS), spec.restart_max, DEFAULT_DELAY_S)
        run.supervisor = RestartSupervisor(policy, run.run_id, start, link=CollectorLink(self.endpoint, keys),
                                           stop=lambda processes, grace: self._stop_processes(run, list(processes),
                                                                                              grace), say=say)
        run.supervisor.tick()  # the first attempt starts now
        run.processes = list(run.supervisor.processes)

    def _stop_remote(self, run: Run, grace_s: float) -> None:
        for plan in remote_stop_plans(run.spec, grace_s):
            run.stop_processes.append(ManagedProcess(plan, run.run_id, self.buffer_lines))

    def _selected(self, run_id: str | None) -> list[Run]:
        return [run for run in self._runs if run_id is None or run.run_id == run_id]

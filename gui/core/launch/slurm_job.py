"""The follower of a Slurm launch: ``python -m ringscope.gui.core.launch.slurm_job --run-id RUN --directory DIR``.

It writes the batch script (``RINGSCOPE_BATCH_SCRIPT``) to ``DIR/RUN.attempt-K.sh``, submits it with ``sbatch``,
then, once a second, prints the job's scheduler state when it changes and the job's output file as it grows, until
the job ends; its exit code is the job's outcome (``JobState.exit_status``: 0, the job's code, 124 timeout,
143 cancelled). SIGTERM / SIGINT / SIGHUP mean Stop: ``scancel``, then it follows the job to its end (the last
output included). This is the process the launcher starts and the process panel shows (see ``slurm``).

Every line it prints itself starts with ``ringscope:``; the rest is the job's own output. A scheduler command that
fails or hangs is reported in one line and retried at the next look; the follower never waits on it for more than
``COMMAND_TIMEOUT_S``.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Final

from ringscope.agent.control import AttemptNote
from ringscope.agent.keys import AccessKeyError, agent_keys_from_env
from ringscope.agent.runtime import ENV_ENDPOINT, current_attempt
from ringscope.gui.core.launch.restart import CollectorLink
from ringscope.gui.core.launch.slurm import (
    ENV_BATCH_SCRIPT,
    EXIT_CANCELLED,
    STATE_PREFIX,
    JobState,
    job_name,
    parse_job_id,
    parse_sacct,
    parse_scontrol,
)

log = logging.getLogger(__name__)

POLL_S: Final[float] = 1.0
COMMAND_TIMEOUT_S: Final[float] = 20.0
CANCEL_FOLLOW_S: Final[float] = 60.0  # after scancel, how long the job's end is waited for
EXIT_SUBMIT_FAILED: Final[int] = 1


class _Follower:
    def __init__(self, job_id: str, output: Path, run_id: str, attempt: int) -> None:
        self.job_id = job_id
        self.output = output
        self.run_id = run_id
        self.attempt = attempt
        self.link = _collector_link()
        self.offset = 0
        self.last: str | None = None
        self.cancel_asked_s: float | None = None
        self.unknown_since: float | None = None

    def look(self) -> JobState | None:
        """The job's state now (scontrol while slurmctld keeps the job, else sacct); None when neither knows."""
        done = _command(["scontrol", "show", "job", "-o", self.job_id])
        state = parse_scontrol(self.job_id, done.stdout) if done is not None and done.returncode == 0 else None
        if state is None:
            done = _command(["sacct", "-j", self.job_id, "-X", "-n", "-P", "-o", "State,Reason,NodeList,ExitCode"])
            state = parse_sacct(self.job_id, done.stdout) if done is not None and done.returncode == 0 else None
        return state

    def say_state(self, state: JobState) -> None:
        line = state.line()
        if line != self.last:
            self.last = line
            _say(line)
            if self.link is not None:  # the runs table's Slurm state (recorded with the run's attempts)
                note = AttemptNote(self.attempt, "scheduler", time.time(), state.word,
                                   state.exit_status() if state.final else None, line)
                if not self.link.note(self.run_id, note):
                    log.debug("the collector did not take job %s's state: %s", self.job_id, self.link.last_error)

    def copy_output(self, *, final: bool = False) -> None:
        """Print what the job wrote since the last look: whole lines, and with ``final`` a last unfinished one too."""
        try:
            with self.output.open("rb") as stream:
                stream.seek(self.offset)
                data = stream.read()
        except OSError:  # not created yet (the job has not started), or gone
            return
        end = len(data) if final else data.rfind(b"\n") + 1
        if end:
            text = data[:end].decode(errors="replace")
            sys.stdout.write(text if text.endswith("\n") else text + "\n")
            sys.stdout.flush()
            self.offset += end

    def cancel(self) -> None:
        if self.cancel_asked_s is None:
            self.cancel_asked_s = time.monotonic()
            _say(f"stopping: scancel {self.job_id}")
            done = _command(["scancel", self.job_id])
            if done is not None and done.returncode != 0:
                _say(f"scancel {self.job_id} failed: {(done.stderr or done.stdout).strip()}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ringscope.gui.core.launch.slurm_job", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--directory", required=True, help="where the batch script and the job's output go")
    args = parser.parse_args(argv)
    script = os.environ.pop(ENV_BATCH_SCRIPT, None)  # read, and not passed on to the job's environment by sbatch
    if not script:
        print(f"ringscope: no batch script: {ENV_BATCH_SCRIPT} is empty", file=sys.stderr)
        return 2
    stop = {"asked": False}

    def on_signal(_number: int, _frame: FrameType | None) -> None:
        stop["asked"] = True

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    directory = Path(args.directory)
    attempt = current_attempt() or 1
    try:
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{args.run_id}.attempt-{attempt}.sh"
        path.write_text(script)
        path.chmod(0o700)
    except OSError as error:
        _say(f"cannot write the batch script in {directory}: {error}")
        return EXIT_SUBMIT_FAILED
    _say(f"batch script {path}")
    submitted = _command(["sbatch", "--parsable", str(path)])
    if submitted is None:
        return EXIT_SUBMIT_FAILED
    job_id = parse_job_id(submitted.stdout) if submitted.returncode == 0 else None
    if job_id is None:
        _say(f"sbatch refused the job (exit code {submitted.returncode}): "
             f"{(submitted.stderr or submitted.stdout).strip() or 'no message'}")
        return EXIT_SUBMIT_FAILED
    follower = _Follower(job_id, directory / f"{job_name(args.run_id)}-{job_id}.out", args.run_id, attempt)
    _say(f"submitted job {job_id}; its output: {follower.output}")
    while True:
        if stop["asked"]:
            follower.cancel()
        state = follower.look()
        follower.copy_output()
        if state is not None:
            follower.unknown_since = None
            follower.say_state(state)
            if state.final:
                follower.copy_output(final=True)
                return state.exit_status()
        else:
            follower.unknown_since = follower.unknown_since or time.monotonic()
            if time.monotonic() - follower.unknown_since > 5 * COMMAND_TIMEOUT_S:
                _say(f"job {job_id}: neither scontrol nor sacct knows it any more; its end is unknown")
                follower.copy_output(final=True)
                return EXIT_SUBMIT_FAILED
        if follower.cancel_asked_s is not None and time.monotonic() - follower.cancel_asked_s > CANCEL_FOLLOW_S:
            _say(f"job {job_id} did not end within {CANCEL_FOLLOW_S:g} s of scancel; stopped following it")
            return EXIT_CANCELLED
        time.sleep(POLL_S)


def _collector_link() -> CollectorLink | None:
    """The collector the job reports to (``RINGSCOPE_ENDPOINT``, with the access token when it needs one), which is
    told the job's state; None when there is none to tell."""
    endpoint = os.environ.get(ENV_ENDPOINT)
    if not endpoint:
        return None
    try:
        keys = agent_keys_from_env()
    except AccessKeyError:
        keys = None
    return CollectorLink(endpoint, keys, timeout_s=2.0)


def _command(argv: list[str]) -> subprocess.CompletedProcess[str] | None:
    """Run a Slurm command; None (and one line) when it is missing or hangs."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    except FileNotFoundError:
        _say(f"`{argv[0]}` is not installed here; a Slurm launch needs Slurm's client commands on this machine")
    except subprocess.TimeoutExpired:
        _say(f"`{' '.join(argv)}` did not answer within {COMMAND_TIMEOUT_S:g} s; retrying")
    return None


def _say(text: str) -> None:
    print(f"{STATE_PREFIX}{text}", flush=True)


if __name__ == "__main__":
    sys.exit(main())

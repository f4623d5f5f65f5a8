"""Run an unmodified training with Ringscope injected: ringscope run [--endpoint E] [--run-id ID] -- COMMAND ...

    ringscope run -- torchrun --nproc-per-node 2 train.py --epochs 3
    ringscope run --endpoint tcp://master:5757 -- python train_tf.py

Every Python process of COMMAND (torchrun's ranks included) starts with Ringscope's bootstrap on PYTHONPATH and
RINGSCOPE_ENDPOINT / RINGSCOPE_RUN_ID in its environment (one run id for all of them): PyTorch DDP models, their
DataLoaders and optimizer steps, Keras fit under a tf.distribute strategy and tf.function loops that call
strategy.run are measured without a code change (see README, "Instrument your training"). Telemetry goes to a
window or ringscope record listening at the endpoint. With RINGSCOPE_DISABLE=1 the command runs untouched.

With --restart FAULTS (any of hang, failure, lost) the run is supervised: when it hangs or loses a rank (as the
collector at the endpoint judges it) or COMMAND exits with an error, every rank's stacks are kept in the recording,
the whole job is stopped, and COMMAND starts again as the next attempt of the same run (same run id,
RINGSCOPE_ATTEMPT=k), at most --max-restarts times, --restart-delay seconds later. The script resumes from its own
latest checkpoint (the reference trainers: --resume-latest). Exit 0, Ctrl-C or SIGTERM never restart.

COMMAND runs in its own process group; SIGINT, SIGTERM and SIGHUP sent to ringscope run are forwarded to that group
(at a terminal, COMMAND gets the terminal, so Ctrl-C reaches it directly, and Ctrl-Z stops both). The exit code is
COMMAND's: its own code, 128+N when a signal N ended it, 127 when it cannot be found, 126 when it cannot be run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from types import FrameType

from ringscope.agent.inject import disabled_by_environment, injection_env
from ringscope.agent.keys import AccessKeyError, agent_keys_from_env
from ringscope.agent.publisher import DEFAULT_ENDPOINT
from ringscope.agent.runtime import ENV_ATTEMPT, ENV_ENDPOINT, ENV_RUN_ID
from ringscope.gui.commands._args import command_words, seconds_or_zero
from ringscope.gui.core.launch.plan import ProcessPlan
from ringscope.gui.core.launch.process import ManagedProcess, shell_exit_code
from ringscope.gui.core.launch.restart import (
    DEFAULT_DELAY_S,
    DEFAULT_MAX_RESTARTS,
    MAX_RESTARTS_LIMIT,
    CollectorLink,
    RestartPolicy,
    parse_faults,
)
from ringscope.gui.core.launch.spec import new_run_id
from ringscope.gui.core.launch.supervisor import RestartSupervisor

EXIT_USAGE = 2
EXIT_NOT_FOUND = 127
EXIT_NOT_EXECUTABLE = 126
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
TICK_S = 0.1  # how often a supervised run's processes and the collector's verdict are looked at


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``ringscope run``."""
    parser.add_argument("--endpoint", default=None, metavar="ENDPOINT",
                        help=f"collector the agents send to (default: $RINGSCOPE_ENDPOINT, else {DEFAULT_ENDPOINT})")
    parser.add_argument("--run-id", default=None, metavar="ID",
                        help="run id shared by all processes (default: $RINGSCOPE_RUN_ID, else a fresh one)")
    restart = parser.add_argument_group("restart policy")
    restart.add_argument("--restart", type=_faults, default=None, metavar="FAULTS",
                         help="restart the run when it hits one of these faults: a comma-separated list of hang, "
                              "failure, lost (default: never restart)")
    restart.add_argument("--max-restarts", type=_restarts, default=None, metavar="N",
                         help=f"give up after N restarts (default {DEFAULT_MAX_RESTARTS}; needs --restart)")
    restart.add_argument("--restart-delay", type=seconds_or_zero, default=None, metavar="SECONDS",
                         help=f"wait this long before each restart (default {DEFAULT_DELAY_S:g}; needs --restart)")
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND ...",
                        help="the training command, after --")


def run(args: argparse.Namespace) -> int:
    """Run the command with the injection environment; return its exit code."""
    command = command_words(args.command)
    if not command:
        print("ringscope run: no command given; usage: ringscope run [--endpoint E] [--run-id ID] -- COMMAND ...",
              file=sys.stderr)
        return EXIT_USAGE
    if args.endpoint is not None and "://" not in args.endpoint:
        print(f"ringscope run: argument --endpoint: expected a ZeroMQ endpoint such as tcp://HOST:PORT, got "
              f"{args.endpoint!r}", file=sys.stderr)
        return EXIT_USAGE
    env = command_env(os.environ, endpoint=args.endpoint, run_id=args.run_id)
    if args.restart is None:
        if args.max_restarts is not None or args.restart_delay is not None:
            print("ringscope run: --max-restarts and --restart-delay need --restart FAULTS (e.g. --restart "
                  "hang,failure,lost)", file=sys.stderr)
            return EXIT_USAGE
        return run_command(command, env)
    policy = RestartPolicy(args.restart, DEFAULT_MAX_RESTARTS if args.max_restarts is None else args.max_restarts,
                           DEFAULT_DELAY_S if args.restart_delay is None else args.restart_delay)
    return supervise(command, env, policy)


def supervise(command: Sequence[str], env: dict[str, str], policy: RestartPolicy) -> int:
    """Run ``command`` as attempts of one run under ``policy``; return the last attempt's exit code."""
    if shutil.which(command[0], path=env.get("PATH")) is None:
        print(f"ringscope run: command not found or not executable: {command[0]}", file=sys.stderr)
        return EXIT_NOT_FOUND
    if disabled_by_environment(env) or ENV_RUN_ID not in env:
        print("ringscope run: --restart needs Ringscope's telemetry (RINGSCOPE_DISABLE is set): restarting on "
              "failure only", file=sys.stderr)
    run_id = env.get(ENV_RUN_ID) or new_run_id()
    endpoint = env.get(ENV_ENDPOINT, DEFAULT_ENDPOINT)
    try:
        keys = agent_keys_from_env(env)
    except AccessKeyError as exc:
        print(f"ringscope run: {exc}", file=sys.stderr)
        return EXIT_USAGE

    def say(text: str) -> None:
        print(f"ringscope run: {text}", file=sys.stderr, flush=True)

    def start(attempt: int) -> list[ManagedProcess]:
        plan = ProcessPlan("command", list(command), env={**env, ENV_ATTEMPT: str(attempt)})
        return [ManagedProcess(plan, run_id, capture=False)]

    say(f"run {run_id}: restarting on {policy.describe()}; asking the collector at {endpoint}")
    supervisor = RestartSupervisor(policy, run_id, start, link=CollectorLink(endpoint, keys), say=say)
    stop_requested: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop_requested.append(signum)

    previous = {sig: signal.signal(sig, on_signal) for sig in FORWARDED_SIGNALS}
    try:
        while not supervisor.done:
            if stop_requested and not supervisor.stop_requested:
                say(f"{signal.Signals(stop_requested[0]).name}: stopping the run (no restart)")
                supervisor.request_stop()
            supervisor.tick()
            time.sleep(TICK_S)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        supervisor.close()
    attempts = ", ".join(f"{a.attempt}: {a.reason} (exit {a.exit_code})" for a in supervisor.attempts)
    say(f"run {run_id}: {len(supervisor.attempts)} attempt(s): {attempts}")
    return supervisor.exit_code if supervisor.exit_code is not None else EXIT_NOT_EXECUTABLE


def _faults(text: str) -> frozenset[str]:
    try:
        return parse_faults(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _restarts(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= MAX_RESTARTS_LIMIT:
        raise argparse.ArgumentTypeError(f"expected a number of restarts 0..{MAX_RESTARTS_LIMIT}, got {text!r}")
    return value


def command_env(base: dict[str, str] | os._Environ[str], *, endpoint: str | None, run_id: str | None) -> dict[str, str]:
    """``base`` plus the injection (or ``base`` unchanged, said once on stderr, under ``RINGSCOPE_DISABLE=1``)."""
    env = dict(base)
    if disabled_by_environment(env):
        print("ringscope run: RINGSCOPE_DISABLE is set: running the command without Ringscope", file=sys.stderr)
        return env
    env.update(injection_env(
        env,
        endpoint=endpoint or env.get(ENV_ENDPOINT) or DEFAULT_ENDPOINT,
        run_id=run_id or env.get(ENV_RUN_ID) or new_run_id(),
    ))
    return env


def run_command(command: Sequence[str], env: dict[str, str]) -> int:
    """Start ``command`` in its own process group, forward signals to it, wait, and return its exit code."""
    pending: list[int] = []
    child: subprocess.Popen[bytes] | None = None

    def forward(signum: int, frame: FrameType | None) -> None:
        if child is None:
            pending.append(signum)  # arrived before the child existed: sent once it does
            return
        _signal_group(child.pid, signum)

    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED_SIGNALS}
    terminal = _foreground_terminal()
    try:
        try:
            child = subprocess.Popen(list(command), env=env, preexec_fn=_own_group(terminal))
        except FileNotFoundError:
            print(f"ringscope run: command not found: {command[0]}", file=sys.stderr)
            return EXIT_NOT_FOUND
        except PermissionError as exc:
            print(f"ringscope run: cannot execute {command[0]}: {exc.strerror}", file=sys.stderr)
            return EXIT_NOT_EXECUTABLE
        for signum in pending:
            _signal_group(child.pid, signum)
        code = _wait(child, terminal)
    finally:
        if terminal is not None:
            _take_terminal_back(terminal)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return shell_exit_code(code)


def _wait(child: subprocess.Popen[bytes], terminal: int | None) -> int:
    """The child's exit status (negative: killed by that signal). At a terminal, a child stopped by Ctrl-Z stops
    this process too, as a shell job would, and continues with it (``fg``/``bg``)."""
    if terminal is None:
        return child.wait()
    while True:
        try:
            _, status = os.waitpid(child.pid, os.WUNTRACED)
        except ChildProcessError:  # reaped elsewhere: Popen knows the code
            return child.wait()
        except InterruptedError:
            continue
        if not os.WIFSTOPPED(status):
            child.returncode = os.waitstatus_to_exitcode(status)
            return child.returncode
        _take_terminal_back(terminal)
        os.kill(os.getpid(), signal.SIGSTOP)  # the shell sees its job stopped; fg/bg sends SIGCONT
        try:
            _set_foreground(terminal, child.pid)  # the child leads its own group
        except OSError:  # continued in the background (bg): the child stays in the background too
            pass
        _signal_group(child.pid, signal.SIGCONT)


def _signal_group(pid: int, signum: int) -> None:
    try:
        os.killpg(pid, signum)
    except (ProcessLookupError, PermissionError):  # already gone
        pass


def _foreground_terminal() -> int | None:
    """stdin's file descriptor when it is a terminal whose foreground group is ours, else None."""
    try:
        fd = sys.stdin.fileno()
        if os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgrp():
            return fd
    except (OSError, ValueError, AttributeError):
        pass
    return None


def _own_group(terminal: int | None) -> Callable[[], None]:
    """What the child runs before exec: its own process group, and the terminal's foreground if we had it."""

    def setup() -> None:
        os.setpgid(0, 0)
        if terminal is not None:
            try:
                _set_foreground(terminal, os.getpgrp())
            except OSError:  # the terminal went away: run in the background group
                pass

    return setup


def _take_terminal_back(terminal: int) -> None:
    try:
        _set_foreground(terminal, os.getpgrp())
    except OSError:
        pass


def _set_foreground(fd: int, group: int) -> None:
    # A background group calling tcsetpgrp gets SIGTTOU (which would stop it): ignore it for the call.
    previous = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    try:
        os.tcsetpgrp(fd, group)
    finally:
        signal.signal(signal.SIGTTOU, previous)

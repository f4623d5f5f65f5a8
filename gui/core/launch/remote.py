"""Multi-node launches over SSH from the master node: one ``ssh`` client per host, and how to stop what they started.

For a spec with ``hosts`` the launcher starts, on this machine, one process per host:

    ssh -o BatchMode=yes -o StrictHostKeyChecking=accept-new [-i KEY] [USER@]HOST \\
        'cd DIR || exit 1; exec python -c WATCHDOG_CODE RUN HOST GRACE_S \\
         env K=V ... python -m torch.distributed.run --nnodes N --nproc-per-node P \\
         --rdzv-backend c10d --rdzv-endpoint HOST0:PORT --rdzv-id RUN ...'

as DeepSpeed's and pdsh-style launchers do: the hosts share the file system paths of this machine (interpreter,
project, working directory), every word is shell-quoted, and the ssh client's output is the remote output, so the
process panel streams it like a local process's. Every remote process carries ``RINGSCOPE_RUN_ID`` and
``RINGSCOPE_HOST`` (the host as given) in its environment; ``remote_stop_plans`` uses exactly that pair to find and
stop a run's processes on a host (SIGTERM, SIGKILL after the grace period), because an ssh client without a
terminal sends nothing to the remote side when it is signalled or killed.

For the same reason a run would otherwise outlive its connection (the ssh client killed, the app gone): the training
runs under a watchdog on each host (``WATCHDOG_CODE``), which starts the host's commands as its child, with the ssh
session's output as theirs, exits with their exit status (a signal ``N`` as ``128 + N``, as a shell reports it),
and stops the run on that host as ``remote_stop_plans`` does (the same code) once the ssh session is gone. It
notices that by its standard output: sshd reads the session's output from a pipe (a socket pair on some builds),
and when the connection ends the sshd process holding the other end exits, so ``poll`` on our end reports
POLLERR (pipe) or POLLHUP (socket) at once. Other signals were ruled out: stdin is at EOF from the start (the
launcher gives the ssh client /dev/null, and ssh forwards that EOF); writing a heartbeat byte to find EPIPE would
put bytes into the training's output; and a changed ``getppid()`` misses wrappers between sshd and the command
(a ForceCommand wrapper, a container's exec), which the output pipe passes through. A network that is gone is
noticed when the host's sshd drops the connection: after ``ClientAliveInterval`` x ``ClientAliveCountMax`` where
the hosts' sshd sets them (its defaults leave it to TCP's timeouts: minutes with output pending, hours without).

It builds argv only: it never starts a process, never touches the network and never imports Qt or a framework.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shlex
from collections.abc import Sequence
from typing import Final

from ringscope.gui.core.launch.plan import ENV_RUN_ID, ProcessPlan, launch_env, program_words, strategy_words
from ringscope.gui.core.launch.spec import LaunchKind, LaunchSpec

ENV_HOST: Final[str] = "RINGSCOPE_HOST"  # the name ringscope.agent.devices reports as the host, when set
MULTI_NODE_KINDS: Final[tuple[LaunchKind, ...]] = ("ddp", "tf_multi_worker", "script")
DEFAULT_RENDEZVOUS_PORT: Final[int] = 29400  # torchrun's c10d default
DEFAULT_WORKER_PORT: Final[int] = 29610  # first TF_CONFIG port of each host (and MASTER_PORT of plain scripts)
MAX_HOSTS: Final[int] = 256
SSH_DEFAULTS: Final[tuple[str, ...]] = (
    "-o", "BatchMode=yes",  # never wait for a password prompt nobody can see
    "-o", "StrictHostKeyChecking=accept-new",  # first contact is accepted, a changed key is refused
    "-o", "ConnectTimeout=15",
)
_HOST_LABEL = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?$")

# Shared by STOP_CODE and WATCHDOG_CODE (Python that a host runs with ``python -c``): ``stop_run(run_id, host,
# grace_s)`` sends SIGTERM to every process whose environment holds both RINGSCOPE_RUN_ID=RUN_ID and
# RINGSCOPE_HOST=HOST, SIGKILL to those still there after GRACE_S, and returns both lists of pids.
# By environment, not command line: torchrun's ranks do not carry the run id in their arguments, and the
# shell that runs this code (whose command line does) must not match.
_STOP_RUN_CODE: Final[str] = """\
import os, signal, sys, time
def members(marks):
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            try:
                with open("/proc/" + name + "/environ", "rb") as environ:
                    if marks <= set(environ.read().split(b"\\0")):
                        found.append(int(name))
            except OSError:
                pass
    return found
def send(sig, pids):
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass
def stop_run(run_id, host, grace_s):
    marks = {("RINGSCOPE_RUN_ID=" + run_id).encode(), ("RINGSCOPE_HOST=" + host).encode()}
    first = members(marks)
    send(signal.SIGTERM, first)
    deadline = time.monotonic() + grace_s
    while members(marks) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = members(marks)
    send(signal.SIGKILL, left)
    return first, left
"""

# Runs on a host as ``python -c STOP_CODE RUN_ID HOST GRACE_S``: ``stop_run`` once, and one line saying what it did.
STOP_CODE: Final[str] = _STOP_RUN_CODE + """\
run_id, host = sys.argv[1], sys.argv[2]
first, left = stop_run(run_id, host, float(sys.argv[3]))
print("ringscope stop on %s: %d process(es) of run %s sent SIGTERM, %d SIGKILL"
      % (host, len(first), run_id, len(left)), flush=True)
"""

# Runs on a host as ``python -c WATCHDOG_CODE RUN_ID HOST GRACE_S COMMAND...``: COMMAND as a child sharing our
# stdin/stdout/stderr (the ssh session's), our exit status its own; ``stop_run`` when the session's reader of our
# stdout is gone (see the module docstring). poll() with no event asked reports only POLLERR/POLLHUP/POLLNVAL, and
# the 0.1 s timeout is how soon the child's own exit is seen. After the stop the child is killed too: with several
# commands it is an unmarked ``sh -c`` (it ends with its commands anyway; this only makes sure).
WATCHDOG_CODE: Final[str] = _STOP_RUN_CODE + """\
import select, subprocess
run_id, host, grace_s = sys.argv[1], sys.argv[2], float(sys.argv[3])
training = subprocess.Popen(sys.argv[4:])
session_output = select.poll()
session_output.register(1, 0)
while training.poll() is None:
    if session_output.poll(100):
        stop_run(run_id, host, grace_s)
        training.kill()
        break
code = training.wait()
sys.exit(code if code >= 0 else 128 - code)
"""
DISCONNECT_GRACE_S: Final[float] = 5.0  # SIGTERM to SIGKILL when the watchdog stops a run whose session is gone


# ---- Public API --------------------------------------------------------------------------------------------------

def remote_plans(spec: LaunchSpec, endpoint: str, agent_env: dict[str, str] | None = None) -> list[ProcessPlan]:
    """One ``ssh`` client per host of ``spec`` (which has a run id and ``hosts``; call ``validate`` first).

    ``endpoint`` is the collector as the hosts reach it. Host ``i`` runs ``spec.processes`` ranks (ddp: one torchrun
    with ``--nproc-per-node``; tf_multi_worker: that many workers with TF_CONFIG listing every host's ports; script:
    that many copies with RANK/LOCAL_RANK/WORLD_SIZE/NODE_RANK/MASTER_ADDR/MASTER_PORT).
    """
    assert spec.run_id is not None and spec.hosts, "remote_plans needs a spec with a run id and hosts"
    base_env = launch_env(spec, endpoint, spec.run_id, agent_env, "")
    plans = []
    for index, host in enumerate(spec.hosts):
        host_env = {**base_env, ENV_HOST: host}
        commands = [(argv, {**host_env, **extra}) for argv, extra in host_commands(spec, index)]
        remote = remote_shell_command(commands, spec.working_dir or os.getcwd(), watchdog_words(spec, host))
        plans.append(ProcessPlan(host, ssh_argv(spec, host, remote), local=False))
    return plans


def remote_stop_plans(spec: LaunchSpec, grace_s: float) -> list[ProcessPlan]:
    """One ``ssh HOST python -c STOP_CODE ...`` per host: stops the run's processes there (see ``STOP_CODE``)."""
    assert spec.run_id is not None, "a started run has a run id"
    plans = []
    for host in spec.hosts:
        words = [spec.python, "-c", STOP_CODE, spec.run_id, host, f"{max(grace_s, 0.0):g}"]
        plans.append(ProcessPlan(f"stop {host}", ssh_argv(spec, host, shlex.join(words)), local=False))
    return plans


def host_commands(spec: LaunchSpec, index: int) -> list[tuple[list[str], dict[str, str]]]:
    """The commands host ``index`` runs (argv, variables of that command only), in local-rank order."""
    program = program_words(spec)
    hosts, per_host = spec.hosts, spec.processes
    if spec.kind == "ddp":
        port = spec.base_port or DEFAULT_RENDEZVOUS_PORT
        argv = [spec.python, "-m", "torch.distributed.run", "--nnodes", str(len(hosts)),
                "--nproc-per-node", str(per_host), "--rdzv-backend", "c10d",
                "--rdzv-endpoint", host_port(hosts[0], port), "--rdzv-id", str(spec.run_id),
                "--max-restarts", "0", *program]
        return [(argv, {})]
    port = spec.base_port or DEFAULT_WORKER_PORT
    if spec.kind == "tf_multi_worker":
        cluster = {"worker": [host_port(host, port + local) for host in hosts for local in range(per_host)]}
        return [([spec.python, *program, *strategy_words(spec)],
                 {"TF_CONFIG": json.dumps({"cluster": cluster,
                                           "task": {"type": "worker", "index": index * per_host + local}})})
                for local in range(per_host)]
    # Plain script (tf_mirrored is refused by validation): the rank variables torchrun would set.
    return [([spec.python, *program],
             {"RANK": str(index * per_host + local), "LOCAL_RANK": str(local),
              "WORLD_SIZE": str(len(hosts) * per_host), "NODE_RANK": str(index),
              "MASTER_ADDR": hosts[0], "MASTER_PORT": str(port)})
            for local in range(per_host)]


def remote_shell_command(commands: Sequence[tuple[Sequence[str], dict[str, str]]], cwd: str,
                         supervisor: Sequence[str] = ()) -> str:
    """One POSIX shell line running ``commands`` in ``cwd``; its exit status is the first failing command's.

    One command is ``exec``'d (the remote shell disappears, its status is the command's); several run in the
    background and are waited for in turn. ``supervisor`` (``watchdog_words``) is ``exec``'d instead when given,
    with the command, or a ``sh -c`` running the several, as its last arguments.
    """
    change_dir = f"cd {shlex.quote(cwd)} || exit 1"
    if len(commands) == 1:
        argv, env = commands[0]
        return f"{change_dir}; exec {shlex.join([*supervisor, *_env_words(argv, env)])}"
    words = [f"{shlex.join(_env_words(argv, env))} & p{number}=$!" for number, (argv, env) in enumerate(commands)]
    words.append("rc=0")
    words += [f"wait $p{number} || rc=$?" for number in range(len(commands))]
    words.append("exit $rc")
    together = "; ".join(words)
    if supervisor:
        return f"{change_dir}; exec {shlex.join([*supervisor, 'sh', '-c', together])}"
    return f"{change_dir}; {together}"


def watchdog_words(spec: LaunchSpec, host: str) -> list[str]:
    """``python -c WATCHDOG_CODE RUN_ID HOST GRACE_S``: runs its last arguments on ``host`` and stops the run there
    when the ssh session is gone (see ``WATCHDOG_CODE``)."""
    assert spec.run_id is not None, "a started run has a run id"
    return [spec.python, "-c", WATCHDOG_CODE, spec.run_id, host, f"{DISCONNECT_GRACE_S:g}"]


def ssh_argv(spec: LaunchSpec, host: str, remote_command: str) -> list[str]:
    """``ssh [the spec's options] [launcher defaults] [-i KEY] -- [USER@]HOST REMOTE_COMMAND``.

    The spec's ``ssh_options`` come first: ssh keeps the first value it sees of an option, so the user's win.
    """
    argv = ["ssh", *spec.ssh_options, *SSH_DEFAULTS]
    if spec.ssh_key:
        argv += ["-i", os.path.expanduser(spec.ssh_key)]
    return [*argv, "--", spec.ssh_login(host), remote_command]


def host_port(host: str, port: int) -> str:
    """``host:port``, with an IPv6 address in brackets (``[fd00::1]:29400``) as torchrun and gRPC expect."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def check_host(host: object) -> str | None:
    """None when ``host`` can be given to ssh as a host name (a name, an ssh alias or an address), else why not."""
    if not isinstance(host, str) or not host.strip():
        return "a host name is empty; remove the empty line from the hosts list"
    if host != host.strip() or any(char.isspace() for char in host):
        return f"host name {host!r} contains spaces; give one host per line"
    if "@" in host:
        return f"host {host!r}: give the login name in the SSH user field, not in the host name"
    try:
        ipaddress.ip_address(host)
        return None
    except ValueError:
        pass
    if ":" in host:
        return (f"host {host!r}: a port does not go into the host name; give it as an ssh option "
                "(-o Port=N) or in your ssh config")
    if len(host) > 253 or not all(_HOST_LABEL.match(label) for label in host.split(".")):
        return (f"host name {host!r} is not a valid host name; use letters, digits, hyphens and dots "
                "(e.g. node-1, gpu7.cluster.example or 10.0.0.5)")
    return None


def stop_marker(spec: LaunchSpec, host: str) -> dict[str, str]:
    """The environment entries that mark ``spec``'s processes on ``host`` (what ``STOP_CODE`` looks for)."""
    return {ENV_RUN_ID: str(spec.run_id), ENV_HOST: host}


# ---- Internals ---------------------------------------------------------------------------------------------------

def _env_words(argv: Sequence[str], env: dict[str, str]) -> list[str]:
    return ["env", *(f"{key}={value}" for key, value in env.items()), *argv]

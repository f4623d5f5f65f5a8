"""Multi-node launches over SSH from the master node: one ``ssh`` client per host, and how to stop what they started.

For a spec with ``hosts`` the launcher starts, on this machine, one process per host:

    ssh -o BatchMode=yes -o StrictHostKeyChecking=accept-new [-i KEY] [USER@]HOST \\
        'cd DIR || exit 1; exec env K=V ... python -m torch.distributed.run --nnodes N --nproc-per-node P \\
         --rdzv-backend c10d --rdzv-endpoint HOST0:PORT --rdzv-id RUN ...'

as DeepSpeed's and pdsh-style launchers do: the hosts share the file system paths of this machine (interpreter,
project, working directory), every word is shell-quoted, and the ssh client's output is the remote output, so the
process panel streams it like a local process's. Every remote process carries ``RINGSCOPE_RUN_ID`` and
``RINGSCOPE_HOST`` (the host as given) in its environment; ``remote_stop_plans`` uses exactly that pair to find and
stop a run's processes on a host (SIGTERM, SIGKILL after the grace period), because an ssh client without a
terminal sends nothing to the remote side when it is signalled or killed.

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

from ringscope.gui.core.launch.plan import ENV_RUN_ID, ProcessPlan, launch_env, parse_tcp_endpoint, program_words
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
_LOOPBACK_NAMES: Final[frozenset[str]] = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})

# Runs on a host as ``python -c STOP_CODE RUN_ID HOST GRACE_S``: every process whose environment holds both
# RINGSCOPE_RUN_ID=RUN_ID and RINGSCOPE_HOST=HOST gets SIGTERM, and SIGKILL if still there after GRACE_S.
# By environment, not command line: torchrun's ranks do not carry the run id in their arguments, and the
# shell that runs this code (whose command line does) must not match.
STOP_CODE: Final[str] = """\
import os, signal, sys, time
run_id, host, grace_s = sys.argv[1], sys.argv[2], float(sys.argv[3])
marks = {("RINGSCOPE_RUN_ID=" + run_id).encode(), ("RINGSCOPE_HOST=" + host).encode()}
def members():
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
first = members()
send(signal.SIGTERM, first)
deadline = time.monotonic() + grace_s
while members() and time.monotonic() < deadline:
    time.sleep(0.1)
left = members()
send(signal.SIGKILL, left)
print("ringscope stop on %s: %d process(es) of run %s sent SIGTERM, %d SIGKILL"
      % (host, len(first), run_id, len(left)), flush=True)
"""


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
        remote = remote_shell_command(commands, spec.working_dir or os.getcwd())
        plans.append(ProcessPlan(host, ssh_argv(spec, host, remote)))
    return plans


def remote_stop_plans(spec: LaunchSpec, grace_s: float) -> list[ProcessPlan]:
    """One ``ssh HOST python -c STOP_CODE ...`` per host: stops the run's processes there (see ``STOP_CODE``)."""
    assert spec.run_id is not None, "a started run has a run id"
    plans = []
    for host in spec.hosts:
        words = [spec.python, "-c", STOP_CODE, spec.run_id, host, f"{max(grace_s, 0.0):g}"]
        plans.append(ProcessPlan(f"stop {host}", ssh_argv(spec, host, shlex.join(words))))
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
        extra = ["--strategy", "multi_worker_mirrored"] if spec.uses_reference else []
        return [([spec.python, *program, *extra],
                 {"TF_CONFIG": json.dumps({"cluster": cluster,
                                           "task": {"type": "worker", "index": index * per_host + local}})})
                for local in range(per_host)]
    # Plain script (tf_mirrored is refused by validation): the rank variables torchrun would set.
    return [([spec.python, *program],
             {"RANK": str(index * per_host + local), "LOCAL_RANK": str(local),
              "WORLD_SIZE": str(len(hosts) * per_host), "NODE_RANK": str(index),
              "MASTER_ADDR": hosts[0], "MASTER_PORT": str(port)})
            for local in range(per_host)]


def remote_shell_command(commands: Sequence[tuple[Sequence[str], dict[str, str]]], cwd: str) -> str:
    """One POSIX shell line running ``commands`` in ``cwd``; its exit status is the first failing command's.

    One command is ``exec``'d (the remote shell disappears, its status is the command's); several run in the
    background and are waited for in turn.
    """
    words = [f"cd {shlex.quote(cwd)} || exit 1"]
    if len(commands) == 1:
        argv, env = commands[0]
        return f"{words[0]}; exec {_env_command(argv, env)}"
    for number, (argv, env) in enumerate(commands):
        words.append(f"{_env_command(argv, env)} & p{number}=$!")
    words.append("rc=0")
    words += [f"wait $p{number} || rc=$?" for number in range(len(commands))]
    words.append("exit $rc")
    return "; ".join(words)


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


def is_loopback_endpoint(endpoint: str) -> bool:
    """True when ``endpoint`` names this machine's loopback (127.x, ::1, localhost): no other host can reach it."""
    try:
        host, _ = parse_tcp_endpoint(endpoint)
    except ValueError:
        return False
    host = host.strip("[]")
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def stop_marker(spec: LaunchSpec, host: str) -> dict[str, str]:
    """The environment entries that mark ``spec``'s processes on ``host`` (what ``STOP_CODE`` looks for)."""
    return {ENV_RUN_ID: str(spec.run_id), ENV_HOST: host}


# ---- Internals ---------------------------------------------------------------------------------------------------

def _env_command(argv: Sequence[str], env: dict[str, str]) -> str:
    assignments = [f"{key}={value}" for key, value in env.items()]
    return shlex.join(["env", *assignments, *argv])

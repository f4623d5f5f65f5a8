"""Turning a ``LaunchSpec`` into concrete processes: argv, environment, working directory, name.

Also the small network helpers the launcher needs (free local ports, is a port in use, parsing an endpoint).
It never starts a process and never imports Qt or a training framework.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from typing import Final

import ringscope
from ringscope.agent.inject import injection_env
from ringscope.gui.core.launch.options import format_option
from ringscope.gui.core.launch.spec import LaunchSpec, new_run_id

ENV_ENDPOINT: Final[str] = "RINGSCOPE_ENDPOINT"  # the names ringscope.agent.runtime reads
ENV_RUN_ID: Final[str] = "RINGSCOPE_RUN_ID"
LAUNCHER_ENV_KEYS: Final[frozenset[str]] = frozenset({ENV_ENDPOINT, ENV_RUN_ID})
REFERENCE_MODULES: Final[dict[str, str]] = {
    "ddp": "ringscope.trainers.ddp_trainer",
    "tf_mirrored": "ringscope.trainers.tf_trainer",
    "tf_multi_worker": "ringscope.trainers.tf_trainer",
}


@dataclass(frozen=True, slots=True)
class ProcessPlan:
    """One process to start. ``env`` holds only what the launcher adds to the app's own environment."""

    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None

    def full_env(self) -> dict[str, str]:
        """The complete environment of the process: the app's, then ``env`` on top."""
        merged = dict(os.environ)
        merged.update(self.env)
        return merged


# ---- Public API --------------------------------------------------------------------------------------------------

def build_commands(spec: LaunchSpec, endpoint: str, agent_env: dict[str, str] | None = None) -> list[ProcessPlan]:
    """The processes that ``spec`` starts, each reporting to ``endpoint``. Call ``validate(spec)`` first.

    The spec's run id is used (a fresh one if it has none); every process gets ``RINGSCOPE_ENDPOINT``,
    ``RINGSCOPE_RUN_ID``, ``PYTHONUNBUFFERED=1`` (so its output reaches the process panel line by line) and
    ``agent_env`` (e.g. the collector's access token). A user's script with ``spec.zero_code`` also gets the
    injection environment of ``ringscope.agent.inject`` (the bootstrap first on ``PYTHONPATH``), as under ``ringscope
    run``.
    A spec with ``hosts`` gives one ``ssh`` client per host instead (``ringscope.gui.core.launch.remote.remote_plans``).
    """
    run_id = spec.run_id or new_run_id()
    if spec.hosts:
        # Imported here: the remote plans build on this module's environment and program helpers.
        from ringscope.gui.core.launch.remote import remote_plans
        return remote_plans(replace(spec, run_id=run_id), endpoint, agent_env)
    base_env = launch_env(spec, endpoint, run_id, agent_env, os.environ.get("PYTHONPATH", ""))
    program = program_words(spec)
    cwd = spec.working_dir
    if spec.kind == "ddp":
        # One torchrun; it starts the ranks. --standalone picks a free rendezvous port on this machine.
        argv = [spec.python, "-m", "torch.distributed.run", "--standalone",
                "--nproc-per-node", str(spec.processes), *program]
        return [ProcessPlan("torchrun", argv, base_env, cwd)]
    if spec.kind == "tf_mirrored":
        extra = ["--strategy", "mirrored", "--devices", str(spec.processes)] if spec.uses_reference else []
        return [ProcessPlan("tf-mirrored", [spec.python, *program, *extra], base_env, cwd)]
    if spec.kind == "tf_multi_worker":
        ports = list(range(spec.base_port, spec.base_port + spec.processes)) if spec.base_port else \
            free_ports(spec.processes)
        cluster = {"worker": [f"localhost:{port}" for port in ports]}
        extra = ["--strategy", "multi_worker_mirrored"] if spec.uses_reference else []
        plans = []
        for index in range(spec.processes):
            env = dict(base_env)
            env["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
            plans.append(ProcessPlan(f"worker{index}", [spec.python, *program, *extra], env, cwd))
        return plans
    # Plain script: N copies with the usual rank variables, so a user's script can tell its copies apart.
    plans = []
    for rank in range(spec.processes):
        env = dict(base_env)
        env.update({"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(spec.processes)})
        plans.append(ProcessPlan(f"rank{rank}", [spec.python, *program], env, cwd))
    return plans


def launch_env(spec: LaunchSpec, endpoint: str, run_id: str, agent_env: dict[str, str] | None,
               inherited_pythonpath: str) -> dict[str, str]:
    """What every process of ``spec`` gets on top of its environment (see ``build_commands``).

    ``inherited_pythonpath`` is the ``PYTHONPATH`` the processes would otherwise see (the app's for local processes,
    none for remote ones: their login environment is not known here); the spec's own ``PYTHONPATH`` wins over it.
    """
    base_env = dict(spec.env)
    base_env.update({ENV_ENDPOINT: endpoint, ENV_RUN_ID: run_id, "PYTHONUNBUFFERED": "1", **(agent_env or {})})
    if spec.uses_reference:
        # Reference trainers are a package of this project: make them importable whatever the working directory.
        base_env["PYTHONPATH"] = os.pathsep.join(
            p for p in (ringscope.child_pythonpath(), base_env.get("PYTHONPATH", inherited_pythonpath)) if p)
    elif spec.injects:
        current = {"PYTHONPATH": base_env.get("PYTHONPATH", inherited_pythonpath)}
        base_env.update(injection_env(current))
    return base_env


def program_words(spec: LaunchSpec) -> list[str]:
    """What follows the interpreter (or torchrun): ``-m module options`` or ``script args``."""
    if spec.uses_reference:
        return ["-m", REFERENCE_MODULES[spec.kind], *_option_words(spec)]
    return [spec.trainer, *spec.script_args]


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports that were free a moment ago (all held open together so none repeats)."""
    with ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """True when ``host:port`` cannot be bound right now (someone else holds it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def parse_tcp_endpoint(endpoint: str) -> tuple[str, int]:
    """``tcp://host:port`` -> (host, port). Raises ValueError saying what a valid endpoint looks like."""
    if not endpoint.startswith("tcp://"):
        raise ValueError(f"endpoint {endpoint!r} is not a tcp endpoint; expected tcp://HOST:PORT")
    host, sep, port_text = endpoint[len("tcp://"):].rpartition(":")
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"endpoint {endpoint!r} is malformed; expected tcp://HOST:PORT with a port in 1..65535")
    return host, int(port_text)


def check_bindable(endpoint: str) -> str | None:
    """None when a collector could bind ``endpoint`` now, else a message (malformed, or port in use)."""
    try:
        host, port = parse_tcp_endpoint(endpoint)
    except ValueError as error:
        return str(error)
    bind_host = "0.0.0.0" if host in ("*", "0.0.0.0") else host
    try:
        in_use = port_in_use(port, bind_host)
    except OSError as error:  # e.g. a host name that does not resolve
        return f"cannot bind collector endpoint {endpoint}: {error}"
    if in_use:
        return (f"collector endpoint {endpoint}: port {port} is in use by another process "
                "(another Ringscope window?); close it or choose another port with --bind")
    return None


def connect_endpoint(bind_endpoint: str) -> str:
    """The address local processes connect to for a collector bound at ``bind_endpoint`` (``*`` -> 127.0.0.1)."""
    for wildcard in ("tcp://*:", "tcp://0.0.0.0:"):
        if bind_endpoint.startswith(wildcard):
            return "tcp://127.0.0.1:" + bind_endpoint[len(wildcard):]
    return bind_endpoint


def remote_endpoint(bind_endpoint: str) -> str | None:
    """The address other hosts connect to for a collector bound at ``bind_endpoint``: this machine's name when it
    listens on every interface; None when the bound address itself is the one to give (or it is loopback only,
    which validation refuses for runs on hosts)."""
    for wildcard in ("tcp://*:", "tcp://0.0.0.0:"):
        if bind_endpoint.startswith(wildcard):
            return f"tcp://{socket.getfqdn()}:{bind_endpoint[len(wildcard):]}"
    return None


# ---- Internals ---------------------------------------------------------------------------------------------------

def _option_words(spec: LaunchSpec) -> Iterator[str]:
    framework = spec.framework
    assert framework is not None, "reference trainers exist for ddp and tf kinds only"
    for name, value in spec.options.items():
        yield from format_option(name, value, framework)

"""Checking a ``LaunchSpec`` before anything starts: every problem as one sentence a user can act on.

``validate`` is called on every keystroke of the launch dialog, so it stays cheap: the only slow check (does an
interpreter other than ours have torch / tensorflow) runs once per interpreter and is cached.
It never starts a training and never imports Qt or a training framework (it only asks whether they are installed).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

from ringscope.gui.core.launch.endpoints import is_loopback_endpoint, parse_tcp_endpoint, port_in_use
from ringscope.gui.core.launch.options import check_combination, check_option
from ringscope.gui.core.launch.plan import LAUNCHER_ENV_KEYS, REFERENCE_MODULES
from ringscope.gui.core.launch.remote import MAX_HOSTS, MULTI_NODE_KINDS, check_host
from ringscope.gui.core.launch.slurm import check_slurm
from ringscope.gui.core.launch.spec import KIND_TITLES, KINDS, MAX_PROCESSES, LaunchSpec, parse_env_lines

SBATCH_MISSING = ("Slurm's sbatch is not installed on this machine (a Slurm launch submits from here); install "
                  "Slurm's client commands (apt-get install slurm-client) or choose another target")
_FRAMEWORK_MODULE = {"ddp": "torch", "tf_mirrored": "tensorflow", "tf_multi_worker": "tensorflow"}
_SSH_USER = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,31}$")
_LAUNCHER_NAME = {"ddp": "torchrun (torch.distributed.run)", "tf_mirrored": "TensorFlow",
                  "tf_multi_worker": "TensorFlow"}


# ---- Public API --------------------------------------------------------------------------------------------------

def validate(spec: LaunchSpec, endpoint: str | None = None) -> list[str]:
    """All problems with ``spec`` (empty when it can be launched). ``endpoint``, when given, is checked too."""
    if spec.kind not in KINDS:
        return [f"unknown launch kind {spec.kind!r}; choose one of {', '.join(KINDS)}"]
    errors: list[str] = []
    errors += _check_processes(spec)
    errors += _check_interpreter(spec)
    errors += _check_program(spec)
    errors += _check_options(spec)
    errors += _check_working_dir(spec)
    errors += _check_env(spec)
    errors += _check_ports(spec)
    errors += _check_hosts(spec)
    errors += _check_slurm(spec)
    if endpoint is not None:
        try:
            parse_tcp_endpoint(endpoint)
        except ValueError as error:
            errors.append(f"collector {error}")
        else:
            if (spec.hosts or spec.slurm) and is_loopback_endpoint(endpoint):
                where = "Slurm's nodes" if spec.slurm else "the hosts"
                errors.append(f"the collector endpoint {endpoint} is this machine's loopback address, which {where} "
                              "cannot reach; bind the collector to an address they can reach (e.g. "
                              "--bind tcp://0.0.0.0:PORT) and give the launcher that address")
    return errors


def module_available(python: str, module: str) -> bool:
    """Whether ``python`` can import ``module`` (looked up, not imported, for our own interpreter)."""
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        return _find_here(module)
    return _find_in(python, module)


# ---- Checks ------------------------------------------------------------------------------------------------------

def _check_processes(spec: LaunchSpec) -> list[str]:
    if isinstance(spec.processes, bool) or not isinstance(spec.processes, int):
        return [f"number of processes {spec.processes!r} is not a whole number"]
    if not 1 <= spec.processes <= MAX_PROCESSES:
        unit = "devices" if spec.kind == "tf_mirrored" else "processes"
        return [f"number of {unit} {spec.processes} is out of range; expected 1..{MAX_PROCESSES}"]
    machines, unit = (len(spec.hosts), "host") if spec.hosts else (
        (spec.slurm.nodes, "node") if spec.slurm is not None and isinstance(spec.slurm.nodes, int) else (1, ""))
    if spec.processes * machines > MAX_PROCESSES:
        return [f"{spec.processes} processes on each of {machines} {unit}s make {spec.processes * machines}, more "
                f"than {MAX_PROCESSES}; use fewer per {unit} or fewer {unit}s"]
    return []


def _check_interpreter(spec: LaunchSpec) -> list[str]:
    python = spec.python
    if not python or not (os.path.isfile(python) and os.access(python, os.X_OK)):
        return [f"launcher not found: the Python interpreter {python!r} does not exist or is not executable; "
                "point it to a python of an environment with your framework installed"]
    module = _FRAMEWORK_MODULE.get(spec.kind)
    if module is not None and not module_available(python, module):
        return [f"launcher not found: {_LAUNCHER_NAME[spec.kind]} needs '{module}', which {python} cannot import; "
                f"install it there (pip install {module}) or choose another interpreter"]
    return []


def _check_program(spec: LaunchSpec) -> list[str]:
    if spec.uses_reference:
        if spec.kind == "script":
            return ["a plain script launch needs a script path; choose your script "
                    "(the reference trainers run under PyTorch DDP or TensorFlow)"]
        module = REFERENCE_MODULES[spec.kind]
        if not _find_here(module):
            return [f"reference trainer {module} is not installed with this app; choose your own script"]
        return []
    if spec.script_args and not all(isinstance(arg, str) for arg in spec.script_args):
        return ["script arguments must be text"]
    if not spec.trainer.strip():
        return ["no script chosen; pick a .py file or use the reference trainer"]
    script = Path(spec.trainer)
    if not script.is_absolute() and spec.working_dir:
        script = Path(spec.working_dir) / script
    if not script.is_file():
        return [f"script {spec.trainer!r} not found (looked at {script}); check the path"]
    return []


def _check_options(spec: LaunchSpec) -> list[str]:
    framework = spec.framework
    if not spec.options:
        return []
    if not spec.uses_reference or framework is None:
        return ["trainer options apply to the reference trainers only; pass your script's own arguments instead"]
    errors = [message for name, value in spec.options.items()
              if (message := check_option(name, value, framework)) is not None]
    if errors or isinstance(spec.processes, bool) or not isinstance(spec.processes, int):
        return errors
    return check_combination(spec.options, framework, spec.processes)


def _check_working_dir(spec: LaunchSpec) -> list[str]:
    if spec.working_dir and not os.path.isdir(spec.working_dir):
        return [f"working directory {spec.working_dir!r} does not exist; create it or choose another"]
    return []


def _check_env(spec: LaunchSpec) -> list[str]:
    errors = []
    for key in spec.env:
        _, bad = parse_env_lines(f"{key}=x")
        errors += bad
        if key in LAUNCHER_ENV_KEYS:
            errors.append(f"environment variable {key} is set by the launcher (it points the run at this window); "
                          "remove it from the list")
    return errors


def _check_ports(spec: LaunchSpec) -> list[str]:
    elsewhere = bool(spec.hosts or spec.slurm)  # the ports are the hosts' or nodes', not this machine's
    if spec.base_port is None or (spec.kind != "tf_multi_worker" and not elsewhere):
        return []
    if not 1024 <= spec.base_port <= 65535 - max(spec.processes, 1):
        return [f"base port {spec.base_port} is out of range; expected 1024..{65535 - max(spec.processes, 1)} "
                "or leave it empty to pick free ports"]
    if elsewhere:
        return []  # nothing to check here
    busy = [port for port in range(spec.base_port, spec.base_port + spec.processes) if port_in_use(port)]
    if busy:
        return [f"port {port} (TF_CONFIG address of worker {port - spec.base_port}) is in use by another process; "
                "choose another base port or leave it empty to pick free ports" for port in busy]
    return []


def _check_slurm(spec: LaunchSpec) -> list[str]:
    if spec.slurm is None:
        return []
    errors = check_slurm(spec)
    if shutil.which("sbatch") is None:
        errors.append(SBATCH_MISSING)
    return errors


def _check_hosts(spec: LaunchSpec) -> list[str]:
    if not spec.hosts:
        return []
    if isinstance(spec.hosts, str) or not isinstance(spec.hosts, tuple | list):
        return [f"hosts {spec.hosts!r} is not a list of host names"]
    errors = []
    if spec.kind not in MULTI_NODE_KINDS:
        errors.append(f"{KIND_TITLES[spec.kind]} uses the devices of one machine and cannot run on several hosts; "
                      "choose MultiWorkerMirroredStrategy (one worker per host) or clear the hosts list")
    if len(spec.hosts) > MAX_HOSTS:
        errors.append(f"{len(spec.hosts)} hosts are more than {MAX_HOSTS}; launch at most {MAX_HOSTS} hosts")
    errors += [message for host in spec.hosts if (message := check_host(host)) is not None]
    seen: set[str] = set()
    for host in spec.hosts:
        if host in seen:
            errors.append(f"host {host!r} is listed twice; list each host once and raise the processes per host")
        seen.add(host)
    if spec.ssh_user is not None and not _SSH_USER.match(spec.ssh_user):
        errors.append(f"SSH user {spec.ssh_user!r} is not a login name (letters, digits, . _ -; not starting "
                      "with - or a digit); leave it empty for ssh's default")
    if spec.ssh_key and not os.path.isfile(os.path.expanduser(spec.ssh_key)):
        errors.append(f"SSH key {spec.ssh_key!r} not found; choose an existing private key file or leave it empty "
                      "for ssh's default keys")
    if not all(isinstance(option, str) and option and "\n" not in option for option in spec.ssh_options):
        errors.append(f"SSH options {list(spec.ssh_options)!r} must be non-empty words without line breaks, "
                      "e.g. -o Port=2222")
    if shutil.which("ssh") is None:
        errors.append("the ssh client is not installed on this machine (it starts the processes on the hosts); "
                      "install it (apt-get install openssh-client) or clear the hosts list")
    return errors


# ---- Module lookup -----------------------------------------------------------------------------------------------

def _find_here(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


@lru_cache(maxsize=32)
def _find_in(python: str, module: str) -> bool:
    # Another interpreter: ask it (once; cached, since the dialog validates on every keystroke).
    code = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
    try:
        return subprocess.run([python, "-c", code], capture_output=True, timeout=20, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False

"""Turning a ``LaunchSpec`` into concrete processes on this machine: argv, environment, working directory, name;
and the environment and program words that remote launches (``remote``) share.

It never starts a process and never imports Qt or a training framework.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final

import ringscope
from ringscope.agent.inject import injection_env
from ringscope.gui.core.launch.endpoints import free_ports
from ringscope.gui.core.launch.options import format_option
from ringscope.gui.core.launch.spec import LaunchSpec

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
    # False: a client of processes that run elsewhere and are stopped their own way (ssh, a Slurm job's follower).
    # A stop then looks for no orphans by token: Slurm passes the submitter's environment on to the job, and on a
    # node that is also the submitter the token found the job's ranks, killed under Slurm's own cancellation.
    local: bool = True

    def full_env(self) -> dict[str, str]:
        """The complete environment of the process: the app's, then ``env`` on top."""
        merged = dict(os.environ)
        merged.update(self.env)
        return merged


# ---- Public API --------------------------------------------------------------------------------------------------

def local_plans(spec: LaunchSpec, endpoint: str, agent_env: dict[str, str] | None = None) -> list[ProcessPlan]:
    """The processes that ``spec`` (with a run id, without ``hosts``) starts on this machine, each reporting to
    ``endpoint``; ``ringscope.gui.core.launch.commands.build_commands`` is the entry point.

    Every process gets ``RINGSCOPE_ENDPOINT``, ``RINGSCOPE_RUN_ID``, ``PYTHONUNBUFFERED=1`` (so its output reaches the
    process panel line by line) and ``agent_env`` (e.g. the collector's access token). A user's script with
    ``spec.zero_code`` also gets the injection environment of ``ringscope.agent.inject`` (the bootstrap first on
    ``PYTHONPATH``), as under ``ringscope run``.
    """
    assert spec.run_id is not None and not spec.hosts, "local_plans needs a spec with a run id and no hosts"
    base_env = launch_env(spec, endpoint, spec.run_id, agent_env, os.environ.get("PYTHONPATH", ""))
    program = program_words(spec)
    cwd = spec.working_dir
    if spec.kind == "ddp":
        # One torchrun; it starts the ranks. --standalone picks a free rendezvous port on this machine.
        argv = [spec.python, "-m", "torch.distributed.run", "--standalone",
                "--nproc-per-node", str(spec.processes), *program]
        return [ProcessPlan("torchrun", argv, base_env, cwd)]
    if spec.kind == "tf_mirrored":
        return [ProcessPlan("tf-mirrored", [spec.python, *program, *strategy_words(spec)], base_env, cwd)]
    if spec.kind == "tf_multi_worker":
        ports = list(range(spec.base_port, spec.base_port + spec.processes)) if spec.base_port else \
            free_ports(spec.processes)
        cluster = {"worker": [f"localhost:{port}" for port in ports]}
        extra = strategy_words(spec)
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
    """What every process of ``spec`` gets on top of its environment (see ``local_plans``).

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


def strategy_words(spec: LaunchSpec) -> list[str]:
    """What tells the TensorFlow reference trainer its strategy (``--strategy mirrored --devices N`` or
    ``--strategy multi_worker_mirrored``); nothing for a user's script or another kind."""
    if not spec.uses_reference:
        return []
    if spec.kind == "tf_mirrored":
        return ["--strategy", "mirrored", "--devices", str(spec.processes)]
    if spec.kind == "tf_multi_worker":
        return ["--strategy", "multi_worker_mirrored"]
    return []


# ---- Internals ---------------------------------------------------------------------------------------------------

def _option_words(spec: LaunchSpec) -> Iterator[str]:
    framework = spec.framework
    assert framework is not None, "reference trainers exist for ddp and tf kinds only"
    for name, value in spec.options.items():
        yield from format_option(name, value, framework)

"""Launching on Slurm: the batch script Ringscope writes, the follower process that submits and watches it, and the
words for a job's scheduler state.

A spec with ``slurm`` settings starts, on this machine, one process (``slurm_plans``)::

    python -m ringscope.gui.core.launch.slurm_job     # RINGSCOPE_BATCH_SCRIPT holds the script below

which writes the batch script next to the job's output (``<working dir>/ringscope-slurm/``), submits it with
``sbatch``, prints the job's scheduler state as it changes (*queued (Resources)* → *running on node-[0-1]* →
*finished* / *failed* / *cancelled* / *timeout*) and the job's output as it grows, and exits with the job's outcome.
So the process panel streams a Slurm job like a local process, and Stop (SIGTERM to the follower) is ``scancel``.

The batch script is plain bash a user can read, save and submit themselves::

    #SBATCH --nodes=2 --ntasks-per-node=1 ...         # ddp: one torchrun per node
    head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
    srun ... bash -c ringscope_task                   # torchrun --nnodes N --rdzv-endpoint $head_node:29400 ...

- **ddp**: one task per node running ``torchrun --nproc-per-node P`` with a c10d rendezvous on the allocation's first
  node, as NVIDIA's and PyTorch's Slurm examples do.
- **tf_multi_worker**: P tasks per node, one worker each; ``TF_CONFIG`` lists every node's ports (node order of the
  allocation, ``--distribution=block``) and the task's index is ``SLURM_PROCID``.
- **script**: P tasks per node with torchrun's variables (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``NODE_RANK``,
  ``MASTER_ADDR``, ``MASTER_PORT``).
- **tf_mirrored**: one task on one node.

Every task gets ``RINGSCOPE_ENDPOINT``, ``RINGSCOPE_RUN_ID``, ``RINGSCOPE_HOST`` (its Slurm node name) and the
zero-code bootstrap on ``PYTHONPATH`` (``ringscope run``'s, for a user's script); the agents also put
``SLURM_JOB_ID`` into their Hello, so a job the user submitted with ``ringscope run`` inside shows its job id too.
The access token (``RINGSCOPE_KEY``) is never written into the file: ``sbatch`` passes the submitting environment
on (its default ``--export=ALL``), where the follower has it.

It builds text and argv only: it never starts a process and never imports Qt or a framework.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

import ringscope
from ringscope.agent.keys import ENV_KEY
from ringscope.agent.runtime import ENV_ATTEMPT
from ringscope.gui.core.launch.plan import ENV_ENDPOINT, ProcessPlan, launch_env, program_words, strategy_words
from ringscope.gui.core.launch.remote import DEFAULT_RENDEZVOUS_PORT, DEFAULT_WORKER_PORT
from ringscope.gui.core.launch.spec import LaunchSpec

ENV_BATCH_SCRIPT: Final[str] = "RINGSCOPE_BATCH_SCRIPT"  # what the follower submits
SECRET_ENV_KEYS: Final[frozenset[str]] = frozenset({ENV_KEY})  # passed by sbatch, never written down
OUTPUT_DIR: Final[str] = "ringscope-slurm"
MAX_NODES: Final[int] = 4096
_TIME = re.compile(r"^(\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d{1,2}(:\d{1,2}(:\d{1,2})?)?|UNLIMITED|INFINITE)$")
_NAME = re.compile(r"^[A-Za-z0-9_.,+-]{1,128}$")

# Slurm's job states (squeue %T, scontrol JobState, sacct State) in Ringscope's words.
STATE_WORDS: Final[dict[str, str]] = {
    "PENDING": "queued", "REQUEUED": "queued", "REQUEUE_HOLD": "queued", "REQUEUE_FED": "queued",
    "CONFIGURING": "starting", "RESIZING": "running", "RUNNING": "running", "COMPLETING": "running",
    "SUSPENDED": "suspended", "STOPPED": "suspended", "SIGNALING": "running", "STAGE_OUT": "running",
    "COMPLETED": "finished", "FAILED": "failed", "NODE_FAIL": "failed", "BOOT_FAIL": "failed",
    "OUT_OF_MEMORY": "failed", "DEADLINE": "timeout", "PREEMPTED": "cancelled", "REVOKED": "cancelled",
    "CANCELLED": "cancelled", "TIMEOUT": "timeout", "SPECIAL_EXIT": "failed",
}
FOLLOWER_NAME: Final[str] = "slurm job"  # the follower's process name (ProcessPlan.name)
STATE_PREFIX: Final[str] = "ringscope: "  # the follower's own lines start so; the rest is the job's output
_STATE_LINE = re.compile(rf"^{STATE_PREFIX}(job \d+ (?:{'|'.join(sorted(set(STATE_WORDS.values())))})\b.*)$")
FINAL_WORDS: Final[frozenset[str]] = frozenset({"finished", "failed", "cancelled", "timeout"})
# The follower's exit code for each final state: a job's own code when it failed, timeout(1)'s 124 for a time limit,
# 143 (128 + SIGTERM) when it was cancelled, as a process stopped from the panel reports it.
EXIT_TIMEOUT: Final[int] = 124
EXIT_CANCELLED: Final[int] = 143


@dataclass(frozen=True, slots=True)
class JobState:
    """One look at a job: Slurm's state (``PENDING``...), its reason, nodes and exit code (``scontrol``'s ``N:S``)."""

    job_id: str
    slurm_state: str
    reason: str = ""
    nodes: str = ""
    exit_code: str = ""

    @property
    def word(self) -> str:
        """Ringscope's word for the state: queued, starting, running, suspended, finished, failed, cancelled,
        timeout (or the Slurm state in lower case when it is one Ringscope does not know)."""
        base = self.slurm_state.split()[0] if self.slurm_state else ""
        return STATE_WORDS.get(base, base.lower() or "unknown")

    @property
    def final(self) -> bool:
        return self.word in FINAL_WORDS

    def describe(self) -> str:
        """``queued (Resources)``, ``running on node-[0-1]``, ``failed (exit code 1)``, ``timeout``..."""
        word = self.word
        if word == "queued" and self.reason and self.reason not in ("None", "(null)"):
            return f"queued ({self.reason})"
        if word in ("running", "starting") and self.nodes and self.nodes != "(null)":
            return f"{word} on {self.nodes}"
        if word == "failed":
            code = self.exit_code.split(":")[0] if self.exit_code else ""
            details = [f"exit code {code}"] if code not in ("", "0") else []
            if self.slurm_state.split()[0] != "FAILED":
                details.append(self.slurm_state.split()[0])
            return f"failed ({', '.join(details)})" if details else "failed"
        return word

    def line(self) -> str:
        """``job 41 queued (Resources)``: the follower prints it after ``STATE_PREFIX``, the collector records it
        (the ``scheduler`` attempt note's detail) and the process panel reads it back (``job_state_line``)."""
        return f"job {self.job_id} {self.describe()}"

    def exit_status(self) -> int:
        """The follower's exit code for a final state (see ``EXIT_TIMEOUT``)."""
        word = self.word
        if word == "finished":
            return 0
        if word == "timeout":
            return EXIT_TIMEOUT
        if word == "cancelled":
            return EXIT_CANCELLED
        code, _, signal = (self.exit_code or "1:0").partition(":")
        if code.isdigit() and int(code) > 0:
            return int(code)
        return 128 + int(signal) if signal.isdigit() and int(signal) > 0 else 1


# ---- Public API --------------------------------------------------------------------------------------------------

def slurm_plans(spec: LaunchSpec, endpoint: str, agent_env: dict[str, str] | None = None) -> list[ProcessPlan]:
    """The follower process of a Slurm launch (``spec.slurm`` set, with a run id). See the module docstring."""
    assert spec.run_id is not None and spec.slurm is not None, "slurm_plans needs a Slurm spec with a run id"
    script = batch_script(spec, endpoint, agent_env)
    # the collector's address and token: the follower tells it the job's states, and sbatch passes the token on
    env = {ENV_BATCH_SCRIPT: script, ENV_ENDPOINT: endpoint, "PYTHONUNBUFFERED": "1", **(agent_env or {})}
    argv = [spec.python, "-m", "ringscope.gui.core.launch.slurm_job", "--run-id", spec.run_id,
            "--directory", output_directory(spec)]
    return [ProcessPlan(FOLLOWER_NAME, argv, env, spec.working_dir, local=False)]


def cancel_plans(spec: LaunchSpec) -> list[ProcessPlan]:
    """``scancel --name=ringscope-RUN``: cancels the run's jobs without the follower (which a forced kill ends
    before it can ``scancel``), found by the job name the batch script gives them."""
    assert spec.run_id is not None, "a started run has a run id"
    return [ProcessPlan("scancel", ["scancel", f"--name={job_name(spec.run_id)}"], local=False)]


def output_directory(spec: LaunchSpec) -> str:
    """Where the batch script and the job's output go: ``ringscope-slurm/`` in the working directory (which the
    nodes share with this machine)."""
    return os.path.join(spec.working_dir or os.getcwd(), OUTPUT_DIR)


def batch_script(spec: LaunchSpec, endpoint: str, agent_env: Mapping[str, str] | None = None) -> str:
    """The readable bash batch script of ``spec`` (which has ``slurm`` settings and a run id)."""
    settings = spec.slurm
    assert settings is not None and spec.run_id is not None, "batch_script needs a Slurm spec with a run id"
    env = launch_env(spec, endpoint, spec.run_id, dict(agent_env or {}), "")
    exported = {key: value for key, value in env.items() if key not in SECRET_ENV_KEYS}
    per_node = spec.processes
    tasks_per_node = 1 if spec.kind in ("ddp", "tf_mirrored") else per_node
    directory = output_directory(spec)
    lines = [
        "#!/bin/bash",
        f"# Written by Ringscope {ringscope.__version__} for run {spec.run_id}: {spec.title()}.",
        "# Submit it yourself with `sbatch THIS_FILE`; the job reports to the collector below (RINGSCOPE_ENDPOINT).",
        "# A collector started with --secure also needs RINGSCOPE_KEY in the environment sbatch passes on",
        "# (`export RINGSCOPE_KEY=$(ringscope keys)` before sbatch); it is never written into this file.",
        f"#SBATCH --job-name={job_name(spec.run_id)}",
        f"#SBATCH --nodes={settings.nodes}",
        f"#SBATCH --ntasks-per-node={tasks_per_node}",
        f"#SBATCH --output={os.path.join(directory, '%x-%j.out')}",
        "#SBATCH --open-mode=append",
    ]
    if settings.partition:
        lines.append(f"#SBATCH --partition={settings.partition}")
    if settings.account:
        lines.append(f"#SBATCH --account={settings.account}")
    if settings.time_limit:
        lines.append(f"#SBATCH --time={settings.time_limit}")
    if settings.gpus_per_node:
        lines.append(f"#SBATCH --gpus-per-node={settings.gpus_per_node}")
    lines += [f"#SBATCH {_sbatch_option(line)}" for line in settings.extra if line.strip()]
    lines += [
        "",
        "set -euo pipefail",
        f"cd {shlex.quote(spec.working_dir or os.getcwd())}",
        "",
        "# What every rank's Ringscope agent needs (the zero-code bootstrap comes with PYTHONPATH)",
        *(f"export {key}={shlex.quote(value)}" for key, value in exported.items()),
        *([] if ENV_ATTEMPT in exported else [f'export {ENV_ATTEMPT}="${{{ENV_ATTEMPT}:-1}}"']),
        "",
        "# The allocation's first node hosts the rendezvous",
        'nodes=($(scontrol show hostnames "$SLURM_JOB_NODELIST"))',
        'export RINGSCOPE_HEAD_NODE="${nodes[0]}"',
        *_task_lines(spec),
        "",
        f"srun --nodes={settings.nodes} --ntasks-per-node={tasks_per_node} --distribution=block "
        "--kill-on-bad-exit=1 bash -c ringscope_task",
        "",
    ]
    return "\n".join(lines)


def check_slurm(spec: LaunchSpec) -> list[str]:
    """Problems with ``spec.slurm`` (empty when it can be submitted), each a sentence a user can act on."""
    settings = spec.slurm
    if settings is None:
        return []
    errors = []
    if isinstance(settings.nodes, bool) or not isinstance(settings.nodes, int) or \
            not 1 <= settings.nodes <= MAX_NODES:
        errors.append(f"Slurm nodes {settings.nodes!r} is out of range; expected 1..{MAX_NODES}")
    elif spec.kind == "tf_mirrored" and settings.nodes != 1:
        errors.append("TensorFlow MirroredStrategy runs on one node; ask Slurm for 1 node or choose "
                      "MultiWorkerMirroredStrategy")
    if spec.hosts:
        errors.append("a Slurm launch gets its nodes from Slurm; clear the hosts list (SSH launches only)")
    for label, value in (("partition", settings.partition), ("account", settings.account)):
        if value and not _NAME.match(value):
            errors.append(f"Slurm {label} {value!r} is not a valid name; use letters, digits, '_', '-', '.' or ','")
    if settings.time_limit and not _TIME.match(settings.time_limit.strip()):
        errors.append(f"Slurm time limit {settings.time_limit!r} is not one of Slurm's forms: minutes (30), "
                      "MM:SS, HH:MM:SS, D-HH[:MM[:SS]] or UNLIMITED")
    if isinstance(settings.gpus_per_node, bool) or not isinstance(settings.gpus_per_node, int) or \
            not 0 <= settings.gpus_per_node <= 64:
        errors.append(f"GPUs per node {settings.gpus_per_node!r} is out of range; expected 0..64")
    for line in settings.extra:
        option = _sbatch_option(line)
        if option and not option.startswith("-"):
            errors.append(f"extra #SBATCH line {line!r} is not an sbatch option; write it as --name=value "
                          "(e.g. --mem=64G)")
        elif "\n" in option or _option_name(option) in _SET_BY_RINGSCOPE:
            errors.append(f"extra #SBATCH line {line!r} sets what Ringscope sets itself (nodes, tasks, job name, "
                          "output); use the fields for nodes and tasks")
    return errors


def parse_scontrol(job_id: str, text: str) -> JobState | None:
    """A job's state from ``scontrol show job -o ID`` (one line of ``Key=Value``), or None when it says nothing."""
    fields = dict(re.findall(r"(\w+)=(\S*)", text))
    if "JobState" not in fields:
        return None
    return JobState(job_id, fields["JobState"], fields.get("Reason", ""), fields.get("NodeList", ""),
                    fields.get("ExitCode", ""))


def parse_sacct(job_id: str, text: str) -> JobState | None:
    """A job's state from ``sacct -j ID -X -n -P -o State,Reason,NodeList,ExitCode``, or None when it is unknown."""
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 4 and parts[0]:
            return JobState(job_id, parts[0], parts[1], parts[2], parts[3])
    return None


def job_state_line(line: str) -> str | None:
    """``JobState.line()`` when ``line`` is one of the follower's state lines, else None (what the process panel
    shows as a Slurm job's state)."""
    found = _STATE_LINE.match(line)
    return found.group(1) if found else None


def parse_job_id(sbatch_output: str) -> str | None:
    """The job id ``sbatch --parsable`` printed (``123`` or ``123;cluster``), or None."""
    first = sbatch_output.strip().splitlines()[0] if sbatch_output.strip() else ""
    job_id = first.split(";")[0].strip()
    return job_id if job_id.isdigit() else None


# ---- Internals ---------------------------------------------------------------------------------------------------

def job_name(run_id: str) -> str:
    """The Slurm job name of a run's jobs (every attempt's): ``ringscope-RUN``."""
    return f"ringscope-{run_id}"[:128]


_SET_BY_RINGSCOPE: Final[frozenset[str]] = frozenset({
    "--job-name", "-J", "--nodes", "-N", "--ntasks", "-n", "--ntasks-per-node", "--output", "-o", "--open-mode"})
"""sbatch options the script sets itself, long and short (an extra line repeating one would override it)."""


def _option_name(option: str) -> str:
    """``--nodes=4`` / ``--nodes 4`` -> ``--nodes``; ``-N4`` / ``-N 4`` -> ``-N``."""
    words = option.split("=", 1)[0].split(maxsplit=1)
    name = words[0] if words else ""
    return name if name.startswith("--") else name[:2]


def _sbatch_option(line: str) -> str:
    text = line.strip()
    return text[len("#SBATCH"):].strip() if text.upper().startswith("#SBATCH") else text


class _Var(str):
    """A shell word this module builds from a task's Slurm variables (``$SLURM_JOB_ID``): expanded by bash in the
    task, where every other word (a user's arguments included) is quoted literally."""


def _task_lines(spec: LaunchSpec) -> list[str]:
    """``ringscope_task``: what each Slurm task runs on its node, exported for ``srun``'s ``bash -c`` (and, for
    MultiWorkerMirrored, the worker list it reads, built before it)."""
    program = program_words(spec)
    per_node = spec.processes
    before: list[str] = []
    body: list[str] = ['export RINGSCOPE_HOST="$SLURMD_NODENAME"']
    argv: list[str] = [spec.python, *program, *strategy_words(spec)]
    if spec.kind == "ddp":
        port = spec.base_port or DEFAULT_RENDEZVOUS_PORT
        argv = [spec.python, "-m", "torch.distributed.run", "--nnodes", _Var("$SLURM_JOB_NUM_NODES"),
                "--nproc-per-node", str(per_node), "--rdzv-backend", "c10d",
                "--rdzv-endpoint", _Var(f"$RINGSCOPE_HEAD_NODE:{port}"), "--rdzv-id", _Var("$SLURM_JOB_ID"),
                "--max-restarts", "0", *program]
        comment = f"# one torchrun per node, {per_node} ranks each, rendezvous on the first node"
    elif spec.kind == "tf_multi_worker":
        port = spec.base_port or DEFAULT_WORKER_PORT
        before = [f"workers=(); for node in \"${{nodes[@]}}\"; do for ((i = 0; i < {per_node}; i++)); do "
                  f"workers+=(\"\\\"$node:$(({port} + i))\\\"\"); done; done",
                  'export RINGSCOPE_TF_WORKERS="[$(IFS=,; echo "${workers[*]}")]"']
        body.append('export TF_CONFIG="{\\"cluster\\": {\\"worker\\": $RINGSCOPE_TF_WORKERS}, '
                    '\\"task\\": {\\"type\\": \\"worker\\", \\"index\\": $SLURM_PROCID}}"')
        comment = (f"# one MultiWorkerMirroredStrategy worker per task, {per_node} per node; TF_CONFIG lists every "
                   "node's ports, in the allocation's order")
    elif spec.kind == "tf_mirrored":
        comment = f"# one MirroredStrategy process on {per_node} devices"
    else:
        port = spec.base_port or DEFAULT_WORKER_PORT
        body += ['export RANK="$SLURM_PROCID" LOCAL_RANK="$SLURM_LOCALID" WORLD_SIZE="$SLURM_NTASKS"',
                 f'export NODE_RANK="$SLURM_NODEID" MASTER_ADDR="$RINGSCOPE_HEAD_NODE" MASTER_PORT={port}']
        comment = f"# {per_node} copies of the script per node, with torchrun's rank variables"
    words = " ".join(f'"{word}"' if isinstance(word, _Var) else shlex.quote(word) for word in argv)
    return [*before, "", comment, "ringscope_task() {", *(f"    {line}" for line in body), f"    exec {words}", "}",
            "export -f ringscope_task"]

"""What a scaling sweep runs: frameworks x rank counts on the same model, data and per-rank batch (the reference
trainers, or one user script through the zero-code path), and the checks that refuse a sweep this machine cannot run
before anything starts.

Owns the sweep's words for frameworks (``ddp``, ``tf-mirrored``, ``tf-multi-worker``), the parsing of the command
line's lists, ``SweepPlan.configurations`` (the order runs happen in), ``problems`` (every reason to refuse, in
words) and ``process_plans`` (a configuration as the launcher's processes: ``ringscope.gui.core.launch`` builds them,
the sweep only adds the injected all-reduce delay). It never starts a process and never imports Qt or a framework.

A user script (``SweepPlan.script``) runs as the launch dialog's *My script* with *Instrument automatically* and as
``ringscope run`` do (``LaunchSpec(trainer=script, zero_code=True)``): unmodified, under torchrun for ``ddp``, as N
TF_CONFIG workers for ``tf-multi-worker``, and for ``tf-mirrored`` on the first N GPUs only (``CUDA_VISIBLE_DEVICES``:
the reference trainer splits the CPU into N logical devices from inside, which cannot be done to a script from
outside, so a CPU ``tf-mirrored`` script sweep is refused).
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Final

from ringscope.gui.core.launch.commands import build_commands
from ringscope.gui.core.launch.options import OptionValue
from ringscope.gui.core.launch.plan import ProcessPlan
from ringscope.gui.core.launch.spec import LaunchKind, LaunchSpec
from ringscope.gui.core.launch.validation import validate

FRAMEWORKS: Final[dict[str, LaunchKind]] = {
    "ddp": "ddp",
    "tf-mirrored": "tf_mirrored",
    "tf-multi-worker": "tf_multi_worker",
}
"""The sweep's framework names -> the launch kind that runs the reference trainer for it."""
FRAMEWORK_TITLES: Final[dict[str, str]] = {
    "ddp": "PyTorch DDP",
    "tf-mirrored": "TF MirroredStrategy",
    "tf-multi-worker": "TF MultiWorkerMirroredStrategy",
}
REFERENCE_ONLY_OPTIONS: Final[tuple[str, ...]] = ("--model-width", "--model-depth", "--dataset", "--batch-size",
                                                  "--steps")
"""Sweep options that configure the reference trainers only: a user script takes its own (``--script-args``)."""
COMM_DELAY_FRAMEWORKS: Final[tuple[str, ...]] = ("ddp",)
"""Frameworks whose reference trainer takes ``--comm-delay-ms`` (the DDP trainer's comm hook delays the all-reduce)."""
DATASETS: Final[tuple[str, ...]] = ("digits", "synthetic")
DEVICES: Final[tuple[str, ...]] = ("auto", "cpu", "gpu")



@dataclass(frozen=True, slots=True)
class SweepDefaults:
    """The sweep's defaults: ``ringscope sweep``'s, the window's sweep form's and ``SweepPlan``'s (``DEFAULTS``,
    defined here only). ``device`` "auto": one GPU per rank when there are enough, else the CPU
    (``resolve_device``); a plan holds the resolved one."""

    steps: int = 200
    model_width: int = 64
    model_depth: int = 2
    batch_size: int = 32
    dataset: str = "digits"
    device: str = "auto"
    timeout_per_run_s: float = 900.0


DEFAULTS: Final[SweepDefaults] = SweepDefaults()
SESSION_NAME: Final[str] = "sweep.db"
"""The session file a sweep records into, in its output folder."""
REPORT_NAME: Final[str] = "sweep.html"
OUTPUT_NAMES: Final[tuple[str, ...]] = ("sweep.csv", REPORT_NAME, "sweep.pdf")
"""The files a sweep writes into its output folder at its end."""
_TRAINER_DEVICE: Final[dict[str, dict[str, str]]] = {"ddp": {"cpu": "cpu", "gpu": "cuda"},
                                                     "tf": {"cpu": "cpu", "gpu": "gpu"}}


@dataclass(frozen=True, slots=True)
class Configuration:
    """One run of the sweep: a framework on a number of ranks (and, for tests, an injected all-reduce delay)."""

    framework: str
    ranks: int
    comm_delay_ms: float = 0.0

    @property
    def label(self) -> str:
        """``framework:ranks``, as ``--comm-delay-ms-for`` names it (e.g. ``ddp:2``)."""
        return f"{self.framework}:{self.ranks}"


@dataclass(frozen=True, slots=True)
class SweepPlan:
    """A sweep request. Every configuration trains the same model on the same data with the same per-rank batch.

    Attributes:
        frameworks: sweep framework names (keys of ``FRAMEWORKS``), in the order given.
        ranks: rank counts, ascending, without repeats.
        steps: optimizer steps per run.
        model_width / model_depth / batch_size / dataset: the reference trainers' options of the same names.
        device: "cpu" or "gpu", keyword only and always given (``resolve_device`` turns the sweep's device,
            ``DEFAULTS.device`` unless chosen, into one of them).
        comm_delays: ``framework:ranks`` -> milliseconds of injected all-reduce delay (a test hook).
        python: the interpreter that runs the trainers.
        script: the user's training script (None: the reference trainers); then ``steps``, ``model_width``,
            ``model_depth``, ``batch_size`` and ``dataset`` do not apply (the script has its own, in ``script_args``).
        script_args: the arguments after the script, the same in every configuration.
    """

    frameworks: tuple[str, ...]
    ranks: tuple[int, ...]
    steps: int = DEFAULTS.steps
    model_width: int = DEFAULTS.model_width
    model_depth: int = DEFAULTS.model_depth
    batch_size: int = DEFAULTS.batch_size
    dataset: str = DEFAULTS.dataset
    device: str = field(kw_only=True)
    comm_delays: dict[str, float] = field(default_factory=dict)
    python: str = sys.executable
    script: str | None = None
    script_args: tuple[str, ...] = ()

    @property
    def uses_script(self) -> bool:
        """True when every configuration runs the user's script rather than the reference trainer."""
        return self.script is not None

    def script_command(self) -> str:
        """The script and its arguments as a shell would read them (e.g. ``train.py --steps 40``); "" without one."""
        return shlex.join([self.script, *self.script_args]) if self.script is not None else ""

    def configurations(self) -> list[Configuration]:
        """Every framework at every rank count: framework by framework, fewest ranks first."""
        return [Configuration(framework, ranks, self.comm_delays.get(f"{framework}:{ranks}", 0.0))
                for framework in self.frameworks for ranks in self.ranks]


# ---- Parsing the command line's values (ValueError with the value seen and what is accepted) ------------------------


def parse_frameworks(text: str) -> tuple[str, ...]:
    """``ddp,tf-mirrored`` -> ("ddp", "tf-mirrored"); underscores are accepted for hyphens."""
    names = [part.strip().lower().replace("_", "-") for part in text.split(",")]
    if not text.strip() or any(not name for name in names):
        raise ValueError(f"expected a comma-separated list of {', '.join(FRAMEWORKS)}, got {text!r}")
    for name in names:
        if name not in FRAMEWORKS:
            raise ValueError(f"unknown framework {name!r}; choose from {', '.join(FRAMEWORKS)} (e.g. ddp,tf-mirrored)")
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"framework {repeated[0]!r} is listed twice in {text!r}; list each once")
    return tuple(names)


def parse_ranks(text: str) -> tuple[int, ...]:
    """``1,2,4`` -> (1, 2, 4): whole numbers >= 1, sorted; a repeat is refused."""
    parts = [part.strip() for part in text.split(",")]
    if not text.strip() or not all(part.isdigit() and int(part) >= 1 for part in parts):
        raise ValueError(f"expected a comma-separated list of whole numbers >= 1 (e.g. 1,2,4), got {text!r}")
    numbers = [int(part) for part in parts]
    if len(set(numbers)) != len(numbers):
        raise ValueError(f"a rank count is listed twice in {text!r}; list each once")
    return tuple(sorted(numbers))


def parse_comm_delay(text: str) -> tuple[str, float]:
    """``ddp:2=40`` -> ("ddp:2", 40.0): a framework, a rank count and milliseconds >= 0."""
    target, sep, ms_text = text.partition("=")
    framework, colon, ranks_text = target.partition(":")
    try:
        ms = float(ms_text)
    except ValueError:
        ms = -1.0
    framework = framework.strip().lower().replace("_", "-")
    if not sep or not colon or not ranks_text.strip().isdigit() or not 0 <= ms < float("inf"):
        raise ValueError(f"expected FRAMEWORK:RANKS=MS with milliseconds >= 0 (e.g. ddp:2=40), got {text!r}")
    return f"{framework}:{int(ranks_text)}", ms


def resolve_device(device: str, gpus: int, most_ranks: int) -> str:
    """"cpu" or "gpu": ``auto`` is the GPU when there is one per rank of the largest configuration, else the CPU."""
    if device == "auto":
        return "gpu" if gpus >= most_ranks > 0 else "cpu"
    return device


# ---- Checks ------------------------------------------------------------------------------------------------------


def problems(plan: SweepPlan, *, cpu_count: int | None, gpu_count: int) -> list[str]:
    """Every reason this machine cannot run ``plan`` (empty: it can), each a sentence naming the value and the fix.

    Checked here: a user script (``script_problems``), a baseline of 1 rank (scaling efficiency is measured against
    it), ranks per core (CPU) or per GPU, the injected delays, and each configuration as the launcher would check it
    (``ringscope.gui.core.launch.validate``: option ranges, the interpreter has torch / tensorflow).
    """
    errors: list[str] = script_problems(plan, gpu_count=gpu_count)
    if 1 not in plan.ranks:
        errors.append(f"--ranks {_list(plan.ranks)} has no 1: scaling efficiency is throughput(N) / (N x "
                      f"throughput(1)), so every sweep needs a 1-rank run; add 1 (e.g. --ranks 1,{_list(plan.ranks)})")
    most = max(plan.ranks, default=0)
    cores = cpu_count or 1
    if plan.device == "cpu" and most > cores:
        errors.append(f"--ranks {_list(plan.ranks)}: a CPU run of {most} ranks needs {most} cores (one per rank) "
                      f"and this machine has {cores}; drop the rank counts above {cores} from --ranks, or run on a "
                      "bigger machine")
    if plan.device == "gpu" and most > gpu_count:
        errors.append(f"--ranks {_list(plan.ranks)}: a GPU run of {most} ranks needs {most} GPUs (one per rank) "
                      f"and this machine has {gpu_count}; drop the rank counts above {gpu_count} from --ranks, or use "
                      "--device cpu")
    if plan.device == "gpu" and "tf-multi-worker" in plan.frameworks:
        errors.append("tf-multi-worker on GPUs: its workers on one machine would all train on GPU 0; sweep it with "
                      "--device cpu, or drop it from --frameworks")
    if plan.script is None:  # a script sweep refuses every delay (script_problems)
        errors += _delay_problems(plan)
    if errors:
        return errors
    where: dict[str, list[str]] = {}  # one message for every configuration it applies to (an option out of range)
    for configuration in plan.configurations():
        for message in validate(launch_spec(plan, configuration)):
            where.setdefault(message, []).append(configuration.label)
    return [f"{', '.join(labels)}: {message}" for message, labels in where.items()]


def script_problems(plan: SweepPlan, *, gpu_count: int = 0) -> list[str]:
    """Why ``plan.script`` cannot be swept as asked (empty without a script): the file, one framework, one that can
    be given its rank count from outside."""
    if plan.script is None:
        return []
    errors = []
    if plan.comm_delays:
        errors.append("--comm-delay-ms-for with --script: the injected all-reduce delay is a hook of the reference "
                      "DDP trainer, which a user script does not have; drop --comm-delay-ms-for")
    if not os.path.isfile(plan.script):
        seen = "is a folder" if os.path.isdir(plan.script) else "does not exist"
        errors.append(f"--script {plan.script!r} {seen}; give the path of your training script (a .py file)")
    if len(plan.frameworks) != 1:
        errors.append(f"--script with --frameworks {','.join(plan.frameworks)}: a script is written for one "
                      "framework; sweep it with that one (e.g. --frameworks ddp)")
    if "tf-mirrored" in plan.frameworks and plan.device != "gpu":
        errors.append("--script with tf-mirrored on the CPU: a MirroredStrategy script's replica count cannot be set "
                      "from outside (the reference trainer splits the CPU into N logical devices from inside; a "
                      "script's MirroredStrategy sees one CPU device), so this sweep would not run N replicas; "
                      "sweep your TF script with tf-multi-worker (N workers, TF_CONFIG), or tf-mirrored with "
                      f"--device gpu (the first N GPUs; this machine has {gpu_count})")
    return errors


def script_conflicts(given: Sequence[str]) -> list[str]:
    """The options in ``given`` (as typed, e.g. ``--model-width``) that a script sweep refuses, in one sentence each:
    they configure the reference trainers only."""
    refused = [option for option in REFERENCE_ONLY_OPTIONS if option in given]
    if not refused:
        return []
    return [f"{', '.join(refused)} with --script: {'these configure' if len(refused) > 1 else 'it configures'} the "
            "reference trainers only; give your script its own settings (steps, batch size, model) with "
            "--script-args, e.g. --script-args \"--steps 200 --batch-size 64\""]


def _delay_problems(plan: SweepPlan) -> list[str]:
    errors = []
    known = {configuration.label for configuration in plan.configurations()}
    for label in plan.comm_delays:
        framework = label.partition(":")[0]
        if framework not in FRAMEWORKS:
            errors.append(f"--comm-delay-ms-for {label}: unknown framework {framework!r}; choose from "
                          f"{', '.join(FRAMEWORKS)}")
        elif framework not in COMM_DELAY_FRAMEWORKS:
            errors.append(f"--comm-delay-ms-for {label}: only the {', '.join(COMM_DELAY_FRAMEWORKS)} trainer can "
                          "delay its all-reduce")
        elif label not in known:
            errors.append(f"--comm-delay-ms-for {label}: the sweep has no configuration {label}; it runs "
                          f"{', '.join(sorted(known))}")
    return errors


def _list(numbers: tuple[int, ...]) -> str:
    return ",".join(str(n) for n in numbers)


# ---- Processes ---------------------------------------------------------------------------------------------------


def trainer_options(plan: SweepPlan, configuration: Configuration) -> dict[str, OptionValue]:
    """The reference trainer's options for a configuration: the same for every configuration but the device's name."""
    framework = "ddp" if configuration.framework == "ddp" else "tf"
    return {"dataset": plan.dataset, "model-width": plan.model_width, "model-depth": plan.model_depth,
            "batch-size": plan.batch_size, "steps": plan.steps, "seed": 0,
            "device": _TRAINER_DEVICE[framework][plan.device]}


def launch_spec(plan: SweepPlan, configuration: Configuration, run_id: str | None = None) -> LaunchSpec:
    """The launch of one configuration, as the window's launcher would make it (a user script: zero-code, as its
    *My script* with *Instrument automatically* and ``ringscope run``)."""
    if plan.script is not None:
        env = {}
        if configuration.framework == "tf-mirrored":
            # MirroredStrategy() takes every visible GPU: showing it N is how N replicas are asked from outside.
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(index) for index in range(configuration.ranks))
        return LaunchSpec(kind=FRAMEWORKS[configuration.framework], trainer=plan.script,
                          script_args=plan.script_args, processes=configuration.ranks, env=env, run_id=run_id,
                          python=plan.python, zero_code=True)
    return LaunchSpec(kind=FRAMEWORKS[configuration.framework], processes=configuration.ranks,
                      options=trainer_options(plan, configuration), run_id=run_id, python=plan.python)


def process_plans(plan: SweepPlan, configuration: Configuration, run_id: str, endpoint: str) -> list[ProcessPlan]:
    """The processes of one configuration (``ringscope.gui.core.launch.build_commands``), each reporting to
    ``endpoint`` under
    ``run_id``; an injected delay is passed to the trainer as ``--comm-delay-ms`` (not in the launcher's option
    table: it is a test hook of the sweep, not a launch option)."""
    plans = build_commands(launch_spec(plan, configuration, run_id), endpoint)
    if configuration.comm_delay_ms <= 0:
        return plans
    return [replace(p, argv=[*p.argv, "--comm-delay-ms", f"{configuration.comm_delay_ms:g}"]) for p in plans]

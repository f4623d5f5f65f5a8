"""A sweep started from the window: the form's request, its checks and the command line it runs.

The window runs ``python -m ringscope.gui.cli sweep ...`` as a child process (the sweep records into a session of its
own) and follows it by its progress lines (``ringscope.gui.core.sweep.progress_lines``).

``SweepRequest`` is what the dialog's form holds (every option of ``ringscope sweep``, a user script included, with
the sweep's defaults from ``ringscope.gui.core.sweep.plan``); ``request_errors`` checks it with the CLI's own checks
(``ringscope.gui.core.sweep.plan.problems``) plus the output folder's, and ``sweep_argv`` is the one place its command
line is written. Never imports Qt and never starts a process.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import ringscope
from ringscope.gui.core.sweep.plan import (
    DEFAULTS,
    FRAMEWORKS,
    REPORT_NAME,
    SESSION_NAME,
    SweepPlan,
    parse_comm_delay,
    parse_frameworks,
    parse_ranks,
    problems,
    resolve_device,
)

# ---- The request from the form -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SweepRequest:
    """What the sweep dialog's form says: the options of ``ringscope sweep`` of the same names (and its defaults,
    ``ringscope.gui.core.sweep.plan.DEFAULTS``).

    ``ranks`` and ``script_args`` are the text typed (``1,2,4``; ``--epochs 1 --lr 0.1``), parsed by the CLI's own
    parsers when checked. ``script`` is the user's training script: None sweeps the reference trainers, "" is a
    script not chosen yet. With a script, ``steps``, ``model_width``, ``model_depth``, ``batch_size``, ``dataset`` and
    ``comm_delays`` do not apply and are not passed (``ringscope sweep`` refuses them with ``--script``).
    ``price_per_gpu_hour`` None: the agents' price, else the CLI's default.
    """

    frameworks: tuple[str, ...]
    ranks: str
    out: str
    steps: int = DEFAULTS.steps
    model_width: int = DEFAULTS.model_width
    model_depth: int = DEFAULTS.model_depth
    batch_size: int = DEFAULTS.batch_size
    dataset: str = DEFAULTS.dataset
    device: str = DEFAULTS.device
    price_per_gpu_hour: float | None = None
    timeout_per_run_s: float = DEFAULTS.timeout_per_run_s
    comm_delays: dict[str, float] = field(default_factory=dict)
    script: str | None = None
    script_args: str = ""
    python: str = sys.executable

    @property
    def session_path(self) -> Path:
        """The session file the sweep records into."""
        return Path(self.out).expanduser() / SESSION_NAME

    @property
    def report_path(self) -> Path:
        """The HTML report the sweep writes at its end."""
        return Path(self.out).expanduser() / REPORT_NAME

    def configuration_count(self) -> int:
        """How many runs the sweep makes (0 while the frameworks or ranks do not parse)."""
        try:
            return len(parse_frameworks(",".join(self.frameworks))) * len(parse_ranks(self.ranks))
        except ValueError:
            return 0


def request_errors(request: SweepRequest, *, cpu_count: int | None, gpu_count: int) -> list[str]:
    """Every reason the sweep cannot start (empty: it can), in words naming the value and the fix.

    The frameworks, ranks and script arguments go through the CLI's parsers and the whole plan through ``problems``
    (the checks ``ringscope sweep`` makes before anything starts, a script's included); the output folder must be
    usable and not hold a session yet.
    """
    errors: list[str] = []
    frameworks: tuple[str, ...] = ()
    ranks: tuple[int, ...] = ()
    if not request.frameworks:
        errors.append(f"no framework chosen; tick at least one of {', '.join(FRAMEWORKS)}")
    else:
        try:
            frameworks = parse_frameworks(",".join(request.frameworks))
        except ValueError as exc:
            errors.append(f"frameworks: {exc}")
    try:
        ranks = parse_ranks(request.ranks)
    except ValueError as exc:
        errors.append(f"ranks: {exc}")
    errors += _option_errors(request) + _folder_errors(request.out)
    if errors:
        return errors
    script = request.script
    plan = SweepPlan(frameworks=frameworks, ranks=ranks, steps=request.steps, model_width=request.model_width,
                     model_depth=request.model_depth, batch_size=request.batch_size, dataset=request.dataset,
                     device=resolve_device(request.device, gpu_count, max(ranks)),
                     comm_delays=dict(request.comm_delays) if script is None else {}, python=request.python,
                     script=None if script is None else script_path(script),
                     script_args=() if script is None else split_script_args(request.script_args))
    return problems(plan, cpu_count=cpu_count, gpu_count=gpu_count)


def _option_errors(request: SweepRequest) -> list[str]:
    """The numbers the CLI's parsers would refuse; with a script, its path and arguments instead of the reference
    trainers' options (which do not apply)."""
    errors: list[str] = []
    if request.script is None:
        for name, value in (("steps", request.steps), ("model width", request.model_width),
                            ("model depth", request.model_depth), ("batch size", request.batch_size)):
            if value < 1:
                errors.append(f"{name} {value} is too small; expected a whole number >= 1")
    else:
        if not request.script.strip():
            errors.append("no training script chosen; pick your script (a .py file), or sweep the reference trainer")
        try:
            split_script_args(request.script_args)
        except ValueError as exc:
            errors.append(f"script arguments: {exc}")
    if not request.timeout_per_run_s > 0:
        errors.append(f"timeout per configuration {request.timeout_per_run_s:g} s; expected a number of seconds > 0")
    if request.price_per_gpu_hour is not None and not request.price_per_gpu_hour > 0:
        errors.append(f"price per GPU-hour {request.price_per_gpu_hour:g}; expected a price > 0 (e.g. 2.5), or none")
    return errors


def _folder_errors(out: str) -> list[str]:
    if not out.strip():
        return ["no output folder; choose a folder for the session and the reports"]
    path = Path(out).expanduser()
    if path.exists() and not path.is_dir():
        return [f"output folder {out!r} is a file; choose a folder"]
    if (path / SESSION_NAME).exists():
        return [f"{path / SESSION_NAME} already exists (a session is never overwritten); choose another output "
                "folder"]
    existing = next((p for p in (path, *path.parents) if p.exists()), None)
    if existing is None or not os.access(existing, os.W_OK | os.X_OK):
        return [f"output folder {out!r} cannot be created: {existing or path} is not writable; choose another folder"]
    return []


def parse_comm_delays(text: str) -> tuple[dict[str, float], list[str]]:
    """``ddp:2=40, ddp:4=40`` (commas or blanks between) -> the injected all-reduce delays by ``framework:ranks``,
    each entry parsed by the CLI's parser, and a message for each entry it refuses."""
    delays: dict[str, float] = {}
    errors: list[str] = []
    for entry in re.split(r"[,\s]+", text.strip()):
        if not entry:
            continue
        try:
            label, ms = parse_comm_delay(entry)
        except ValueError as exc:
            errors.append(f"all-reduce delay: {exc}")
            continue
        delays[label] = ms
    return delays, errors


def split_script_args(text: str) -> tuple[str, ...]:
    """``--epochs 1 --lr 0.1`` -> its words, as a shell splits them (``ringscope sweep --script-args``; the same
    message when the quotes do not close)."""
    try:
        return tuple(shlex.split(text))
    except ValueError as exc:
        raise ValueError(f"cannot split {text!r} into arguments ({exc}); check its quotes") from None


def script_path(script: str) -> str:
    """The script as the sweep runs it: ``~`` expanded, made absolute (as ``ringscope sweep --script`` does)."""
    return os.path.abspath(os.path.expanduser(script.strip()))


# ---- The command ---------------------------------------------------------------------------------------------------


def sweep_argv(request: SweepRequest) -> list[str]:
    """The command that runs ``request``: ``python -m ringscope.gui.cli sweep ...`` with the interpreter of the
    trainers, every option written as its ``ringscope sweep`` flag (the one place the window builds it).

    With a script: ``--script`` (absolute) and ``--script-args=TEXT`` (one word, even when TEXT starts with ``-``),
    and none of the reference trainers' options, which the CLI refuses with ``--script``. The price only when given.
    """
    argv = [request.python, "-m", "ringscope.gui.cli", "sweep", "--frameworks", ",".join(request.frameworks),
            "--ranks", request.ranks.replace(" ", ""), "--device", request.device,
            "--timeout-per-run", _number(request.timeout_per_run_s), "--out", str(Path(request.out).expanduser())]
    if request.script is not None:
        argv += ["--script", script_path(request.script)]
        if request.script_args.strip():
            argv.append(f"--script-args={request.script_args.strip()}")
    else:
        argv += ["--steps", str(request.steps), "--model-width", str(request.model_width),
                 "--model-depth", str(request.model_depth), "--batch-size", str(request.batch_size),
                 "--dataset", request.dataset]
        for label, ms in request.comm_delays.items():
            argv += ["--comm-delay-ms-for", f"{label}={_number(ms)}"]
    if request.price_per_gpu_hour is not None:
        argv += ["--price-per-gpu-hour", _number(request.price_per_gpu_hour)]
    return argv


def _number(value: float) -> str:
    """``120.0`` -> ``120``, ``3.25`` -> ``3.25``: as typed, without ``:g``'s rounding to 6 digits."""
    return f"{value:.15g}"


def sweep_env() -> dict[str, str]:
    """What the sweep's process adds to the app's environment: unbuffered output (progress arrives as it happens)
    and this project first on ``PYTHONPATH`` (``ringscope.gui.cli`` importable whatever the working directory)."""
    path = os.pathsep.join(p for p in (ringscope.child_pythonpath(), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONUNBUFFERED": "1", "PYTHONPATH": path}


def default_out_folder(now: float | None = None) -> str:
    """A new folder for a sweep: ``<XDG_DATA_HOME or ~/.local/share>/ringscope/sweeps/sweep-YYYYmmdd-HHMMSS``."""
    base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return str(base / "ringscope" / "sweeps" / time.strftime("sweep-%Y%m%d-%H%M%S", time.localtime(now)))


def is_default_out_folder(out: str) -> bool:
    """Whether ``out`` is a folder ``default_out_folder`` makes (the user kept the folder offered)."""
    return Path(out).expanduser().parent == Path(default_out_folder()).parent

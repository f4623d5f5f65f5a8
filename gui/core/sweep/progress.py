"""A sweep started from the window: the form's request, its checks, the command line it runs, and the progress lines
that command prints.

The window runs ``python -m gui.cli sweep ...`` as a child process (the sweep records into a session of its own) and
follows it by its output: ``ringscope sweep`` prints one machine-readable line when each configuration starts and
one when it ends, written and read here so that both sides agree::

    SWEEP config 3 of 6: ddp:2 started
    SWEEP config 3 of 6: ddp:2 done
    SWEEP config 4 of 6: tf-mirrored:1 failed: torchrun (pid 812) failed with exit code 1; ...

``SweepRequest`` is what the dialog's form holds; ``request_errors`` checks it with the CLI's own checks
(``gui.core.sweep.plan.problems``) plus the output folder's. Never imports Qt and never starts a process.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from gui.core.launch.plan import PROJECT_ROOT
from gui.core.sweep.plan import (
    FRAMEWORKS,
    Configuration,
    SweepPlan,
    parse_frameworks,
    parse_ranks,
    problems,
    resolve_device,
)

if TYPE_CHECKING:
    from gui.core.sweep.runner import RunOutcome

SESSION_NAME: Final[str] = "sweep.db"
"""The session file a sweep writes into its folder (``gui.commands.sweep.SESSION_NAME``; a test keeps them equal)."""
REPORT_NAME: Final[str] = "sweep.html"
PROGRESS_PREFIX: Final[str] = "SWEEP config "
EVENTS: Final[tuple[str, ...]] = ("started", "done", "failed", "stopped")
_LINE = re.compile(r"SWEEP config (\d+) of (\d+): ([a-z][a-z-]*):(\d+) (started|done|failed|stopped)(?:: (.*))?")


# ---- Progress lines ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SweepProgress:
    """One progress line: configuration ``number`` of ``total`` (``framework`` on ``ranks``) has ``event``-ed.

    ``detail`` says why a configuration failed ("" otherwise).
    """

    number: int
    total: int
    framework: str
    ranks: int
    event: str
    detail: str = ""

    @property
    def finished(self) -> bool:
        """True for the line that ends a configuration (done, failed or stopped)."""
        return self.event != "started"

    def text(self) -> str:
        """For people: ``config 3 of 6: ddp, 2 ranks`` (and how it ended, once it has)."""
        ranks = f"{self.ranks} rank" + ("" if self.ranks == 1 else "s")
        where = f"config {self.number} of {self.total}: {self.framework}, {ranks}"
        return where if self.event == "started" else f"{where} — {self.event}"


def format_progress(number: int, total: int, configuration: Configuration, event: str, detail: str = "") -> str:
    """The line ``ringscope sweep`` prints for a configuration's ``event`` (one of ``EVENTS``); one line always."""
    if event not in EVENTS:
        raise ValueError(f"unknown sweep progress event {event!r}; expected one of {', '.join(EVENTS)}")
    line = f"{PROGRESS_PREFIX}{number} of {total}: {configuration.label} {event}"
    return f"{line}: {' '.join(detail.split())}" if detail.strip() else line


def parse_progress(line: str) -> SweepProgress | None:
    """A progress line read back (surrounding blanks ignored); None for any other line."""
    match = _LINE.fullmatch(line.strip())
    if match is None:
        return None
    number, total, framework, ranks, event, detail = match.groups()
    return SweepProgress(int(number), int(total), framework, int(ranks), event, detail or "")


class ProgressLines:
    """Turns ``SweepRunner``'s callbacks into progress lines, handed to ``emit``.

    The runner reports, for each configuration in order, a line when it starts (``on_progress``), its outcome
    (``on_outcome``), then a line when it ends (``on_progress`` again); a start is a progress call made while every
    configuration started so far has its outcome.
    """

    def __init__(self, configurations: Sequence[Configuration], emit: Callable[[str], None]) -> None:
        self._configurations = list(configurations)
        self._emit = emit
        self._started = 0
        self._ended = 0

    def on_progress(self, line: str) -> None:
        """The runner's ``on_progress``: emits the start line of the next configuration when one starts."""
        if self._started == self._ended and self._started < len(self._configurations):
            self._started += 1
            self._emit(format_progress(self._started, len(self._configurations),
                                       self._configurations[self._started - 1], "started"))

    def on_outcome(self, outcome: RunOutcome) -> None:
        """The runner's ``on_outcome``: emits how the configuration ended (done, stopped, or failed and why)."""
        self._ended += 1
        event = "done" if outcome.ok else "stopped" if outcome.interrupted else "failed"
        self._emit(format_progress(self._ended, len(self._configurations), outcome.configuration, event,
                                   "" if outcome.ok else outcome.message))


# ---- The request from the form -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SweepRequest:
    """What the sweep dialog's form says: the options of ``ringscope sweep`` of the same names.

    ``ranks`` is the text typed (e.g. ``1,2,4``), parsed by the CLI's own parser when checked.
    """

    frameworks: tuple[str, ...]
    ranks: str
    out: str
    steps: int = 200
    model_width: int = 64
    batch_size: int = 32
    dataset: str = "digits"
    device: str = "auto"
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

    The frameworks and ranks go through the CLI's parsers and the plan through ``problems`` (the checks
    ``ringscope sweep`` makes before anything starts); the output folder must be usable and not hold a session yet.
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
    for name, value in (("steps", request.steps), ("model width", request.model_width),
                        ("batch size", request.batch_size)):
        if value < 1:
            errors.append(f"{name} {value} is too small; expected a whole number >= 1")
    errors += _folder_errors(request.out)
    if errors:
        return errors
    plan = SweepPlan(frameworks=frameworks, ranks=ranks, steps=request.steps, model_width=request.model_width,
                     batch_size=request.batch_size, dataset=request.dataset,
                     device=resolve_device(request.device, gpu_count, max(ranks)), python=request.python)
    return problems(plan, cpu_count=cpu_count, gpu_count=gpu_count)


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


def sweep_argv(request: SweepRequest) -> list[str]:
    """The command that runs ``request``: ``python -m gui.cli sweep ...`` with the interpreter of the trainers."""
    return [request.python, "-m", "gui.cli", "sweep", "--frameworks", ",".join(request.frameworks),
            "--ranks", request.ranks.replace(" ", ""), "--steps", str(request.steps),
            "--model-width", str(request.model_width), "--batch-size", str(request.batch_size),
            "--dataset", request.dataset, "--device", request.device, "--out", str(Path(request.out).expanduser())]


def sweep_env() -> dict[str, str]:
    """What the sweep's process adds to the app's environment: unbuffered output (progress arrives as it happens)
    and this project first on ``PYTHONPATH`` (``gui.cli`` importable whatever the working directory)."""
    path = os.pathsep.join(p for p in (str(PROJECT_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONUNBUFFERED": "1", "PYTHONPATH": path}


def default_out_folder(now: float | None = None) -> str:
    """A new folder for a sweep: ``<XDG_DATA_HOME or ~/.local/share>/ringscope/sweeps/sweep-YYYYmmdd-HHMMSS``."""
    base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return str(base / "ringscope" / "sweeps" / time.strftime("sweep-%Y%m%d-%H%M%S", time.localtime(now)))

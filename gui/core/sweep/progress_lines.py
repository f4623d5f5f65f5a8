"""The progress lines of a sweep: ``ringscope sweep`` prints one machine-readable line when each configuration starts
and one when it ends, written and read here so that both sides (the CLI and the window that follows it) agree::

    SWEEP config 3 of 6: ddp:2 started
    SWEEP config 3 of 6: ddp:2 done
    SWEEP config 4 of 6: tf-mirrored:1 failed: torchrun (pid 812) failed with exit code 1; ...

``format_progress`` writes a line, ``parse_progress`` reads one back (``SweepProgress``), and ``ProgressLines`` turns
``SweepRunner``'s callbacks into them. Never imports Qt and never starts a process.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from ringscope.gui.core.sweep.plan import Configuration

if TYPE_CHECKING:
    from ringscope.gui.core.sweep.runner import RunOutcome

PROGRESS_PREFIX: Final[str] = "SWEEP config "
EVENTS: Final[tuple[str, ...]] = ("started", "done", "failed", "stopped")
_LINE = re.compile(r"SWEEP config (\d+) of (\d+): ([a-z][a-z-]*):(\d+) (started|done|failed|stopped)(?:: (.*))?")


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

"""Which run the window shows when runs come and go: the auto-selection rule, in one place.

The user's pick wins: a run appearing later (a new launch, a new run id from outside) is shown at once, unless the
user picked a run in the last ``AUTO_SELECT_HOLD_S`` seconds (they are reading it). A launch from this window is
shown when its first agent says hello, unless the user picked a run after launching it. Before any pick, or when
the shown run is gone from memory, the newest run is shown. The window never jumps to an older run by itself.

Plain Python (no widgets): the window asks ``choose`` a few times a second with the run ids it has just listed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

AUTO_SELECT_HOLD_S = 60.0
"""A run the user picked stays shown at least this long, even when a new run appears."""


class RunSelection:
    """The auto-selection rule's memory: runs seen, launches started here, when the user last picked a run."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, hold_s: float = AUTO_SELECT_HOLD_S) -> None:
        self._clock = clock
        self.hold_s = hold_s
        self.known: set[str] = set()
        self.launched_s: dict[str, float] = {}
        self.picked_s = -math.inf

    def note_picked(self) -> None:
        """The user picked a run (a click in the runs table)."""
        self.picked_s = self._clock()

    def note_launched(self, run_id: str) -> None:
        """A launch from this window started under ``run_id``."""
        self.launched_s[run_id] = self._clock()

    def choose(self, run_ids: Sequence[str], shown: str | None, shown_available: bool) -> str | None:
        """The run to show now, or None to keep ``shown``. ``run_ids``: every run, oldest first."""
        new = [run_id for run_id in run_ids if run_id not in self.known]
        self.known.update(new)
        if shown is None or not shown_available:
            return run_ids[-1] if run_ids else None
        launched = [run_id for run_id in new if run_id in self.launched_s]
        if launched and self.launched_s[launched[-1]] > self.picked_s:
            return launched[-1]  # launched here, and the user has not picked another run since
        if new and self._clock() - self.picked_s >= self.hold_s:
            return new[-1]
        return None

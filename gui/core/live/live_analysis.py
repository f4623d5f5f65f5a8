"""Whole-session analysis and cost while a training runs, computed off the GUI thread.

The live store keeps only recent steps (enough for charts), but cost so far, waste by cause and work at risk are
whole-session figures. ``LiveAnalyzer`` reads a source on its own thread, runs ``analyze`` + ``estimate_cost``, and
keeps the latest result for the GUI timer to pick up. The window's source is the shown run's live store within
``LIVE_STEPS`` / ``LIVE_GPU_READINGS``: the duration and the devices come from the agents, the waiting from the
store's running phase totals (``SessionData.phase_totals``: every step, also those it no longer holds), the
findings from the recent steps. Bounded whatever the run's length; a source that re-reads a recording grows with it
(a viewer's is loaded once).

It never touches Qt, never blocks the caller, and never raises: a failed pass is logged and the previous result
stays. Its period stretches with the size of the session (at least ``PERIOD_FACTOR`` x the last pass), so a long
run never makes it eat a core.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from ringscope.gui.core.analysis.cost import CostBreakdown, estimate_cost
from ringscope.gui.core.analysis.summary import SessionAnalysis, analyze
from ringscope.gui.core.session_data import SessionData

log = logging.getLogger(__name__)

PERIOD_FACTOR: Final[float] = 10.0
"""The analyzer sleeps at least this many times as long as its last pass took (so it uses <= ~10 % of a core)."""
LIVE_STEPS: Final[int] = 1 << 16
"""Step rows a pass reads from a live store at most (``LiveStore.to_session_data``'s budget): 64 of each rank's
steps at 1 024 ranks, 8 at 8 192. A pass's copy is made and pickled in the ingest process while the steps that arrive
wait for its GIL: with the store's own budget (32 steps a rank, 64 GPU readings a GPU) it was 64-68 MB at 8 192
ranks 35 s in (more as the GPU rings fill), ~0.6 s of the ingest process a pass, and latency spiked to 1.6 s every
~20 s."""
LIVE_GPU_READINGS: Final[int] = 1 << 16
"""GPU readings a pass reads from a live store at most: 8 at 8 192 GPUs (the cost and GPU figures are means)."""
LIVE_LEAST: Final[int] = 4
"""Steps of each rank and readings of each GPU a pass reads at least, however many there are."""
QUIET_AFTER_S: Final[float] = 10.0
"""After this long without a new step, cost is priced up to the last step instead of up to now."""


@dataclass(frozen=True, slots=True)
class LiveFigures:
    """One pass: the analysis, its cost, when it was made, how long it took, and a counter that grows per pass."""

    analysis: SessionAnalysis
    cost: CostBreakdown
    made_s: float
    took_s: float
    version: int
    run_id: str | None = None  # the run these figures are about (None: the whole session)


class LiveAnalyzer:
    """Analyzes the session every ``min_period_s`` (or slower, see ``PERIOD_FACTOR``) on a daemon thread.

    Args:
        source: returns the whole session so far (called on the analyzer's thread).
        price: returns the price per GPU-hour to use now (None: the agents' or the default price).
        priced_until: for a run id, until when it costs money (``LiveRuns.priced_until``: its last message while it
            runs, its end afterwards). Without it a run is priced up to now while steps arrive.
    """

    def __init__(self, source: Callable[[], SessionData], price: Callable[[], float | None],
                 min_period_s: float = 2.0, *, priced_until: Callable[[str], float | None] | None = None) -> None:
        self._source = source
        self._price = price
        self._priced_until = priced_until
        self._run_id: str | None = None
        self._min_period_s = min_period_s
        self._latest: LiveFigures | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ringscope-live-analysis", daemon=True)

    # ---- Public API ----------------------------------------------------------------------------------------------

    def start(self) -> LiveAnalyzer:
        """Start the thread. Returns self."""
        self._thread.start()
        return self

    def latest(self) -> LiveFigures | None:
        """The most recent figures, or None before the first pass finished."""
        return self._latest

    def select(self, run_id: str | None) -> None:
        """Analyze one run from now on (None: the whole session); the previous run's figures are dropped."""
        if run_id != self._run_id:
            self._run_id = run_id
            self._latest = None
            self._wake.set()

    @property
    def run_id(self) -> str | None:
        """The run being analyzed (None: the whole session)."""
        return self._run_id

    def refresh(self) -> None:
        """Ask for a pass now (e.g. after the price changed)."""
        self._wake.set()

    def analyze_now(self) -> LiveFigures | None:
        """Run one pass on the calling thread (tests, and the final figures at shutdown)."""
        self._pass()
        return self._latest

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the thread (a pass in progress finishes first, within ``timeout_s``)."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    # ---- Thread --------------------------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            took = self._pass()
            self._wake.wait(max(self._min_period_s, PERIOD_FACTOR * took))
            self._wake.clear()

    def _pass(self) -> float:
        started = time.monotonic()
        run_id = self._run_id
        try:
            session = self._source()
            if run_id is not None:
                session = session.for_run(run_id)
            analysis = analyze(session)
            now = time.time()
            priced = self._priced_until(run_id) if self._priced_until is not None and run_id is not None else None
            if priced is None:
                # While steps still arrive the money keeps flowing up to now; once the run went quiet, stop the meter.
                live = analysis.steps_total > 0 and now - analysis.end_s < QUIET_AFTER_S
                priced = now if live else None
            cost = estimate_cost(analysis, session, self._price(), now_s=priced)
        except Exception:  # a session file mid-write, a bad price: keep the last figures, try again later
            log.exception("live analysis pass failed; keeping the previous figures")
            return time.monotonic() - started
        took = time.monotonic() - started
        version = 1 if self._latest is None else self._latest.version + 1
        if run_id != self._run_id:
            return took  # the selection changed during the pass: these figures are about another run
        self._latest = LiveFigures(analysis, cost, time.time(), took, version, run_id)
        return took

"""The top of the window: "is this training healthy, and if not, why?" in six cards.

Run (framework, strategy, ranks, hosts, elapsed, step, recording), throughput, step time, idle share and its main
cause, the straggler, and the cost of waiting. Receives snapshots; owns no state but its labels.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
from PySide6 import QtCore, QtWidgets

from ringscope.agent.schema import field_doc
from ringscope.gui.core.analysis.cost import CURRENCY, DEFAULT_PRICE_PER_GPU_HOUR
from ringscope.gui.core.analysis.goodput import CAUSE_TEXT as GOODPUT_TEXT
from ringscope.gui.core.analysis.goodput import CAUSES as GOODPUT_CAUSES
from ringscope.gui.core.analysis.goodput import PRODUCTIVE
from ringscope.gui.core.analysis.hang import HangVerdict
from ringscope.gui.core.analysis.summary import SessionAnalysis
from ringscope.gui.core.live.store import STATE_FINISHED, STATE_LOST, Snapshot
from ringscope.gui.views import theme
from ringscope.gui.views.qt_plot_tools import format_seconds, format_share


class _Card(QtWidgets.QFrame):
    def __init__(self, title: str, tooltip: str) -> None:
        super().__init__()
        self.setObjectName("card")
        self.setToolTip(tooltip)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(10, 6, 10, 6)
        layout.setSpacing(2)
        self.title = QtWidgets.QLabel(title)
        self.title.setObjectName("cardTitle")
        self.value = QtWidgets.QLabel("—")
        self.value.setObjectName("cardValue")
        self.value.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
        self.detail = QtWidgets.QLabel("")
        self.detail.setObjectName("cardDetail")
        self.detail.setWordWrap(True)
        self.detail.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
        for widget in (self.title, self.value, self.detail):
            layout.addWidget(widget)
        layout.addStretch(1)

    def show_values(self, value: str, detail: str, color: str | None = None) -> None:
        # Only what changed: with the app's style sheet, setStyleSheet re-polishes the label (and a new text may
        # re-layout the card) even when nothing is different, and this runs every frame.
        style = f"color: {color};" if color else ""
        if self.value.text() != value:
            self.value.setText(value)
        if self.value.styleSheet() != style:
            self.value.setStyleSheet(style)
        if self.detail.text() != detail:
            self.detail.setText(detail)


class QtOverview(QtWidgets.QWidget):
    """Cards answering "healthy, and if not, why?"; ``cost_widget`` (whole-session cost) is added at the end."""

    def __init__(self, cost_widget: QtWidgets.QWidget | None = None) -> None:
        super().__init__()
        layout = QtWidgets.QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.run = _Card("Run", "The training the agents describe (from their hello messages).")
        self.throughput = _Card("Throughput", "Samples per second over the last 5 s, all ranks together.")
        self.step_time = _Card("Step time", field_doc("step_s") + " Median, p95 and max over every recent step of "
                                                                    "every rank (the last 20 steps of each).")
        self.idle = _Card("Idle share", "Share of step time the accelerators were not computing: data wait + "
                                        "exposed comm + other (last 20 steps, all ranks).")
        self.network_verdict: tuple[str, str] | None = None  # (value, detail) while the links are the bottleneck
        self.straggler = _Card("Straggler", "The rank the others wait for: in synchronous data parallelism the "
                                            "slowest rank waits least in AllReduce. " + field_doc("comm_exposed_s"))
        self.cost = _Card("Cost of waiting", "Idle share x GPUs x price per GPU-hour (set the price in "
                                             "Preferences): what waiting costs per hour right now.")
        self.goodput = _Card("Goodput", "Share of the run's wall time spent in training steps that were kept (less "
                                        "their waiting); the rest by cause: waiting, checkpoints, hang until "
                                        "detected, detection to restart, start-up, steps redone after a restart "
                                        "(README, Definitions).")
        cards = [self.run, self.throughput, self.step_time, self.idle, self.straggler, self.goodput, self.cost]
        for card in cards:
            layout.addWidget(card, 3 if card is self.run else 2)  # the run card says the most
        if cost_widget is not None:  # whole-session money figures next to the live waiting rate
            layout.addWidget(cost_widget, 3)
        self.setSizePolicy(QtWidgets.QSizePolicy.Policy.Preferred, QtWidgets.QSizePolicy.Policy.Maximum)

    # ---- Public API ----------------------------------------------------------------------------------------------

    def render(self, snap: Snapshot, recording: str, price_per_gpu_hour: float | None, run: Any = None,
               hang: HangVerdict | None = None) -> None:
        """Show one snapshot; ``run`` is the selected run's row of the runs table (state, exit code), if any;
        ``hang`` the verdict while the run is hung (the straggler card then names the ranks that did not arrive)."""
        n = len(snap.state)
        lost = snap.state.count(STATE_LOST)
        finished = snap.state.count(STATE_FINISHED)
        hosts = len({h for h in snap.hosts if h != "?"})
        step = int(np.nanmax(snap.current_step)) if n and np.isfinite(snap.current_step).any() else None
        what = f"{snap.framework} / {snap.strategy}" if snap.framework else "waiting for agents"
        states = f"{n} ranks" + (f" ({lost} lost)" if lost else "") + (f" ({finished} finished)" if finished else "")
        host_text = f"{hosts} host{'s' if hosts != 1 else ''}"
        lifecycle, color = self._lifecycle(snap, run, lost)
        run_name = f"run {snap.run_id}<br>" if snap.run_id else ""
        recording = recording.rsplit("/", 1)[-1]  # the file's name: the status bar shows its whole path
        self.run.show_values(what, f"{run_name}{lifecycle}<br>{states} · {host_text} · step "
                                   f"{step if step is not None else '—'}<br>recording: {recording}", color)
        self._render_throughput(snap, n - finished)
        p50, p95, worst = snap.step_pct_s
        if math.isfinite(p50):
            self.step_time.show_values(format_seconds(p50), f"p95 {format_seconds(p95)} · max {format_seconds(worst)}"
                                                            + (" · at the end" if snap.ended else ""))
        else:
            self.step_time.show_values("no data", "")
        measured = not math.isnan(snap.idle_share)
        fit = not measured and bool(np.isfinite(snap.recent_step_s).any())  # steps, but no phase was timed
        if fit:
            self.idle.show_values("not measured", "phases not measured with fit: Keras model.fit reports the step "
                                                  "time only (a custom loop measures data wait, compute and comm)")
        elif not measured:
            self.idle.show_values("no data", "no steps with compute times yet")
        else:
            cause = snap.idle_cause
            self.idle.show_values(format_share(snap.idle_share),
                                  f'main cause: <span style="color:{theme.PHASE_COLORS[cause]}">&#9632;</span> '
                                  f"{theme.PHASE_LABELS[cause]} {format_share(snap.idle_cause_share)} of step time"
                                  + (" · at the end" if snap.ended else ""),
                                  theme.ALERT_COLOR if snap.idle_share > 0.5 else None)
        final = " (final verdict)" if snap.ended else ""
        if hang is not None:
            now = time.time()
            stuck = ", ".join(str(p.rank) for p in hang.stuck) or "none outside the collective"
            self.straggler.show_values(f"hung · stuck: rank {stuck}" if hang.stuck else "hung",
                                       f"{hang.summary(now)}; {hang.device_hours(now):.3f} device-hours burnt "
                                       "waiting · Run ▸ Hang details… (Ctrl+H) shows the stacks",
                                       theme.ALERT_COLOR)
        elif snap.straggler is None and self.network_verdict is not None:
            value, evidence = self.network_verdict
            self.straggler.show_values(value, evidence + final, theme.ALERT_COLOR)
        elif snap.straggler is None:
            self.straggler.show_values("none", ("no rank makes the others wait (> 5 % of a step)" + final)
                                       if n > 1 else "needs two or more ranks", theme.OK_COLOR if n > 1 else None)
        else:
            self.straggler.show_values(f"rank {snap.straggler.rank}", snap.straggler.reason + final,
                                       theme.STRAGGLER_COLOR)
        self._render_goodput(run, price_per_gpu_hour)
        self._render_cost(snap, price_per_gpu_hour, fit)

    def show_network(self, analysis: SessionAnalysis | None) -> None:
        """Take the whole-session analysis' network verdict (``LiveAnalyzer``, every few seconds): when every rank
        waits on a link that queues, the Straggler card names the host instead of saying "none"."""
        network = analysis.network if analysis is not None else None
        if analysis is None or analysis.wait_diagnosis != "network" or network is None or not network.congested:
            self.network_verdict = None
        elif network.slow_host is not None:
            self.network_verdict = (f"none · network: {network.slow_host}", network.evidence())
        else:
            self.network_verdict = ("none · network", network.evidence())

    # ---- Cards ---------------------------------------------------------------------------------------------------

    @staticmethod
    def _lifecycle(snap: Snapshot, run: Any, lost: int) -> tuple[str, str | None]:
        """The run's state in words (with how long it ran) and the Run card's colour."""
        state = getattr(run, "state", None) or snap.run_state or "running"
        if not snap.framework:
            return "no run yet", None
        elapsed = _clock(snap.elapsed_s) if math.isfinite(snap.elapsed_s) else "—"
        if state == "running":
            return f"running · {elapsed} elapsed", theme.ALERT_COLOR if lost else None
        if state == "hung":
            return f"hung: no rank completes a step · {elapsed} elapsed", theme.ALERT_COLOR
        code = getattr(run, "exit_code", None)
        text = {
            "finished": f"finished {elapsed}",
            "stopped": f"stopped after {elapsed}",
            "failed": f"failed (exit {code}) after {elapsed}" if code is not None else f"failed after {elapsed}",
            "lost": f"lost after {elapsed}: a rank vanished without saying goodbye",
            "unfinished": f"unfinished: the recording ended after {elapsed}",
        }.get(state, f"{state} after {elapsed}")
        color = {"finished": theme.OK_COLOR, "failed": theme.ALERT_COLOR, "lost": theme.ALERT_COLOR}.get(state)
        return text, color

    def _render_goodput(self, run: Any, price_per_gpu_hour: float | None) -> None:
        goodput = getattr(run, "goodput", None)
        if goodput is None or not goodput.wall_s or not math.isfinite(goodput.ratio):
            self.goodput.show_values("—", "no steps yet")
            return
        lost = sorted((c for c in GOODPUT_CAUSES if c != PRODUCTIVE and goodput.share(c) >= 0.005),
                      key=lambda c: -goodput.seconds[c])[:2]
        price = price_per_gpu_hour or DEFAULT_PRICE_PER_GPU_HOUR  # as the cost card prices it
        parts = [f"{GOODPUT_TEXT[c]} {format_share(goodput.share(c))} ({CURRENCY}{goodput.cost(c, price):,.2f})"
                 for c in lost]
        attempts = getattr(run, "attempts", 1)
        detail = ("lost to: " + ", ".join(parts) if parts else "nothing lost") + (
            f"<br>{run.attempts_text}" if attempts > 1 else "")
        color = theme.ALERT_COLOR if goodput.ratio < 0.5 else (theme.OK_COLOR if goodput.ratio >= 0.8 else None)
        self.goodput.show_values(format_share(goodput.ratio), detail, color)

    def _render_throughput(self, snap: Snapshot, active: int) -> None:
        if math.isnan(snap.steps_per_s):
            if snap.steps_total:  # steps came, all in the current second: a rate needs one complete second
                self.throughput.show_values("measuring", f"{snap.steps_total:,} step(s) received; rate in 1 s")
            else:
                self.throughput.show_values("no data", "no steps received yet")
            return
        final = "final: " if snap.ended else ""
        per_rank = snap.steps_per_s / max(1, active if not snap.ended else len(snap.state))
        value = (f"{final}{snap.samples_per_s:,.0f} samples/s" if not math.isnan(snap.samples_per_s)
                 else f"{final}samples/s not reported")
        when = "over its last seconds" if snap.ended else "last 5 s"
        self.throughput.show_values(value, f"{per_rank:.1f} steps/s per rank · {snap.steps_per_s:,.0f} steps/s total"
                                           f" ({when})")

    def _render_cost(self, snap: Snapshot, price: float | None, fit: bool) -> None:
        gpus = len(snap.gpus) or len(snap.state)
        unit = "GPU" if snap.gpus else "rank"  # CPU-only runs are priced per rank, as in the reports
        source = "" if price else " (default price; set yours in Preferences, Ctrl+,)"
        price = price or DEFAULT_PRICE_PER_GPU_HOUR
        if fit:
            self.cost.show_values("not measured", "Keras fit does not split the step: waiting cannot be priced "
                                                  f"({gpus} {unit}s at {CURRENCY}{price:.2f} per hour{source})")
        elif math.isnan(snap.idle_share):
            self.cost.show_values("no data", f"{gpus} {unit}s at {CURRENCY}{price:.2f} per hour{source}")
        else:
            wasted = snap.idle_share * gpus * price
            when = ", at its end" if snap.ended else source
            self.cost.show_values(f"{CURRENCY}{wasted:,.2f} / h",
                                  f"{format_share(snap.idle_share)} idle x {gpus} {unit}s x {CURRENCY}{price:.2f} "
                                  f"per {unit}-hour{when}")


def _clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 3600:d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"

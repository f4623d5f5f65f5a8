"""The sweep's outputs: ``SweepReport`` (everything they show), ``sweep.csv`` and the self-contained ``sweep.html``.

Owns the words every output shares (the subtitle, the notes on how figures were measured) and the page: the
recommendation with its evidence, the equal-footing statement, throughput against ranks with the ideal linear line
and the scaling efficiency (the report's embedded uPlot, offline), the phase shares and the cost per 1000 samples of
each configuration, and every figure in a sortable table. The PDF is ``ringscope.gui.core.sweep.pdf``. Files are written
through a temporary file and renamed (``ringscope.gui.core.report.html``). Never imports Qt.
"""

from __future__ import annotations

import csv
import io
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from ringscope.gui.core.analysis.summary import WARMUP_STEPS
from ringscope.gui.core.phases import COMM_EXPOSED, COMPUTE, DATA_WAIT, OTHER, PHASE_BY_NAME
from ringscope.gui.core.report import interactive
from ringscope.gui.core.report.html import STYLE, legend_html, write_text_atomically
from ringscope.gui.core.report.interactive import escape
from ringscope.gui.core.report.model import duration_text, when_text
from ringscope.gui.core.session_data import SessionData
from ringscope.gui.core.sweep.advice import Advice, money, recommend, title
from ringscope.gui.core.sweep.analysis import Footing, SweepRow, check_footing, sweep_rows
from ringscope.gui.core.sweep.plan import SweepPlan
from ringscope.gui.core.sweep.runner import RunOutcome

CSV_COLUMNS: Final[tuple[str, ...]] = (
    "framework", "ranks", "global_batch", "steps", "samples_per_s", "efficiency", "data_wait_share", "compute_share",
    "allreduce_stall_share", "other_share", "bytes_per_step", "cost_per_1000_samples", "waiting_cost",
    # what every configuration trained (the equal-footing check) and which run of sweep.db it is
    "batch_size_per_rank", "model_width", "model_depth", "dataset", "equal_footing", "comm_delay_ms", "run_id",
    "status",
    # a user script's sweep: its throughput when its steps carry no sample count, the unit, and what ran
    "steps_per_s", "throughput_unit", "script",
)
"""``sweep.csv``'s header: one row per configuration; an empty cell is a figure that was not measured (a user
script's sweep leaves the reference trainers' batch_size_per_rank, model_width, model_depth and dataset empty)."""
FRAMEWORK_COLORS: Final[dict[str, str]] = {"ddp": "#59a14f", "tf-mirrored": "#b07aa1", "tf-multi-worker": "#9c755f"}
"""One color per framework in the sweep's charts (not a phase color: phases have theirs)."""
IDEAL_DASH: Final[list[int]] = [6, 4]
SHARE_PHASES: Final[tuple[tuple[str, str], ...]] = (
    ("data_wait_share", DATA_WAIT.name), ("compute_share", COMPUTE.name),
    ("allreduce_stall_share", COMM_EXPOSED.name), ("other_share", OTHER.name))
"""Row share fields in stacking order, with their phase (color and label)."""

STYLE_EXTRA = """
.ok{border-left:4px solid #59a14f;padding:.3em .8em;background:#f3f8f1}
.bad{border-left:4px solid #d62728;padding:.3em .8em;background:#fbeeee}
ul.evidence li{margin:.25em 0}
.wide{width:260px}
.nowrap{white-space:nowrap}
.unchecked{border-left:4px solid #888;padding:.3em .8em;background:#f4f4f4}
p.reason{margin:.4em 0 .4em .9em}
"""


@dataclass(frozen=True, slots=True)
class SweepReport:
    """What the sweep's outputs show: the request, the runs, one row per configuration, advice and footing."""

    plan: SweepPlan
    outcomes: tuple[RunOutcome, ...]
    rows: tuple[SweepRow, ...]
    advice: Advice
    footing: Footing
    session_path: str
    wall_s: float
    created_s: float

    def subtitle(self) -> str:
        """One line: frameworks, rank counts, steps, the model and data, the device, when and how long."""
        p = self.plan
        frameworks = " vs ".join(title(f) for f in p.frameworks)
        ranks = ", ".join(str(n) for n in p.ranks)
        if p.uses_script:
            return (f"{frameworks} on {ranks} rank(s) · user script {p.script_command()} (zero-code) · "
                    f"{p.device.upper()} · {when_text(self.created_s)} · {duration_text(self.wall_s)}")
        return (f"{frameworks} on {ranks} rank(s) · {p.steps} steps per run · {p.dataset}, MLP width "
                f"{p.model_width} x depth {p.model_depth}, {p.batch_size} samples per rank per step · "
                f"{p.device.upper()} · {when_text(self.created_s)} · {duration_text(self.wall_s)}")

    def notes(self) -> list[str]:
        """How the figures were measured, in sentences (HTML and PDF show the same)."""
        unit = next((row.cost_unit for row in self.rows if row.cost_unit), "GPU-hours")
        price = next((row.price_per_gpu_hour for row in self.rows if row.price_per_gpu_hour is not None), None)
        what = ("the reference trainer (trainers/ddp_trainer.py under torchrun, trainers/tf_trainer.py for TensorFlow)"
                if not self.plan.uses_script else
                f"the user's script ({self.plan.script_command()}) unmodified, instrumented by the zero-code path "
                "of ringscope run (torchrun --nproc-per-node N for ddp, N TF_CONFIG workers for tf-multi-worker, "
                "the first N GPUs for tf-mirrored)")
        amount = ("samples" if all(row.throughput_unit != "steps/s" for row in self.rows) else
                  "samples (steps where the script's steps carry no sample count: steps/s, not priced)")
        notes = [
            f"Each configuration ran {what} alone on this machine, one after the other, all recorded "
            f"into {self.session_path}, each under its own run id (ringscope report {self.session_path} --run ID "
            "gives one run's full report).",
            f"Steady state: each rank's first batch and first {WARMUP_STEPS} steps are left out, as in ringscope "
            f"report. Throughput = {amount} of all ranks per second over the steady span; shares are of the mean "
            "step.",
            "Scaling efficiency = throughput(N) / (N x throughput(1)) of the same framework; the ideal line is N x "
            "throughput(1).",
            "Cost per 1000 samples = ranks x price x the time 1000 samples take at the measured throughput"
            + (f" ({money(price)} per {unit[:-1]})" if price is not None else "")
            + "; waiting cost = its idle part (data wait + AllReduce stall + other)."
            + (" No GPU in these runs: each rank is priced as one GPU-hour per hour (rank-hours)."
               if unit == "rank-hours" else ""),
            "bytes_per_step: gradient bytes one rank all-reduces per step, as the agent reports them (DDP); empty "
            "where the framework does not report it.",
        ]
        delays = [row for row in self.rows if row.comm_delay_ms > 0]
        if delays:
            notes.append("Injected all-reduce delay (a test hook, --comm-delay-ms-for): " + ", ".join(
                f"{row.label} {row.comm_delay_ms:g} ms per all-reduce" for row in delays) + ".")
        return notes


def build_report(session: SessionData, outcomes: Sequence[RunOutcome], plan: SweepPlan, *, session_path: str,
                 wall_s: float, price_per_gpu_hour: float | None = None,
                 created_s: float | None = None) -> SweepReport:
    """Measure every configuration's run in ``session`` and derive the advice and the equal-footing check."""
    rows = sweep_rows(session, outcomes, plan, price_per_gpu_hour)
    return SweepReport(plan, tuple(outcomes), tuple(rows), recommend(rows), check_footing(outcomes, plan),
                       session_path, wall_s, time.time() if created_s is None else created_s)


# ---- CSV -----------------------------------------------------------------------------------------------------------


def csv_text(report: SweepReport) -> str:
    """``sweep.csv``: the header ``CSV_COLUMNS`` and one row per configuration, in run order."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    p = report.plan
    equal = report.footing.csv_value
    trained: list[object] = ["", "", "", ""] if p.uses_script else [p.batch_size, p.model_width, p.model_depth,
                                                                   p.dataset]
    for row in report.rows:
        writer.writerow([
            row.framework, row.ranks, _cell(row.global_batch), _cell(row.steps), _cell(row.samples_per_s),
            _cell(row.efficiency), _cell(row.data_wait_share), _cell(row.compute_share),
            _cell(row.allreduce_stall_share), _cell(row.other_share), _cell(row.bytes_per_step),
            _cell(row.cost_per_1000_samples), _cell(row.waiting_cost), *trained, equal, _cell(row.comm_delay_ms),
            row.run_id, row.status, _cell(row.steps_per_s), row.throughput_unit, p.script_command(),
        ])
    return buffer.getvalue()


def write_csv(report: SweepReport, path: str | Path) -> Path:
    """Write ``sweep.csv`` (atomically)."""
    return write_text_atomically(Path(path), csv_text(report))


def _cell(value: float | int | None) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return ""
    if isinstance(value, int):
        return str(value)
    return f"{value:.10g}"


# ---- HTML ----------------------------------------------------------------------------------------------------------


def render_html(report: SweepReport) -> str:
    """The sweep page (self-contained: inline CSS, the embedded uPlot and script; no URL)."""
    footing_class = "ok" if report.footing.equal else "bad" if report.footing.checked else "unchecked"
    evidence = "".join(f"<li>{escape(line)}</li>" for line in report.advice.evidence)
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>Ringscope scaling sweep</title>"
        f"<style>{STYLE}{STYLE_EXTRA}</style>{interactive.head_assets()}</head><body>",
        f"<h1>Ringscope scaling sweep</h1><p class='sub'>{escape(report.subtitle())}</p>",
        f"<p class='verdict' id='recommendation'>{escape(report.advice.headline)}</p>",
        "".join(f"<p class='reason'>{escape(reason)}</p>" for reason in report.advice.reasons),
        _section("evidence", "Evidence", f"<ul class='evidence'>{evidence}</ul>"),
        _section("footing", "Equal footing", f"<p class='{footing_class}'>{escape(report.footing.text)}</p>"),
        _section("scaling", "Throughput vs ranks",
                 f"<p class='evidence'>{throughput_unit(report.rows).capitalize()} of all ranks (steady state) "
                 "for each framework; dashed: "
                 "the ideal linear line N x throughput(1). Hover for values, click a legend entry to hide a line."
                 "</p>" + _throughput_chart(report.rows, report.plan)
                 + "<h3>Scaling efficiency</h3><p class='evidence'>throughput(N) / (N x throughput(1)); 100 % is "
                   "linear scaling.</p>" + _efficiency_chart(report.rows, report.plan)),
        _section("phases", "Where the step time went",
                 "<p class='evidence'>Share of the mean steady-state step in each phase, per configuration.</p>"
                 + legend_html() + _phase_table(report.rows)),
        _section("cost", "Cost per 1000 samples", _cost_table(report.rows)),
        _section("configurations", "All figures", _figures_table(report.rows)),
        _section("method", "How these figures were measured",
                 "<ul>" + "".join(f"<li>{escape(note)}</li>" for note in report.notes()) + "</ul>"),
        interactive.body_scripts() + "</body></html>",
    ]
    return "\n".join(parts)


def write_html(report: SweepReport, path: str | Path) -> Path:
    """Write ``sweep.html`` (atomically)."""
    return write_text_atomically(Path(path), render_html(report))


def _throughput_chart(rows: Sequence[SweepRow], plan: SweepPlan) -> str:
    unit = throughput_unit(rows)
    series = []
    for framework in plan.frameworks:
        color = FRAMEWORK_COLORS.get(framework, COMPUTE.color)
        measured = [row_value(rows, framework, n, "throughput") for n in plan.ranks]
        base = row_value(rows, framework, 1, "throughput")
        series.append({"label": f"{framework} measured", "color": color, "values": measured, "points": 7})
        if base is not None:
            series.append({"label": f"{framework} ideal (N x 1 rank)", "color": color, "dash": IDEAL_DASH,
                           "points": 0, "values": [n * base for n in plan.ranks]})
    return interactive.xy_chart("chart-throughput", [float(n) for n in plan.ranks], series, xlabel="ranks",
                                ylabel=f"{unit} (all ranks)", unit=unit, xunit="ranks",
                                xticks=[float(n) for n in plan.ranks])


def _efficiency_chart(rows: Sequence[SweepRow], plan: SweepPlan) -> str:
    series: list[dict[str, object]] = [
        {"label": f"{framework}", "color": FRAMEWORK_COLORS.get(framework, COMPUTE.color), "points": 7,
         "values": [None if (e := row_value(rows, framework, n, "efficiency")) is None else 100 * e
                    for n in plan.ranks]}
        for framework in plan.frameworks]
    series.append({"label": "linear (100 %)", "color": "#888888", "dash": IDEAL_DASH, "points": 0,
                   "values": [100.0 for _ in plan.ranks]})
    top = max([100.0, *(100 * (row.efficiency or 0) for row in rows)])
    return interactive.xy_chart("chart-efficiency", [float(n) for n in plan.ranks], series, xlabel="ranks",
                                ylabel="scaling efficiency (%)", unit="%", xunit="ranks",
                                xticks=[float(n) for n in plan.ranks], ymax=top * 1.1, height=240)


def _phase_table(rows: Sequence[SweepRow]) -> str:
    heads = ["Configuration", "Step (ms)", *(PHASE_BY_NAME[phase].label + " (%)" for _, phase in SHARE_PHASES),
             "Share of step"]
    body = []
    for row in rows:
        shares = [getattr(row, name) for name, _ in SHARE_PHASES]
        bar = "".join(f"<span style='width:{100 * share:.2f}%;background:{PHASE_BY_NAME[phase].color}' "
                      f"title='{escape(PHASE_BY_NAME[phase].label)}: {100 * share:.1f} %'></span>"
                      for share, (_, phase) in zip(shares, SHARE_PHASES, strict=True) if share is not None)
        cells = "".join(interactive.number_cell(None if s is None else 100 * s, 1) for s in shares)
        body.append(f"<tr><td>{escape(row.label)}</td>"
                    f"{interactive.number_cell(None if row.step_s is None else row.step_s * 1e3, 2)}{cells}"
                    f"<td><div class='bar wide'>{bar}</div></td></tr>")
    return interactive.sortable_table(heads, body, "Steady state; click a column heading to sort.")


def _cost_table(rows: Sequence[SweepRow]) -> str:
    priced = [row.cost_per_1000_samples for row in rows if row.cost_per_1000_samples is not None]
    most = max(priced, default=0.0) or 1.0
    heads = ["Configuration", "Cost per 1000 samples", "of which waiting", "Useful (blue) and waiting (red)"]
    body = []
    for row in rows:
        cost, waiting = row.cost_per_1000_samples, row.waiting_cost
        bar = ""
        if cost is not None:
            waiting_part = waiting or 0.0
            bar = (f"<div class='bar wide'><span style='width:{100 * (cost - waiting_part) / most:.2f}%;"
                   f"background:{COMPUTE.color}'></span><span style='width:{100 * waiting_part / most:.2f}%;"
                   f"background:{COMM_EXPOSED.color}'></span></div>")
        body.append(f"<tr><td>{escape(row.label)}</td><td class='num' data-v='{cost or -1:.8g}'>{money(cost)}</td>"
                    f"<td class='num' data-v='{waiting or -1:.8g}'>{money(waiting)}</td><td>{bar}</td></tr>")
    return interactive.sortable_table(heads, body, "Bars on one scale: the longest is the most expensive "
                                                   "configuration. Waiting = data wait + AllReduce stall + other.")


def _figures_table(rows: Sequence[SweepRow]) -> str:
    heads = ["Configuration", "Global batch", "Steps", throughput_unit(rows).capitalize(), "Efficiency (%)",
             "Stall (%)", "Compute (%)", "Bytes per step", "Status", "Run id"]
    body = []
    for row in rows:
        numbers = [(row.global_batch, 0), (row.steps, 0), (row.throughput, 1), (_pct(row.efficiency), 1),
                   (_pct(row.allreduce_stall_share), 1), (_pct(row.compute_share), 1), (row.bytes_per_step, 0)]
        cells = "".join(interactive.number_cell(value, digits) for value, digits in numbers)
        body.append(f"<tr><td>{escape(row.label)}</td>{cells}<td>{escape(row.status)}</td>"
                    f"<td class='nowrap'>{escape(row.run_id)}</td></tr>")
    return interactive.sortable_table(heads, body, "Every figure of sweep.csv; click a column heading to sort.")


def _pct(share: float | None) -> float | None:
    return None if share is None else 100 * share


def throughput_unit(rows: Sequence[SweepRow]) -> str:
    """The unit the rows' throughput is in: ``samples/s``, or ``steps/s`` when no row reported samples."""
    units = {row.throughput_unit for row in rows if row.throughput_unit}
    return "steps/s" if units == {"steps/s"} else "samples/s"


def row_value(rows: Sequence[SweepRow], framework: str, ranks: int, name: str) -> float | None:
    """The figure ``name`` of the row of ``framework`` on ``ranks`` (None when missing or not measured)."""
    row = next((r for r in rows if r.framework == framework and r.ranks == ranks), None)
    value = None if row is None else getattr(row, name)
    return None if value is None else float(value)


def _section(section_id: str, heading: str, body: str) -> str:
    return f"<section id='{section_id}'><h2>{escape(heading)}</h2>{body}</section>"

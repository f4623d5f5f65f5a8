"""The sweep's figures: one row per configuration, scaling efficiency, the equal-footing check, the recommendation.

Each row's steady-state figures come from the analysis every session report uses (``ringscope.gui.core.analysis.summary
.analyze``: warm-up steps excluded) on that configuration's run of the session file, and its price from the cost
model (``ringscope.gui.core.analysis.cost``). Scaling efficiency is throughput(N) / (N x throughput(1)) of the same
framework,
in samples/s, or in steps/s of all ranks for a user script whose steps carry no sample count (its batches do not come
from a DataLoader the agent sees): the unit is named, never mixed. A user script's footing cannot be checked (it
prints no ``RINGSCOPE_RESULT``): ``check_footing`` says so instead of claiming it. Qt-free and framework-free; a
figure that was not measured is None (an empty CSV cell), never 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

import numpy as np

from ringscope.gui.core.analysis.cost import estimate_cost
from ringscope.gui.core.analysis.summary import analyze, steady_mask
from ringscope.gui.core.session_data import SessionData
from ringscope.gui.core.sweep.plan import SweepPlan
from ringscope.gui.core.sweep.runner import RunOutcome

SAMPLES_PRICED: Final[int] = 1000
"""Cost figures are per this many training samples."""
FOOTING_KEYS: Final[tuple[str, ...]] = ("dataset", "model_width", "model_depth", "parameters", "batch_size_per_rank",
                                        "optimizer", "lr", "seed")
"""What the trainers' ``footing`` reports (``ringscope.trainers.common.footing``), compared across configurations."""
NOT_CHECKED: Final[str] = "footing not checked: user script (same script and arguments for every configuration)"
"""What the outputs say of a user script's sweep instead of an equal-footing check it could not do."""


@dataclass(frozen=True, slots=True)
class SweepRow:
    """One configuration's figures (steady state). Shares are fractions of the mean step; money per 1000 samples.

    ``waiting_cost`` is the part of ``cost_per_1000_samples`` spent on idle phases (data wait, AllReduce stall,
    other); ``bytes_per_step`` the gradient bytes one rank all-reduces per step, when the agent reports it (DDP).
    ``steps_per_s`` (steps of all ranks per second) is set instead of ``samples_per_s`` when the run's steps carry no
    sample count (a user script's); such a row is not priced. ``global_batch`` is None when not known.
    """

    framework: str
    ranks: int
    run_id: str
    global_batch: int | None
    steps: int | None = None
    samples_per_s: float | None = None
    steps_per_s: float | None = None
    efficiency: float | None = None
    data_wait_share: float | None = None
    compute_share: float | None = None
    allreduce_stall_share: float | None = None
    other_share: float | None = None
    step_s: float | None = None
    bytes_per_step: float | None = None
    cost_per_1000_samples: float | None = None
    waiting_cost: float | None = None
    price_per_gpu_hour: float | None = None
    cost_unit: str = ""
    comm_delay_ms: float = 0.0
    status: str = "ok"

    @property
    def label(self) -> str:
        """``framework:ranks``."""
        return f"{self.framework}:{self.ranks}"

    @property
    def measured(self) -> bool:
        """True when the run produced steady-state throughput (samples/s, or steps/s without sample counts)."""
        return self.throughput is not None

    @property
    def throughput(self) -> float | None:
        """Steady-state throughput in ``throughput_unit``: samples/s, else steps/s of all ranks."""
        return self.samples_per_s if self.samples_per_s is not None else self.steps_per_s

    @property
    def throughput_unit(self) -> str:
        """``samples/s``, ``steps/s`` (no sample counts were reported), or "" when not measured."""
        return "samples/s" if self.samples_per_s is not None else "steps/s" if self.steps_per_s is not None else ""

    def ms_per_1000_samples(self, share: float | None) -> float | None:
        """Milliseconds of wall time per 1000 samples spent in a phase with this share of the step."""
        if share is None or not self.samples_per_s:
            return None
        return share * SAMPLES_PRICED / self.samples_per_s * 1e3


@dataclass(frozen=True, slots=True)
class Footing:
    """Whether every configuration trained the same thing: ``equal``, one sentence, and the differences found.

    ``checked`` is False when nothing could be compared (a user script prints no footing): ``equal`` is then False
    and ``text`` says the footing was not checked, and why.
    """

    equal: bool
    text: str
    differences: tuple[str, ...] = ()
    values: Mapping[str, Any] | None = None
    checked: bool = True

    @property
    def csv_value(self) -> str:
        """``sweep.csv``'s ``equal_footing`` cell: yes, no, or the plain reason it was not checked."""
        if not self.checked:
            return NOT_CHECKED
        return "yes" if self.equal else "no"


# ---- Rows --------------------------------------------------------------------------------------------------------


def measure(session: SessionData, outcome: RunOutcome, plan: SweepPlan,
            price_per_gpu_hour: float | None = None) -> SweepRow:
    """The row of one configuration from its run in ``session`` (efficiency is filled in by ``with_efficiency``)."""
    configuration = outcome.configuration
    row = SweepRow(configuration.framework, configuration.ranks, outcome.run_id,
                   global_batch=None if plan.uses_script else plan.batch_size * configuration.ranks,
                   comm_delay_ms=configuration.comm_delay_ms, status="ok" if outcome.ok else outcome.message)
    part = session.for_run(outcome.run_id) if outcome.run_id in session.run_ids else None
    if part is None or not len(part.steps["step"]):
        status = row.status if not outcome.ok else "no steps were recorded for this run"
        return replace(row, status=status)
    analysis = analyze(part)
    cost = estimate_cost(analysis, part, price_per_gpu_hour)
    steps = max((r.steps_total for r in analysis.per_rank), default=0)
    row = replace(row, steps=steps, price_per_gpu_hour=cost.price_per_gpu_hour, cost_unit=cost.unit,
                  bytes_per_step=_bytes_per_step(part))
    if plan.uses_script:
        row = replace(row, global_batch=_global_batch(part))
        if part.world_size != configuration.ranks and row.status == "ok":
            # A script that placed its own ranks (e.g. its strategy picked other devices): not this configuration.
            return replace(row, status=f"the script ran {part.world_size} rank(s), not {configuration.ranks}: "
                                       "left out of the comparison")
    steps_only = analysis.throughput_unit == "steps/s" and plan.uses_script
    if analysis.throughput is None or not analysis.overall.steps or not (
            analysis.throughput_unit == "samples/s" or steps_only):
        return replace(row, status=row.status if row.status != "ok" else "no steady-state samples were recorded")
    overall = analysis.overall
    shares = overall.shares if overall.phases_measured else {}
    if steps_only:  # no sample counts: throughput in steps/s, and nothing to price per 1000 samples
        return replace(row, steps_per_s=analysis.throughput, step_s=overall.step_s,
                       data_wait_share=shares.get("data_wait"), compute_share=shares.get("compute"),
                       allreduce_stall_share=shares.get("comm_exposed"), other_share=shares.get("other"))
    per_1000 = cost.devices * cost.price_per_gpu_hour * SAMPLES_PRICED / analysis.throughput / 3600.0
    idle = overall.idle_share if overall.phases_measured else float("nan")
    return replace(
        row, samples_per_s=analysis.throughput, step_s=overall.step_s,
        data_wait_share=shares.get("data_wait"), compute_share=shares.get("compute"),
        allreduce_stall_share=shares.get("comm_exposed"), other_share=shares.get("other"),
        cost_per_1000_samples=per_1000, waiting_cost=per_1000 * idle if math.isfinite(idle) else None)


def with_efficiency(rows: Sequence[SweepRow]) -> list[SweepRow]:
    """``rows`` with ``efficiency`` = throughput(N) / (N x throughput(1)) of the same framework, in the same unit
    (None without a measured 1-rank run of that framework in that unit)."""
    baseline = {row.framework: row for row in rows if row.ranks == 1 and row.throughput}
    out = []
    for row in rows:
        base = baseline.get(row.framework)
        efficiency = None
        if base is not None and base.throughput and row.throughput is not None \
                and row.throughput_unit == base.throughput_unit:
            efficiency = row.throughput / (row.ranks * base.throughput)
        out.append(replace(row, efficiency=efficiency))
    return out


def sweep_rows(session: SessionData, outcomes: Sequence[RunOutcome], plan: SweepPlan,
               price_per_gpu_hour: float | None = None) -> list[SweepRow]:
    """Every configuration's row, in run order, with efficiencies."""
    return with_efficiency([measure(session, outcome, plan, price_per_gpu_hour) for outcome in outcomes])


def _global_batch(part: SessionData) -> int | None:
    """Samples per steady step of all ranks: the median per rank, summed (None when no sample count was reported)."""
    steady = steady_mask(part.steps)
    ranks = np.asarray(part.steps["rank"])[steady]
    samples = np.asarray(part.steps["samples"], dtype=np.float64)[steady]
    medians = [float(np.median(mine)) for rank in np.unique(ranks)
               if len(mine := samples[(ranks == rank) & np.isfinite(samples)])]
    return round(sum(medians)) if medians else None


def _bytes_per_step(part: SessionData) -> float | None:
    """Median gradient bytes one rank all-reduced per steady step (None when the agent does not report it)."""
    values = np.asarray(part.steps["bucket_bytes"], dtype=np.float64)[steady_mask(part.steps)]
    values = values[np.isfinite(values)]
    return float(np.median(values)) if len(values) else None


# ---- Equal footing -----------------------------------------------------------------------------------------------


def check_footing(outcomes: Sequence[RunOutcome], plan: SweepPlan) -> Footing:
    """Compare what each run says it trained (the ``footing`` of its ``RINGSCOPE_RESULT`` lines, and its world size)
    with the first run and with the request: same data set, model, parameter count, per-rank batch, optimizer.
    A user script prints no footing: the result then says the footing was not checked, and what was held equal."""
    if plan.script is not None:
        return Footing(False, f"{NOT_CHECKED[0].upper()}{NOT_CHECKED[1:]}: every configuration ran "
                              f"{plan.script_command()} unmodified (zero-code instrumentation); its model, data and "
                              "per-rank batch are the script's own and were not compared.", checked=False)
    requested = {"dataset": plan.dataset, "model_width": plan.model_width, "model_depth": plan.model_depth,
                 "batch_size_per_rank": plan.batch_size}
    reference: dict[str, Any] | None = None
    differences: list[str] = []
    unknown: list[str] = []
    for outcome in outcomes:
        label = outcome.configuration.label
        footings = [f for r in outcome.results if isinstance(f := r.get("footing"), dict)]
        if not footings or len(footings) != len(outcome.results):
            unknown.append(label)
            continue
        for footing in footings:
            values = {key: footing.get(key) for key in FOOTING_KEYS}
            if reference is None:
                reference = values
                differences += [f"{label}: {key} {values[key]!r}, requested {want!r}"
                                for key, want in requested.items() if values[key] != want]
            differences += [f"{label}: {key} {values[key]!r}, not {reference[key]!r} as in the first run"
                            for key in FOOTING_KEYS if values[key] != reference[key]]
        worlds = {r.get("world_size") for r in outcome.results}
        if worlds != {outcome.configuration.ranks}:
            differences.append(f"{label}: the trainer ran {', '.join(map(str, sorted(worlds, key=str)))} rank(s), "
                               f"not {outcome.configuration.ranks}")
    differences = list(dict.fromkeys(differences))
    if reference is None:
        return Footing(False, "Equal footing could not be checked: no run printed its RINGSCOPE_RESULT line.",
                       tuple(differences))
    what = (f"{reference['dataset']} data, an MLP of width {reference['model_width']} x depth "
            f"{reference['model_depth']} ({_count(reference['parameters'])} parameters), "
            f"{reference['batch_size_per_rank']} samples per rank per step, {reference['optimizer']}, "
            f"lr {reference['lr']:g}")
    missing = f" (not confirmed for {', '.join(unknown)}: no RINGSCOPE_RESULT line)" if unknown else ""
    if differences:
        return Footing(False, f"NOT equal footing: {'; '.join(differences)}.", tuple(differences), reference)
    return Footing(True, f"Equal footing: every configuration trained {what}, as each trainer's RINGSCOPE_RESULT "
                         f"line confirms{missing}.", (), reference)


def _count(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else str(value)

"""What the two overhead benchmarks (DDP, TensorFlow) share: workloads, the interleaved measurement, the figures.

Three variants run in blocks of steps, interleaved round after round with the order rotated, so machine noise hits
them alike: ``baseline`` (no agent), ``control`` (an identical baseline: the A/A noise floor) and ``instrumented``.
A benchmark may add variants of its own (DDP adds ``python_hook``: PyTorch's own Python ``allreduce_hook``, no
agent), reported against the baseline the same way.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

# name: (dataset, model width, model depth, batch per rank, (rounds quick, rounds full), steps per block)
WORKLOADS: dict[str, tuple[str, int, int, int, tuple[int, int], int]] = {
    "digits": ("digits", 64, 2, 32, (120, 400), 10),
    "realistic": ("synthetic", 1024, 4, 32, (30, 100), 4),
}
VARIANTS = ("baseline", "control", "instrumented")
OTHER_VARIANTS: dict[str, str] = {
    "python_hook": "PyTorch's own Python allreduce_hook, no agent (the floor of any Python comm hook)",
}

StepTimes = dict[str, list[list[float]]]
"""By variant: one list of step times (s) per round."""


def interleave(run_block: Callable[[str], list[float]], rounds: int, after_round: Callable[[], None] | None = None,
               variants: tuple[str, ...] = VARIANTS) -> tuple[StepTimes, dict[str, list[float]]]:
    """Warm each variant up once, then run ``rounds`` rounds of one block per variant in rotating order.

    ``run_block(variant)`` runs one block and returns its step times. Returns the step times per round and the
    process CPU seconds per step (all threads: comm, callbacks, the agent's sender) per round, by variant.
    """
    for variant in variants:  # warm-up: first-iteration bucket rebuild or tracing, allocator, caches
        run_block(variant)
    times: StepTimes = {v: [] for v in variants}
    cpu: dict[str, list[float]] = {v: [] for v in variants}
    for index in range(rounds):
        shift = index % len(variants)  # rotate the order: no variant always follows the same one
        for variant in variants[shift:] + variants[:shift]:
            cpu_started = time.process_time()
            block = run_block(variant)
            cpu[variant].append((time.process_time() - cpu_started) / len(block))
            times[variant].append(block)
        if after_round is not None:
            after_round()
    return times, cpu


def summary_rows(benchmark: str, workload: str, result: dict[str, Any], setup: str) -> list[dict[str, Any]]:
    """Benchmark rows of one workload from ``summarize``'s dict (shared with ``bench_tf_overhead``)."""
    ratio_q = result["ratio_quartiles"]
    control_q = result["control_quartiles"]
    note = (f"{result['rounds']} rounds x {result['block']} steps per variant, interleaved in one run; "
            f"{result['workload']}; {setup}")
    return [
        {"benchmark": benchmark, "metric": f"{workload}_step_ratio_median", "value": ratio_q[1], "unit": "x",
         "note": f"target <= 1.01; IQR {ratio_q[0]:.4f}..{ratio_q[2]:.4f}; {note}"},
        {"benchmark": benchmark, "metric": f"{workload}_control_ratio_median", "value": control_q[1], "unit": "x",
         "note": f"A/A noise floor (baseline vs an identical baseline); IQR {control_q[0]:.4f}..{control_q[2]:.4f}"},
        {"benchmark": benchmark, "metric": f"{workload}_baseline_step_median", "value": result["baseline_step_s"] * 1e3,
         "unit": "ms", "note": "uninstrumented step, same run"},
        {"benchmark": benchmark, "metric": f"{workload}_extra_per_step_median", "value": result["extra_s"] * 1e6,
         "unit": "µs", "note": f"instrumented - baseline, median over rounds; IQR {result['extra_iqr_s'][0] * 1e6:.0f}"
                               f"..{result['extra_iqr_s'][1] * 1e6:.0f} µs"},
        {"benchmark": benchmark, "metric": f"{workload}_extra_per_step_p25", "value": result["extra_p25_s"] * 1e6,
         "unit": "µs", "note": "difference of the pooled 25th percentiles (least disturbed by load spikes); "
                               f"control: {result['control_p25_s'] * 1e6:.0f} µs"},
        {"benchmark": benchmark, "metric": f"{workload}_extra_cpu_per_step_median",
         "value": result["extra_cpu_s"] * 1e6, "unit": "µs",
         "note": "process CPU time (all threads: comm, callbacks, sender) instrumented - baseline per step, "
                 f"median over rounds; control: {result['control_cpu_s'] * 1e6:.0f} µs"},
    ] + [
        {"benchmark": benchmark, "metric": f"{workload}_{variant}_ratio_median", "value": other["ratio_quartiles"][1],
         "unit": "x", "note": f"{OTHER_VARIANTS.get(variant, variant)} vs baseline, same run; IQR "
                              f"{other['ratio_quartiles'][0]:.4f}..{other['ratio_quartiles'][2]:.4f}; extra CPU "
                              f"{other['extra_cpu_s'] * 1e6:.0f} µs per step"}
        for variant, other in result.get("others", {}).items()
    ]


def summarize(times: dict[str, list[list[float]]], cpu: dict[str, list[float]], workload: str, block: int
              ) -> dict[str, Any]:
    """Per-round step times (and process CPU seconds per step, all threads) of the three variants -> the figures
    ``summary_rows`` reports."""
    rounds = len(times["baseline"])
    base = [statistics.median(r) for r in times["baseline"]]
    control = [statistics.median(r) for r in times["control"]]
    inst = [statistics.median(r) for r in times["instrumented"]]
    extras = [i - b for i, b in zip(inst, base, strict=True)]

    def p25(variant: str) -> float:
        return statistics.quantiles([t for r in times[variant] for t in r], n=4)[0]

    e_q = statistics.quantiles(extras, n=4)
    return {
        "workload": workload, "rounds": rounds, "block": block,
        "ratio_quartiles": statistics.quantiles([i / b for i, b in zip(inst, base, strict=True)], n=4),
        "control_quartiles": statistics.quantiles([c / b for c, b in zip(control, base, strict=True)], n=4),
        "baseline_step_s": statistics.median(base),
        "extra_s": statistics.median(extras), "extra_iqr_s": [e_q[0], e_q[2]],
        "extra_p25_s": p25("instrumented") - p25("baseline"), "control_p25_s": p25("control") - p25("baseline"),
        "extra_cpu_s": statistics.median(i - b for i, b in zip(cpu["instrumented"], cpu["baseline"], strict=True)),
        "control_cpu_s": statistics.median(c - b for c, b in zip(cpu["control"], cpu["baseline"], strict=True)),
        "others": {v: {"ratio_quartiles": statistics.quantiles(
                           [statistics.median(r) / b for r, b in zip(times[v], base, strict=True)], n=4),
                       "extra_cpu_s": statistics.median(o - b for o, b in zip(cpu[v], cpu["baseline"], strict=True))}
                   for v in times if v not in VARIANTS},
    }

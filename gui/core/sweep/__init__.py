"""Scaling sweeps (``ringscope sweep``): one model, several frameworks and rank counts, one session file, one
recommendation. Qt-free and framework-free; the public API, re-exported from the modules of this package.

Modules: ``plan`` (configurations, parsing, the checks that refuse a sweep before it starts, the launcher's
processes for a configuration), ``runner`` (runs them in turn, never leaving a process behind), ``analysis`` (one
row per configuration from the session report's own analysis, scaling efficiency, the equal-footing check),
``advice`` (the recommendation and its evidence), ``report`` (CSV and HTML), ``pdf`` (PDF); for the window's
sweep dialog, ``request`` (the form's request, its checks, its command line) and ``progress_lines`` (the lines
``ringscope sweep`` prints as each configuration starts and ends, and their reading).

    plan = SweepPlan(("ddp", "tf-mirrored"), (1, 2), steps=200, device="cpu")
    errors = problems(plan, cpu_count=os.cpu_count(), gpu_count=0)   # every reason to refuse, before anything runs
    outcomes = SweepRunner(plan, collector.endpoint, records=lambda: collector.counters.records).run()
    report = build_report(load("sweep.db"), outcomes, plan, session_path="sweep.db", wall_s=...)
    write_csv(report, "sweep.csv"); write_html(report, "sweep.html"); write_pdf(report, "sweep.pdf")

Names are imported on first use (as in ``ringscope.agent.tf_distribute``): ``ringscope --help`` imports the sweep
command, which must not pay for matplotlib.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY: dict[str, str] = {
    **dict.fromkeys(("Advice", "recommend"), "ringscope.gui.core.sweep.advice"),
    **dict.fromkeys(("NOT_CHECKED", "Footing", "SweepRow", "check_footing", "sweep_rows", "with_efficiency"),
                    "ringscope.gui.core.sweep.analysis"),
    "write_pdf": "ringscope.gui.core.sweep.pdf",
    **dict.fromkeys(("FRAMEWORKS", "Configuration", "SweepPlan", "parse_comm_delay", "parse_frameworks", "parse_ranks",
                     "problems", "process_plans", "resolve_device", "script_conflicts", "script_problems"),
                    "ringscope.gui.core.sweep.plan"),
    **dict.fromkeys(("CSV_COLUMNS", "SweepReport", "build_report", "csv_text", "render_html", "write_csv",
                     "write_html"), "ringscope.gui.core.sweep.report"),
    **dict.fromkeys(("RunOutcome", "SweepRunner"), "ringscope.gui.core.sweep.runner"),
}


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use."""
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'ringscope.gui.core.sweep' has no attribute {name!r}")
    return getattr(importlib.import_module(module_name), name)


__all__ = sorted(_LAZY)

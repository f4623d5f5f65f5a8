"""The self-contained HTML report: interactive charts (the embedded uPlot), sortable tables, inline CSS and script,
no external URL — opens offline.

Owns the page layout: verdict and headline, step-time breakdown and throughput (hover, zoom, toggle), the per-rank
table (one row per rank), straggler, per-GPU table, cost, checkpoints and work at risk, recommendations, data
quality, legend. Every value is HTML-escaped. Written to a temporary file and renamed, so a cancelled export leaves
nothing behind. Must never import Qt.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from ringscope.gui.core.analysis import stacks
from ringscope.gui.core.analysis.attempts import attempts_of
from ringscope.gui.core.analysis.goodput import goodput_of
from ringscope.gui.core.phases import PHASES
from ringscope.gui.core.report import interactive
from ringscope.gui.core.report.interactive import escape
from ringscope.gui.core.report.model import (
    Report,
    Rows,
    checkpoint_rows,
    cost_rows,
    headline_rows,
    network_rows,
    quality_rows,
    straggler_text,
    verdict,
    when_text,
)
from ringscope.gui.core.report.progress import Progress

SECTIONS: tuple[str, ...] = ("headline", "breakdown", "ranks", "straggler", "network", "gpu", "cost", "goodput",
                             "checkpoints", "recommendations", "quality")
"""Ids of the page's sections, in order (tests check they are all present)."""

STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2em auto;max-width:1200px;
color:#222}
h1{margin-bottom:0}.sub{color:#666;margin-top:.2em}
table{border-collapse:collapse;margin:.5em 0}td,th{padding:.25em .8em;border-bottom:1px solid #eee;text-align:left;
vertical-align:top}
th{color:#555;font-weight:600;white-space:nowrap}
.rec{border-left:4px solid #999;padding:.3em .8em;margin:.6em 0;background:#fafafa}
.rec.high{border-color:#d62728}.rec.medium{border-color:#f28e2b}.rec.info{border-color:#4e79a7}
.evidence{color:#555;font-size:.92em}
.swatch{display:inline-block;width:.9em;height:.9em;margin-right:.3em;vertical-align:middle;border-radius:2px}
svg{max-width:100%;height:auto}
.verdict{font-size:1.15em;font-weight:600;background:#eef3f8;padding:.6em .9em;border-radius:4px}
"""


def render_html(report: Report | Sequence[Report], progress: Progress | None = None, *,
                title: str = "Ringscope report") -> str:
    """The report page as a string; several reports (one per run) become one page with a section per run."""
    progress = progress or Progress()
    reports = [report] if isinstance(report, Report) else list(report)
    runs = ", ".join(r.analysis.run_id or "(unnamed)" for r in reports)
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{escape(title)} — {escape(runs)}"
             f"</title><style>{STYLE}</style>{interactive.head_assets()}</head><body>",
             f"<h1>{escape(title)}</h1><p class='sub'>Where did the time and the money go? "
             f"{'Run' if len(reports) == 1 else f'{len(reports)} runs:'} {escape(runs)}</p>",
             legend_html()]
    if len(reports) > 1:
        parts.append("<ul>" + "".join(f"<li><a href='#run-{number}'>{escape(r.analysis.run_id)}</a> — "
                                      f"{escape(r.analysis.framework)} / {escape(r.analysis.strategy)}</li>"
                                      for number, r in enumerate(reports)) + "</ul>")
    for number, one in enumerate(reports):
        part = progress.slice(number / len(reports), (number + 1) / len(reports))
        if len(reports) > 1:
            parts.append(f"<h1 id='run-{number}'>Run {escape(one.analysis.run_id)}</h1>")
        parts.extend(_run_sections(one, part, prefix=f"run{number}-" if len(reports) > 1 else ""))
    parts.append(interactive.body_scripts() + "</body></html>")
    progress(1.0, "HTML ready")
    return "\n".join(parts)


def _run_sections(report: Report, progress: Progress, prefix: str = "") -> list[str]:
    """The sections of one run's report."""
    a = report.analysis
    parts = []
    progress(0.05, "headline")
    parts.append(f"<p class='verdict'>{escape(verdict(report))}</p>")
    parts.append(_section(prefix + "headline", "Summary", table(headline_rows(report))))
    progress(0.1, "step-time charts")
    parts.append(_section(
        prefix + "breakdown", "Step-time breakdown over time",
        "<p>Mean milliseconds per step in each phase, per time bucket, all ranks; warm-up steps included. Hover for "
        "values, drag to zoom (double-click resets), click a legend entry to hide a phase.</p>"
        + interactive.step_breakdown_chart(a, f"{prefix}chart-breakdown")
        + "<h3>Throughput (all ranks)</h3>" + interactive.throughput_chart(a, f"{prefix}chart-throughput")))
    progress(0.4, "per-rank table")
    parts.append(_section(prefix + "ranks", "Per-rank breakdown",
                          "<p>Steady-state milliseconds per step in each phase on each rank. The slowest rank has "
                          "the smallest exposed wait.</p>" + interactive.rank_table(a)))
    progress(0.7, "straggler and GPUs")
    parts.append(_section(prefix + "straggler", "Straggler", f"<p>{escape(straggler_text(a))}</p>"))
    links = network_rows(a) or [("Links", "all ranks on one host: no network between hosts"
                                 if a.network is not None and len(a.network.hosts) == 1 else "not measured")]
    parts.append(_section(prefix + "network", "Network (per host)", table(links)))
    parts.append(_section(prefix + "gpu", "GPU utilization", f"<p>{escape(a.gpu_statement)}</p>"
                          + interactive.gpu_table(a)))
    progress(0.85, "cost")
    parts.append(_section(prefix + "cost", "Cost", table(cost_rows(report)) + interactive.cost_bar(report.cost)))
    parts.append(_section(prefix + "goodput", "Goodput and restarts", goodput_html(report)))
    parts.append(_section(prefix + "checkpoints", "Checkpoints and work at risk", table(checkpoint_rows(report))))
    parts.append(_section(prefix + "recommendations", "Recommendations", recommendations_html(report)))
    parts.append(_section(prefix + "quality", "Data quality", table(quality_rows(report))))
    dump = stacks.result_from_events(report.session.events, a.run_id)
    if dump is not None:  # a stack dump on demand was taken during the run: the latest one, folded
        parts.append(_section(prefix + "stacks", "Stacks on demand",
                              f"<p>Taken {escape(when_text(dump['ts_s']))}; identical stacks folded.</p><pre>"
                              f"{escape(stacks.render_text(stacks.fold(dump)))}</pre>"))
    return parts


def goodput_html(report: Report) -> str:
    """Goodput, the wall time by cause as a bar, and the attempts when the run was restarted."""
    attempts = attempts_of(report.session)
    goodput = goodput_of(report.session, attempts)
    if not goodput.wall_s:
        return "<p>no steps: no goodput</p>"
    text = (f"<p><b>Goodput {goodput.ratio:.1%}</b>: the share of the run's {goodput.wall_s:,.1f} s of wall time "
            "spent in training steps that were kept (waiting inside steps, checkpoints, hangs, restarts, start-up "
            "and redone steps are the rest; see the README's definitions).</p>")
    text += interactive.goodput_bar(goodput, report.cost)
    if len(attempts) > 1:
        rows = [(f"Attempt {a.attempt}", f"{when_text(a.started_s)} → {when_text(a.ended_s)}: "
                 f"{a.reason or 'unknown end'} (exit code {a.exit_code}); steps {a.resumed_from}–{a.reached}, "
                 f"{a.redone} redone") for a in attempts]
        text += "<h3>Attempts</h3>" + table(rows)
    return text


def write_html(report: Report | Sequence[Report], path: str | Path, progress: Progress | None = None) -> Path:
    """Render and write the report; nothing is written if the export is cancelled."""
    text = render_html(report, progress)
    return write_text_atomically(Path(path), text)


@contextlib.contextmanager
def atomic_target(target: Path) -> Iterator[Path]:
    """A temporary path next to ``target`` to write to; renamed into place when the block ends, removed if it
    raises (a cancelled or failed export leaves nothing behind)."""
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=target.suffix)
    os.close(fd)
    try:
        yield Path(tmp)
        give_user_mode(tmp)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def give_user_mode(path: str | Path) -> None:
    """Give a finished temporary file the mode any new file of the user gets (``0o666`` less the umask).

    ``tempfile.mkstemp`` creates files ``0600``; renamed into place as they are, every export would be private to
    its writer, unlike everything else the user saves. Every export writer calls this just before its rename.
    """
    os.chmod(path, 0o666 & ~_umask())


def _umask() -> int:
    """The process's umask, read without changing it (``os.umask`` sets it, racing other threads' new files)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK:  # no /proc (macOS): set-and-restore, as briefly as possible
        old = os.umask(0o077)
        os.umask(old)
    return old


_UMASK_LOCK = threading.Lock()


def write_text_atomically(target: Path, text: str) -> Path:
    """Write ``text`` to a temporary file next to ``target`` and rename it into place."""
    with atomic_target(target) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return target


def recommendations_html(report: Report) -> str:
    """Each recommendation with the figure that triggered it."""
    if not report.recommendations:
        return "<p>No threshold crossed: nothing to recommend.</p>"
    return "".join(
        f"<div class='rec {r.severity}'><b>{escape(r.title)}</b><br>{escape(r.advice)}"
        f"<div class='evidence'>{escape(r.evidence)}</div></div>" for r in report.recommendations)


def legend_html() -> str:
    """The phase legend, said once."""
    items = "".join(f"<span title='{escape(p.description)}'><span class='swatch' style='background:{p.color}'></span>"
                    f"{escape(p.label)}</span> &nbsp; " for p in PHASES)
    return f"<p class='legend'>{items}</p>"


def table(rows: Rows) -> str:
    """A two-column table of label/value rows."""
    return "<table>" + "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in rows) + "</table>"


def _section(section_id: str, heading: str, body: str) -> str:
    return f"<section id='{section_id}'><h2>{escape(heading)}</h2>{body}</section>"

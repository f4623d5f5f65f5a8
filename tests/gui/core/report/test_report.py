"""Every export opens and says what the injected delays imply: HTML, PDF, CSV, trace; progress and cancel."""

from __future__ import annotations

import csv
import json
import threading
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pypdfium2 as pdfium
import pytest

from ringscope.agent.schema import FIELD_NAMES
from ringscope.gui.core.phases import PHASES
from ringscope.gui.core.report import EXPORT_KINDS, ExportCancelled, build_report, export
from ringscope.gui.core.report.html import SECTIONS
from tests.gui.core.analysis.test_analysis import ALLREDUCE_S, make_session

SCREENS = Path("/work/notes/screens")


class _Page(HTMLParser):
    """Collects section ids, URL-bearing attributes, tags and text of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.sections: list[str] = []
        self.urls: list[str] = []
        self.tags: set[str] = set()
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        for name, value in attrs:
            if tag == "section" and name == "id" and value:
                self.sections.append(value)
            if name in ("src", "href", "xlink:href", "action", "data") and value:
                self.urls.append(value)

    def handle_data(self, data: str) -> None:
        self.text.append(data)


@pytest.fixture(scope="module")
def straggler_report():  # type: ignore[no-untyped-def]
    session = make_session(ranks=4, steps=150, straggler=2, extra_compute_s=0.030, throttle=True,
                           checkpoint_every=50)
    return build_report(session, 3.0)


def test_html_is_self_contained_and_names_straggler_and_cause(straggler_report, tmp_path: Path) -> None:
    path = export(straggler_report, "html", tmp_path / "r.html")[0]
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    assert page.sections == list(SECTIONS)
    assert "script" in page.tags  # the embedded charting library and the page's script
    assert not {"link", "iframe", "img"} & page.tags
    # Only in-document references (#id) are allowed: it must open offline.
    assert all(url.startswith("#") for url in page.urls), page.urls
    assert "url(http" not in path.read_text(encoding="utf-8")
    text = " ".join(page.text)
    assert "rank 2, late by" in text and "hardware" in text
    gap_ms = straggler_report.analysis.straggler.gap_s * 1e3
    assert gap_ms == pytest.approx(30, abs=2)
    assert f"{gap_ms:.1f} ms" in text
    assert f"${straggler_report.cost.cost_total:,.2f}" in text
    assert "Rank 2 is a straggler" in text  # recommendation with its figure
    for phase in PHASES:
        assert phase.label in text


def test_pdf_pages_render_and_are_not_blank(straggler_report, tmp_path: Path) -> None:
    path = export(straggler_report, "pdf", tmp_path / "r.pdf")[0]
    document = pdfium.PdfDocument(str(path))
    try:
        assert len(document) >= 3  # first page, chart page, tables
        SCREENS.mkdir(parents=True, exist_ok=True)
        for index in range(len(document)):
            image = document[index].render(scale=1.0).to_pil()
            pixels = np.asarray(image.convert("L"))
            assert (pixels < 200).mean() > 0.005, f"page {index + 1} looks blank"
            if index in (0, 1):
                image.save(SCREENS / f"report_pdf_page{index + 1}.png")
    finally:
        document.close()


def test_csv_has_schema_columns_and_empty_cells_for_missing(straggler_report, tmp_path: Path) -> None:
    files = export(straggler_report, "csv", tmp_path / "csv")
    assert sorted(f.name for f in files) == ["devices.csv", "events.csv", "hosts.csv", "steps.csv"]
    with (tmp_path / "csv" / "steps.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0])[: len(FIELD_NAMES["step"])] == list(FIELD_NAMES["step"])
    assert "other_s" in rows[0]
    assert len(rows) == 4 * 150
    assert rows[0]["loss"] == ""  # not measured: empty, never 0
    fast = [float(r["comm_exposed_s"]) for r in rows if r["rank"] != "2" and int(r["step"]) > 5]
    assert np.median(fast) == pytest.approx(ALLREDUCE_S + 0.030, abs=0.002)
    with (tmp_path / "csv" / "devices.csv").open() as handle:
        assert next(iter(csv.DictReader(handle)))["name"] == "H100"
    with (tmp_path / "csv" / "events.csv").open() as handle:
        assert {r["event"] for r in csv.DictReader(handle)} == {"checkpoint_saved"}


def test_trace_has_one_track_per_rank_and_phase_events(straggler_report, tmp_path: Path) -> None:
    path = export(straggler_report, "trace", tmp_path / "t.json")[0]
    trace = json.loads(path.read_text())
    events = trace["traceEvents"]
    tracks = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert tracks == {f"rank {r}" for r in range(4)}
    complete = [e for e in events if e["ph"] == "X"]
    assert {e["cat"] for e in complete} == {"step", *(p.name for p in PHASES)}
    # Exposed comm of the straggler is the all-reduce alone; the others also wait the straggler's 30 ms.
    def exposed(rank: int) -> float:
        durations = [e["dur"] for e in complete if e["cat"] == "comm_exposed" and e["tid"] == rank
                     and e["args"]["step"] > 5]
        return float(np.median(durations))
    assert exposed(2) == pytest.approx(ALLREDUCE_S * 1e6, rel=0.1)
    assert exposed(0) == pytest.approx((ALLREDUCE_S + 0.030) * 1e6, rel=0.1)
    # Phases of a step lie inside the step.
    step0 = next(e for e in complete if e["cat"] == "step" and e["tid"] == 1 and e["args"]["step"] == 10)
    inside = [e for e in complete if e["cat"] != "step" and e["tid"] == 1 and e["args"]["step"] == 10]
    assert sum(e["dur"] for e in inside) == pytest.approx(step0["dur"], rel=1e-6)
    assert all(step0["ts"] <= e["ts"] and e["ts"] + e["dur"] <= step0["ts"] + step0["dur"] + 1 for e in inside)


@pytest.mark.parametrize("kind", EXPORT_KINDS)
def test_progress_reaches_one_and_cancel_leaves_no_file(straggler_report, tmp_path: Path, kind: str) -> None:
    seen: list[float] = []
    target = tmp_path / ("out" if kind == "csv" else f"out.{kind}")
    export(straggler_report, kind, target, progress=lambda f, _m: seen.append(f))
    assert seen[-1] == 1.0 and seen == sorted(seen)

    cancel = threading.Event()
    cancelled_target = tmp_path / ("cancelled" if kind == "csv" else f"cancelled.{kind}")

    def cancel_soon(fraction: float, _message: str) -> None:
        if fraction > 0:
            cancel.set()

    with pytest.raises(ExportCancelled):
        export(straggler_report, kind, cancelled_target, progress=cancel_soon, cancel=cancel)
    leftovers = [p for p in (cancelled_target.iterdir() if cancelled_target.is_dir() else [cancelled_target])
                 if p.exists()]
    assert not any(p.suffix in (".html", ".pdf", ".trace") or p.name.endswith(".csv") for p in leftovers)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left behind


def test_report_of_cpu_only_session_says_no_gpu_and_rank_hours(tmp_path: Path) -> None:
    report = build_report(make_session(ranks=2, steps=40, gpu=False))
    page = _Page()
    page.feed(export(report, "html", tmp_path / "cpu.html")[0].read_text())
    text = " ".join(page.text)
    assert "No GPU" in text and "rank-hours" in text


def test_unknown_export_kind_is_a_clear_error(straggler_report, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown export kind 'docx'"):
        export(straggler_report, "docx", tmp_path / "x")


def test_hours_are_written_for_people_at_every_scale() -> None:
    from ringscope.gui.core.report.model import hours_text

    assert [hours_text(h) for h in (0.0, 1.47e-06, 0.00889, 0.5, 12.345, 1234.5)] == \
        ["0.00", "< 0.0001", "0.00889", "0.5", "12.35", "1,234.50"]


def test_a_session_with_two_runs_exports_one_part_per_run(tmp_path: Path) -> None:
    from ringscope.gui.core.ingest.session_reader import load
    from ringscope.gui.core.report import export
    from tests.gui.core.analysis.test_runs import _record

    path = tmp_path / "s.db"
    _record(path)
    session = load(path)
    reports = [build_report(session.for_run(run_id), 2.0) for run_id in session.run_ids]
    assert [r.analysis.framework for r in reports] == ["pytorch", "tensorflow"]
    [html_file] = export(reports, "html", tmp_path / "r.html")
    text = html_file.read_text()
    assert "<h1 id='run-0'>Run run-ddp</h1>" in text and "<h1 id='run-1'>Run run-tf</h1>" in text
    assert text.count("id='run0-headline'") == 1 and text.count("id='run1-headline'") == 1
    [pdf_file] = export(reports, "pdf", tmp_path / "r.pdf")
    single = export(reports[1], "pdf", tmp_path / "one.pdf")[0]
    assert len(pdfium.PdfDocument(pdf_file)) > len(pdfium.PdfDocument(single)) >= 2
    csv_files = export(reports, "csv", tmp_path / "csv")
    assert {p.parent.name for p in csv_files} == {"run-ddp", "run-tf"}
    traces = export(reports, "trace", tmp_path / "t.json")
    assert [p.name for p in traces] == ["t-run-ddp.json", "t-run-tf.json"]

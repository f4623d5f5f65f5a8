"""Reports a team can hand on: A4 PDF pages with a real first page, and "no data" instead of zeros."""

from __future__ import annotations

from pathlib import Path

import pypdfium2 as pdfium
import pytest

from gui.core.report import build_report, export
from gui.core.report.model import headline_rows
from gui.core.session_data import SessionData
from tests.gui.core.analysis.test_analysis import make_session


def _pages(path: Path) -> list[tuple[tuple[float, float], str]]:
    """(width, height) in points and the text of each page."""
    document = pdfium.PdfDocument(str(path))
    try:
        out = []
        for index in range(len(document)):
            page = document[index]
            text = page.get_textpage().get_text_range()
            out.append((page.get_size(), text))
        return out
    finally:
        document.close()


@pytest.fixture(scope="module")
def straggler_report():  # type: ignore[no-untyped-def]
    return build_report(make_session(ranks=8, steps=150, straggler=2, extra_compute_s=0.030, throttle=True,
                                     checkpoint_every=50), 3.0)


def test_every_page_is_a4_and_numbered_with_the_run_id(straggler_report, tmp_path: Path) -> None:
    pages = _pages(export(straggler_report, "pdf", tmp_path / "r.pdf")[0])
    assert len(pages) >= 2
    for number, (size, text) in enumerate(pages, start=1):
        assert size == pytest.approx((595, 842), abs=0.5), f"page {number} is {size}"
        assert f"page {number} of {len(pages)}" in text
        assert f"run {straggler_report.analysis.run_id}" in text


def test_first_page_has_verdict_summary_table_and_breakdown_chart(straggler_report, tmp_path: Path) -> None:
    (_, first), (_, second), *_ = _pages(export(straggler_report, "pdf", tmp_path / "r.pdf")[0])
    assert "Rank 2 is a straggler: every other rank waits 30.0 ms per step" in first.replace("\r\n", " ")
    assert "Run summary" in first
    for label, value in headline_rows(straggler_report)[:9]:
        assert label in first and value.split(" ")[0] in first, label
    assert "Step-time breakdown over time" in first and "mean step time (ms)" in first
    # The chart page: several titled charts with their units.
    for title in ("Throughput (all ranks)", "Per-rank breakdown", "GPU utilization", "Where the money went"):
        assert title in second
    assert "samples/s" in second and "share of step time (%)" in second


def test_no_gpu_is_a_line_on_a_page_not_a_page(tmp_path: Path) -> None:
    report = build_report(make_session(ranks=2, steps=40, gpu=False))
    pages = _pages(export(report, "pdf", tmp_path / "cpu.pdf")[0])
    [charts_page] = [text for _, text in pages if "Throughput (all ranks)" in text]
    assert "No GPU: host(s) node0, node1 report no GPU" in charts_page.replace("\r\n", " ")
    assert "Per-rank breakdown" in charts_page and "Where the money went" in charts_page
    assert all(size == pytest.approx((595, 842), abs=0.5) for size, _ in pages)


def test_several_runs_keep_a4_and_each_run_starts_a_page(tmp_path: Path) -> None:
    reports = [build_report(make_session(ranks=2, steps=40, seed=seed)) for seed in (0, 1)]
    pages = _pages(export(reports, "pdf", tmp_path / "two.pdf")[0])
    assert sum("Ringscope report — run" in text for _, text in pages) == 2
    assert all(size == pytest.approx((595, 842), abs=0.5) for size, _ in pages)


def test_empty_session_says_no_data_not_zero(tmp_path: Path) -> None:
    report = build_report(SessionData())
    rows = dict(headline_rows(report))
    for label in ("Mean step time", "Throughput", "Time split", "Idle share", "Cost of waiting"):
        assert rows[label] == "no data", (label, rows[label])
    html = export(report, "html", tmp_path / "e.html")[0].read_text(encoding="utf-8")
    pdf_text = " ".join(text for _, text in _pages(export(report, "pdf", tmp_path / "e.pdf")[0]))
    for text in (html, pdf_text):
        assert "no data" in text.lower()
        assert "0.0 ms" not in text and "0.0 %" not in text and "0.0%" not in text

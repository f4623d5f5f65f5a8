"""Reports a team can hand on: A4 PDF pages with a real first page, and "no data" instead of zeros."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

import pypdfium2 as pdfium
import pytest

from ringscope.gui.core.report import build_report, export
from ringscope.gui.core.report.model import headline_rows
from ringscope.gui.core.session_data import SessionData
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


class _Html(HTMLParser):
    """Script sources, link targets, per-rank table rows and headings of a report page."""

    def __init__(self) -> None:
        super().__init__()
        self.srcs: list[str] = []
        self.section = ""
        self.rank_rows = 0
        self.in_body = False
        self.headings: list[str] = []
        self._heading = False
        self.inline_scripts = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        self.srcs += [v for k, v in attrs if k in ("src", "href") and v]
        if tag == "section":
            self.section = values.get("id") or ""
        if tag == "script" and "src" not in values:
            self.inline_scripts += 1
        self.in_body = tag == "tbody" or (self.in_body and tag != "table")
        if tag == "tr" and self.in_body and self.section == "ranks":
            self.rank_rows += 1
        self._heading = tag in ("h2", "h3")

    def handle_endtag(self, tag: str) -> None:
        if tag == "tbody":
            self.in_body = False

    def handle_data(self, data: str) -> None:
        if self._heading and data.strip():
            self.headings.append(data.strip())
            self._heading = False


def test_html_embeds_its_charting_library_and_works_offline(tmp_path: Path) -> None:
    report = build_report(make_session(ranks=12, steps=60, straggler=5, extra_compute_s=0.03))
    text = export(report, "html", tmp_path / "r.html")[0].read_text(encoding="utf-8")
    page = _Html()
    page.feed(text)
    assert "uPlot" in text and "var uPlot=function()" in text  # the library itself, inline
    assert page.srcs == [] or all(src.startswith("#") for src in page.srcs), page.srcs
    assert "<script src" not in text and "<link" not in text
    assert page.inline_scripts >= 4  # library, page script, the two charts' data
    assert page.rank_rows == 12  # one row per rank
    for heading in ("Step-time breakdown over time", "Throughput (all ranks)", "Per-rank breakdown",
                    "GPU utilization", "Where the money went"):
        assert heading in page.headings
    assert "class='straggler'" in text and "data-chart='chart-breakdown'" in text


def test_html_rank_table_has_every_rank_beyond_the_chart_limit(tmp_path: Path) -> None:
    report = build_report(make_session(ranks=40, steps=20, gpu=False))
    page = _Html()
    page.feed(export(report, "html", tmp_path / "r.html")[0].read_text(encoding="utf-8"))
    assert page.rank_rows == 40

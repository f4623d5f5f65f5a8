"""The pages of a comparison (``ringscope.gui.core.report.compare``): a run with a straggler (A) and the same run
after the fix (B), as HTML and PDF."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pypdfium2 as pdfium
import pytest

from ringscope.gui.core.analysis.compare import Comparison
from ringscope.gui.core.report.compare import write_compare_html, write_compare_pdf
from tests.gui.core.analysis.test_compare import before_and_after, empty_and_after


@pytest.fixture(scope="module")
def comparison() -> Comparison:
    return before_and_after()


def test_compare_html_and_pdf_open(comparison, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    html_path = write_compare_html(comparison, tmp_path / "c.html")
    text = html_path.read_text(encoding="utf-8")

    class Sections(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.ids: list[str] = []

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            self.ids += [v for k, v in attrs if tag == "section" and k == "id" and v]

    parser = Sections()
    parser.feed(text)
    assert parser.ids == ["sessions", "figures", "stragglers", "charts-time", "charts-throughput", "ranks"]
    assert "before.db" in text and "after.db" in text and "rank 1, late by" in text
    # self-contained: the charting library is embedded, nothing is fetched
    assert "uPlot" in text and "src=" not in text and "<link" not in text
    # interactive charts, A's and B's on one y-scale, with a tall enough scale for the taller of the two
    specs = {key: json.loads(re.search(rf"id='{key}'>(.*?)</script>", text, re.S).group(1))  # type: ignore[union-attr]
             for key in ("a-breakdown", "b-breakdown", "a-throughput", "b-throughput")}
    assert specs["a-breakdown"]["ymax"] == specs["b-breakdown"]["ymax"]
    assert specs["a-throughput"]["ymax"] == specs["b-throughput"]["ymax"]
    tallest = max(sum(v or 0 for v in column) for spec in (specs["a-breakdown"], specs["b-breakdown"])
                  for column in zip(*(s["values"] for s in spec["series"]), strict=True))
    assert tallest <= specs["a-breakdown"]["ymax"] <= 1.2 * tallest
    assert specs["a-throughput"]["series"][0]["label"].startswith("A") and text.count("table class='sortable'") == 2
    pdf_path = write_compare_pdf(comparison, tmp_path / "c.pdf")
    pages = _pdf_pages(pdf_path)
    assert len(pages) == 2
    assert all(size == pytest.approx((595, 842), abs=0.5) for size, _ in pages)


def _pdf_pages(path: Path) -> list[tuple[tuple[float, float], str]]:
    """(size in points, text with line breaks as spaces) of each page."""
    document = pdfium.PdfDocument(str(path))
    try:
        return [(document[i].get_size(), " ".join(document[i].get_textpage().get_text_range().split()))
                for i in range(len(document))]
    finally:
        document.close()


def test_a_and_b_are_labelled_on_every_chart_and_the_table_has_units(comparison, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (_, table_page), (_, chart_page) = _pdf_pages(write_compare_pdf(comparison, tmp_path / "c.pdf"))
    assert "Figure Unit A: before.db B: after.db B vs A Better" in table_page
    assert "Mean step time (steady) ms" in table_page and "Throughput samples/s" in table_page
    assert "Exposed comm (AllReduce stall) share % of step" in table_page  # the whole label, not cut
    assert "Cost so far $" in table_page
    # Each side-by-side chart titled with its session, and the throughput legend says which line is which.
    assert chart_page.count("A: before.db") >= 3 and chart_page.count("B: after.db") >= 3
    assert "on one scale" in chart_page
    html = write_compare_html(comparison, tmp_path / "c.html").read_text(encoding="utf-8")
    assert "<th>Unit</th>" in html and "<td>ms</td>" in html and "<td>samples/s</td>" in html
    assert html.count("A: before.db") >= 4 and html.count("B: after.db") >= 4  # table, headers, chart titles


def test_an_empty_sessions_pages_say_no_data_and_name_no_winner(comparison: Comparison, tmp_path: Path) -> None:
    result = empty_and_after(tmp_path, comparison)
    (_, table_page), _ = _pdf_pages(write_compare_pdf(result, tmp_path / "c.pdf"))
    assert "Mean step time (steady) ms no data 76" in table_page
    assert "better: A" not in table_page and "158" not in table_page
    html = write_compare_html(result, tmp_path / "c.html").read_text(encoding="utf-8")
    assert "no data" in html and "0.0 ms" not in html

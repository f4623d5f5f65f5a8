"""Comparison of two sessions: a run with a straggler (A) and the same run after the fix (B)."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

import pypdfium2 as pdfium
import pytest

from gui.core.analysis.compare import compare, write_compare_html, write_compare_pdf
from gui.core.report import build_report
from tests.gui.core.analysis.test_analysis import make_session


@pytest.fixture(scope="module")
def comparison():  # type: ignore[no-untyped-def]
    before = build_report(make_session(ranks=4, steps=120, straggler=1, extra_compute_s=0.040), 2.0)
    after = build_report(make_session(ranks=4, steps=120), 2.0)
    return compare(before, after, "before.db", "after.db")


def test_differences_have_direction_and_the_fixed_run_wins(comparison) -> None:  # type: ignore[no-untyped-def]
    m = {metric.key: metric for metric in comparison.metrics}
    assert m["step_s"].a == pytest.approx(m["step_s"].b + 40, abs=2)  # the straggler's 40 ms per step is gone
    assert m["step_s"].direction.startswith("down") and m["step_s"].better == "B"
    assert m["throughput"].direction.startswith("up") and m["throughput"].better == "B"
    assert m["straggler_gap_ms"].a == pytest.approx(40, abs=2) and m["straggler_gap_ms"].b == 0
    assert m["stall_ms"].better == "B"
    assert m["share_compute"].better == "B"  # a larger compute share is better
    assert m["ranks"].better == "n/a" and m["ranks"].direction == "unchanged"
    assert m["cost_per_step"].better == "B"


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
    assert parser.ids == ["sessions", "figures", "stragglers", "charts-a", "charts-b"]
    assert "before.db" in text and "after.db" in text and "rank 1, late by" in text
    assert "<script" not in text and "src=" not in text
    pdf_path = write_compare_pdf(comparison, tmp_path / "c.pdf")
    document = pdfium.PdfDocument(str(pdf_path))
    try:
        assert len(document) == 5
    finally:
        document.close()

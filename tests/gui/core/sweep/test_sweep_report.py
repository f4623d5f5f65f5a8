"""The sweep's files: sweep.csv (empty cells for what was not measured), a self-contained sweep.html with the
recommendation and its charts, and an A4 sweep.pdf that says the same."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import pypdfium2 as pdfium
import pytest

from ringscope.gui.core.sweep import CSV_COLUMNS, SweepPlan, SweepReport, csv_text, render_html, write_pdf
from ringscope.gui.core.sweep.advice import recommend
from ringscope.gui.core.sweep.analysis import Footing, SweepRow, with_efficiency

PLAN = SweepPlan(("ddp", "tf-mirrored"), (1, 2), steps=60, device="cpu")
REQUIRED = ("framework", "ranks", "global_batch", "steps", "samples_per_s", "efficiency", "data_wait_share",
            "compute_share", "allreduce_stall_share", "other_share", "bytes_per_step", "cost_per_1000_samples",
            "waiting_cost")


def _row(framework: str, ranks: int, samples_per_s: float | None, stall: float = 0.1) -> SweepRow:
    if samples_per_s is None:
        return SweepRow(framework, ranks, f"run-{framework}-{ranks}", 32 * ranks, status="failed: exit code 1")
    cost = ranks * 2.5 * 1000 / samples_per_s / 3600
    return SweepRow(framework, ranks, f"run-{framework}-{ranks}", 32 * ranks, steps=60, samples_per_s=samples_per_s,
                    data_wait_share=0.05, compute_share=0.8 - stall, allreduce_stall_share=stall, other_share=0.15,
                    step_s=0.002, bytes_per_step=35880.0 if framework == "ddp" else None,
                    cost_per_1000_samples=cost, waiting_cost=cost * (0.2 + stall), price_per_gpu_hour=2.5,
                    cost_unit="rank-hours")


@pytest.fixture(scope="module")
def report() -> SweepReport:
    rows = with_efficiency([_row("ddp", 1, 10000.0), _row("ddp", 2, 16000.0, stall=0.3),
                            _row("tf-mirrored", 1, 5000.0), _row("tf-mirrored", 2, None)])
    footing = Footing(True, "Equal footing: every configuration trained the same model.")
    return SweepReport(PLAN, (), tuple(rows), recommend(rows), footing, "out/sweep.db", 42.0, 1_700_000_000.0)


def test_csv_has_the_issue_columns_first_and_one_row_per_configuration(report: SweepReport) -> None:
    rows = list(csv.DictReader(io.StringIO(csv_text(report))))
    assert CSV_COLUMNS[:len(REQUIRED)] == REQUIRED
    assert [(r["framework"], r["ranks"]) for r in rows] == [("ddp", "1"), ("ddp", "2"), ("tf-mirrored", "1"),
                                                            ("tf-mirrored", "2")]
    ddp2 = rows[1]
    assert float(ddp2["efficiency"]) == pytest.approx(16000 / (2 * 10000))
    assert ddp2["global_batch"] == "64" and ddp2["bytes_per_step"] == "35880" and ddp2["equal_footing"] == "yes"
    assert ddp2["batch_size_per_rank"] == "32" and ddp2["model_width"] == "64" and ddp2["dataset"] == "digits"
    assert rows[2]["bytes_per_step"] == ""  # TF does not report it: empty, never 0
    failed = rows[3]
    assert failed["samples_per_s"] == failed["efficiency"] == failed["cost_per_1000_samples"] == ""
    assert failed["status"] == "failed: exit code 1"


def test_html_is_self_contained_and_leads_with_the_recommendation(report: SweepReport) -> None:
    page = render_html(report)
    assert not re.search(r"(src|href)=['\"]?(https?:|//|file:)", page)
    headline = page.index("Recommendation: ")
    assert headline < page.index("<h2>Evidence</h2>") < page.index("Equal footing: every configuration")
    for section in ("evidence", "footing", "scaling", "phases", "cost", "configurations", "method"):
        assert f"<section id='{section}'>" in page
    for chart in ("chart-throughput", "chart-efficiency"):
        assert f"data-chart='{chart}'" in page
    assert "ddp ideal (N x 1 rank)" in page and "linear (100 %)" in page
    assert "AllReduce stall vs compute — ddp" in page
    assert "ddp:2 $0.0000868" in page  # cost per 1000 samples, to three significant digits
    assert "Not measured: tf-mirrored:2 (failed: exit code 1)" in page


def test_pdf_pages_are_a4_and_say_the_recommendation(report: SweepReport, tmp_path: Path) -> None:
    path = write_pdf(report, tmp_path / "sweep.pdf")
    document = pdfium.PdfDocument(str(path))
    try:
        pages = [document[i] for i in range(len(document))]
        sizes = [page.get_size() for page in pages]
        text = " ".join(page.get_textpage().get_text_range() for page in pages)
    finally:
        document.close()
    assert len(sizes) <= 3 and all(size == pytest.approx((595, 842), abs=0.5) for size in sizes)
    squeezed = re.sub(r"\s+", "", text)
    assert re.sub(r"\s+", "", report.advice.headline) in squeezed  # "$" amounts drawn as text, not math
    for words in ("Throughput vs ranks", "Scaling efficiency", "Where the step time went", "Cost per 1000 samples",
                  "Equal footing: every configuration"):
        assert re.sub(r"\s+", "", words) in squeezed, words

"""Timing one call and reporting it as a benchmark row (``bench_reopen``, ``bench_report``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def timed(call: Callable[[], T]) -> tuple[T, float]:
    """``call()``'s result and the wall seconds it took."""
    started = time.perf_counter()
    result = call()
    return result, time.perf_counter() - started


def seconds_row(benchmark: str, metric: str, seconds: float, note: str) -> dict[str, Any]:
    """A benchmark row of a duration in seconds."""
    return {"benchmark": benchmark, "metric": metric, "value": seconds, "unit": "s", "note": note}

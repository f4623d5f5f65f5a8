"""Prometheus / OpenMetrics export of the live runs (``ringscope record --metrics-port``, and the window).

``MetricsServer`` serves what ``LiveRunsCollector`` builds on each scrape from a ``LiveRuns`` snapshot: per-rank
AllReduce stall, data-loader wait and compute, the straggler, run states, idle share, cost, ingest counters, and
GPUs under dcgm-exporter's names. Qt-free, so the headless ``record`` and the window share it.
"""

from ringscope.gui.core.metrics.collector import LiveRunsCollector, RecorderFigures, select_runs
from ringscope.gui.core.metrics.exporter import (
    DEFAULT_METRICS_BIND,
    SUGGESTED_METRICS_PORT,
    MetricsError,
    MetricsServer,
    is_loopback,
)
from ringscope.gui.core.metrics.families import MetricsLimits

__all__ = ["DEFAULT_METRICS_BIND", "SUGGESTED_METRICS_PORT", "LiveRunsCollector", "MetricsError", "MetricsLimits",
           "MetricsServer", "RecorderFigures", "is_loopback", "select_runs"]

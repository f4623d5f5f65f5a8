"""The ``--metrics-*`` options (a Prometheus / OpenMetrics endpoint) and starting the endpoint they describe.

Shared by every command that holds live runs (``record`` today; ``window`` can add the same options). The endpoint
itself is ``ringscope.gui.core.metrics.MetricsServer``. Never imports Qt.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable

from ringscope.gui.commands._args import add_price_argument, positive_int
from ringscope.gui.core.analysis.cost import DEFAULT_PRICE_PER_GPU_HOUR
from ringscope.gui.core.ingest.sink import IngestCounters
from ringscope.gui.core.live.runs import LiveRuns
from ringscope.gui.core.metrics import (
    DEFAULT_METRICS_BIND,
    MetricsError,
    MetricsLimits,
    MetricsServer,
    RecorderFigures,
)
from ringscope.gui.core.metrics.families import KEEP_ENDED_S, MAX_RANKS_PER_RUN, TOP_RANKS


def add_metrics_arguments(parser: argparse.ArgumentParser) -> None:
    """``--metrics-port`` (off by default), ``--metrics-bind``, the caps, and the price the cost series use."""
    group = parser.add_argument_group("metrics endpoint (Prometheus / OpenMetrics; see the README)")
    group.add_argument("--metrics-port", type=metrics_port, default=None, metavar="PORT",
                       help="serve the live runs' metrics over HTTP on this port (0 picks a free one; the URL is "
                            "printed; default: no endpoint)")
    group.add_argument("--metrics-bind", type=metrics_address, default=DEFAULT_METRICS_BIND, metavar="ADDRESS",
                       help="address the metrics endpoint listens on (default %(default)s: this machine only; "
                            "0.0.0.0 serves every network, without authentication)")
    group.add_argument("--metrics-keep-ended", type=minutes, default=KEEP_ENDED_S / 60.0, metavar="MINUTES",
                       help="minutes a run's series stay after it ended (default %(default)g)")
    group.add_argument("--metrics-max-ranks", type=positive_int, default=MAX_RANKS_PER_RUN, metavar="N",
                       help="ranks of a run exported one series each; a larger run exports p5/p50/p95 over its "
                            "ranks and its --metrics-top-ranks worst ranks by AllReduce stall (default "
                            "%(default)s)")
    group.add_argument("--metrics-top-ranks", type=positive_int, default=TOP_RANKS, metavar="N",
                       help="worst ranks exported per run beyond --metrics-max-ranks (default %(default)s)")
    add_price_argument(parser, f"{DEFAULT_PRICE_PER_GPU_HOUR:g}, for the metrics' cost series")


def start_metrics(args: argparse.Namespace, command: str, runs: LiveRuns | None,
                  counters: Callable[[], IngestCounters] | None,
                  recorder: RecorderFigures | None = None) -> tuple[MetricsServer | None, bool]:
    """Start the endpoint the options ask for: (server or None when not asked, True when it could not start; the
    reason is printed as the command's one error line)."""
    if args.metrics_port is None or runs is None:
        return None, False
    price = args.price_per_gpu_hour
    server = MetricsServer(runs, counters, args.metrics_bind, args.metrics_port, recorder=recorder,
                           price_per_gpu_hour=lambda: price,
                           limits=MetricsLimits(keep_ended_s=args.metrics_keep_ended * 60.0,
                                                max_ranks_per_run=args.metrics_max_ranks,
                                                top_ranks=args.metrics_top_ranks))
    try:
        return server.start(), False
    except MetricsError as exc:
        option = "--metrics-port" if exc.port_in_use else "--metrics-bind"
        print(f"ringscope {command}: argument {option}: {exc}", file=sys.stderr)
        return None, True


# ---- Argument types ------------------------------------------------------------------------------------------------


def metrics_port(text: str) -> int:
    """A TCP port 0..65535 (0 picks a free one)."""
    if not text.strip().isdigit() or not 0 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port in 0..65535 (0 picks a free one), got {text!r}")
    return int(text)


def metrics_address(text: str) -> str:
    """An address to listen on: an IP address or a host name of this machine, without scheme or port."""
    if not text.strip() or any(c.isspace() or c in "/?#" for c in text) or text.count(":") == 1:
        raise argparse.ArgumentTypeError(f"expected an address of this machine without scheme or port (e.g. "
                                         f"127.0.0.1, 0.0.0.0, ::1), got {text!r}")
    return text


def minutes(text: str) -> float:
    """A finite number of minutes >= 0."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected a number of minutes >= 0, got {text!r}")
    return value

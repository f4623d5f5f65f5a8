"""Record telemetry headlessly into a session file: ringscope record --out SESSION.db [--bind ENDPOINT].

Prints where it listens, a one-line progress report to stderr every few seconds, and stops cleanly on Ctrl-C or
SIGTERM with everything received written to the file. With --metrics-port it also keeps the live runs in memory
and serves their metrics over HTTP to Prometheus (see the README's "Prometheus and Grafana").
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import threading
import time
from types import FrameType

from ringscope.agent import control
from ringscope.gui.commands._args import bind_endpoint, new_session_file, positive_int, seconds, seconds_or_zero
from ringscope.gui.commands._metrics import add_metrics_arguments, start_metrics
from ringscope.gui.commands.keys import add_secure_arguments, secure_keys
from ringscope.gui.core.analysis.hang import MIN_THRESHOLD_S
from ringscope.gui.core.analysis.runs import LOST_TIMEOUT_S, STATE_TEXT
from ringscope.gui.core.ingest import gc_policy
from ringscope.gui.core.ingest.collector import DEFAULT_BIND, Collector, CollectorError
from ringscope.gui.core.ingest.recorder import QUEUE_CAPACITY_BYTES, Recorder
from ringscope.gui.core.live.runs import LiveRuns
from ringscope.gui.core.live.store import LiveStore
from ringscope.gui.core.live.watch import RunWatcher
from ringscope.gui.core.metrics import MetricsServer

WATCH_INTERVAL_S = 0.25  # how often run states are decided (a hang is named within this of crossing its threshold)
AGENT_FLUSH_S = 0.25
"""How often a headless recorder asks its agents to send (they send every 50 ms by default, for a window's live
latency): a quarter of the wake-ups of every rank's sender thread and of this recorder, on cores the training
needs; a record waits at most this long more."""


def agent_flush(text: str) -> float:
    """``--agent-flush``: 0 (leave the agents' own) or seconds the agents accept (``control.check_settings``, as
    the collector checks them)."""
    value = seconds_or_zero(text)
    if value:
        try:
            control.check_settings({"flush_interval_s": value})
        except control.ControlError:
            low, high = control.SETTINGS["flush_interval_s"][1:3]  # type: ignore[misc]
            raise argparse.ArgumentTypeError(f"{text} is outside {low:g}..{high:g} s (or 0: the agents' own)") from None
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``ringscope record``."""
    parser.add_argument("--out", required=True, type=new_session_file, metavar="SESSION.db",
                        help="session file to create (must not exist; missing folders are created)")
    parser.add_argument("--bind", type=bind_endpoint, default=DEFAULT_BIND, metavar="ENDPOINT",
                        help=f"ZeroMQ endpoint to listen on (default {DEFAULT_BIND}: this machine only; "
                             "use tcp://0.0.0.0:5757 to accept agents from other hosts)")
    parser.add_argument("--progress-s", type=seconds_or_zero, default=5.0, metavar="SECONDS",
                        help="seconds between progress lines on stderr (default %(default)g; 0: none)")
    parser.add_argument("--duration", type=seconds, default=None, metavar="SECONDS",
                        help="stop after this many seconds (default: run until Ctrl-C or SIGTERM)")
    parser.add_argument("--queue-mb", type=positive_int, default=QUEUE_CAPACITY_BYTES // 2**20, metavar="MB",
                        help="memory for records waiting to be written (default %(default)d MB); beyond it, "
                             "records are dropped and counted")
    parser.add_argument("--lost-timeout", type=seconds, default=LOST_TIMEOUT_S, metavar="SECONDS",
                        help="an agent silent this long without saying goodbye is lost (default %(default)g; agents "
                             "send a heartbeat every second)")
    parser.add_argument("--hang-after", type=seconds, default=MIN_THRESHOLD_S, metavar="SECONDS",
                        help="a run whose ranks are alive but complete no step for max(this, 20 x its median step) "
                             "is hung (default %(default)g)")
    parser.add_argument("--agent-flush", type=agent_flush, default=AGENT_FLUSH_S, metavar="SECONDS",
                        help="ask every agent to send its records this often (default %(default)g: fewer wake-ups on "
                             "the training's cores than the agents' own 0.05 s, which a window keeps for live "
                             "latency; 0: leave the agents' own)")
    add_secure_arguments(parser)
    add_metrics_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Record until interrupted; 0 on a clean stop, 1 when received rows are not in the file (write errors, or
    dropped because the writer fell behind), 2 when the file, endpoint or key file cannot be used."""
    keys, code = secure_keys(args, "record")
    if code:
        return code
    gc_policy.tune_for_ingest()  # this process only receives telemetry from here on
    recorder = Recorder(args.out, meta={"command": shlex.join(sys.argv)}, queue_capacity_bytes=args.queue_mb << 20)
    # the live runs: a second sink next to the recorder, for run states (lost, hung, finished) and the metrics
    # Headless: the stores keep what states, hangs and metrics need (recent steps per rank), not the window's
    # whole-run heat history: ~2.5 KB per rank instead of ~40 KB.
    runs = LiveRuns(lost_timeout_s=args.lost_timeout, store_factory=lambda run_id: LiveStore(
        lost_timeout_s=args.lost_timeout, run_id=run_id, buckets=16, recent_steps=32, series_len=64))
    runs.hang_minimum_s = args.hang_after
    watcher = RunWatcher(runs, recorder.note_event)
    settings = {"flush_interval_s": args.agent_flush} if args.agent_flush else None
    collector = Collector(args.bind, [recorder, runs], keys=keys, agent_settings=settings)
    metrics, failed = start_metrics(args, "record", runs, lambda: collector.counters, recorder)
    if failed:
        return 2  # before the session file exists: nothing written
    try:
        recorder.start()
    except (OSError, ValueError) as exc:
        _close_metrics(metrics)
        print(f"ringscope record: cannot create {args.out}: {exc}", file=sys.stderr)
        return 2
    try:
        collector.start()
    except CollectorError as exc:
        _close_metrics(metrics)
        recorder.close()
        recorder.path.unlink(missing_ok=True)
        print(f"ringscope record: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    print(f"ringscope record: listening on {collector.endpoint}, writing {recorder.path} "
          f"(agents: RINGSCOPE_ENDPOINT={collector.endpoint}); Ctrl-C to stop", flush=True)
    if metrics is not None:
        print(f"ringscope record: metrics on {metrics.url} (Prometheus / OpenMetrics)", flush=True)
    started = time.monotonic()
    last_progress = started
    try:
        while not stop.wait(WATCH_INTERVAL_S):
            now = time.monotonic()
            if args.duration is not None and now - started >= args.duration:
                break
            _watch(watcher)  # run states move (lost, hung, finished) and hangs are recorded, scraped or not
            if args.progress_s > 0 and now - last_progress >= args.progress_s:
                last_progress = now
                _progress(collector, recorder, now - started)
    finally:
        collector.close()
        recorder.close()
        _close_metrics(metrics)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    counters = collector.counters
    print(f"ringscope record: stopped; {recorder.rows_written} records from {counters.agents} agent(s) in "
          f"{recorder.path} ({recorder.file_bytes / 1e6:.1f} MB); gaps {counters.gaps}, joined late "
          f"{counters.joined_late}, sent twice {counters.duplicates} (dropped), rejected {counters.rejected_total}, "
          f"dropped {recorder.dropped_records}", file=sys.stderr, flush=True)
    if recorder.dropped_records:
        print(f"ringscope record: {recorder.dropped_records} received record(s) were dropped, not written: the "
              f"writer fell more than --queue-mb {args.queue_mb} MB behind the agents (this machine could not keep "
              "up); the file holds everything else", file=sys.stderr, flush=True)
    if recorder.write_errors:
        print(f"ringscope record: {recorder.write_errors} row(s) could not be written to {recorder.path} (last "
              f"error: {recorder.last_write_error}); the file holds everything else; check the disk's free space "
              "and health", file=sys.stderr, flush=True)
    return 1 if recorder.write_errors or recorder.dropped_records else 0


def _watch(watcher: RunWatcher) -> None:
    """Refresh the runs; one line per state change, the hang verdict with the stuck ranks' stacks."""
    notices = watcher.tick()
    for run_id, old, new in watcher.transitions:
        print(f"ringscope record: run {run_id}: {old} -> {new} ({STATE_TEXT.get(new, new)})", file=sys.stderr,
              flush=True)
    for notice in notices:
        print(f"ringscope record: run {notice.run_id} {notice.text}", file=sys.stderr, flush=True)


def _progress(collector: Collector, recorder: Recorder, elapsed_s: float) -> None:
    counters = collector.counters
    print(f"[{elapsed_s:7.1f} s] agents {counters.agents}  received {counters.records}  written "
          f"{recorder.rows_written}  gaps {counters.gaps} (missing {counters.missing_messages})  "
          f"rejected {counters.rejected_total}  dropped {recorder.dropped_records}  "
          f"{recorder.file_bytes / 1e6:.1f} MB" + (f"  WRITE ERRORS {recorder.write_errors}" if recorder.write_errors
                                                   else ""), file=sys.stderr, flush=True)


def _close_metrics(metrics: MetricsServer | None) -> None:
    if metrics is not None:
        metrics.close()

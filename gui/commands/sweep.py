"""Scaling sweep and framework bake-off on one model: ringscope sweep --frameworks ddp,tf-mirrored --ranks 1,2 --out DIR

    ringscope sweep --frameworks ddp,tf-mirrored --ranks 1,2 --steps 200 --out sweep/
    ringscope sweep --frameworks ddp,tf-mirrored,tf-multi-worker --ranks 1,2,4 --model-width 256 --out sweep/
    ringscope sweep --frameworks ddp --ranks 1,2,4 --script train.py --script-args "--epochs 1" --out sweep/

Runs the reference trainer of each framework on each rank count, one after the other, with the same model, data
and per-rank batch, all recorded into one session file (DIR/sweep.db, one run id per configuration). Then writes
DIR/sweep.csv (one row per configuration: throughput, scaling efficiency = throughput(N) / (N x throughput(1)),
phase shares, bytes per step, cost per 1000 samples), DIR/sweep.html and DIR/sweep.pdf (throughput against ranks
with the ideal linear line, phase shares, cost, and a recommendation with its evidence).

With --script, every configuration runs the user's script, unmodified, through the zero-code path of ringscope run
(torchrun --nproc-per-node N for ddp; N TF_CONFIG workers for tf-multi-worker; the first N GPUs for tf-mirrored),
with the same --script-args; the outputs then say that the footing was not checked (a script prints no
RINGSCOPE_RESULT line). --model-width, --model-depth, --dataset, --batch-size and --steps configure the reference
trainers only and are refused with --script.

A sweep this machine cannot run (more ranks than cores on a CPU, or than GPUs; no 1-rank baseline; an unknown
framework; a bad number) is refused before anything starts. On stderr, each configuration's start and end is also
one machine-readable line, e.g. "SWEEP config 3 of 6: ddp:2 started": the window's File > Sweep... dialog runs
this command and follows it by them. Exit code 1 when a configuration failed (the outputs then show the others, and
say why it has no figures).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, TypeVar

from ringscope.gui.commands._args import (
    EXIT_FAILED,
    add_price_argument,
    create_folders,
    fail,
    os_error_text,
    output_folder,
    positive_int,
    seconds,
)
from ringscope.gui.core.analysis.cost import DEFAULT_PRICE_PER_GPU_HOUR
from ringscope.gui.core.extras import require
from ringscope.gui.core.sweep.plan import (
    DATASETS,
    DEFAULTS,
    DEVICES,
    OUTPUT_NAMES,
    SESSION_NAME,
    SweepPlan,
    parse_comm_delay,
    parse_frameworks,
    parse_ranks,
    script_conflicts,
)
from ringscope.gui.core.sweep.request import split_script_args

if TYPE_CHECKING:
    from ringscope.gui.core.sweep.report import SweepReport

GIVEN = "_reference_options_given"
"""The namespace attribute listing the reference trainers' options given on the command line (private: ``_``)."""
T = TypeVar("T")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``ringscope sweep``."""
    parser.add_argument("--frameworks", required=True, type=_checked(parse_frameworks), metavar="LIST",
                        help="comma-separated: ddp (PyTorch DDP), tf-mirrored (TF MirroredStrategy), "
                             "tf-multi-worker (TF MultiWorkerMirroredStrategy, one process per rank)")
    parser.add_argument("--ranks", required=True, type=_checked(parse_ranks), metavar="N,N,...",
                        help="comma-separated rank counts, 1 included (the baseline of scaling efficiency), e.g. "
                             "1,2,4")
    parser.add_argument("--out", required=True, type=output_folder, metavar="DIR",
                        help=f"folder for {SESSION_NAME}, {', '.join(OUTPUT_NAMES)} (created if missing; must not "
                             f"hold a {SESSION_NAME} yet)")
    # The reference trainers' options note that they were given, so that one given with --script is refused.
    for flag, default, what in (("--steps", DEFAULTS.steps, "optimizer steps per run"),
                                ("--model-width", DEFAULTS.model_width, "hidden units per MLP layer"),
                                ("--model-depth", DEFAULTS.model_depth, "hidden layers of the MLP"),
                                ("--batch-size", DEFAULTS.batch_size,
                                 "samples per rank per step, the same in every configuration")):
        parser.add_argument(flag, type=positive_int, default=default, metavar="N", action=_ReferenceOption,
                            help=f"{what} (default %(default)d)")
    parser.add_argument("--dataset", choices=DATASETS, default=DEFAULTS.dataset, action=_ReferenceOption,
                        help="digits (scikit-learn, bundled) or synthetic (scales with --model-width; default "
                             "%(default)s)")
    parser.add_argument("--script", default=None, metavar="PATH",
                        help="sweep your own training script instead of the reference trainers: run unmodified "
                             "through the zero-code path (as ringscope run), one framework only; the options above "
                             "(--steps ... --dataset) then do not apply")
    parser.add_argument("--script-args", type=_checked(split_script_args), default=(), metavar='"ARGS"',
                        help='arguments for --script, the same in every configuration, in one quoted word (e.g. '
                             '--script-args "--epochs 1 --lr 0.1"; a single option: --script-args=--fast)')
    parser.add_argument("--device", choices=DEVICES, default=DEFAULTS.device,
                        help="where ranks compute: auto = one GPU per rank when there are enough, else the CPU "
                             "(default %(default)s)")
    add_price_argument(parser, f"the agents' price, else {DEFAULT_PRICE_PER_GPU_HOUR:g}")
    parser.add_argument("--timeout-per-run", type=seconds, default=DEFAULTS.timeout_per_run_s, metavar="SECONDS",
                        help="stop a configuration still running after this long (default %(default)g)")
    # Test hook: slow one configuration's all-reduce (the DDP trainer's --comm-delay-ms).
    parser.add_argument("--comm-delay-ms-for", type=_checked(parse_comm_delay), action="append", default=[],
                        metavar="FRAMEWORK:RANKS=MS", help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    """Check, run every configuration, write the outputs; 0 when all ran, 1 when one failed, 2 when refused."""
    from ringscope.gui.core.launch.demo import gpu_count
    from ringscope.gui.core.sweep.plan import problems, resolve_device

    require("pdf", "a sweep (it writes sweep.pdf)")  # before hours of training, not after
    given = getattr(args, GIVEN, [])
    if args.script is None and args.script_args:
        return fail("sweep", "--script-args without --script: they are the arguments of your script; add --script "
                             "PATH, or drop --script-args")
    gpus = gpu_count() if args.device != "cpu" else 0
    plan = SweepPlan(frameworks=args.frameworks, ranks=args.ranks, steps=args.steps, model_width=args.model_width,
                     model_depth=args.model_depth, batch_size=args.batch_size, dataset=args.dataset,
                     device=resolve_device(args.device, gpus, max(args.ranks)),
                     comm_delays=dict(args.comm_delay_ms_for), python=sys.executable,
                     script=None if args.script is None else os.path.abspath(args.script),
                     script_args=tuple(args.script_args))
    errors = (script_conflicts(given) if plan.uses_script else []) + problems(plan, cpu_count=os.cpu_count(),
                                                                             gpu_count=gpus)
    if errors:
        return fail("sweep", "; ".join(errors))
    out = Path(args.out)
    if (out / SESSION_NAME).exists():
        return fail("sweep", f"{out / SESSION_NAME} already exists (a session is never overwritten); give another "
                             "--out folder")
    try:
        create_folders([out])
    except OSError as exc:
        return fail("sweep", f"cannot create --out {out}: {os_error_text(exc)}")
    return _sweep(plan, out, args)


def _sweep(plan: SweepPlan, out: Path, args: argparse.Namespace) -> int:
    from ringscope.gui.core.ingest.collector import Collector, CollectorError
    from ringscope.gui.core.ingest.recorder import Recorder
    from ringscope.gui.core.ingest.session_reader import load
    from ringscope.gui.core.sweep import RunOutcome, SweepRunner, build_report, write_csv, write_html, write_pdf
    from ringscope.gui.core.sweep.progress_lines import ProgressLines

    session_path = out / SESSION_NAME
    recorder = Recorder(session_path, meta={"command": shlex.join(sys.argv), "sweep": json.dumps(_plan_json(plan))})
    try:
        recorder.start()
        collector = Collector("tcp://127.0.0.1:0", [recorder]).start()
    except (OSError, ValueError, CollectorError) as exc:
        recorder.close()
        return fail("sweep", f"cannot record into {session_path}: {exc}")
    started = time.monotonic()
    print(f"ringscope sweep: {len(plan.configurations())} configuration(s) on {plan.device.upper()}, "
          f"recording into {session_path}", file=sys.stderr, flush=True)
    lines = ProgressLines(plan.configurations(), _machine_progress)  # "SWEEP config 3 of 6: ddp:2 started"

    def on_progress(line: str) -> None:
        lines.on_progress(line)
        _progress(line)

    def on_outcome(outcome: RunOutcome) -> None:
        recorder.note_launch(outcome.run_id, outcome.state, outcome.exit_code, outcome.ended_s, outcome.message)
        lines.on_outcome(outcome)

    runner = SweepRunner(plan, collector.endpoint, records=lambda: collector.counters.records,
                         timeout_s=args.timeout_per_run, on_progress=on_progress, on_outcome=on_outcome)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        runner.stop()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        outcomes = runner.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        collector.close()
        recorder.close()
    report = build_report(load(session_path), outcomes, plan, session_path=str(session_path),
                          wall_s=time.monotonic() - started, price_per_gpu_hour=args.price_per_gpu_hour)
    try:
        written = [write_csv(report, out / "sweep.csv"), write_html(report, out / "sweep.html"),
                   write_pdf(report, out / "sweep.pdf")]
    except OSError as exc:
        print(f"ringscope sweep: cannot write the outputs into {out}: {os_error_text(exc)}", file=sys.stderr)
        return EXIT_FAILED
    _summary(report, written)
    if runner.stopped:
        print(f"ringscope sweep: interrupted after {len(outcomes)} of {len(plan.configurations())} configuration(s); "
              "the outputs show what was measured", file=sys.stderr)
    return 0 if all(o.ok for o in outcomes) and len(outcomes) == len(plan.configurations()) else EXIT_FAILED


def _summary(report: SweepReport, written: list[Path]) -> None:
    """The table of figures and the recommendation on stdout; the files written."""
    from ringscope.gui.core.sweep.advice import money
    from ringscope.gui.core.sweep.report import throughput_unit

    unit = throughput_unit(report.rows)
    print(f"{'configuration':<22}{unit:>12}{'efficiency':>12}{'stall':>8}{'compute':>9}{'per 1000':>12}")
    for row in report.rows:
        rate = "{:,.0f}" if row.samples_per_s is not None else "{:,.1f}"
        print(f"{row.label:<22}{_fmt(row.throughput, rate):>12}{_fmt(row.efficiency, '{:.1%}'):>12}"
              f"{_fmt(row.allreduce_stall_share, '{:.0%}'):>8}{_fmt(row.compute_share, '{:.0%}'):>9}"
              f"{money(row.cost_per_1000_samples) if row.cost_per_1000_samples is not None else '-':>12}"
              + ("" if row.status == "ok" else f"  {row.status}"))
    print(f"footing: {report.footing.text}")
    print(f"recommendation: {report.advice.headline}")
    for reason in report.advice.reasons:
        print(f"why: {reason}")
    for path in written:
        print(f"{path.suffix.lstrip('.')}: {path}")
    print(f"ringscope sweep: done in {report.wall_s:.1f} s", file=sys.stderr)


def _progress(line: str) -> None:
    print(f"ringscope sweep: {line}", file=sys.stderr, flush=True)


def _machine_progress(line: str) -> None:
    """A progress line for the window (``ringscope.gui.core.sweep.progress_lines``): alone on its line, no prefix."""
    print(line, file=sys.stderr, flush=True)


def _fmt(value: float | None, form: str) -> str:
    if value is None:
        return "-"
    text = form.format(value)
    return text[1:] if text.startswith("-") and not any(c in "123456789" for c in text) else text  # never "-0%"


def _plan_json(plan: SweepPlan) -> dict[str, object]:
    return {"frameworks": list(plan.frameworks), "ranks": list(plan.ranks), "steps": plan.steps,
            "model_width": plan.model_width, "model_depth": plan.model_depth, "batch_size": plan.batch_size,
            "dataset": plan.dataset, "device": plan.device, "comm_delays": plan.comm_delays, "script": plan.script,
            "script_args": list(plan.script_args)}


class _ReferenceOption(argparse.Action):
    """Stores the value, and notes the option (``--model-width``) in the namespace's ``GIVEN`` list."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        setattr(namespace, self.dest, values)
        setattr(namespace, GIVEN, [*getattr(namespace, GIVEN, []), self.option_strings[0]])


def _checked(parse: Callable[[str], T]) -> Callable[[str], T]:
    """An argparse ``type=`` from a parser raising ValueError (its message becomes the one-line error)."""

    def check(text: str) -> T:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    check.__name__ = parse.__name__
    return check

"""Submit a training to Slurm with Ringscope in it: ringscope submit --nodes N --tasks-per-node P [...] -- SCRIPT ...

    ringscope submit --endpoint tcp://master:5757 --nodes 2 --tasks-per-node 8 --gpus-per-node 8 \\
        --partition gpu --time 4:00:00 -- train.py --epochs 3
    ringscope submit --print --nodes 2 --tasks-per-node 2 -- train.py      # only show the batch script

The same batch script the window's launch dialog writes (target *Slurm*): srun + torchrun with a c10d
rendezvous on the allocation's first node (--kind ddp, the default), one MultiWorkerMirroredStrategy worker per
task with TF_CONFIG built from the allocation (--kind tf_multi_worker), or plain copies of the script with
torchrun's rank variables (--kind script); the script runs with ringscope run's zero-code bootstrap and
reports to ENDPOINT. Without SCRIPT the project's reference trainer runs (ddp and TensorFlow kinds).

It writes the script to ringscope-slurm/ in the working directory, submits it with sbatch and stays in the
foreground: the job's scheduler state as it changes (queued with Slurm's reason, running, finished / failed /
cancelled / timeout), then its output. Ctrl-C (or SIGTERM) cancels the job with scancel. The exit code is the
job's: 0, its own exit code when it failed, 124 on its time limit, 143 when cancelled, 1 when sbatch refused it.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace

from ringscope.agent.publisher import DEFAULT_ENDPOINT
from ringscope.agent.runtime import ENV_ENDPOINT, ENV_RUN_ID
from ringscope.gui.commands._args import command_words, connect_endpoint, positive_int
from ringscope.gui.core.launch.commands import build_commands
from ringscope.gui.core.launch.slurm import batch_script
from ringscope.gui.core.launch.slurm_settings import SlurmSettings
from ringscope.gui.core.launch.spec import KINDS, REFERENCE, LaunchSpec, new_run_id
from ringscope.gui.core.launch.validation import SBATCH_MISSING, validate

EXIT_USAGE = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``ringscope submit``."""
    parser.add_argument("--endpoint", type=connect_endpoint, default=None, metavar="ENDPOINT",
                        help=f"collector the ranks send to, as the nodes reach it (default: $RINGSCOPE_ENDPOINT, else "
                             f"{DEFAULT_ENDPOINT}, which compute nodes cannot reach)")
    parser.add_argument("--run-id", default=None, metavar="ID", help="run id (default: $RINGSCOPE_RUN_ID, else fresh)")
    parser.add_argument("--kind", choices=KINDS, default="ddp",
                        help="how each node starts its ranks (default ddp: one torchrun per node)")
    parser.add_argument("--nodes", type=positive_int, default=1, metavar="N",
                        help="nodes of the allocation (default 1)")
    parser.add_argument("--tasks-per-node", type=positive_int, default=1, metavar="P",
                        help="ranks per node (ddp: torchrun's --nproc-per-node; devices for tf_mirrored)")
    parser.add_argument("--partition", default="", help="sbatch --partition (default: the cluster's)")
    parser.add_argument("--time", default="", metavar="LIMIT", help="sbatch --time, e.g. 30 or 4:00:00")
    parser.add_argument("--account", default="", help="sbatch --account")
    parser.add_argument("--gpus-per-node", type=int, default=0, metavar="G", help="sbatch --gpus-per-node")
    parser.add_argument("--sbatch", action="append", default=[], metavar="OPTION",
                        help="another #SBATCH line, e.g. --sbatch=--mem=64G (repeatable)")
    parser.add_argument("--workdir", default=None, metavar="DIR",
                        help="the job's working directory, shared with the nodes (default: this one)")
    parser.add_argument("--print", action="store_true", dest="print_only",
                        help="print the batch script and exit without submitting")
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="-- SCRIPT ...",
                        help="the training script and its arguments, after -- (none: the reference trainer)")


def run(args: argparse.Namespace) -> int:
    """Build, check and submit the job; follow it until it ends; return its outcome as an exit code."""
    command = command_words(args.command)
    endpoint = args.endpoint or os.environ.get(ENV_ENDPOINT) or DEFAULT_ENDPOINT
    run_id = args.run_id or os.environ.get(ENV_RUN_ID) or new_run_id()
    spec = LaunchSpec(kind=args.kind, trainer=command[0] if command else REFERENCE, script_args=tuple(command[1:]),
                      processes=args.tasks_per_node, working_dir=os.path.abspath(args.workdir or os.getcwd()),
                      run_id=run_id,
                      slurm=SlurmSettings(nodes=args.nodes, partition=args.partition, time_limit=args.time,
                                          account=args.account, gpus_per_node=args.gpus_per_node,
                                          extra=tuple(args.sbatch)))
    if spec.trainer != REFERENCE:
        spec = replace(spec, trainer=os.path.abspath(os.path.join(spec.working_dir or "", spec.trainer)))
    errors = validate(spec, endpoint)
    if args.print_only:
        errors = [error for error in errors if error != SBATCH_MISSING]  # printing needs no Slurm here
    if errors:  # every problem, in the one line every command gives
        print("ringscope submit: " + "; ".join(errors), file=sys.stderr)
        return EXIT_USAGE
    if args.print_only:
        sys.stdout.write(batch_script(spec, endpoint))
        return 0
    [plan] = build_commands(spec, endpoint)
    # this process becomes the follower the window would start: Ctrl-C reaches it (scancel), its exit code is ours
    if plan.cwd:
        os.chdir(plan.cwd)
    os.execve(plan.argv[0], plan.argv, plan.full_env())

"""Launching trainings from the app (Qt-free): the public API, re-exported from the modules of this package.

Modules: ``options`` (trainer option table), ``spec`` (LaunchSpec), ``validation`` (validate), ``commands``
(build_commands: local ``plan`` or SSH ``remote``), ``endpoints`` (ports and collector addresses), ``process``
(ManagedProcess, output buffers), ``runner`` (Launcher), ``supervisor`` and ``restart`` (restart policy), ``demo``
(demo_spec).

    launcher = Launcher("tcp://127.0.0.1:5757")
    errors = launcher.validate(spec)          # every problem, in words, before anything starts
    run = launcher.start(spec)                # processes in their own groups, output into bounded buffers
    changes = launcher.poll()                 # from one thread (the GUI timer): state changes with exit codes
    launcher.stop(run.run_id, grace_s=10)     # SIGTERM/SIGINT, SIGKILL after the grace period; never hangs

Never imports Qt or a training framework.
"""

from ringscope.gui.core.launch.commands import build_commands
from ringscope.gui.core.launch.demo import DEMO_STEPS, demo_spec, gpu_count
from ringscope.gui.core.launch.endpoints import (
    check_bindable,
    connect_endpoint,
    free_ports,
    port_in_use,
    remote_endpoint,
)
from ringscope.gui.core.launch.options import (
    OPTIONS,
    OPTIONS_BY_KEY,
    OptionSpec,
    OptionValue,
    default_options,
    option_for,
    options_for,
)
from ringscope.gui.core.launch.plan import ProcessPlan
from ringscope.gui.core.launch.process import FINAL_STATES, ManagedProcess, OutputBuffer, ProcessState, StateChange
from ringscope.gui.core.launch.runner import Launcher, LaunchError, Run
from ringscope.gui.core.launch.spec import (
    KIND_TITLES,
    KINDS,
    REFERENCE,
    LaunchKind,
    LaunchSpec,
    format_env_lines,
    new_run_id,
    parse_env_lines,
)
from ringscope.gui.core.launch.validation import validate

__all__ = [
    "DEMO_STEPS",
    "FINAL_STATES",
    "KINDS",
    "KIND_TITLES",
    "OPTIONS",
    "OPTIONS_BY_KEY",
    "REFERENCE",
    "LaunchError",
    "LaunchKind",
    "LaunchSpec",
    "Launcher",
    "ManagedProcess",
    "OptionSpec",
    "OptionValue",
    "OutputBuffer",
    "ProcessPlan",
    "ProcessState",
    "Run",
    "StateChange",
    "build_commands",
    "check_bindable",
    "connect_endpoint",
    "default_options",
    "demo_spec",
    "format_env_lines",
    "free_ports",
    "gpu_count",
    "new_run_id",
    "option_for",
    "options_for",
    "parse_env_lines",
    "port_in_use",
    "remote_endpoint",
    "validate",
]

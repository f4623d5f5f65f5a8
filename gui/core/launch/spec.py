"""What the user asked to launch: ``LaunchSpec``, its persistence (``to_dict``/``from_dict``) and small parsers.

A spec is plain data; it never starts anything, never touches the network, and never imports Qt.
"""

from __future__ import annotations

import os
import re
import secrets
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Final, Literal, cast, get_args

from ringscope.gui.core.launch.options import Framework, OptionValue
from ringscope.gui.core.launch.slurm_settings import SlurmSettings

LaunchKind = Literal["ddp", "tf_mirrored", "tf_multi_worker", "script"]
KINDS: Final[tuple[LaunchKind, ...]] = get_args(LaunchKind)
KIND_TITLES: Final[dict[LaunchKind, str]] = {
    "ddp": "PyTorch DDP (torchrun)",
    "tf_mirrored": "TensorFlow MirroredStrategy",
    "tf_multi_worker": "TensorFlow MultiWorkerMirroredStrategy",
    "script": "Python script (N plain processes)",
}
REFERENCE: Final[str] = "reference"
MAX_PROCESSES: Final[int] = 1024
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(slots=True)
class LaunchSpec:
    """One launch request.

    Attributes:
        kind: how processes are started (torchrun / one TF process / N TF workers / N plain processes).
        trainer: ``"reference"`` (the project's trainer for ``kind``) or the path of the user's script.
        script_args: arguments after the script (user scripts only; reference trainers take ``options``).
        processes: ranks (ddp), devices (tf_mirrored) or worker processes (tf_multi_worker, script).
        options: reference-trainer options by name (see ``ringscope.gui.core.launch.options``); text values are
        accepted. working_dir: the processes' working directory (None: the app's).
        env: extra environment variables.
        run_id: one id per launch; None lets the launcher assign a fresh one.
        python: the interpreter that runs everything (torchrun is run as ``python -m torch.distributed.run``).
        base_port: first TF_CONFIG port for MultiWorkerMirroredStrategy; None picks free ports.
        zero_code: inject Ringscope into the user's unmodified script (``ringscope.agent.inject``, as ``ringscope run``
            does); off for scripts that instrument themselves. Reference trainers instrument themselves: ignored.
        hosts: the nodes to run on over SSH, in node-rank order (the first hosts the rendezvous); empty: this
            machine only. With hosts, ``processes`` counts per host, ``base_port`` is the rendezvous (ddp) or first
            TF_CONFIG port (tf_multi_worker) on the hosts, and ``python``, ``working_dir`` and the trainer are paths
            that must exist on every host (a shared file system, as DeepSpeed's and pdsh-style launchers assume).
        ssh_user: the login name on the hosts (None: ssh's default, i.e. the config file's or the local user).
        ssh_key: an identity file for ``ssh -i`` (None: ssh's default keys and agent).
        ssh_options: extra ssh arguments placed before the launcher's own, e.g. ``("-F", "~/.ssh/cluster")`` or
            ``("-o", "Port=2222")``; ssh keeps the first value of an option, so these win.
        slurm: submit to Slurm instead (``ringscope.gui.core.launch.slurm``): ``processes`` counts per node, the nodes
            come from the allocation. None: this machine or ``hosts``.
        restart_max: *Restart automatically*: 0 never; N restarts the run (same run id, next attempt) at most N
            times when it hangs, a process fails or a rank is lost (``ringscope.gui.core.launch.restart``).
    """

    kind: LaunchKind = "ddp"
    trainer: str = REFERENCE
    script_args: tuple[str, ...] = ()
    processes: int = 2
    options: dict[str, OptionValue] = field(default_factory=dict)
    working_dir: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    run_id: str | None = None
    python: str = sys.executable
    base_port: int | None = None
    zero_code: bool = True
    hosts: tuple[str, ...] = ()
    ssh_user: str | None = None
    ssh_key: str | None = None
    ssh_options: tuple[str, ...] = ()
    restart_max: int = 0
    slurm: SlurmSettings | None = None

    @property
    def framework(self) -> Framework | None:
        """Which trainer option set applies (None for plain scripts)."""
        return framework_of(self.kind)

    @property
    def remote(self) -> bool:
        """True when the processes run on ``hosts`` over SSH rather than on this machine."""
        return bool(self.hosts)

    @property
    def uses_reference(self) -> bool:
        """True when the project's reference trainer is launched (then ``options`` apply)."""
        return self.trainer == REFERENCE

    @property
    def injects(self) -> bool:
        """True when Ringscope is injected into the launched script (the user's script with ``zero_code``)."""
        return self.zero_code and not self.uses_reference

    def title(self) -> str:
        """A one-line description for lists (e.g. the "Recent" list)."""
        what = "reference trainer" if self.uses_reference else os.path.basename(self.trainer)
        unit = "devices" if self.kind == "tf_mirrored" else "processes"
        where = f" on each of {len(self.hosts)} hosts ({', '.join(self.hosts)})" if self.hosts else ""
        if self.slurm is not None:
            where = f" on each of {self.slurm.nodes} Slurm node{'s' if self.slurm.nodes != 1 else ''}"
        return f"{KIND_TITLES[self.kind]}: {what}, {self.processes} {unit}{where}"

    def with_new_run_id(self) -> LaunchSpec:
        """A copy for re-running: same request, fresh run id."""
        return replace(self, run_id=new_run_id(), options=dict(self.options), env=dict(self.env))

    def ssh_login(self, host: str) -> str:
        """The ssh destination for ``host``: ``user@host`` when ``ssh_user`` is set, else ``host``."""
        return f"{self.ssh_user}@{host}" if self.ssh_user else host

    # ---- Persistence ------------------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form for the "Recent" list (the run id is dropped: a re-run is a new launch)."""
        data = asdict(self)
        data["script_args"] = list(self.script_args)
        data["hosts"] = list(self.hosts)
        data["ssh_options"] = list(self.ssh_options)
        data["slurm"] = None if self.slurm is None else self.slurm.to_dict()
        data.pop("run_id")
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LaunchSpec:
        """Inverse of ``to_dict``. Raises ValueError naming the bad field when ``data`` is not a saved spec."""
        kind = data.get("kind")
        if kind not in KINDS:
            raise ValueError(f"saved launch has kind {kind!r}; expected one of {', '.join(KINDS)}")
        try:
            return cls(
                kind=cast(LaunchKind, kind),
                trainer=str(data.get("trainer", REFERENCE)),
                script_args=tuple(str(arg) for arg in data.get("script_args", ())),
                processes=int(data.get("processes", 1)),
                options={str(k): v for k, v in dict(data.get("options", {})).items()},
                working_dir=None if data.get("working_dir") in (None, "") else str(data["working_dir"]),
                env={str(k): str(v) for k, v in dict(data.get("env", {})).items()},
                python=str(data.get("python") or sys.executable),
                base_port=None if data.get("base_port") is None else int(data["base_port"]),
                zero_code=bool(data.get("zero_code", True)),
                hosts=tuple(str(host) for host in data.get("hosts") or ()),
                ssh_user=None if data.get("ssh_user") in (None, "") else str(data["ssh_user"]),
                ssh_key=None if data.get("ssh_key") in (None, "") else str(data["ssh_key"]),
                ssh_options=tuple(str(option) for option in data.get("ssh_options") or ()),
                restart_max=max(0, int(data.get("restart_max") or 0)),
                slurm=None if not data.get("slurm") else SlurmSettings.from_dict(dict(data["slurm"])),
            )
        except (TypeError, ValueError) as error:
            raise ValueError(f"saved launch is malformed ({error}); it will be ignored") from error


def framework_of(kind: LaunchKind) -> Framework | None:
    """``"ddp"`` / ``"tf"`` option set of a launch kind, None for plain scripts."""
    if kind == "ddp":
        return "ddp"
    if kind in ("tf_mirrored", "tf_multi_worker"):
        return "tf"
    return None


def new_run_id() -> str:
    """A fresh, sortable, unique run id such as ``launch-20250102-130405-3fa2``."""
    return time.strftime("launch-%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def parse_env_lines(text: str) -> tuple[dict[str, str], list[str]]:
    """``KEY=VALUE`` lines (blank lines and ``#`` comments ignored) -> (variables, error messages)."""
    env: dict[str, str] = {}
    errors: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not _ENV_KEY.match(key):
            errors.append(f"environment line {number}: {raw.strip()!r} is not KEY=VALUE "
                          "(KEY: letters, digits, underscore; not starting with a digit)")
            continue
        env[key] = value
    return env, errors


def format_env_lines(env: dict[str, str]) -> str:
    """Inverse of ``parse_env_lines``."""
    return "\n".join(f"{key}={value}" for key, value in env.items())

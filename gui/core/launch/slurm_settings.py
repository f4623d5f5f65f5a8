"""What a Slurm launch asks ``sbatch`` for: ``SlurmSettings``, plain data kept in a ``LaunchSpec`` (``spec.slurm``).

The batch script and the follower are in ``ringscope.gui.core.launch.slurm``; this module is apart so that the spec can
hold the settings without importing what builds scripts from specs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class SlurmSettings:
    """What ``sbatch`` is asked for. ``LaunchSpec.processes`` is the ranks (tasks) per node.

    Attributes:
        nodes: nodes of the allocation.
        partition, account: ``--partition`` / ``--account`` (empty: the cluster's default).
        time_limit: ``--time`` in Slurm's forms (``30``, ``1:30:00``, ``2-00:00:00``); empty: the partition's.
        gpus_per_node: ``--gpus-per-node`` (0: none asked for).
        extra: more ``#SBATCH`` lines, each an sbatch option (``--mem=64G``, ``--exclusive``, ``--qos=high``);
            a leading ``#SBATCH`` is accepted.
    """

    nodes: int = 2
    partition: str = ""
    time_limit: str = ""
    account: str = ""
    gpus_per_node: int = 0
    extra: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["extra"] = list(self.extra)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SlurmSettings:
        return cls(nodes=int(data.get("nodes", 2)), partition=str(data.get("partition") or ""),
                   time_limit=str(data.get("time_limit") or ""), account=str(data.get("account") or ""),
                   gpus_per_node=int(data.get("gpus_per_node") or 0),
                   extra=tuple(str(line) for line in data.get("extra") or ()))

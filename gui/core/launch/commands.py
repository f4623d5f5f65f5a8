"""The processes a launch starts: ``build_commands`` chooses between this machine's processes (``plan.local_plans``)
and one ``ssh`` client per host (``remote.remote_plans``), so that neither of those modules needs the other.

It never starts a process and never imports Qt or a training framework.
"""

from __future__ import annotations

from dataclasses import replace

from ringscope.gui.core.launch.plan import ProcessPlan, local_plans
from ringscope.gui.core.launch.remote import remote_plans
from ringscope.gui.core.launch.slurm import slurm_plans
from ringscope.gui.core.launch.spec import LaunchSpec, new_run_id


def build_commands(spec: LaunchSpec, endpoint: str, agent_env: dict[str, str] | None = None) -> list[ProcessPlan]:
    """The processes that ``spec`` starts, each reporting to ``endpoint``. Call ``validate(spec)`` first.

    The spec's run id is used (a fresh one if it has none). A spec without ``hosts`` starts its processes here
    (``local_plans``: the environment every process gets is described there); a spec with ``hosts`` gives one ``ssh``
    client per host instead (``remote_plans``), and a Slurm spec one follower that submits the batch script and
    streams the job (``slurm_plans``).
    """
    spec = replace(spec, run_id=spec.run_id or new_run_id())
    if spec.slurm is not None:
        return slurm_plans(spec, endpoint, agent_env)
    if spec.hosts:
        return remote_plans(spec, endpoint, agent_env)
    return local_plans(spec, endpoint, agent_env)

"""Ringscope agent: embedded in training processes, sends telemetry to the Ringscope app over ZeroMQ.

Importing this package is cheap and imports neither torch, tensorflow nor Qt. Framework integrations live in
``agent.torch_ddp`` and ``agent.tf_distribute`` and import their framework only when used.

    import agent
    telemetry = agent.start(framework="pytorch", strategy="ddp", rank=rank, world_size=world)
    telemetry.step(rank, step, start_s, end_s, data_wait_s=..., compute_s=...)
    telemetry.close()
"""

from agent.runtime import Agent, start
from agent.schema import SCHEMA_VERSION, EventKind

__all__ = ["SCHEMA_VERSION", "Agent", "EventKind", "start"]

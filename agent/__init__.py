"""Ringscope agent: embedded in training processes, sends telemetry to the Ringscope app over ZeroMQ.

Importing this package is cheap and imports neither torch, tensorflow nor Qt. Framework integrations live in
``ringscope.agent.torch_ddp`` and ``ringscope.agent.tf_distribute`` and import their framework only when used.

    from ringscope import agent
    telemetry = agent.start(framework="pytorch", strategy="ddp", rank=rank, world_size=world)
    telemetry.step(rank, step, start_s, end_s, data_wait_s=..., compute_s=...)
    telemetry.close()
"""

from ringscope.agent.runtime import Agent, start
from ringscope.agent.schema import SCHEMA_VERSION, EventKind

__all__ = ["SCHEMA_VERSION", "Agent", "EventKind", "start"]

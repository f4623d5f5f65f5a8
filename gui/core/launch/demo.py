"""``demo_spec``: the launch behind ``ringscope demo`` — a small real DDP training that shows every chart.

Two ranks of the reference PyTorch trainer on the digits data set, paced to run for a minute or two, with an input
delay (data-loader idle) and rank 1 made slow (a straggler the others wait for in AllReduce), checkpointing into a
temporary folder. With two or more GPUs it runs on CUDA (NCCL). It never starts anything itself.
"""

from __future__ import annotations

import tempfile

from ringscope.agent.devices import DeviceProbe
from ringscope.gui.core.launch.spec import LaunchSpec

DEMO_STEPS = 1200


def gpu_count() -> int:
    """GPUs NVML can see (0 without a GPU or driver; never raises)."""
    try:
        probe = DeviceProbe()
    except Exception:  # a broken driver must not stop the demo; it runs on the CPU instead
        return 0
    try:
        return len(probe.gpus)
    finally:
        probe.close()


def demo_spec(steps: int = DEMO_STEPS, gpus: int | None = None) -> LaunchSpec:
    """The demo launch. ``gpus`` overrides GPU detection (NCCL needs one GPU per rank, so 2+ GPUs mean CUDA)."""
    gpus = gpu_count() if gpus is None else gpus
    checkpoint_dir = tempfile.mkdtemp(prefix="ringscope-demo-ckpt-")
    return LaunchSpec(
        kind="ddp",
        processes=2,
        options={
            "dataset": "digits",
            "model-width": 128,
            "model-depth": 2,
            "batch-size": 64,
            "steps": steps,
            "lr": 0.05,
            # 20 ms input delay + 40 ms extra on rank 1: ~75 ms steps on a 2-core box (13 steps/s measured), so
            # the default 1200 steps run about 1.5 minutes.
            "data-delay-ms": 20,
            "slow-rank": 1,
            "slow-ms": 40,
            "checkpoint-dir": checkpoint_dir,
            "checkpoint-every-steps": max(steps // 4, 1),
            "seed": 0,
            "device": "cuda" if gpus >= 2 else "cpu",
        },
    )

"""The PyTorch side of profiles on demand (``ringscope.agent.profiling``): ``torch.profiler`` (Kineto), a Chrome trace
per rank and its top operators by self time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ringscope.agent.profiling import TOP_OPS


class TorchProfiler:
    """``ProfilerBackend`` for PyTorch; ``cuda``: record CUDA kernels too."""

    framework = "pytorch"

    def __init__(self, cuda: bool) -> None:
        self._cuda = cuda

    def start(self) -> Any:
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self._cuda else [])
        profiler = profile(activities=activities)
        profiler.start()
        return profiler

    def stop(self, handle: Any) -> None:
        handle.stop()

    def export(self, handle: Any, folder: Path, rank: int) -> dict[str, Any]:
        path = folder / f"rank{rank}.pt.trace.json"
        handle.export_chrome_trace(str(path))
        averages = sorted(handle.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
        top = [[e.key, round(e.self_cpu_time_total / 1e3, 4),
                round(getattr(e, "self_device_time_total", 0.0) / 1e3, 4), e.count] for e in averages[:TOP_OPS]]
        return {"trace": str(path), "format": "chrome", "top_ops": top,
                "top_ops_columns": ["operator", "self CPU ms", "self device ms", "calls"]}

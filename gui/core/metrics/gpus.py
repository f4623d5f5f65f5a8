"""GPU families under dcgm-exporter's names, and an explicit statement of GPU absence per host.

What it owns: the mapping from the agents' NVML readings (``ringscope.agent.schema.GpuSample``) to the DCGM field names
and labels dcgm-exporter uses (``DCGM_FI_DEV_GPU_UTIL{gpu, UUID, device, modelName, Hostname}``), so dashboards built
for dcgm-exporter show Ringscope's GPUs and can join them with the per-rank stall on ``Hostname`` / ``gpu``; and
``ringscope_gpu_present{host, status}`` (1 or 0) for every host of an exported running run.

Only the latest reading of each GPU, only while its run is running and only when it is younger than
``MetricsLimits.gpu_stale_s``: a GPU that belongs to nobody any more is not reported. What it must never do: emit a
GPU series on a host without GPUs (no zeros: the series are absent and ``ringscope_gpu_present`` says 0), or
invent a reading the board did not give.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Final

from ringscope.agent.schema import GpuSample, GpuStatus
from ringscope.gui.core.live.snapshot import Snapshot
from ringscope.gui.core.metrics.families import Families

DCGM_LABELS: Final[tuple[str, ...]] = ("gpu", "UUID", "device", "modelName", "Hostname", "run", "rank")
"""dcgm-exporter's labels, then Ringscope's run and rank (the rank the agent measured the GPU for)."""
_MIB: Final[float] = float(2**20)

DCGM_FIELDS: Final[tuple[tuple[str, str, Callable[[GpuSample], float | None]], ...]] = (
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %): NVML's share of time a kernel ran.", lambda g: g.util_pct),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", lambda g: g.mem_util_pct),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).",
     lambda g: None if g.mem_used_bytes is None else g.mem_used_bytes / _MIB),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).",
     lambda g: None if g.mem_used_bytes is None or g.mem_total_bytes is None
     else (g.mem_total_bytes - g.mem_used_bytes) / _MIB),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", lambda g: g.power_w),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", lambda g: g.temp_c),
    ("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", lambda g: g.sm_clock_mhz),
)


def add_gpu_families(families: Families, running: Iterable[tuple[str, Snapshot]], now_s: float,
                     stale_s: float) -> None:
    """DCGM-named series for the fresh GPUs of running runs, and ``ringscope_gpu_present`` for their hosts."""
    latest: dict[tuple[str, int], tuple[str, GpuSample]] = {}  # one series per GPU, from its newest reading
    present: dict[str, tuple[float, int, str]] = {}  # host -> (reading time, 1/0, status)
    for run_id, snap in running:
        for series in snap.gpus:
            sample = series.latest
            if sample is None or not now_s - sample.ts_s <= stale_s:
                continue
            key = (series.host, series.gpu_index)
            if key not in latest or latest[key][1].ts_s < sample.ts_s:
                latest[key] = (run_id, sample)
        for state in snap.host_states:
            seen = float(state.ts_s[-1]) if len(state.ts_s) else float("-inf")
            has_gpu = int(state.gpu_status == GpuStatus.OK and state.gpu_count > 0)
            if state.host not in present or present[state.host][0] < seen:
                present[state.host] = (seen, has_gpu, state.gpu_status)
    for (host, index), (run_id, sample) in sorted(latest.items()):
        labels = (str(index), sample.uuid or "", f"nvidia{index}", sample.name or "", host, run_id,
                  "" if sample.rank is None else str(sample.rank))
        for name, documentation, read in DCGM_FIELDS:
            families.gauge(name, documentation, DCGM_LABELS, labels, read(sample))
        if host not in present:  # readings without a host statement: the readings say it has a GPU
            present[host] = (sample.ts_s, 1, GpuStatus.OK)
    for host, (_, has_gpu, status) in sorted(present.items()):
        families.gauge("ringscope_gpu_present", "1 when the host reports GPUs, 0 when it has none (then no DCGM_* "
                       "series exist for it; status says why: no_gpu, nvml_error).", ("host", "status"),
                       (host, status), has_gpu)

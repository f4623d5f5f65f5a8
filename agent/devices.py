"""Device probes: NVML for GPUs, psutil for the host. Every reading is a value or ``None``, never an exception.

Modelled on nvitop's api: every NVML call goes through ``_nvml`` which returns ``None`` instead of raising, and one
sample is a fixed-key record (``GpuSample`` / ``HostSample`` from the schema). NVML takes a driver lock, so probes
are called from the agent's sampler thread at a few Hz, never from the training loop; process listing and PCIe
counters are deliberately left out.

Without NVML (no library, no driver, no permission) the host sample says so explicitly (``gpu_status``), so the app
can say "no GPU" rather than draw zeros that look like an idle GPU.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import psutil

from ringscope.agent.background import BackgroundThread
from ringscope.agent.schema import GpuSample, GpuStatus, HostSample, Record

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class GpuInfo:
    """Static facts about one GPU as NVML numbers it (NVML index, not CUDA index)."""

    index: int
    uuid: str | None
    name: str | None
    pci_bus_id: str | None


ENV_HOST = "RINGSCOPE_HOST"


def host_name() -> str:
    """The name this host reports as: ``RINGSCOPE_HOST`` when set (a multi-node launcher sets it per node, e.g. where
    containers or network namespaces share one hostname), else the hostname."""
    chosen = os.environ.get(ENV_HOST, "").strip()
    return chosen[:255] if chosen else socket.gethostname()


class DeviceProbe:
    """Reads the host and its GPUs. Construct once per process; ``sample()`` from one thread at a few Hz.

    Args:
        gpu_indices: NVML indices to sample (default: all). ``rank_of_gpu`` maps an NVML index to the rank that
            uses it, when known, so samples can be drawn per rank.
    """

    def __init__(self, gpu_indices: Sequence[int] | None = None, rank_of_gpu: dict[int, int] | None = None) -> None:
        self.host = host_name()
        self._process = psutil.Process(os.getpid())
        self._process.cpu_percent(None)  # prime: psutil's first reading is always 0.0
        psutil.cpu_percent(None)
        self._rank_of_gpu = dict(rank_of_gpu or {})
        self._pynvml: Any = None
        self._handles: list[tuple[GpuInfo, Any]] = []
        self.gpu_status = GpuStatus.NO_GPU
        self.gpu_status_detail: str | None = None
        self._init_nvml(gpu_indices)

    # ---- Public API ----------------------------------------------------------------------------------------------

    @property
    def gpus(self) -> list[GpuInfo]:
        """The GPUs this probe samples (empty without NVML)."""
        return [info for info, _ in self._handles]

    def sample(self) -> list[Record]:
        """One host sample plus one sample per GPU. Never raises."""
        now = time.time()
        records: list[Record] = [self._host_sample(now)]
        records.extend(self._gpu_sample(now, info, handle) for info, handle in self._handles)
        return records

    def close(self) -> None:
        """Release NVML (safe to call when it was never initialised)."""
        if self._pynvml is not None:
            _call(self._pynvml.nvmlShutdown)
            self._pynvml = None
            self._handles = []

    # ---- NVML ----------------------------------------------------------------------------------------------------

    def _init_nvml(self, gpu_indices: Sequence[int] | None) -> None:
        try:
            import pynvml  # nvidia-ml-py
        except ImportError as exc:
            self.gpu_status_detail = f"nvidia-ml-py is not installed ({exc})"
            return
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            missing = isinstance(exc, (pynvml.NVMLError_LibraryNotFound, pynvml.NVMLError_DriverNotLoaded))
            self.gpu_status = GpuStatus.NO_GPU if missing else GpuStatus.NVML_ERROR
            self.gpu_status_detail = f"NVML unavailable: {exc}"
            return
        self._pynvml = pynvml
        count = _call(pynvml.nvmlDeviceGetCount) or 0
        indices = range(count) if gpu_indices is None else [i for i in gpu_indices if 0 <= i < count]
        for index in indices:
            handle = _call(pynvml.nvmlDeviceGetHandleByIndex, index)
            if handle is None:
                continue
            pci = _call(pynvml.nvmlDeviceGetPciInfo, handle)
            info = GpuInfo(
                index=index,
                uuid=_text(_call(pynvml.nvmlDeviceGetUUID, handle)),
                name=_text(_call(pynvml.nvmlDeviceGetName, handle)),
                pci_bus_id=_text(getattr(pci, "busId", None)),
            )
            self._handles.append((info, handle))
        if self._handles:
            self.gpu_status, self.gpu_status_detail = GpuStatus.OK, None
        else:
            self.gpu_status, self.gpu_status_detail = GpuStatus.NO_GPU, f"NVML found {count} GPU(s) to sample"

    def _gpu_sample(self, now: float, info: GpuInfo, handle: Any) -> GpuSample:
        nv = self._pynvml
        util = _call(nv.nvmlDeviceGetUtilizationRates, handle)
        mem = _call(nv.nvmlDeviceGetMemoryInfo, handle)
        power_mw = _call(nv.nvmlDeviceGetPowerUsage, handle)
        energy_mj = _call(nv.nvmlDeviceGetTotalEnergyConsumption, handle)
        return GpuSample(
            ts_s=now,
            host=self.host,
            gpu_index=info.index,
            uuid=info.uuid,
            name=info.name,
            rank=self._rank_of_gpu.get(info.index),
            util_pct=_num(getattr(util, "gpu", None)),
            mem_util_pct=_num(getattr(util, "memory", None)),
            mem_used_bytes=_int(getattr(mem, "used", None)),
            mem_total_bytes=_int(getattr(mem, "total", None)),
            power_w=None if power_mw is None else power_mw / 1000.0,
            energy_j=None if energy_mj is None else energy_mj / 1000.0,
            temp_c=_num(_call(nv.nvmlDeviceGetTemperature, handle, nv.NVML_TEMPERATURE_GPU)),
            sm_clock_mhz=_num(_call(nv.nvmlDeviceGetClockInfo, handle, nv.NVML_CLOCK_SM)),
            throttle_reasons=_int(_call(nv.nvmlDeviceGetCurrentClocksEventReasons, handle)),
        )

    def _host_sample(self, now: float) -> HostSample:
        vm = _call(psutil.virtual_memory)
        rss = _call(lambda: self._process.memory_info().rss)
        return HostSample(
            ts_s=now,
            host=self.host,
            cpu_pct=_call(psutil.cpu_percent, None),
            mem_used_bytes=None if vm is None else int(vm.total - vm.available),
            mem_total_bytes=None if vm is None else int(vm.total),
            process_cpu_pct=_call(self._process.cpu_percent, None),
            process_rss_bytes=_int(rss),
            gpu_count=len(self._handles),
            gpu_status=self.gpu_status,
            gpu_status_detail=self.gpu_status_detail,
        )


class DeviceSampler(BackgroundThread):
    """Calls a ``DeviceProbe`` every ``interval_s`` on its own daemon thread and hands the records to ``sink``."""

    def __init__(self, probe: DeviceProbe, sink: Callable[[Record], object], interval_s: float = 0.5) -> None:
        if interval_s <= 0:
            raise ValueError(f"device sampling interval must be > 0 s, got {interval_s}")
        super().__init__("ringscope-devices")
        self.probe = probe
        self._sink = sink
        self._interval_s = interval_s

    @property
    def interval_s(self) -> float:
        return self._interval_s

    def set_interval(self, interval_s: float) -> None:
        """Sample every ``interval_s`` from the next sample on (a runtime setting; any thread)."""
        if interval_s <= 0:
            raise ValueError(f"device sampling interval must be > 0 s, got {interval_s}")
        self._interval_s = interval_s

    def close(self, timeout_s: float = 1.0) -> None:
        """Stop sampling and release NVML."""
        super().close(timeout_s)
        self.probe.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            for record in self.probe.sample():
                self._sink(record)
            self._stop.wait(self._interval_s)


def nvml_index_of_cuda_device(uuid: str | None, pci_bus_id: tuple[int, int, int] | None = None) -> int | None:
    """The NVML index of the GPU a framework calls by ``uuid`` (or PCI ``(domain, bus, device)``), else ``None``.

    CUDA numbers devices after ``CUDA_VISIBLE_DEVICES`` (and by speed unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID``);
    NVML numbers all devices by PCI order. So ``cuda:0`` is matched by identity, never by index. UUIDs compare
    without their ``GPU-``/``MIG-`` prefix and case. Never raises; ``None`` without NVML or without a match.
    """
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # no library, no driver, no permission: nothing to map to
        return None
    try:
        wanted = _bare_uuid(uuid)
        count = _call(pynvml.nvmlDeviceGetCount) or 0
        by_pci: int | None = None
        for index in range(count):
            handle = _call(pynvml.nvmlDeviceGetHandleByIndex, index)
            if handle is None:
                continue
            if wanted is not None and _bare_uuid(_text(_call(pynvml.nvmlDeviceGetUUID, handle))) == wanted:
                return index
            pci = _call(pynvml.nvmlDeviceGetPciInfo, handle)
            seen = (getattr(pci, "domain", None), getattr(pci, "bus", None), getattr(pci, "device", None))
            if pci_bus_id is not None and seen == tuple(pci_bus_id):
                by_pci = index
        return by_pci
    finally:
        _call(pynvml.nvmlShutdown)  # NVML counts init/shutdown pairs: the sampler's own handle stays valid


def _bare_uuid(uuid: str | None) -> str | None:
    if not uuid:
        return None
    text = uuid.strip().lower()
    for prefix in ("gpu-", "mig-"):
        if text.startswith(prefix):
            text = text[len(prefix) :]
    return text


# ---- Helpers -----------------------------------------------------------------------------------------------------


def _call(fn: Callable[..., T], *args: Any) -> T | None:
    """Call a probe function; any failure (NotSupported, NoPermission, GPU lost...) becomes ``None``."""
    try:
        return fn(*args)
    except Exception:
        return None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def _num(value: Any) -> float | None:
    return None if value is None else float(value)


def _int(value: Any) -> int | None:
    return None if value is None else int(value)

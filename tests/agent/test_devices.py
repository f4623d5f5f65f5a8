"""Device probing on a machine without a GPU: an explicit 'no_gpu', never zeros that look like an idle GPU."""

from __future__ import annotations

from ringscope.agent.devices import DeviceProbe, DeviceSampler
from ringscope.agent.schema import GpuSample, GpuStatus, HostSample


def test_without_nvml_the_host_sample_says_no_gpu() -> None:
    probe = DeviceProbe()
    try:
        records = probe.sample()
    finally:
        probe.close()
    host = records[0]
    assert isinstance(host, HostSample)
    assert host.gpu_status == GpuStatus.NO_GPU
    assert host.gpu_count == 0 and host.gpu_status_detail
    assert not [r for r in records if isinstance(r, GpuSample)]
    assert host.mem_total_bytes is not None and host.mem_total_bytes > 0


def test_sampler_delivers_samples_and_stops() -> None:
    got: list = []
    sampler = DeviceSampler(DeviceProbe(), got.append, interval_s=0.02).start()
    import time

    deadline = time.monotonic() + 5
    while len(got) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    sampler.close()
    assert len(got) >= 3 and all(isinstance(r, HostSample) for r in got)

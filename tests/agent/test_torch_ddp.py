"""ringscope.agent.torch_ddp in one process: a real one-rank gloo group, a real DDP model, a real ROUTER socket.

Multi-rank behaviour (stall, straggler, loader wait, resume) is tested with torchrun in tests/trainers.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import zmq
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ringscope.agent import wire
from ringscope.agent.devices import nvml_index_of_cuda_device
from ringscope.agent.schema import Event, EventKind, Record, Step
from ringscope.agent.torch_ddp import comm_hook_for, instrument


@pytest.fixture(scope="module")
def process_group() -> Iterator[None]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    store = dist.TCPStore("127.0.0.1", port, 1, True, timeout=__import__("datetime").timedelta(seconds=30))
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.fixture
def pull() -> Iterator[tuple[str, zmq.Socket[bytes]]]:
    context = zmq.Context()
    sock = context.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    yield f"tcp://127.0.0.1:{port}", sock
    sock.close(linger=0)
    context.term()


def _drain(sock: zmq.Socket[bytes], until: float = 5.0) -> list[Record]:
    records: list[Record] = []
    deadline = time.monotonic() + until
    while time.monotonic() < deadline:
        if sock.poll(200):
            records.extend(wire.decode(sock.recv_multipart()[-1]).records)
        elif any(isinstance(r, Event) and r.event == EventKind.FINISHED for r in records):
            break
    return records


def _model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))


def _batches(count: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    return [(torch.randn(4, 8, generator=generator), torch.randint(0, 3, (4,), generator=generator))
            for _ in range(count)]


def _train(ddp: Any, batches: Any, probe: Any = None) -> None:
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for x, y in batches:
        loss = nn.functional.cross_entropy(ddp(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if probe is not None:
            probe.step_done(samples=len(x), loss=loss)


def test_import_agent_does_not_import_torch() -> None:
    code = "import sys, agent; assert 'torch' not in sys.modules, 'agent imported torch'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.parametrize("timing", ["light", "full"])
def test_steps_are_reported_with_phases(process_group: None, pull: tuple[str, Any], timing: str) -> None:
    endpoint, sock = pull
    ddp = DistributedDataParallel(_model())
    probe = instrument(ddp, _batches(5), endpoint=endpoint, run_id="unit", timing=timing)
    assert bool(ddp._comm_hooks) == (timing == "full")  # light: DDP keeps its built-in C++ all-reduce
    _train(ddp, probe.loader, probe)
    probe.close()
    steps = [r for r in _drain(sock) if isinstance(r, Step)]
    assert [s.step for s in steps] == [0, 1, 2, 3, 4]
    assert [s.first_batch for s in steps] == [True, False, False, False, False]
    for s in steps:
        assert s.samples == 4 and s.loss is not None
        assert s.bucket_bytes == 4 * sum(p.numel() for p in ddp.parameters())
        assert None not in (s.data_wait_s, s.compute_s, s.comm_exposed_s)
        # light timing cannot see each bucket's completion: no total comm time, no bucket count
        assert (s.comm_s is None and s.bucket_count is None) if timing == "light" else \
            (s.comm_s is not None and s.bucket_count == 1)
        assert s.step_s >= s.data_wait_s + s.compute_s + s.comm_exposed_s - 1e-6  # type: ignore[operator]


def test_light_timing_leaves_the_weights_identical_to_plain_ddp(process_group: None) -> None:
    plain = DistributedDataParallel(_model())
    _train(plain, _batches(3))
    light = DistributedDataParallel(_model())
    probe = instrument(light, None, endpoint="tcp://127.0.0.1:1", timing="light")
    _train(light, _batches(3), probe)
    probe.close(timeout_s=0.1)
    for a, b in zip(plain.parameters(), light.parameters(), strict=True):
        assert torch.equal(a, b)


def test_wrapped_hook_leaves_the_weights_identical(process_group: None) -> None:
    """The timing wrapper must not change a single gradient: same weights as the bare hook after training."""
    hook, state = comm_hook_for("fp16")
    bare = DistributedDataParallel(_model())
    bare.register_comm_hook(state, hook)
    _train(bare, _batches(3))
    wrapped = DistributedDataParallel(_model())
    probe = instrument(wrapped, None, comm_hook=hook, comm_state=state, endpoint="tcp://127.0.0.1:1")
    _train(wrapped, _batches(3), probe)
    probe.close(timeout_s=0.1)
    for a, b in zip(bare.parameters(), wrapped.parameters(), strict=True):
        assert torch.equal(a, b)


def test_an_instrumented_model_is_freed_with_its_probe(process_group: None) -> None:
    """The model holds the comm hook and the hook holds the probe: the probe must not point back at the model, or
    model, loader workers and agent would stay alive (a cycle through C++ the collector cannot see) until exit."""
    import gc
    import weakref

    ddp = DistributedDataParallel(_model())
    probe = instrument(ddp, _batches(2), endpoint="tcp://127.0.0.1:1")
    _train(ddp, probe.loader, probe)
    probe.close(timeout_s=0.1)
    model_ref, probe_ref = weakref.ref(ddp), weakref.ref(probe)
    del ddp, probe
    gc.collect()
    assert model_ref() is None, "the DDP model outlived every user reference"
    assert probe_ref() is None, "the probe outlived the model that holds its hook"


def test_instrument_refuses_what_it_cannot_wrap(process_group: None) -> None:
    with pytest.raises(ValueError, match=r"needs a torch\.nn\.parallel\.DistributedDataParallel model"):
        instrument(_model(), None)
    ddp = DistributedDataParallel(_model())
    ddp.register_comm_hook(*reversed(comm_hook_for("none")))  # type: ignore[misc]
    with pytest.raises(ValueError, match="already has a communication hook"):
        instrument(ddp, None)


def test_checkpoint_restore_and_restart_events(
    process_group: None, pull: tuple[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint, sock = pull
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    ddp = DistributedDataParallel(_model())
    probe = instrument(ddp, _batches(2), endpoint=endpoint)
    path = tmp_path / "ckpt.pt"
    with probe.checkpoint(path):
        torch.save(ddp.module.state_dict(), path)
    probe.checkpoint_restored(path, 0.01, step=7)
    _train(ddp, probe.loader, probe)
    probe.close()
    records = _drain(sock)
    events = {r.event: r for r in records if isinstance(r, Event)}
    assert events[EventKind.CHECKPOINT_SAVED].bytes == path.stat().st_size
    assert events[EventKind.CHECKPOINT_RESTORED].step == 7
    assert "restart 1" in (events[EventKind.RESTART].text or "")
    assert [r.step for r in records if isinstance(r, Step)] == [7, 8]


def test_training_thread_cost_is_small(process_group: None) -> None:
    """``step_done`` and the timed ``next()`` together cost well under a millisecond per step."""
    ddp = DistributedDataParallel(_model())
    probe = instrument(ddp, list(range(2000)), endpoint="tcp://127.0.0.1:1")
    started = time.perf_counter()
    for _ in probe.loader:  # type: ignore[union-attr]
        probe.step_done(samples=1, loss=0.5)
    per_step = (time.perf_counter() - started) / 2000
    probe.close(timeout_s=0.1)
    assert per_step < 200e-6, f"{per_step * 1e6:.1f} µs per step"


def test_nvml_mapping_without_a_gpu_is_none() -> None:
    if os.path.exists("/dev/nvidiactl"):
        pytest.skip("a GPU is present: benchmarks/gpu_check.sh covers the mapping there")
    assert nvml_index_of_cuda_device("GPU-00000000-0000-0000-0000-000000000000") is None

"""agent.start / Agent over a real socket, the disable switch, and what importing ``agent`` must not load."""

from __future__ import annotations

import subprocess
import sys
import time

import zmq

from ringscope import agent
from ringscope.agent import wire
from ringscope.agent.schema import Event, Hello, Step


def test_importing_agent_loads_no_framework_and_no_qt() -> None:
    code = ("import sys, agent, ringscope.agent.simulate; "
            "bad = sorted(m for m in ('torch', 'tensorflow', 'keras', 'PySide6', 'pyqtgraph', 'gui') "
            "if m in sys.modules); print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == ""


def test_agent_sends_hello_started_steps_and_finished(monkeypatch) -> None:
    monkeypatch.setenv("RINGSCOPE_HOST", " node-b ")  # a launcher's per-node name wins over the shared hostname
    context = zmq.Context()
    pull = context.socket(zmq.ROUTER)
    pull.setsockopt(zmq.LINGER, 0)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    telemetry = agent.start(framework="pytorch", strategy="ddp", rank=1, world_size=2,
                            endpoint=f"tcp://127.0.0.1:{port}", run_id="r1", sample_devices=False,
                            flush_interval_s=0.01)
    try:
        for i in range(3):
            telemetry.step(1, i, 10.0 + i, 10.5 + i, data_wait_s=0.1, compute_s=0.3)
        telemetry.close()
        records = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not any(isinstance(r, Event) and r.event == "finished"
                                                      for r in records):
            if pull.poll(200):
                records.extend(wire.decode(pull.recv_multipart()[-1]).records)
    finally:
        pull.close(0)
        context.term()
    hello = next(r for r in records if isinstance(r, Hello))
    assert (hello.run_id, hello.rank, hello.ranks, hello.world_size) == ("r1", 1, [1], 2)
    assert hello.host == "node-b" and hello.agent_id.startswith("node-b:")
    steps = [r for r in records if isinstance(r, Step)]
    assert [s.step for s in steps] == [0, 1, 2] and steps[0].step_s == 0.5
    assert [r.event for r in records if isinstance(r, Event)] == ["started", "finished"]


def test_disabled_agent_does_nothing(monkeypatch) -> None:
    monkeypatch.setenv("RINGSCOPE_DISABLE", "1")
    telemetry = agent.start(framework="other", strategy="single")
    telemetry.step(0, 0, 1.0, 2.0)
    telemetry.close()
    assert not telemetry.enabled and telemetry.stats is None

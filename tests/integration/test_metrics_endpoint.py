"""`ringscope record --metrics-port 0` as an on-call engineer uses it: a real recorder process, real agents (a
simulated cluster with a straggler and a CPU-only agent on this GPU-less machine), scrapes over HTTP parsed by
prometheus_client's parser, and a real Prometheus server (Debian's package) scraping the endpoint every second.

Why the stall tolerance holds: the simulator's step model (agent/simulate.py) gives every rank a compute time of
70 % of the period plus a jitter uniform in 0..3 % of it (0..1.5 ms at 20 steps/s), and the straggler 30 ms more.
The all-reduce ends when the last rank arrives, plus an unhidden tail (18 % = 9 ms) every rank waits: so the
straggler's exposed comm is exactly the tail, and every other rank's exceeds it by 30 ms plus the difference of two
jitters, which lies within +-1.5 ms for every step and so for any mean of steps. Values travel as float32 (~1e-9 s).
Hence |stall(other) - stall(straggler) - 30 ms| <= 2 ms, independent of this machine's load (the values are the
model's, not measured on this machine).
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ringscope import agent
from ringscope.agent.simulate import SimulationResult, run_cluster
from tests.ports import free_port

STRAGGLER, EXTRA_MS, RATE = 2, 30.0, 20.0
DASHBOARD = Path(__file__).resolve().parents[2] / "resources" / "grafana" / "ringscope-dashboard.json"
TAIL_S = 0.18 / RATE  # the simulator's unhidden all-reduce tail (TAIL_SHARE of the period)
Sample = tuple[dict[str, str], float]


# ---- Fixtures --------------------------------------------------------------------------------------------------


class _Lines:
    """The lines a subprocess prints, read on a thread so that waiting for one has a deadline."""

    def __init__(self, stream: Any) -> None:
        self._queue: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream: Any) -> None:
        for line in stream:
            self._queue.put(line)

    def next(self, timeout_s: float) -> str:
        try:
            return self._queue.get(timeout=timeout_s)
        except queue.Empty:
            raise AssertionError(f"no line within {timeout_s} s") from None


@dataclass
class Recording:
    process: subprocess.Popen[str]
    endpoint: str
    url: str


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recording]:
    out = tmp_path_factory.mktemp("metrics") / "s.db"
    process = subprocess.Popen(
        [sys.executable, "-m", "ringscope.gui.cli", "record", "--out", str(out), "--bind", "tcp://127.0.0.1:0",
         "--metrics-port", "0", "--progress-s", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        assert process.stdout is not None
        lines = _Lines(process.stdout)
        listening, metrics = lines.next(30), lines.next(10)
        assert "listening on tcp://127.0.0.1:" in listening, listening
        assert "metrics on http://127.0.0.1:" in metrics and "/metrics" in metrics, metrics
        endpoint = listening.split("listening on ")[1].split(",")[0]
        url = metrics.split("metrics on ")[1].split()[0]
        assert int(url.split(":")[2].split("/")[0]) > 0  # port 0 became a real one, and it is printed
        yield Recording(process, endpoint, url)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
        process.communicate(timeout=10)


def _cluster(endpoint: str, run_id: str, duration_s: float) -> tuple[threading.Thread, list[SimulationResult]]:
    """4 simulated ranks, rank 2 computing 30 ms longer, through the real agent code path (threads, real sockets)."""
    results: list[SimulationResult] = []

    def simulate() -> None:
        results.append(run_cluster(4, endpoint=endpoint, steps_per_second=RATE, duration_s=duration_s,
                                   straggler=(STRAGGLER, EXTRA_MS), run_id=run_id, processes=0, give_up_after_s=10))

    thread = threading.Thread(target=simulate, daemon=True)
    thread.start()
    return thread, results


# ---- Scrapes ---------------------------------------------------------------------------------------------------


def scrape(url: str, *, accept: str | None = None) -> dict[str, list[Sample]]:
    """Every sample of the endpoint, by sample name, as prometheus_client's parser reads it."""
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(request, timeout=5) as response:
        text = response.read().decode()
    out: dict[str, list[Sample]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return out


def pick(samples: dict[str, list[Sample]], name: str, **labels: str) -> list[Sample]:
    return [(have, value) for have, value in samples.get(name, [])
            if all(have.get(k) == v for k, v in labels.items())]


def wait_for(what: str, check: Callable[[], Any], timeout_s: float, every_s: float = 0.3) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not seen within {timeout_s} s")
        time.sleep(every_s)


# ---- Tests -------------------------------------------------------------------------------------------------------


def test_straggler_stall_states_and_gpu_absence_through_the_endpoint(recording: Recording) -> None:
    cpu = agent.start(framework="other", strategy="ddp", endpoint=recording.endpoint, run_id="cpu-only",
                      sample_devices=True, device_interval_s=0.2)  # this machine has no GPU: it says so
    try:
        for k in range(5):
            cpu.step(0, k, time.time() - 0.01, time.time(), data_wait_s=0.001, compute_s=0.008, comm_s=0.0,
                     comm_exposed_s=0.0)
        thread, results = _cluster(recording.endpoint, "straggler", duration_s=4.0)

        def judged() -> dict[str, list[Sample]] | None:
            samples = scrape(recording.url)
            steps = pick(samples, "ringscope_rank_steps_total", run="straggler")
            # the recent window (20 steps, the first batch left out) is full on every rank
            full = len(steps) == 4 and min(value for _, value in steps) >= 22
            return samples if full and pick(samples, "ringscope_straggler", run="straggler") else None

        samples = wait_for("a judged straggler with full recent windows", judged, timeout_s=15)
        [(labels, value)] = pick(samples, "ringscope_straggler", run="straggler")
        assert (labels["rank"], labels["cause"], labels["host"], value) == ("2", "compute", "sim-node-0000", 1.0)
        assert labels["framework"] == "simulated"
        assert pick(samples, "ringscope_run_state", run="straggler", state="running")[0][1] == 1.0
        assert pick(samples, "ringscope_run_state", run="straggler", state="finished")[0][1] == 0.0
        stall = {labels["rank"]: value for labels, value in
                 pick(samples, "ringscope_rank_comm_exposed_seconds", run="straggler")}
        assert stall[str(STRAGGLER)] == pytest.approx(TAIL_S, abs=1e-6)
        for rank in ("0", "1", "3"):  # see the module docstring for the 2 ms
            assert stall[rank] - stall[str(STRAGGLER)] == pytest.approx(EXTRA_MS / 1000.0, abs=0.002), rank
            share = pick(samples, "ringscope_rank_comm_exposed_ratio", run="straggler", rank=rank)[0][1]
            step = pick(samples, "ringscope_rank_step_seconds", run="straggler", rank=rank)[0][1]
            assert share == pytest.approx(stall[rank] / step, rel=1e-6)
        # this machine has no GPU: no DCGM series for its host, and an explicit 0
        [(cpu_labels, _)] = pick(samples, "ringscope_rank_step_seconds", run="cpu-only")
        host = cpu_labels["host"]
        assert [(h, v) for h, v in pick(samples, "ringscope_gpu_present", host=host)] == [
            ({"host": host, "status": "no_gpu"}, 0.0)]
        assert not [name for name, rows in samples.items() if name.startswith("DCGM_")
                    and any(labels.get("Hostname") == host for labels, _ in rows)]
        # the simulated cluster's GPUs are reported under dcgm-exporter's names (and say they are simulated)
        gpus = pick(samples, "DCGM_FI_DEV_GPU_UTIL", run="straggler")
        assert len(gpus) == 4 and {labels["modelName"] for labels, _ in gpus} == {"Simulated GPU"}
        assert pick(samples, "ringscope_collector_messages_total")[0][1] > 0
        assert not samples.get("ringscope_collector_rejected_messages_total")

        thread.join(20)
        assert not thread.is_alive() and results and not results[0].problems

        def finished() -> bool:
            return pick(scrape(recording.url), "ringscope_run_state", run="straggler", state="finished")[0][1] == 1
        wait_for("the run finished after the simulation ended", finished, timeout_s=10)
        text = urllib.request.urlopen(urllib.request.Request(  # OpenMetrics when the scraper asks for it
            recording.url, headers={"Accept": "application/openmetrics-text; version=1.0.0"}), timeout=5).read()
        assert text.decode().endswith("# EOF\n")
    finally:
        cpu.close(5.0)


# ---- A real Prometheus -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def prometheus_binary() -> str:
    """Debian's prometheus; installed here when missing and this runs as root (``make test`` installs it too)."""
    found = shutil.which("prometheus")
    if found:
        return found
    if os.geteuid() != 0:
        pytest.fail("this test runs a real Prometheus server: install Debian's package first "
                    "(sudo apt-get install -y prometheus; 'make test' does it when run as root)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "prometheus"]
    done = subprocess.run(install, capture_output=True, text=True, timeout=600, env=env)
    if done.returncode != 0:  # stale package lists: refresh them once
        subprocess.run(["apt-get", "update", "-q"], capture_output=True, text=True, timeout=600, env=env)
        done = subprocess.run(install, capture_output=True, text=True, timeout=600, env=env)
    found = shutil.which("prometheus")
    if not found:
        pytest.fail(f"could not install Debian's prometheus package (apt-get exit {done.returncode}): "
                    f"{(done.stderr or done.stdout)[-800:]}")
    return found


@pytest.fixture
def prometheus(prometheus_binary: str, recording: Recording, tmp_path: Path) -> Iterator[str]:
    """A Prometheus server on loopback scraping the endpoint every second; yields its base URL."""
    target = urllib.parse.urlsplit(recording.url).netloc
    config = tmp_path / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n"
                      "  - job_name: ringscope\n    scrape_interval: 1s\n    scrape_timeout: 1s\n"
                      f"    static_configs:\n      - targets: ['{target}']\n")
    process = None
    try:
        for _ in range(3):  # the free port may be taken between the probe and Prometheus' bind: try another
            port = free_port()
            process = subprocess.Popen(
                [prometheus_binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
                 f"--web.listen-address=127.0.0.1:{port}"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                text=True)
            base = f"http://127.0.0.1:{port}"

            def ready(base: str = base) -> bool:
                try:
                    with urllib.request.urlopen(f"{base}/-/ready", timeout=2) as response:
                        return response.status == 200
                except OSError:
                    return False

            deadline = time.monotonic() + 20
            while process.poll() is None and not ready() and time.monotonic() < deadline:
                time.sleep(0.2)
            if process.poll() is None and ready():
                yield base
                return
            process.kill()
            error = process.communicate(timeout=10)[1]
            if "address already in use" not in error:
                pytest.fail(f"prometheus did not start: {error[-800:]}")
        pytest.fail("prometheus could not bind a free port in 3 tries")
    finally:
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
            process.communicate(timeout=10)


def query(base: str, promql: str) -> list[dict[str, Any]]:
    url = f"{base}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
    with urllib.request.urlopen(url, timeout=5) as response:
        answer = json.load(response)
    assert answer["status"] == "success", answer
    return list(answer["data"]["result"])


def test_a_real_prometheus_scrapes_the_stall_and_the_straggler(recording: Recording, prometheus: str) -> None:
    thread, results = _cluster(recording.endpoint, "scraped", duration_s=3.5)
    try:
        def stall_stored() -> list[dict[str, Any]]:
            rows = query(prometheus, 'ringscope_rank_comm_exposed_seconds{run="scraped"}')
            return rows if len(rows) == 4 and query(prometheus, 'ringscope_straggler{run="scraped"}') else []

        rows = wait_for("Prometheus holding the stall of 4 ranks and a straggler", stall_stored, timeout_s=20,
                        every_s=0.5)
        assert {row["metric"]["job"] for row in rows} == {"ringscope"}
        [straggler] = query(prometheus, 'ringscope_straggler{run="scraped"}')
        assert straggler["metric"]["rank"] == "2" and straggler["value"][1] == "1"
        # the alert an on-call engineer would write: a rank stalled in AllReduce for more than 40 % of its steps
        alerting = query(prometheus, 'ringscope_rank_comm_exposed_ratio{run="scraped"} > 0.4')
        assert {row["metric"]["rank"] for row in alerting} == {"0", "1", "3"}  # ~39 of ~81 ms; the straggler 9
        assert query(prometheus, 'up{job="ringscope"}')[0]["value"][1] == "1"
        # every query of the sample dashboard is valid PromQL for this Prometheus, and its top row shows data
        dashboard = json.loads(DASHBOARD.read_text())
        for panel in (p for p in dashboard["panels"] if p["type"] != "row"):
            answers = [query(prometheus, t["expr"].replace("$run", "scraped").replace("$__rate_interval", "1m"))
                       for t in panel["targets"]]
            if panel["gridPos"]["y"] == 1:
                assert any(answers), f"top-row panel {panel['title']!r} would show no data"
    finally:
        thread.join(20)
    assert results and not results[0].problems


# ---- Arguments -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "option", "said"), [
    (("--metrics-port", "70000"), "--metrics-port", "expected a port in 0..65535"),
    (("--metrics-port", "0", "--metrics-bind", "http://0.0.0.0:9464"), "--metrics-bind", "without scheme or port"),
    (("--metrics-port", "0", "--metrics-keep-ended", "-1"), "--metrics-keep-ended", "minutes >= 0"),
    (("--metrics-port", "0", "--metrics-max-ranks", "0"), "--metrics-max-ranks", "whole number >= 1"),
])
def test_bad_metrics_options_are_one_line_and_write_nothing(args: tuple[str, ...], option: str, said: str,
                                                            tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    from ringscope.gui.cli import main

    assert main(["record", "--out", str(tmp_path / "new" / "S.db"), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and option in err and said in err, err
    assert not (tmp_path / "new").exists()


def test_a_busy_metrics_port_stops_record_before_it_writes(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from ringscope.gui.cli import main

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        busy = str(holder.getsockname()[1])
        code = main(["record", "--out", str(tmp_path / "new" / "S.db"), "--bind", "tcp://127.0.0.1:0",
                     "--metrics-port", busy])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "argument --metrics-port" in err[0] and f"127.0.0.1:{busy}" in err[0] and "in use" in err[0]
    assert not (tmp_path / "new").exists()

"""``ringscope sweep`` end to end: real torchrun and TensorFlow trainers, one collector, one session file.

One sweep (DDP and MirroredStrategy on 1 and 2 ranks, 60 steps) is shared by the module; a second one (DDP only)
injects a 40 ms all-reduce delay into ddp:2, which must scale worse and stall more than without it. Both run as the
user would run them, ``python -m ringscope.gui.cli sweep`` in a subprocess with a timeout, as does a third whose run
outlives
--timeout-per-run (stopped, reported, no process left behind), and a fourth that sweeps a user's own plain DDP script
(``--script``, no Ringscope import in it: the zero-code path instruments it). The refusals run in-process: they must
exit 2 before anything starts or is written.
"""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pypdfium2 as pdfium
import pytest

from ringscope.gui.cli import main
from ringscope.gui.core.ingest.session_reader import load

ROOT = Path(__file__).resolve().parents[2]
SWEEP_TIMEOUT_S = 420
DELAY_MS = 40


@dataclass
class Sweep:
    """A finished sweep: its folder, exit code, output, and sweep.csv's rows keyed by ``framework:ranks``."""

    out: Path
    returncode: int
    stdout: str
    stderr: str

    @property
    def rows(self) -> dict[str, dict[str, str]]:
        with open(self.out / "sweep.csv", newline="") as handle:
            return {f"{r['framework']}:{r['ranks']}": r for r in csv.DictReader(handle)}

    def said(self, prefix: str) -> str:
        """The stdout line starting with ``prefix`` (without it)."""
        return next(line[len(prefix):] for line in self.stdout.splitlines() if line.startswith(prefix))


USER_SCRIPT = """\
import argparse

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, required=True)
steps = parser.parse_args().steps
dist.init_process_group("gloo")
torch.manual_seed(0)
data = TensorDataset(torch.randn(2048, 32), torch.randint(0, 4, (2048,)))
loader = DataLoader(data, batch_size=32, sampler=DistributedSampler(data, seed=0))
model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
done = 0
while done < steps:
    for x, y in loader:
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        done += 1
        if done == steps:
            break
dist.destroy_process_group()
"""
"""A user's plain DDP training on gloo/CPU: no Ringscope import, its step count from its own ``--steps``."""
SCRIPT_STEPS = 40


def _sweep(out: Path, *args: str, steps: str | None = "60") -> Sweep:
    command = [sys.executable, "-m", "ringscope.gui.cli", "sweep", *(["--steps", steps] if steps else []), "--out",
               str(out),
               *args]
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=SWEEP_TIMEOUT_S, check=False)
    sweep = Sweep(out, proc.returncode, proc.stdout, proc.stderr)
    assert sweep.returncode == 0, f"sweep failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr[-4000:]}"
    return sweep


@pytest.fixture(scope="module")
def bake_off(tmp_path_factory: pytest.TempPathFactory) -> Sweep:
    return _sweep(tmp_path_factory.mktemp("sweep") / "out", "--frameworks", "ddp,tf-mirrored", "--ranks", "1,2")


@pytest.fixture(scope="module")
def delayed(tmp_path_factory: pytest.TempPathFactory) -> Sweep:
    return _sweep(tmp_path_factory.mktemp("sweep-delay") / "out", "--frameworks", "ddp", "--ranks", "1,2",
                  "--comm-delay-ms-for", f"ddp:2={DELAY_MS}")


@pytest.mark.slow
def test_one_row_per_configuration_with_the_efficiency_of_its_own_figures(bake_off: Sweep) -> None:
    rows = bake_off.rows
    assert list(rows) == ["ddp:1", "ddp:2", "tf-mirrored:1", "tf-mirrored:2"]
    for label, row in rows.items():
        framework, ranks = row["framework"], int(row["ranks"])
        assert row["status"] == "ok", label
        assert int(row["global_batch"]) == 32 * ranks and int(row["steps"]) == 60
        one_rank = float(rows[f"{framework}:1"]["samples_per_s"])
        assert float(row["efficiency"]) == pytest.approx(float(row["samples_per_s"]) / (ranks * one_rank), rel=1e-6)
        assert float(row["cost_per_1000_samples"]) > float(row["waiting_cost"]) >= 0
        assert row["equal_footing"] == "yes"
    assert float(rows["ddp:2"]["bytes_per_step"]) == (64 * 64 + 64) * 2 * 4 + (64 * 10 + 10) * 4  # fp32 gradients
    assert rows["tf-mirrored:2"]["bytes_per_step"] == ""
    assert bake_off.said("footing: ").startswith("Equal footing: every configuration trained digits data, an MLP of "
                                                 "width 64 x depth 2 (8,970 parameters), 32 samples per rank")


@pytest.mark.slow
def test_every_configuration_is_a_run_of_one_session_file(bake_off: Sweep) -> None:
    session = load(bake_off.out / "sweep.db")
    assert len(session.run_ids) == 4
    worlds = sorted(session.for_run(run_id).world_size for run_id in session.run_ids)
    assert worlds == [1, 1, 2, 2]
    assert {run_id.rsplit("-", 1)[-1] for run_id in session.run_ids} == {"1", "2"}


@pytest.mark.slow
def test_html_and_pdf_carry_the_recommendation(bake_off: Sweep) -> None:
    headline = bake_off.said("recommendation: ")
    assert headline.startswith("Recommendation: ")
    page = (bake_off.out / "sweep.html").read_text(encoding="utf-8")
    assert headline.replace("'", "&#x27;") in page
    assert "data-chart='chart-throughput'" in page and "Equal footing: every configuration" in page
    document = pdfium.PdfDocument(str(bake_off.out / "sweep.pdf"))
    try:
        text = " ".join(document[i].get_textpage().get_text_range() for i in range(len(document)))
    finally:
        document.close()
    assert re.sub(r"\s+", "", headline) in re.sub(r"\s+", "", text)


@pytest.mark.slow
def test_an_allreduce_delay_makes_its_configuration_scale_worse_and_stall_more(bake_off: Sweep,
                                                                                delayed: Sweep) -> None:
    plain, slow = bake_off.rows["ddp:2"], delayed.rows["ddp:2"]
    assert float(slow["comm_delay_ms"]) == DELAY_MS and float(plain["comm_delay_ms"]) == 0
    assert float(slow["efficiency"]) < float(plain["efficiency"])
    assert float(slow["allreduce_stall_share"]) > float(plain["allreduce_stall_share"])
    # 40 ms per step on a step of a few ms: most of the step is the stall
    assert float(slow["allreduce_stall_share"]) > 0.5
    assert float(delayed.rows["ddp:1"]["comm_delay_ms"]) == 0


@pytest.mark.slow
def test_a_users_own_script_is_swept_through_the_zero_code_path(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(USER_SCRIPT)
    sweep = _sweep(tmp_path / "out", "--frameworks", "ddp", "--ranks", "1,2", "--device", "cpu", "--script",
                   str(script), "--script-args", f"--steps {SCRIPT_STEPS}", steps=None)
    session = load(sweep.out / "sweep.db")
    assert len(session.run_ids) == 2
    assert sorted(session.for_run(run_id).world_size for run_id in session.run_ids) == [1, 2]
    rows = sweep.rows
    assert list(rows) == ["ddp:1", "ddp:2"]
    one_rank = float(rows["ddp:1"]["samples_per_s"])
    for label, row in rows.items():
        ranks = int(row["ranks"])
        assert row["status"] == "ok" and row["throughput_unit"] == "samples/s", label
        assert int(row["steps"]) == SCRIPT_STEPS and int(row["global_batch"]) == 32 * ranks  # from recorded samples
        assert float(row["samples_per_s"]) > 0
        assert float(row["efficiency"]) == pytest.approx(float(row["samples_per_s"]) / (ranks * one_rank), rel=1e-6)
        assert row["equal_footing"] == ("footing not checked: user script (same script and arguments for every "
                                        "configuration)")
        assert row["script"] == f"{script} --steps {SCRIPT_STEPS}" and row["model_width"] == ""
    assert sweep.said("footing: ").startswith("Footing not checked: user script (same script and arguments for "
                                              f"every configuration): every configuration ran {script} --steps")
    assert "Footing not checked: user script" in (sweep.out / "sweep.html").read_text(encoding="utf-8")


def test_refusals_exit_2_before_anything_is_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    too_many = (os.cpu_count() or 1) + 1
    cases = [
        (["--frameworks", "ddp,jax", "--ranks", "1,2"], "unknown framework 'jax'"),
        (["--frameworks", "ddp", "--ranks", f"1,{too_many}"], f"a CPU run of {too_many} ranks needs {too_many} cores"),
        (["--frameworks", "ddp", "--ranks", "2"], "has no 1"),
        (["--frameworks", "ddp", "--ranks", "1,2", "--batch-size", "-4"], "expected a whole number >= 1"),
        (["--frameworks", "tf-mirrored", "--ranks", "1", "--comm-delay-ms-for", "tf-mirrored:1=5"],
         "only the ddp trainer can delay its all-reduce"),
    ]
    for args, words in cases:
        assert main(["sweep", "--device", "cpu", "--out", str(out), *args]) == 2, args
        err = capsys.readouterr().err
        assert words in err and err.count("\n") == 1, err
        assert not out.exists()
    out.mkdir()
    (out / "sweep.db").write_bytes(b"")
    assert main(["sweep", "--frameworks", "ddp", "--ranks", "1", "--device", "cpu", "--out", str(out)]) == 2
    assert "already exists" in capsys.readouterr().err


def test_the_comm_delay_hook_is_hidden_from_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweep", "--help"]) == 0
    text = capsys.readouterr().out
    assert "--frameworks" in text and "--ranks" in text and "--comm-delay-ms-for" not in text


@pytest.mark.slow
def test_a_run_past_its_timeout_is_stopped_and_leaves_no_process(tmp_path: Path) -> None:
    started = time.time()
    out = tmp_path / "out"
    command = [sys.executable, "-m", "ringscope.gui.cli", "sweep", "--frameworks", "ddp", "--ranks", "1", "--steps",
               "100000",
               "--timeout-per-run", "3", "--device", "cpu", "--out", str(out)]
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 1, proc.stderr
    assert "ddp:1: still running after 3 s: stopped" in proc.stderr
    (row,) = Sweep(out, proc.returncode, proc.stdout, proc.stderr).rows.values()
    assert row["status"].startswith("still running after 3 s")
    assert not [p for p in psutil.process_iter(["cmdline", "create_time"])
                if p.info["create_time"] >= started
                and "ringscope.trainers.ddp_trainer" in " ".join(p.info["cmdline"] or [])]

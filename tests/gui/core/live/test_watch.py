"""The run watcher writes a hang once into the recording, where info and reports find it with its stack."""

from __future__ import annotations

from pathlib import Path

from ringscope.agent.schema import Heartbeat
from ringscope.gui.core.analysis.info import summarize
from ringscope.gui.core.ingest.recorder import Recorder
from ringscope.gui.core.ingest.session_reader import load
from ringscope.gui.core.live.runs import LiveRuns
from ringscope.gui.core.live.watch import RunWatcher
from ringscope.gui.core.report import build_report
from ringscope.gui.core.report.model import checkpoint_rows
from tests.gui.core.live.test_live_runs import T0, batch, hello, step


def test_a_hang_is_written_once_and_reported(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    recorder = Recorder(path).start()
    runs = LiveRuns(lost_timeout_s=3.0)

    def send(agent: str, records: list, seq: int, recv: float) -> None:  # what the collector does with two sinks
        message = batch(agent, records, seq=seq)
        runs.on_batch(message, recv)
        recorder.on_batch(message, recv)

    for r in (0, 1):
        send(f"a{r}", [hello("run", f"a{r}", [r])], 0, T0)
    end = T0
    for k in range(30):
        end = T0 + (k + 1) * 0.1
        for r in (0, 1):
            send(f"a{r}", [step(r, k, end)], k + 1, end)
    watcher = RunWatcher(runs, recorder.note_event)
    notices = []
    for k in range(1, 16):  # both ranks alive, no step completes: rank 1 never got its batch
        t = end + k
        send("a0", [Heartbeat(t, 0, "collective", end, 30, 1)], 100 + k, t)
        stack = '  File "train.py", line 7, in loop\n    never_returns()' if k > 5 else None
        send("a1", [Heartbeat(t, 1, "data_wait", end, 30, None, stack)], 100 + k, t)
        notices += watcher.tick(now_s=t)
    recorder.close()
    assert len(notices) == 1 and notices[0].run_id == "run"  # written once per hang, not every tick
    assert "rank 1 (in data wait, step 30) did not reach the collective" in notices[0].text
    info = summarize(path)
    [hang] = info["hangs"]
    assert hang["run_id"] == "run" and hang["rank"] == 1 and hang["stalled_s"] > 10
    assert "line 7, in loop" in hang["text"]
    rows = dict(checkpoint_rows(build_report(load(path))))
    assert rows["Hangs"].startswith("1: hung for")

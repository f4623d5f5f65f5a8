"""The ingest process's frame builder (``IngestService.frame``) under the load that crashed it: 8 192 agents joining
while frames, runs-table rows, hang verdicts and run status are built from another thread."""

from __future__ import annotations

import sys
import threading

from ringscope.gui.core.live.watch import RunWatcher
from ringscope.gui.core.service.frames import FrameDecoder
from ringscope.gui.core.service.server import IngestService, IngestSetup
from tests.gui.core.live.test_live_runs import AGENTS, T0, batch, hello, step


def test_frames_and_rows_are_built_safely_while_agents_keep_joining() -> None:
    """The collector thread registers agents (a Hello and a first step each, so the run's store grows rows too)
    while the frames thread builds frames and the watcher thread decides states and builds rows: at 8 192 ranks
    the ingest process crashed with "dictionary changed size during iteration" (issue 29). Every reader must see
    a copy taken under a lock, never the collections the collector thread is adding to."""
    service = IngestService(IngestSetup(bind="tcp://127.0.0.1:0"))  # not started: this test is the collector thread
    runs, watcher, decoder = service.runs, RunWatcher(service.runs), FrameDecoder()
    runs.on_batch(batch("a0", [hello("big", "a0", [0], world=AGENTS), step(0, 0, T0 + 0.1)]), T0)
    joined, stop, failures = [1], threading.Event(), []
    framed = threading.Event()  # set after each frame: the join waits for one every 256 agents, so frames are
    # built while it goes on however fast either side is here (between these points the two race freely)

    def collector() -> None:
        try:
            for r in range(1, AGENTS):
                if r % 256 == 0:
                    framed.clear()
                    framed.wait(10.0)
                records = [hello("big", f"a{r}", [r], world=AGENTS), step(r, 0, T0 + 0.1)]
                runs.on_batch(batch(f"a{r}", records), T0 + r * 1e-4)
                joined[0] = r + 1
        except Exception as exc:  # a sink never raises; if it did, the test must say so, not hang
            failures.append(exc)
        finally:
            stop.set()

    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as CPython allows: the race shows within a few frames
    thread = threading.Thread(target=collector)
    built, ranks_seen = 0, 0
    try:
        thread.start()
        while not stop.is_set():
            reply = service.frame("big", decoder.base, -1, None)
            assert "error" not in reply
            snap = decoder.decode(reply["frame"])
            assert len(snap.ranks) >= ranks_seen and snap.counters["agents"] == len(snap.ranks) == len(snap.hosts)
            ranks_seen = len(snap.ranks)
            watcher.tick(now_s=T0 + 1.0)  # decides states (hang rule included) as the watcher thread does
            row = runs.rows(now_s=T0 + 1.0, refresh=built % 2 == 0)[0]
            assert row.hosts == 1 and row.started_s == T0 and row.world_size == AGENTS
            status = runs.run_status("big")
            assert status is not None and 0 < int(status["agents"]) <= AGENTS  # type: ignore[call-overload]
            built += 1
            framed.set()
    finally:
        sys.setswitchinterval(previous)
        thread.join()
        service.collector.close()
    assert not failures and joined[0] == AGENTS and built >= AGENTS // 256
    final = decoder.decode(service.frame("big", decoder.base, -1, None)["frame"])
    assert len(final.ranks) == AGENTS and runs.rows(now_s=T0 + 1.0)[0].ranks == AGENTS

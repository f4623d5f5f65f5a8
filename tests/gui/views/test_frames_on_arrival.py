"""A frame from the ingest process is drawn when it arrives, not at the window's next tick; the next request waits
for that tick; a stopped timer stops the drawing too. A real window over a real ingest process and real agents."""

from __future__ import annotations

import time

from pytestqt.qtbot import QtBot

from ringscope import agent
from ringscope.gui.app import build_window
from ringscope.gui.views.qt_preferences import Preferences
from tests.agent_steps import send_steps


def test_a_frame_is_drawn_on_arrival_and_the_next_is_asked_for_at_the_next_tick(qtbot: QtBot) -> None:
    parts = build_window(bind="tcp://127.0.0.1:0", record=False, preferences=Preferences())
    window = parts.window
    qtbot.addWidget(window)
    window.timer.setInterval(3_600_000)  # no tick within the test: only the watch on the frames socket draws
    agents = [agent.start(framework="pytorch", strategy="ddp", rank=r, world_size=2, endpoint=parts.collector.endpoint,
                          run_id="arrival", sample_devices=False) for r in (0, 1)]
    try:
        send_steps(agents, 0, 10)
        qtbot.waitUntil(lambda: (window.render_frame(), window.selected_run_id == "arrival")[1], timeout=20_000)
        channel = parts.ingest.frames if parts.ingest is not None else None
        assert channel is not None and channel is parts.runs.frames_channel()

        def drawn(steps: int) -> bool:
            snap = window.last_snapshot
            return snap is not None and snap.steps_total == steps

        def ingested(steps: int) -> bool:  # asked over the calls channel: the frames channel is left alone
            return bool(window.store.step_end_times(0)[1] == steps)

        qtbot.waitUntil(lambda: drawn(20), timeout=20_000)  # frames asked for by the calls above, drawn on arrival
        qtbot.waitUntil(lambda: channel._pending is False, timeout=5_000)  # nothing in flight: the watch took it
        send_steps(agents, 10, 10)
        qtbot.waitUntil(lambda: ingested(40), timeout=10_000)  # the next frame is built with every step
        time.sleep(channel.pace_s)  # the pace since the last request has passed
        channel.pump()  # what a tick does first: ask for the next frame
        assert channel._pending == "arrival" and drawn(20)
        qtbot.waitUntil(lambda: drawn(40), timeout=5_000)  # no tick and no call came: the socket's watch drew it

        # within pace_s of the last request, a call (an arrival's draw, a tick) does not ask again
        qtbot.waitUntil(lambda: channel._pending is False, timeout=5_000)
        channel.pace_s = 3600.0
        window.render_frame()
        assert channel._pending is False
        channel.pace_s = 0.0
        window.render_frame()
        assert channel._pending == "arrival"

        window.timer.stop()  # tests and closing stop the timer: then frames are drawn only when asked for
        window.render_frame()
        send_steps(agents, 20, 10)
        qtbot.waitUntil(lambda: ingested(60), timeout=10_000)
        channel.pump()  # a request in flight (sent now, or by the call above)
        qtbot.waitUntil(lambda: channel.connection.poll(0), timeout=5_000)  # its reply is there...
        qtbot.wait(300)
        assert channel.connection.poll(0) and not drawn(60)  # ...and nothing took it
        qtbot.waitUntil(lambda: (window.render_frame(), drawn(60))[1], timeout=5_000)
    finally:
        for a in agents:
            a.close(timeout_s=1.0)
        parts.close()

"""A replay at full speed keeps the window responsive: counted, never timed.

Each test also runs a broken copy of the code it guards (tests/mutation.py) and shows it fails.
"""

from __future__ import annotations

import os
import sys

import pytest

from specviz.core.events import to_json
from specviz.gui import replay
from specviz.gui.replay import READ_SWITCH_S, Replayer
from specviz.gui.run_view import RunView
from tests.gui.scripted import speculative_events
from tests.mutation import mutant

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support propagateSizeHints",
                                       "This plugin does not support raise")


@pytest.fixture
def view(qtbot) -> RunView:
    v = RunView()
    qtbot.addWidget(v)
    v.resize(1200, 800)
    v.show()
    return v


def switch_while_reading(qtbot, view: RunView, monkeypatch, job_cls: type) -> tuple[float, float]:
    """The interpreter's switch interval while a reader thread waits on a pipe, and after."""
    monkeypatch.setattr(replay, "_ReadJob", job_cls)
    before = sys.getswitchinterval()
    r, w = os.pipe()
    replayer = Replayer(view, interval_ms=0, follow_s=0.0)
    stream = replay.open_pipe_reader(r)
    try:
        events = speculative_events()
        replayer.open_stream(stream, "pipe")
        job = replayer._job
        assert job is not None
        os.write(w, to_json(events[0]).encode() + b"\n")
        qtbot.waitUntil(lambda: view.flush() or bool(view.record.events), timeout=20000)
        during = sys.getswitchinterval()
        with qtbot.waitSignal(replayer.finished, timeout=20000):
            os.write(w, "".join(to_json(e) + "\n" for e in events[1:]).encode())
            os.close(w)
            w = -1
        job.thread.join(10)
        assert not job.thread.is_alive()
    finally:
        if w >= 0:
            os.close(w)
        replayer.stop()
        stream.close()
    after = sys.getswitchinterval()
    return during, after


def test_the_reader_thread_lets_the_gui_thread_have_the_gil_often(qtbot, view: RunView,
                                                                   monkeypatch) -> None:
    """While a recording is parsed on its thread, a Qt call that let go of the GIL gets it back
    within READ_SWITCH_S, not the interpreter's 5 ms (that made 50-600 ms frames); after the
    reading the interpreter's own interval is back."""
    before = sys.getswitchinterval()
    during, after = switch_while_reading(qtbot, view, monkeypatch, replay._ReadJob)
    assert during == READ_SWITCH_S < before and after == before
    # Broken: the reader leaves the interval alone.
    broken = mutant(replay._ReadJob, ("_reading(True)", "pass"), ("_reading(False)", "pass"))
    during, after = switch_while_reading(qtbot, view, monkeypatch, broken)
    assert during == before  # the test above would fail on it

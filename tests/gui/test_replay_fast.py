"""A replay at full speed keeps the window responsive: counted, never timed.

Each test also runs a broken copy of the code it guards (tests/mutation.py) and shows it fails.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import pytest

from specviz.core import recording
from specviz.core.events import Round, to_json
from specviz.gui.replay import player, reader
from specviz.gui.replay.player import Replayer
from specviz.gui.replay.reader import READ_SWITCH_S
from specviz.gui.views.run_view import RunView
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
    monkeypatch.setattr(player, "ReadJob", job_cls)
    r, w = os.pipe()
    replayer = Replayer(view, interval_ms=0, follow_s=0.0)
    stream = reader.open_pipe_reader(r)
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
    during, after = switch_while_reading(qtbot, view, monkeypatch, reader.ReadJob)
    assert during == READ_SWITCH_S < before and after == before
    # Broken: the reader leaves the interval alone.
    broken = mutant(reader.ReadJob, ("reading(True)", "pass"), ("reading(False)", "pass"))
    during, after = switch_while_reading(qtbot, view, monkeypatch, broken)
    assert during == before  # the test above would fail on it


def resets_replaying(qtbot, view: RunView, monkeypatch, tmp_path, replayer_cls: type,
                     runs: int) -> tuple[int, Replayer]:
    """How many times the view was reset (a run's text, bars and plots cleared) replaying a
    file of ``runs`` short runs at full speed, 256 events handed over per tick."""
    monkeypatch.setattr(player, "MIN_BATCH", player.LIVE_BATCH)  # no adapting to the clock
    events = speculative_events()
    path = tmp_path / "many.jsonl"
    path.write_text("".join(to_json(e) + "\n" for e in events) * runs, encoding="utf-8")
    begins = [0]
    real_begin = view._begin

    def begin(started):
        begins[0] += 1
        real_begin(started)

    monkeypatch.setattr(view, "_begin", begin)
    replayer = replayer_cls(view, interval_ms=0, follow_s=0.0)
    try:
        with qtbot.waitSignal(replayer.finished, timeout=30000):
            replayer.open(str(path))
        view.flush()
        assert view.record.events == events  # the last run, whole, as without skipping
        assert replayer.count == len(events) * runs
    finally:
        replayer.stop()
    monkeypatch.undo()
    return begins[0], replayer


def test_runs_replaced_within_a_tick_are_passed_over(qtbot, view: RunView, monkeypatch,
                                                     tmp_path) -> None:
    """At full speed the view is handed the last run that starts in a tick's events, not every
    run before it (each a reset that no frame would show)."""
    runs = 40
    per_tick = player.LIVE_BATCH // len(speculative_events())
    assert per_tick >= 4
    begins, replayer = resets_replaying(qtbot, view, monkeypatch, tmp_path, Replayer, runs)
    assert begins <= runs // per_tick + 2 and replayer.skipped > 0
    # Broken: every run handed over (the view reset once per run).
    broken = mutant(Replayer, ("n -= self._skip_replaced(n)", "pass"))
    begins, _ = resets_replaying(qtbot, view, monkeypatch, tmp_path, broken, runs)
    assert begins == runs


def _rests(monkeypatch, parse) -> tuple[float, float, list, list]:
    """Parse a file's bytes with ``parse`` on a fake clock (parsing 16 KiB: 1 ms);
    (busy, resting, events, the reader's own events without slicing)."""
    started, *rounds, finished = speculative_events()
    many = [dataclasses.replace(rounds[i % 4], index=i) for i in range(200)]
    data = "".join(to_json(e) + "\n" for e in [started, *many, finished]).encode()
    clock = [0.0]

    class Reader(recording.RecordingReader):
        def feed(self, chunk: bytes) -> list:
            clock[0] += 0.001 * len(chunk) / 16384  # the work: 1 ms per 16 KiB
            return super().feed(chunk)

    monkeypatch.setattr(reader.time, "perf_counter", lambda: clock[0])
    waits: list[float] = []

    class Stopped:
        def wait(self, s: float) -> bool:
            waits.append(s)
            return False

    job = reader.ReadJob(None, None, "x", False, 0.0, reader.Wake())
    job.stopped = Stopped()
    events = parse(job, Reader(), data)
    monkeypatch.undo()
    return clock[0], sum(waits), events, recording.RecordingReader().feed(data)


def _parse_flat_out(job, reader, chunk):  # the broken variant: one chunk, no rest
    return reader.feed(chunk)


@pytest.mark.parametrize("broken", [False, True])
def test_the_reader_rests_so_the_gui_thread_gets_the_gil(monkeypatch, broken: bool) -> None:
    """Parsing flat out, the reader thread held the GIL and each Qt call of the GUI thread
    waited to get it back (a 50 MB replay stalled p99 46 ms while read, 15 ms after). The
    reader parses a slice, then rests: its share of the time is READ_DUTY."""
    parse = _parse_flat_out if broken else reader.ReadJob._parse
    busy, rest, events, whole = _rests(monkeypatch, parse)
    assert events == whole  # slicing loses and reorders nothing
    share = busy / (busy + rest)
    ok = abs(share - reader.READ_DUTY) < 0.05
    assert ok != broken, f"the reader was busy {share:.0%} of the time"


@pytest.mark.parametrize("broken", [False, True])
def test_a_full_speed_tick_hands_over_one_frame_of_tokens(qtbot, view: RunView, tmp_path: Path,
                                                          monkeypatch, broken: bool) -> None:
    """Handed more than a frame appends, the view's backlog held rounds for frames (latency
    p95 53 ms); each tick now hands at most FRAME_FRAGMENTS tokens (one round at least)."""
    from specviz.gui.views.run_view import FRAME_FRAGMENTS, fragments

    if broken:
        monkeypatch.setattr(player, "FRAME_FRAGMENTS", 10**9)
    # Ticks that come late (a loaded machine) shrink the batch, and with it what the broken
    # variant hands over (68 tokens once, in a CI run beside other work): no tick is late here.
    monkeypatch.setattr(player, "FRAME_BUDGET_S", 1e9)
    started, *rounds, finished = speculative_events()
    many = [dataclasses.replace(rounds[i % 4], index=i) for i in range(400)]
    path = tmp_path / "many.jsonl"
    path.write_text("".join(to_json(e) + "\n" for e in [started, *many, finished]),
                    encoding="utf-8")
    r = Replayer(view, interval_ms=0, follow_s=0.0)
    monkeypatch.setattr(view, "busy", lambda: False)  # a view that always has room
    ticks: list[int] = []
    real_apply, real_tick = view.apply, r._on_timeout

    def apply(event) -> None:
        if isinstance(event, Round):
            ticks[-1] += fragments(event)
        real_apply(event)

    def tick() -> None:
        ticks.append(0)
        real_tick()

    monkeypatch.setattr(view, "apply", apply)
    monkeypatch.setattr(r, "_on_timeout", tick)
    r.timer.timeout.disconnect()
    r.timer.timeout.connect(tick)
    with qtbot.waitSignal(r.finished, timeout=20000):
        r.open(str(path))
    view.flush()
    r.stop()
    assert view.record.rounds[-1].index == 399  # all of it was shown
    most = max(ticks)
    assert (most <= FRAME_FRAGMENTS) != broken, f"a tick handed over {most} tokens"

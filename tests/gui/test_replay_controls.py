"""Replays you can talk over: pause, speed, round by round, a round back or on, scrubbing,
the presenter's keys, the recording's settings shown read-only, and race files.

Timing is checked on the schedule the replayer computes from the recorded ``elapsed_s``
(the timer's interval before each round), never on a wall clock. Each test names the broken
variant it rejects; ``test_each_test_rejects_its_broken_variant`` runs it on that variant.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt

from specviz.core.events import Round, RunStarted, to_json
from specviz.core.recording import read_recording
from specviz.gui.replay import player as REPLAY
from specviz.gui.replay.player import ROUND_BY_ROUND, Replayer, open_pipe_reader, schedule
from specviz.gui.views.run_view import RunView
from specviz.gui.windows import app as APP
from specviz.gui.windows import controls as CONTROLS
from specviz.gui.windows import replay_bar as REPLAY_BAR
from specviz.gui.windows.app import MainWindow
from specviz.gui.windows.controls import FIELDS
from specviz.gui.windows.replay_bar import BAR_POINT_SIZE
from tests.gui.scripted import speculative_events
from tests.gui.windows import tiny_window
from tests.mutation import mutant

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support propagateSizeHints",
                                       "This plugin does not support raise")

RECORDINGS = Path(__file__).resolve().parents[2] / "assets" / "recordings"
NORMAL = RECORDINGS / "normal.jsonl"
RACE = RECORDINGS / "race.jsonl"
WAIT_MS = 20_000


def make_view(qtbot) -> RunView:
    view = RunView(frame_ms=10_000)  # frames only when a test flushes
    qtbot.addWidget(view)
    view.resize(1400, 850)
    return view


def view_state(view: RunView) -> dict[str, Any]:
    """What the audience sees, as data: the stream's tokens and their fates (struck or not),
    the counts, the round in the bars, the info line."""
    view.flush()
    view.stream.apply_strikes(now=float("inf"))
    rec, stream = view.record, view.stream
    return {
        "text": stream.toPlainText(),
        "tokens": [(s.text, s.kind, s.round_index, s.position,
                    stream.format_at(s.start).fontStrikeOut()) for s in stream.spans],
        "events": len(rec.events), "rounds": len(rec.rounds), "tokens_n": rec.token_count,
        "rate": list(rec.cumulative_rate), "histogram": list(rec.histogram),
        "finished": rec.finished is not None,
        "bars": None if view.bars.round is None else view.bars.round.index,
        "info": view.info.text(),
    }


def played_to(qtbot, events: list, n: int, stop_at_end: bool = False) -> dict[str, Any]:
    """The state of a fresh view that was shown events one by one, a frame after each, up to
    and including round ``n - 1`` (n rounds); with ``stop_at_end``: every event."""
    view = make_view(qtbot)
    rounds = 0
    for event in events:
        if isinstance(event, Round):
            if rounds == n and not stop_at_end:
                break
            rounds += 1
        view.apply(event)
        view.flush()
    return view_state(view)


def loaded(qtbot, view: RunView, cls: type = Replayer, **kw: Any) -> Replayer:
    """A replayer that has read all of normal.jsonl (paused before showing much)."""
    r = cls(view, follow_s=0.0, **kw)
    r.set_speed(ROUND_BY_ROUND)
    r.open(str(NORMAL))
    qtbot.waitUntil(lambda: r.ended and r.rounds_known > 5, timeout=WAIT_MS)
    return r


# -- pause, speed ----------------------------------------------------------------------------


def test_pause_stops_rounds_arriving(qtbot, cls: type = Replayer) -> None:
    """Broken variant: pause() that only redraws the bar (rounds keep coming)."""
    view = make_view(qtbot)
    r = cls(view, follow_s=0.0, speed=50.0)  # ~20 ms a round
    r.open(str(NORMAL))
    qtbot.waitUntil(lambda: r.rounds_shown >= 2, timeout=WAIT_MS)
    r.pause()
    shown = r.rounds_shown
    assert not r.timer.isActive()
    qtbot.wait(300)  # fifteen rounds' time at this speed
    assert r.rounds_shown == shown and r.paused
    view.flush()
    assert len(view.record.rounds) == shown
    with qtbot.waitSignal(r.finished, timeout=WAIT_MS):
        r.play()
    assert r.rounds_shown == r.rounds_known == 17
    r.stop()


def test_speed_scales_the_recorded_schedule(qtbot, cls: type = Replayer) -> None:
    """Broken variants: the speed ignored; each round waiting its whole elapsed_s (not its own
    time)."""
    events = read_recording(NORMAL)
    rounds = [e for e in events if isinstance(e, Round)]
    one, two = schedule(events, 1.0), schedule(events, 2.0)
    assert one[-1] == pytest.approx(rounds[-1].elapsed_s)  # 1×: as long as it took
    assert two == pytest.approx([t / 2 for t in one])
    view = make_view(qtbot)
    intervals = {}
    for speed in (1.0, 2.0, 0.5):
        r = cls(view, follow_s=0.0, speed=speed)
        r.start(events)  # the RunStarted shows now; the timer waits for round 0
        waits = []
        while r.position < len(events):
            assert r.timer.isActive()
            waits.append(r.timer.interval())
            r.timer.stop()
            r._on_timeout()  # the tick, without waiting for it
        intervals[speed] = waits
        r.stop()
    previous = [0.0] + [x.elapsed_s for x in rounds[:-1]]
    assert intervals[1.0] == [round((x.elapsed_s - p) * 1000)
                              for x, p in zip(rounds, previous, strict=True)]
    assert intervals[2.0] == [round((x.elapsed_s - p) * 500)
                              for x, p in zip(rounds, previous, strict=True)]
    assert sum(intervals[0.5]) == pytest.approx(4 * sum(intervals[2.0]), abs=len(rounds) * 2)


def test_round_by_round_waits_for_step(qtbot, cls: type = Replayer) -> None:
    """Broken variant: round by round played on a clock like any speed."""
    view = make_view(qtbot)
    r = loaded(qtbot, view, cls)
    qtbot.wait(200)
    assert r.rounds_shown == 0 and not r.timer.isActive()
    view.flush()
    assert view.record.started is not None  # the prompt is up, waiting for the first Step
    assert r.step() and r.rounds_shown == 1
    r.stop()


# -- scrubbing and stepping ------------------------------------------------------------------


def test_scrub_to_a_round_equals_playing_to_it(qtbot, cls: type = Replayer) -> None:
    """Broken variant: a seek back that does not rebuild from the run's start."""
    events = read_recording(NORMAL)
    view = make_view(qtbot)
    r = loaded(qtbot, view, cls)
    total = r.rounds_known
    r.seek(total)  # forward to the end (every event, the finish too)
    assert view_state(view) == played_to(qtbot, events, total, stop_at_end=True)
    for n in (12, 3, 0, 1, total - 1, 7):  # back, back, back, on, on, back
        r.seek(n)
        assert r.rounds_shown == n
        assert view_state(view) == played_to(qtbot, events, n), n
    r.stop()


def test_step_back_then_forward_is_the_same_state(qtbot, cls: type = Replayer) -> None:
    """Broken variant: Step that jumps two rounds."""
    view = make_view(qtbot)
    r = loaded(qtbot, view, cls)
    for n in (5, 1, r.rounds_known):
        r.seek(n)
        before = view_state(view)
        assert r.step_back() and r.rounds_shown == n - 1
        assert view_state(view) != before
        assert r.step() and r.rounds_shown == n
        assert view_state(view) == before, n
    r.stop()


def test_a_followed_stream_is_live_and_scrubbing_back_pauses_it(qtbot,
                                                                 cls: type = Replayer) -> None:
    """Broken variant: scrubbing back in a stream leaves it following (it jumps to the end)."""
    from specviz.gui.windows.replay_bar import ReplayBar

    view = make_view(qtbot)
    r = cls(view, follow_s=0.0, speed=1.0)
    bar = ReplayBar(r)
    qtbot.addWidget(bar)
    lines = [to_json(e) + "\n" for e in speculative_events()]
    read_fd, write_fd = os.pipe()
    writer = os.fdopen(write_fd, "w", encoding="utf-8")
    try:
        r.open_stream(open_pipe_reader(read_fd), "specviz-cli")
        writer.write("".join(lines[:4]))  # RunStarted, three rounds
        writer.flush()
        qtbot.waitUntil(lambda: r.rounds_shown == 3, timeout=WAIT_MS)
        assert "live" in bar.where.text() and "live" in r.status_text()
        r.seek(1)
        assert r.paused and r.rounds_shown == 1
        assert "paused" in bar.where.text()
        writer.write("".join(lines[4:]))  # the last round and the finish arrive meanwhile
        writer.flush()
        writer.close()
        qtbot.waitUntil(lambda: r.ended, timeout=WAIT_MS)
        qtbot.wait(50)
        assert r.rounds_shown == 1 and r.rounds_known == 4
        with qtbot.waitSignal(r.finished, timeout=WAIT_MS):
            r.play()
        view.flush()
        assert view.record.events == speculative_events()
    finally:
        if not writer.closed:
            writer.close()
        r.stop()


# -- in the window: keys, settings, race files ------------------------------------------------


def make_window(qtbot, settings_store, tiny_pair, cls: type | None = None) -> MainWindow:
    w = tiny_window(qtbot, settings_store, tiny_pair, cls or MainWindow)
    w.replayer.follow_s = 0.0
    w.controls.k.setValue(7)
    w.controls.temperature.setValue(0.3)
    w.controls.seed.setValue(1234)
    w.controls.prompt.setPlainText("my own prompt")
    return w


@pytest.fixture
def window(qtbot, settings_store, tiny_pair):
    w = make_window(qtbot, settings_store, tiny_pair)
    yield w
    w.close()


def open_normal(qtbot, w: MainWindow) -> None:
    w.open_recording(str(NORMAL))
    qtbot.waitUntil(lambda: w.replayer.rounds_shown >= 1, timeout=WAIT_MS)


def test_the_controls_show_the_recording_read_only_then_the_users_again(
        qtbot, window: MainWindow) -> None:
    """Broken variants: the controls left editable; the user's settings not given back."""
    w = window
    mine = w.controls.values()
    open_normal(qtbot, w)
    started = read_recording(NORMAL)[0]
    assert isinstance(started, RunStarted)
    for f in FIELDS:
        if f.setting is not None and f.setting != "seed":
            assert CONTROLS.read_value(w.controls.widget(f)) == getattr(started.settings,
                                                                        f.setting), f.key
    assert w.controls.seed.value() == started.settings.seed
    assert w.controls.target_edit.text() == started.pair.target
    assert "water cycle" in w.controls.prompt.toPlainText()
    assert not w.controls.form_panel.isEnabled() and w.controls.recording_note.isVisibleTo(w)
    assert w.replay_toolbar.isVisibleTo(w)
    assert w.status_label.text().startswith("Replaying normal.jsonl: round ")
    # The corner names the replay's state, not the worker's "idle" (seen saying "idle" while
    # a recording played: the broken variant this rejects).
    assert "replay" in w.state_label.text()
    w.replay_bar.close_button.click()  # leave the replay
    assert w.controls.values() == mine and w.controls.form_panel.isEnabled()
    assert w.state_label.text() == "idle"
    assert not w.replay_toolbar.isVisibleTo(w)
    # Starting something live (a run, a race) reads the user's settings, never the recording's.
    open_normal(qtbot, w)
    assert w.controls.k.value() == started.settings.k
    assert w.sampling().k == 7 and w.controls.values() == mine
    assert not w.replayer.loaded


def test_the_run_button_leaves_the_replay_and_runs_the_users_settings(
        qtbot, window: MainWindow) -> None:
    """Broken variant: the Run button is F5's action (it plays the replay, runs nothing)."""
    w = window
    w.controls.max_new.setValue(4)
    mine = w.controls.values()
    w.replayer.set_speed(ROUND_BY_ROUND)
    w.open_recording(str(NORMAL))
    qtbot.waitUntil(lambda: w.controls.showing_recording, timeout=WAIT_MS)
    w.controls.run_button.click()
    assert not w.replayer.loaded and w.controls.values() == mine
    qtbot.waitUntil(lambda: w.run_view.flush() or w.run_view.record.finished is not None,
                    timeout=WAIT_MS)
    started = w.run_view.record.started
    assert started is not None and started.settings.k == 7 and started.settings.seed == 1234
    assert w.run_view.user_prompt == "my own prompt"  # what the run was sent


def test_the_bars_slider_scrubs(qtbot, window: MainWindow) -> None:
    """Broken variant: the slider's moves taken for its own redraws (no seek)."""
    w = window
    w.replayer.set_speed(ROUND_BY_ROUND)
    w.open_recording(str(NORMAL))
    qtbot.waitUntil(lambda: w.replayer.ended and w.controls.showing_recording,
                    timeout=WAIT_MS)
    bar = w.replay_bar
    assert bar.slider.maximum() == 17 and bar.slider.value() == 0
    bar.slider.setValue(9)  # what a drag or a click on the groove does
    assert w.replayer.rounds_shown == 9 and w.replayer.paused is False
    assert len(w.run_view.record.rounds) == 9 and "round 9 / 17" in bar.where.text()
    bar.back_button.click()
    assert w.replayer.rounds_shown == 8 and bar.slider.value() == 8 and w.replayer.paused
    bar.step_button.click()
    assert w.replayer.rounds_shown == 9 and bar.slider.value() == 9


def test_f6_pauses_and_f10_steps_a_replay(qtbot, window: MainWindow) -> None:
    """Broken variant: F10 starts a live run instead of stepping the replay."""
    w = window
    w.show()
    w.activateWindow()
    qtbot.waitUntil(w.isActiveWindow, timeout=2000)
    w.run_view.setFocus()
    w.replayer.set_speed(4.0)
    open_normal(qtbot, w)
    qtbot.keyClick(w.run_view, Qt.Key.Key_F6)
    assert w.replayer.paused
    n = w.replayer.rounds_shown
    qtbot.wait(300)
    assert w.replayer.rounds_shown == n
    qtbot.keyClick(w.run_view, Qt.Key.Key_F10)
    assert w.replayer.rounds_shown == n + 1 and w.replayer.paused and w.replayer.loaded
    assert w.controller.state == "idle"  # no live run
    qtbot.keyClick(w.run_view, Qt.Key.Key_PageDown)  # the clicker: one more
    assert w.replayer.rounds_shown == n + 2
    qtbot.keyClick(w.run_view, Qt.Key.Key_PageUp)  # and back
    assert w.replayer.rounds_shown == n + 1
    w.run_view.flush()
    assert len(w.run_view.record.rounds) == n + 1
    qtbot.keyClick(w.run_view, Qt.Key.Key_F5)  # F5 plays the replay (no live run)
    assert not w.replayer.paused and w.controller.state == "idle"


def test_file_open_of_a_race_recording_opens_the_race_view(qtbot, window: MainWindow) -> None:
    """Broken variant: race files not detected (played as two runs in the run view)."""
    w = window
    w.open_recording(str(RACE))
    qtbot.waitUntil(lambda: w.race_window.isVisible(), timeout=WAIT_MS)
    assert w.race_window.view.race is not None and w.race_window.view.playing
    qtbot.wait(100)
    w.run_view.flush()
    assert w.run_view.record.started is None  # nothing of it in the run view
    assert not w.replayer.loaded and not w.replay_toolbar.isVisibleTo(w)
    assert not w.controls.showing_recording
    w.race_window.close()
    # An ordinary recording after it still plays in the run view.
    open_normal(qtbot, w)
    assert w.replay_toolbar.isVisibleTo(w) and not w.race_window.isVisible()


# -- each test rejects its broken variant ------------------------------------------------------

REPLAYER_MUTANTS: dict[str, tuple[Callable[..., None], list[tuple[str, str]]]] = {
    "pause only redraws": (test_pause_stops_rounds_arriving, [
        ("        self.paused = True\n        self.timer.stop()\n        self.changed.emit()",
         "        self.changed.emit()")]),
    "the speed ignored": (test_speed_scales_the_recorded_schedule, [
        ("/ max(self.speed, 1e-9) * 1000", "* 1000")]),
    "each round waits its whole elapsed_s": (test_speed_scales_the_recorded_schedule, [
        ("delay = max(0.0, event.elapsed_s - self._last_elapsed)",
         "delay = event.elapsed_s")]),
    "round by round on a clock": (test_round_by_round_waits_for_step, [
        ("            elif self.speed == ROUND_BY_ROUND and not self._due_now(self.position):",
         "            elif False:"),
        ("        elif self.position < len(self.events) and (\n"
         "                self.speed != ROUND_BY_ROUND or self._due_now(self.position)):",
         "        elif self.position < len(self.events):"),
        ("            return not isinstance(self.events[i], Round)", "            return True")]),
    "a seek back without a rebuild": (test_scrub_to_a_round_equals_playing_to_it, [
        ("            self.position = start\n", "            self.position = target\n")]),
    "Step jumps two rounds": (test_step_back_then_forward_is_the_same_state, [
        ("self.seek(self.rounds_shown + 1)", "self.seek(self.rounds_shown + 2)")]),
    "scrubbing a stream keeps following": (
        test_a_followed_stream_is_live_and_scrubbing_back_pauses_it, [
            ("            self.paused = True  # scrubbing back in a followed stream pauses it "
             "until Play\n", "            pass\n")]),
}

WINDOW_MUTANTS: dict[str, tuple[Callable[..., None], Any, str, list[tuple[str, str]]]] = {
    "the controls left editable": (
        test_the_controls_show_the_recording_read_only_then_the_users_again, CONTROLS,
        "ControlsPanel", [("        self.form_panel.setEnabled(False)\n", "")]),
    "the user's settings not given back": (
        test_the_controls_show_the_recording_read_only_then_the_users_again, CONTROLS,
        "ControlsPanel", [("            write_value(self.widget(f), held[f.key])\n",
                           "            pass\n")]),
    "the Run button plays the replay": (
        test_the_run_button_leaves_the_replay_and_runs_the_users_settings, APP, "MainWindow",
        [('(lambda: self.run()) if name == "run" else action.trigger', "action.trigger")]),
    "the slider does not seek": (
        test_the_bars_slider_scrubs, REPLAY_BAR, "ReplayBar",
        [("        if not self._updating:\n", "        if self._updating:\n")]),
    "F10 runs the model in a replay": (
        test_f6_pauses_and_f10_steps_a_replay, APP, "MainWindow",
        [("        if self.replayer.loaded:  # a recording on screen: its next round\n",
          "        if False:\n")]),
    "race files not detected": (
        test_file_open_of_a_race_recording_opens_the_race_view, APP, "MainWindow",
        [("speed=1.0, detect_races=True)", "speed=1.0, detect_races=False)")]),
}


@pytest.mark.parametrize("name", list(REPLAYER_MUTANTS))
def test_each_replayer_test_rejects_its_broken_variant(name: str, qtbot) -> None:
    from pytestqt.exceptions import TimeoutError as QtTimeout

    test, edits = REPLAYER_MUTANTS[name]
    broken = mutant(REPLAY.Replayer, *edits)
    with pytest.raises((AssertionError, QtTimeout)):
        test(qtbot, cls=broken)


@pytest.mark.parametrize("name", list(WINDOW_MUTANTS))
def test_each_window_test_rejects_its_broken_variant(name: str, qtbot, settings_store, tiny_pair,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from pytestqt.exceptions import TimeoutError as QtTimeout

    test, module, attr, edits = WINDOW_MUTANTS[name]
    if name == "race files not detected":
        # A branch that also checks small files on the GUI thread (Stage.open_if_race): off
        # too, or it still finds race.jsonl.
        from specviz.gui.stage.stage import Stage

        monkeypatch.setattr(Stage, "open_if_race", lambda *args: False)
    broken = mutant(getattr(module, attr), *edits)
    monkeypatch.setattr(module, attr, broken)
    if attr == "ControlsPanel":  # the window calls the name it imported
        monkeypatch.setattr(APP, attr, broken)
    monkeypatch.setitem(globals(), "WAIT_MS", 5_000)  # a broken variant may never get there
    w = make_window_with(qtbot, settings_store, tiny_pair, broken if attr == "MainWindow"
                         else MainWindow)
    try:
        with pytest.raises((AssertionError, QtTimeout)):
            test(qtbot, w)
    finally:
        w.close()


def make_window_with(qtbot, settings_store, tiny_pair, cls: type) -> MainWindow:
    return make_window(qtbot, settings_store, tiny_pair, cls)


# -- on a projector: nothing of the bar clipped ------------------------------------------------


@pytest.mark.parametrize("size", [(1366, 768), (1920, 1080)], ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("present", [False, True], ids=["window", "presentation"])
def test_the_bar_is_not_clipped(qtbot, settings_store, tiny_pair, size: tuple[int, int],
                                present: bool) -> None:
    """Broken variant: the bar's buttons sized for the normal type, not the zoomed one."""
    from specviz.gui.views.zoom import presentation_factor
    from tests.gui.layout_check import widget_problems

    w = make_window(qtbot, settings_store, tiny_pair)
    try:
        w.setWindowState(Qt.WindowState.WindowNoState)
        w.resize(*size)
        w.show()
        w.replayer.set_speed(ROUND_BY_ROUND)
        w.open_recording(str(NORMAL))
        qtbot.waitUntil(lambda: w.replayer.ended, timeout=WAIT_MS)
        w.replayer.seek(10)
        if present:
            w.dock.hide()
            w.zoom.set_factor(presentation_factor(w))
        qtbot.wait(50)
        problems = widget_problems(w.replay_toolbar)
        assert not problems, "\n".join(problems)
        bar = w.replay_bar
        assert bar.where.text() == "round 10 / 17 · F10: next"
        assert bar.play_button.height() >= 48 and bar.slider.width() >= 240
        assert w.replay_toolbar.width() == w.width()
        factor = w.zoom.factor
        assert bar.play_button.font().pointSizeF() == pytest.approx(BAR_POINT_SIZE * factor)
    finally:
        w.close()


def test_the_bar_test_rejects_its_broken_variant(qtbot, settings_store, tiny_pair,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from specviz.gui.windows import replay_bar

    broken = mutant(replay_bar.ReplayToolbar,
                    ("        zoom.changed.connect(bar.set_scale)\n", "        pass\n"))
    monkeypatch.setattr(APP, "ReplayToolbar", broken)
    with pytest.raises(AssertionError):
        test_the_bar_is_not_clipped(qtbot, settings_store, tiny_pair, (1920, 1080), True)

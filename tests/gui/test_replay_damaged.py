"""A damaged recording replays as far as it is good: the events before the damage show and one
banner says where and why it ends (issue 26, item 16). Each test runs the broken reader too."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from specviz.core.events import RunStarted
from specviz.core.recording import read_recording
from specviz.gui.replay import player, reader
from specviz.gui.replay.player import Replayer
from specviz.gui.views.run_view import RunView
from tests.gui.windows import tiny_window
from tests.mutation import mutant

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support propagateSizeHints",
                                       "This plugin does not support raise")

ASSETS = Path(__file__).resolve().parents[2] / "assets" / "recordings"
NORMAL = ASSETS / "normal.jsonl"
HOUR_AGO = time.time() - 3600


@pytest.fixture
def view(qtbot) -> RunView:
    v = RunView()
    qtbot.addWidget(v)
    v.resize(1400, 850)
    v.show()
    return v


def cut_file(tmp_path: Path) -> Path:
    """normal.jsonl less its last 200 bytes, written an hour ago (a crash, not a live file)."""
    path = tmp_path / "cut.jsonl"
    path.write_bytes(NORMAL.read_bytes()[:-200])
    os.utime(path, (HOUR_AGO, HOUR_AGO))
    return path


def replay_until_failed(qtbot, replayer: Replayer, path: Path) -> tuple[str, list[str]]:
    """(the failure's message, the status lines on the way) of replaying ``path``."""
    said: list[str] = []
    replayer.progressed.connect(said.append)
    with qtbot.waitSignal(replayer.failed, timeout=20000) as failed:
        replayer.open(str(path))
    replayer.view.flush()
    return failed.args[0].message, said


@pytest.mark.parametrize("broken", [False, True])
def test_a_file_cut_by_a_crash_shows_its_events_and_where_it_ends(
        qtbot, view: RunView, tmp_path: Path, monkeypatch, broken: bool) -> None:
    """The app's replayer (it follows a file still being written): a file cut an hour ago is
    not followed; its 18 good events show, then one banner names line 19 and the cut. The
    broken variant (follow whatever the file's age) waits on it first, "waiting for the
    run's next lines", for a run that will never come."""
    if broken:
        monkeypatch.setattr(reader, "_changed_within", lambda path, seconds: True)
    replayer = Replayer(view, interval_ms=0, follow_s=0.5 if broken else 30.0)
    try:
        message, said = replay_until_failed(qtbot, replayer, cut_file(tmp_path))
    finally:
        replayer.stop()
    good = read_recording(NORMAL)
    assert view.record.events[:18] == good[:18] and len(view.record.events) == 19
    assert message == ("Could not read cut.jsonl: line 19: the file ends in the middle of this "
                       "event (cut short) (the 18 events before it are shown)")
    assert view.banner.isVisible() and "line 19" in view.banner.text()
    following = [s for s in said if s.startswith("Following")]
    assert bool(following) is broken


def _drops_the_chunk(cls: type) -> type:
    """The old reader thread: a bad line lost the events parsed earlier in its chunk."""
    return mutant(cls, ("                exc.events = events + exc.events\n", ""))


@pytest.mark.parametrize("broken", [False, True])
def test_a_bad_line_in_the_middle_keeps_every_event_before_it(
        qtbot, view: RunView, tmp_path: Path, monkeypatch, broken: bool) -> None:
    lines = NORMAL.read_bytes().split(b"\n")
    lines[9] = lines[9][:50] + b"XX" + lines[9][50:]  # line 10 is no longer JSON
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"\n".join(lines))
    if broken:
        monkeypatch.setattr(player, "ReadJob", _drops_the_chunk(reader.ReadJob))
    replayer = Replayer(view, interval_ms=0, follow_s=0.0)
    try:
        message, _ = replay_until_failed(qtbot, replayer, path)
    finally:
        replayer.stop()
    shown = view.record.events[:-1]
    assert "line 10: not a JSON event" in message
    if broken:
        assert len(shown) < 9
    else:
        assert shown == read_recording(NORMAL)[:9]
        assert message.endswith("(the 9 events before it are shown)")


def test_a_cut_race_opened_as_a_race_replays_what_it_holds(qtbot, settings_store, tiny_pair,
                                                           tmp_path: Path) -> None:
    """File → Open race recording on a race cut short: not a silent refusal; the main window
    replays its good events and says where the file ends."""
    window = tiny_window(qtbot, settings_store, tiny_pair)
    window.replayer.follow_s, window.replayer.speed, window.replayer.interval_ms = 0.0, None, 0
    events = read_recording(ASSETS / "race.jsonl")
    path = tmp_path / "race.jsonl"
    path.write_bytes((ASSETS / "race.jsonl").read_bytes()[:-40])
    try:
        with qtbot.waitSignal(window.replayer.failed, timeout=20000) as failed:
            assert not window.stage.open_race_recording(str(path))
        window.run_view.flush()
        assert "cut short" in failed.args[0].message
        second = max(i for i, e in enumerate(events) if isinstance(e, RunStarted))
        assert window.replayer.position == len(events) - 1  # all but the cut line went by
        assert window.run_view.record.events[:-1] == events[second:-1]  # the view: run 2
        assert "cut short" in window.status_label.text()
    finally:
        window.close()

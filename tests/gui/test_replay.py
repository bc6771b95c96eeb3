"""Replays: bad files give one banner (no exception reaches Qt), pipes and growing files show
events as they arrive, reading stays off the GUI thread, and a replay never mixes with a run.

pytest-qt fails a test when an exception escapes into a Qt slot or timer: every test here
would catch a view that throws on what the reader let through.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from specviz.core import recording
from specviz.core.events import (
    Round,
    RunFinished,
    RunStarted,
    TopN,
    from_json,
    to_json,
)
from specviz.gui.replay.player import Replayer
from specviz.gui.views.run_view import RunView
from specviz.gui.windows.app import CUSTOM, MainWindow
from tests.gui.scripted import speculative_events

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support propagateSizeHints",
                                       "This plugin does not support raise")


def lines_of(events: list) -> list[str]:
    return [to_json(e) for e in events]


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.fixture
def view(qtbot) -> RunView:
    v = RunView()
    qtbot.addWidget(v)
    v.resize(1400, 850)
    v.show()
    return v


@pytest.fixture
def replayer(view: RunView) -> Replayer:
    r = Replayer(view, interval_ms=0, follow_s=0.0)
    yield r
    r.stop()


def replay_file(qtbot, replayer: Replayer, path: Path) -> None:
    with qtbot.waitSignal(replayer.finished, timeout=20000):
        replayer.open(str(path))
    replayer.view.flush()


# -- bad files: one banner, the app stays usable ------------------------------------------------


def bad_files() -> dict[str, tuple[bytes, str]]:
    good = lines_of(speculative_events())
    start, rnd, end = (json.loads(good[i]) for i in (0, 1, -1))

    def with_(obj: dict, path: tuple, value: object) -> str:
        obj = json.loads(json.dumps(obj))
        target = obj
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        return json.dumps(obj)

    def blob(lines: list[str]) -> bytes:
        return ("\n".join(lines) + "\n").encode()

    return {
        "finished alone": (b'{"type":"run_finished","generated_ids":[],"text":"",'
                           b'"stop_reason":"eos","summary":[]}\n',
                           "line 1: run_finished.summary must be an object"),
        "n_accepted '2'": (blob([good[0], with_(rnd, ("n_accepted",), "2"), *good[2:]]),
                           "line 2: round.n_accepted must be an integer, got '2'"),
        "p 'high'": (blob([good[0], with_(rnd, ("drafted", 1, "p"), "high"), *good[2:]]),
                     "line 2: round.drafted[1].p must be a number, got 'high'"),
        "summary null": (blob([*good[:-1], with_(end, ("summary",), None)]),
                         f"line {len(good)}: run_finished.summary must be an object, got null"),
        "k 20000000": (blob([with_(start, ("settings", "k"), 20000000), *good[1:]]),
                       "line 1: run_started.settings.k must be at most 16"),
        "cut short": (blob(good[:3]), "line 3: the recording ends in the middle of a run"),
        "cut mid-line": (blob(good)[:700], "the file ends in the middle of this event"),
        "control bytes": (bytes(range(256)) * 40, "line 1: not a JSON event"),
        "binary": (b"\x89PNG\r\n\x1a\n" + bytes(range(128, 256)) * 40, "line 1: not UTF-8"),
        "empty": (b"", "the recording is empty"),
        "order": (blob([good[1], good[0]]), "line 1: round before any run_started"),
    }


@pytest.mark.parametrize("name", list(bad_files()))
def test_a_bad_file_gives_one_banner_and_the_app_stays_usable(
        qtbot, view: RunView, replayer: Replayer, tmp_path: Path, name: str) -> None:
    data, expected = bad_files()[name]
    path = tmp_path / "bad.jsonl"
    path.write_bytes(data)
    with qtbot.waitSignal(replayer.failed, timeout=20000) as failed:
        replayer.open(str(path))
    qtbot.wait(50)  # frames run: a view that throws on what was shown fails the test here
    view.flush()
    message = failed.args[0].message
    assert message.startswith("Could not read bad.jsonl: ") and expected in message, message
    assert view.banner.isVisible() and expected.split(":")[0] in view.banner.text()
    assert "\n" not in message and len(message) < 300
    # Still usable: a good recording replays next, and the banner goes with the new run.
    replay_file(qtbot, replayer, write(tmp_path / "good.jsonl", lines_of(speculative_events())))
    assert view.record.events == speculative_events() and not view.banner.isVisible()


def test_unchecked_events_would_throw_in_the_redraw(qtbot) -> None:
    """Why the reader checks: the old path (from_json, no checks) throws in the frame timer."""
    view = RunView(frame_ms=10)
    qtbot.addWidget(view)
    good = lines_of(speculative_events())
    rnd = json.loads(good[1])
    rnd["n_accepted"] = "2"
    view.apply(from_json(good[0]))
    view.apply(from_json(json.dumps(rnd)))
    with qtbot.captureExceptions() as exceptions:
        qtbot.waitUntil(lambda: bool(exceptions), timeout=5000)
        view.timer.stop()
    assert exceptions[0][0] is TypeError
    with pytest.raises(recording.RecordingError, match="n_accepted must be an integer"):
        list(recording.read_lines([good[0], json.dumps(rnd)]))


def test_the_window_shows_a_bad_file_in_its_banner_and_status(qtbot, settings_store,
                                                               tiny_pair, tmp_path) -> None:
    window = MainWindow(loader=lambda *a, **k: tiny_pair, settings=settings_store,
                        autoload=False)
    qtbot.addWidget(window)
    window.replayer.follow_s = 0.0
    data, expected = bad_files()["k 20000000"]
    (tmp_path / "b.jsonl").write_bytes(data)
    try:
        with qtbot.waitSignal(window.replayer.failed, timeout=20000):
            window.open_recording(str(tmp_path / "b.jsonl"))
        assert expected in window.run_view.banner.text()
        assert expected in window.status_label.text()
    finally:
        window.close()


def test_extreme_but_valid_recordings_draw(qtbot, view: RunView, replayer: Replayer,
                                           tmp_path: Path) -> None:
    """What the reader accepts, at its limits, draws without an exception (K = 16, top-N
    1024, probabilities 0 and 1, empty lists, 20,000-character texts, a K = 0 round)."""
    started, r0, r1, r2, r3, finished = speculative_events()
    wide = TopN(tuple(range(1024)), tuple([1.0] + [0.0] * 1023), tuple(["x" * 30] * 1024))
    big_k = dataclasses.replace(
        started, settings=dataclasses.replace(started.settings, k=16, top_n=1024),
        prompt="p" * 20000)
    drafts = tuple(dataclasses.replace(r1.drafted[0], index=i, q=1.0, p=0.0, ratio=0.0,
                                       r=0.0 if i == 0 else None, q_top=wide, p_top=wide,
                                       status="rejected" if i == 0 else "discarded",
                                       text="长" * 20000 if i == 3 else " x")
                   for i in range(16))
    rounds = [
        dataclasses.replace(r0, index=0, k=16, drafted=drafts, n_accepted=0, bonus_top=wide),
        dataclasses.replace(r1, index=1, k=0, drafted=(), n_accepted=0, extra=None,
                            appended_ids=(), appended_text="", appended_texts=()),
        dataclasses.replace(r2, index=2, elapsed_s=0.0, draft_time_s=0.0, verify_time_s=0.0,
                            target_calls=0, draft_calls=0),
        dataclasses.replace(r3, index=3, drafted=(), n_accepted=0,
                            extra=dataclasses.replace(r3.extra, dist_top=TopN((), (), ()))),
    ]
    events = [big_k, *rounds, dataclasses.replace(finished, text="")]
    lines = lines_of(events)
    assert list(recording.read_lines(lines)) == events  # the reader lets all of it through
    replay_file(qtbot, replayer, write(tmp_path / "edge.jsonl", lines))
    qtbot.wait(100)
    view.select_round(0)
    view.flush()
    assert len(view.record.rounds) == 4 and not view.banner.isVisible()


# -- sources: pipes, standard input, growing files, off the GUI thread ----------------------------


CHILD = r"""
import sys
lines = sys.argv[1:]
out = sys.stdout
for i, line in enumerate(lines):
    out.write(line + "\n")
    out.flush()
    if i == 2:
        sys.stdin.readline()  # hold here until the test has seen the first two events drawn
"""


def test_a_pipe_shows_rounds_as_they_arrive(qtbot, view: RunView, replayer: Replayer) -> None:
    events = speculative_events()
    child = subprocess.Popen([sys.executable, "-c", CHILD, *lines_of(events)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        replayer.open_stream(child.stdout, "specviz-cli")
        # The child is blocked after RunStarted and two rounds: those are on screen already.
        qtbot.waitUntil(lambda: view.flush() or len(view.record.rounds) == 2, timeout=20000)
        assert view.record.events == events[:3] and replayer.active
        assert "round" not in view.info.text() or "2 rounds" in view.info.text()
        with qtbot.waitSignal(replayer.finished, timeout=20000):
            child.stdin.write(b"go\n")
            child.stdin.flush()
        view.flush()
        assert view.record.events == events and not view.banner.isVisible()
    finally:
        child.stdin.close()
        child.wait(10)


STDIN_APP = r"""
import sys
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
from specviz.gui.replay.player import Replayer
from specviz.gui.views.run_view import RunView

app = QApplication([])
view = RunView()
replayer = Replayer(view, interval_ms=0)

def check():
    view.flush()
    if view.record.rounds:
        print("shown", len(view.record.rounds), flush=True)
        app.quit()  # standard input is still open: the reader thread is blocked in a read

timer = QTimer()
timer.timeout.connect(check)
timer.start(20)
replayer.open("-")
sys.exit(app.exec())
"""


def test_quitting_while_standard_input_is_open_exits_cleanly(tmp_path: Path) -> None:
    """`… | specviz --replay -`, closed while the pipe is open: exit 0, no abort at shutdown."""
    child = subprocess.Popen([sys.executable, "-c", STDIN_APP], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env={**os.environ, "QT_QPA_PLATFORM": "offscreen",
                                  "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    try:
        child.stdin.write("".join(line + "\n" for line in lines_of(speculative_events()[:2]))
                          .encode())
        child.stdin.flush()
        assert child.stdout.readline().strip() == b"shown 1"
        rc = child.wait(60)  # stdin stays open all along
        err = child.stderr.read().decode(errors="replace")
    finally:
        child.stdin.close()
        child.kill()
    assert rc == 0 and "Fatal" not in err, (rc, err[-2000:])


def test_replay_dash_reads_standard_input(qtbot, view: RunView, replayer: Replayer,
                                          monkeypatch) -> None:
    data = "".join(line + "\n" for line in lines_of(speculative_events())).encode()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BufferedReader(io.BytesIO(data))))
    with qtbot.waitSignal(replayer.finished, timeout=20000):
        replayer.open("-")
    view.flush()
    assert view.record.events == speculative_events()


def test_a_file_being_written_is_followed_until_its_run_ends(qtbot, view: RunView,
                                                             tmp_path: Path) -> None:
    replayer = Replayer(view, interval_ms=1, follow_s=60.0)
    lines = lines_of(speculative_events())
    path = write(tmp_path / "growing.jsonl", lines[:2])
    with open(path, "a", encoding="utf-8") as f:
        f.write(lines[2][:50])  # half a line: the writer is in the middle of it
    replayer.open(str(path))
    qtbot.waitUntil(lambda: view.flush() or len(view.record.rounds) == 1, timeout=20000)
    assert replayer.active
    with qtbot.waitSignal(replayer.finished, timeout=20000):
        with open(path, "a", encoding="utf-8") as f:
            f.write(lines[2][50:] + "\n" + "".join(line + "\n" for line in lines[3:]))
    view.flush()
    assert view.record.events == speculative_events() and not view.banner.isVisible()
    replayer.stop()


def test_a_finished_file_without_a_last_newline_is_not_followed(qtbot, view: RunView,
                                                                 tmp_path: Path) -> None:
    replayer = Replayer(view, interval_ms=0, follow_s=600.0)
    path = tmp_path / "no-newline.jsonl"
    path.write_text("\n".join(lines_of(speculative_events())), encoding="utf-8")
    with qtbot.waitSignal(replayer.finished, timeout=20000):  # not after 600 s of following
        replayer.open(str(path))
    view.flush()
    assert view.record.events == speculative_events()


def test_reading_happens_off_the_gui_thread(qtbot, view: RunView, replayer: Replayer,
                                            tmp_path: Path, monkeypatch) -> None:
    threads: set[str] = set()
    real = recording.RecordingReader.feed

    def spy(self, chunk: bytes):
        threads.add(threading.current_thread().name)
        return real(self, chunk)

    monkeypatch.setattr(recording.RecordingReader, "feed", spy)
    replay_file(qtbot, replayer, write(tmp_path / "r.jsonl", lines_of(speculative_events())))
    assert threads and threading.main_thread().name not in threads
    assert view.record.events == speculative_events()


def test_a_big_file_is_read_with_bounded_memory(qtbot, view: RunView, replayer: Replayer,
                                                tmp_path: Path) -> None:
    """The reader waits while the window is behind: never more than its queue in memory."""
    started, *rounds, finished = speculative_events()
    many = [dataclasses.replace(rounds[i % 4], index=i) for i in range(3000)]
    path = write(tmp_path / "big.jsonl", lines_of([started, *many, finished]))
    slow = Replayer(view, interval_ms=5, follow_s=0.0)  # paced: the reader gets far ahead
    slow.open(str(path))
    qtbot.waitUntil(lambda: slow._job is not None and slow._job.items.full(), timeout=20000)
    assert len(slow.pending) < 2000  # what was taken is a few batches, not the file
    slow.stop()
    assert not slow.active


# -- a replay never mixes with a live run -------------------------------------------------------


@pytest.fixture
def window(qtbot, settings_store, endless_pair):
    w = MainWindow(loader=lambda *a, **k: endless_pair, settings=settings_store,
                   autoload=False)
    qtbot.addWidget(w)
    w._set_preset(CUSTOM)
    w.controls.draft_edit.setText("tiny-draft")
    w.controls.target_edit.setText("tiny-target")
    w.controls.device.setCurrentText("cpu")
    w.controls.max_new.setValue(5000)
    w.controls.prompt.setPlainText("the cat")
    w.replayer.follow_s = 0.0
    w.replayer.timer.setInterval(1)
    w.replayer.interval_ms = 1
    yield w
    w.close()
    assert w.controller.decoder_thread.isFinished()


def test_a_replay_opened_mid_run_holds_none_of_its_events(qtbot, window, endless_pair,
                                                          tmp_path: Path, monkeypatch) -> None:
    """The live run's round in flight ends after the replay began: its events stay out."""
    gate = threading.Event()
    entered = threading.Event()
    real = endless_pair.target.forward
    calls = {"n": 0}

    def forward(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 4:  # the fourth round's verify pass waits for the test
            entered.set()
            gate.wait(30)
        return real(*args, **kwargs)

    with qtbot.waitSignal(window.controller.loaded, timeout=30000):
        window.load_pair()  # loaded and its step timed before the forward is counted
    # Fixed K: one target pass per round, none timed by a cost calibration; and the target
    # on transformers' forward, the one spied (FastLlama, the CPU's target path, calls the
    # layers itself).
    window.controls.k_policy.setCurrentText("fixed")
    monkeypatch.setenv("SPECVIZ_STOCK_TARGET", "1")
    monkeypatch.setattr(endless_pair.target, "forward", forward)
    window.run()
    qtbot.waitUntil(entered.is_set, timeout=30000)
    path = write(tmp_path / "rec.jsonl", lines_of(speculative_events()))
    with qtbot.waitSignal(window.replayer.finished, timeout=20000):
        window.open_recording(str(path))
    gate.set()  # the live round finishes now: a Round and RunFinished("stopped") follow
    qtbot.waitUntil(lambda: window.controller.state == "idle", timeout=30000)
    qtbot.wait(100)
    window.run_view.flush()
    assert window.run_view.record.events == speculative_events()


def test_a_live_run_started_during_a_replay_stops_it(qtbot, window, tmp_path: Path) -> None:
    window.replayer.set_speed(0.01)  # a slow replay: 100 × the recorded 0.1 s per round
    path = write(tmp_path / "rec.jsonl", lines_of(speculative_events()))
    window.open_recording(str(path))
    qtbot.waitUntil(lambda: window.run_view.flush() or window.run_view.record.started
                    is not None, timeout=20000)
    assert window.replayer.active
    window.controls.max_new.setValue(6)
    window.run()
    assert not window.replayer.active
    qtbot.waitUntil(lambda: window.controller.state == "idle", timeout=30000)
    qtbot.wait(100)
    window.run_view.flush()
    events = window.run_view.record.events
    assert isinstance(events[0], RunStarted) and events[0].prompt != speculative_events()[0].prompt
    assert isinstance(events[-1], RunFinished) and all(
        isinstance(e, Round) for e in events[1:-1])
    assert len(events) - 2 == len(window.run_view.record.rounds) >= 1


"""The race view: two runs on one shared clock; a race recording read back shows the same."""

from __future__ import annotations

import inspect
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from specviz.core.events import RunFinished, RunStarted, from_json, to_json
from specviz.gui.stage.race_view import RaceView, user_text
from specviz.gui.views.run_view import RunView
from tests.gui.scripted import PROMPT, baseline_events, speculative_events
from tests.gui.windows import tiny_window
from tests.mutation import mutant

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support propagateSizeHints",
                                       "This plugin does not support raise")


def scripted_race(temperature: float | None = None) -> list:
    events = [*speculative_events(), *baseline_events()]
    if temperature is None:
        return events
    return [replace(e, settings=replace(e.settings, temperature=temperature))
            if isinstance(e, RunStarted) else e for e in events]


@pytest.fixture
def race_view(qtbot) -> RaceView:
    view = RaceView(frame_ms=10_000)  # the clock is moved by hand with set_time
    qtbot.addWidget(view)
    view.resize(1600, 900)
    return view


def stream_text(events: list, qtbot) -> str:
    view = RunView(frame_ms=10_000)
    qtbot.addWidget(view)
    for e in events:
        view.apply(e)
    view.flush(now=0.0)
    view.stream.apply_strikes(now=100.0)
    return view.stream.toPlainText()


def test_both_panes_follow_one_clock_from_their_own_timestamps(race_view: RaceView) -> None:
    assert race_view.load(scripted_race())
    state = race_view.state()
    assert (state.speculative.rounds, state.baseline.rounds) == (0, 0)
    assert state.speculative.text == state.baseline.text == ""  # nothing written yet
    assert race_view.prompt.text() == f"Prompt (both runs): “{PROMPT}”"  # shown once
    race_view.set_time(0.25)  # speculative rounds end at 0.1, 0.2, 0.3 ..; target alone too
    state = race_view.state()
    assert (state.speculative.rounds, state.speculative.tokens) == (2, 7)
    assert (state.baseline.rounds, state.baseline.tokens) == (2, 2)
    assert state.speculative.clock == state.baseline.clock == "0.25 s"
    assert state.speculative.tokens_per_s == "28.0"  # 7 tokens in 0.25 s
    assert state.baseline.tokens_per_s == "8.0"
    assert state.speedup == "7 vs 2 tokens so far · speedup when both have finished"
    race_view.set_time(0.4)  # the target alone finished at 0.3 s: its clock stops there
    state = race_view.state()
    assert state.baseline.clock == "0.30 s" and "done in 0.30 s" in state.baseline.status
    assert state.speculative.clock == "0.40 s" and "done" not in state.speculative.status
    race_view.set_time(10.0)  # clamped to the race's end, 0.5 s
    state = race_view.state()
    assert state.time_s == 0.5
    assert state.speedup == "Measured speedup 2.00×  (20.0 vs 10.0 tokens/s)"
    assert "differ by design" in state.identity  # T = 1


def test_each_pane_draws_its_run_as_the_live_view(qtbot, race_view: RaceView) -> None:
    race_view.load(scripted_race())
    race_view.set_time(race_view.duration_s)
    for pane in race_view.panes.values():
        pane.stream.apply_strikes(now=100.0)
    # The same tokens as the live view draws after the prompt (shown once, above the panes).
    assert PROMPT + race_view.panes["speculative"].stream.toPlainText() == \
        stream_text(speculative_events(), qtbot)
    assert PROMPT + race_view.panes["baseline"].stream.toPlainText() == \
        stream_text(baseline_events(), qtbot)
    kinds = {s.kind for s in race_view.panes["speculative"].stream.spans}
    assert kinds == {"accepted", "rejected", "resampled", "bonus"}
    assert {s.kind for s in race_view.panes["baseline"].stream.spans} == {"target"}


def test_the_prompt_shows_without_its_chat_template() -> None:
    chatml = ("<|im_start|>system\nYou are a helpful AI assistant<|im_end|>\n<|im_start|>user\n"
              "What are three facts about water?<|im_end|>\n<|im_start|>assistant\n")
    assert user_text(chatml) == "What are three facts about water?"
    assert user_text("[INST] Hello there [/INST]") == "Hello there"
    assert user_text("Once upon") == "Once upon"  # no template: the prompt itself


def test_the_first_to_finish_is_named(race_view: RaceView) -> None:
    race_view.load(scripted_race())
    race_view.set_time(0.5)
    state = race_view.state()
    assert state.baseline.status == "✔ done in 0.30 s — finished first"
    assert state.speculative.status == "✔ done in 0.50 s"


def test_greedy_identity_check(race_view: RaceView) -> None:
    events = scripted_race(temperature=0.0)
    race_view.load(events)
    assert "checked when both" in race_view.state().identity  # not before the end
    race_view.set_time(1.0)
    assert race_view.state().identity.startswith("T = 0: identical text ✗")
    assert "token 3" in race_view.state().identity  # " the cat" then " dog" vs " sat"
    spec_ids = events[5].generated_ids
    same = [replace(e, generated_ids=spec_ids) if isinstance(e, RunFinished) else e
            for e in events]
    race_view.load(same)
    race_view.set_time(1.0)
    assert race_view.state().identity.startswith("T = 0: identical text ✓")


def test_a_lenient_race_claims_no_identity(race_view: RaceView) -> None:
    events = [replace(e, settings=replace(e.settings, temperature=0.0, lenience=0.5))
              if isinstance(e, RunStarted) else e for e in scripted_race()]
    race_view.load(events)
    race_view.set_time(1.0)
    assert race_view.state().identity.startswith("lenience 0.5 < 1")


def test_the_clock_going_back_redraws_the_past(race_view: RaceView, qtbot) -> None:
    race_view.load(scripted_race())
    race_view.set_time(0.45)
    race_view.set_time(0.15)
    back = race_view.state()
    fresh = RaceView(frame_ms=10_000)
    qtbot.addWidget(fresh)
    fresh.load(scripted_race())
    fresh.set_time(0.15)
    assert back == fresh.state()


def test_says_on_screen_how_it_was_measured(race_view: RaceView) -> None:
    race_view.load(scripted_race())
    race_view.show()
    assert race_view.note.isVisible()
    assert "one after the other" in race_view.note.text()
    assert "one clock" in race_view.note.text()


def test_a_race_recording_read_back_reproduces_the_view(qtbot, tmp_path: Path) -> None:
    live = RaceView(frame_ms=10_000)
    qtbot.addWidget(live)
    events = scripted_race(temperature=0.0)
    for e in events[:8]:  # the speculative run and the start of the target alone
        live.apply(e)
    assert live.race is None and live.state().baseline.rounds == 1
    for e in events[8:]:
        live.apply(e)
    assert live.race is not None and live.playing  # measured: now both replay together
    live.pause()
    path = tmp_path / "race.jsonl"
    path.write_text("".join(to_json(e) + "\n" for e in live.events), encoding="utf-8")
    try:
        from specviz.core.recording import read_recording  # the validating reader
        back = read_recording(path)
    except ImportError:  # not merged yet: the plain reader
        back = [from_json(line) for line in path.read_text(encoding="utf-8").splitlines()]
    replayed = RaceView(frame_ms=10_000)
    qtbot.addWidget(replayed)
    assert replayed.load(back)
    assert back == events
    for t in (0.0, 0.1, 0.25, 0.35, 0.5):
        live.set_time(t)
        replayed.set_time(t)
        assert replayed.state() == live.state(), t


def test_not_a_race_is_refused(race_view: RaceView) -> None:
    assert not race_view.load(speculative_events())
    assert race_view.race is None


RACE_VIEW = sys.modules["specviz.gui.stage.race_view"]
MUTANTS = {
    "no redraw when the clock goes back": (
        "test_the_clock_going_back_redraws_the_past", "RacePane",
        [("if n < self.shown:", "if False:")]),
    "one clock for both: the longer run's time": (
        "test_both_panes_follow_one_clock_from_their_own_timestamps", "RacePane",
        [("own = min(t, side.duration_s) if side.finished is not None else t", "own = t")]),
    "identity shown before the end": (
        "test_greedy_identity_check", "RaceView",
        [("if t < race.duration_s or race.identical is None:", "if race.identical is None:")]),
    "the first round never drawn": (
        "test_each_pane_draws_its_run_as_the_live_view", "RacePane",
        [("self.stream.add_rounds(list(side.rounds[self.shown:n]), now=t)",
          "self.stream.add_rounds(list(side.rounds[max(self.shown, 1):n]), now=t)")]),
    "the slower side named first": (
        "test_the_first_to_finish_is_named", "RaceView",
        [("race.speculative.duration_s < race.baseline.duration_s",
          "race.speculative.duration_s > race.baseline.duration_s")]),
    "lenience ignored": ("test_a_lenient_race_claims_no_identity", "RaceView",
                         [("if lenience < 1.0:", "if False:")]),
    "the note hidden": ("test_says_on_screen_how_it_was_measured", "RaceView",
                        [("layout.addWidget(self.note)", "self.note.hide()")]),
    "a finished live race not replayed": (
        "test_a_race_recording_read_back_reproduces_the_view", "RaceView",
        [("            self.load(self.events)\n            self.play()\n",
          "            self.play()\n")]),
    "the chat template shown": ("test_the_prompt_shows_without_its_chat_template", "user_text",
                                [("for pattern in CHAT_USER:", "for pattern in ():")]),
    "speedup shown before the end": (
        "test_both_panes_follow_one_clock_from_their_own_timestamps", "RaceView",
        [("        if t < race.duration_s:\n", "        if False:\n")]),
}


@pytest.mark.parametrize("name", list(MUTANTS))
def test_each_test_rejects_its_broken_variant(name: str, qtbot, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    test_name, attr, edits = MUTANTS[name]
    broken = mutant(getattr(RACE_VIEW, attr), *edits)
    monkeypatch.setattr(RACE_VIEW, attr, broken)
    monkeypatch.setitem(globals(), attr, broken)
    view = RACE_VIEW.RaceView(frame_ms=10_000)
    qtbot.addWidget(view)
    view.resize(1600, 900)
    test = globals()[test_name]
    with pytest.raises(AssertionError):
        if test_name in ("test_the_clock_going_back_redraws_the_past",
                         "test_each_pane_draws_its_run_as_the_live_view"):
            test(view, qtbot) if test_name.endswith("past") else test(qtbot, view)
        elif test_name == "test_a_race_recording_read_back_reproduces_the_view":
            test(qtbot, tmp_path)
        elif test_name == "test_the_prompt_shows_without_its_chat_template":
            test()
        else:
            test(view)


# -- in the app: Run → Race (F7), the step measured at load, File → Export ------------------


WAIT_MS = 60_000  # tiny models: seconds at most, even on a busy machine


@pytest.fixture
def window(qtbot, settings_store, tiny_pair):
    w = make_window(qtbot, settings_store, tiny_pair)
    yield w
    w.close()


def make_window(qtbot, settings_store, tiny_pair):
    w = tiny_window(qtbot, settings_store, tiny_pair)
    w.controls.max_new.setValue(10)
    w.controls.temperature.setValue(0.0)
    w.controls.seed.setValue(-1)  # random: the race must still give both runs one seed
    w.controls.prompt.setPlainText("the cat")
    return w


def test_the_race_action_runs_both_one_after_the_other(qtbot, window) -> None:
    window.actions_by_name["race"].trigger()
    view = window.race_window.view
    qtbot.waitUntil(lambda: view.race is not None, timeout=WAIT_MS)
    race = view.race
    assert race.speculative.started.settings.seed == race.baseline.started.settings.seed
    assert race.speculative.started.settings.seed is not None
    assert [type(e).__name__ for e in view.events].count("RunStarted") == 2
    assert view.playing  # measured, now replayed together
    view.set_time(view.duration_s)
    assert view.state().identity.startswith("T = 0: identical text ✓")
    assert view.state().speedup.startswith("Measured speedup")
    assert window.race_window.isVisible()


def test_the_window_draws_nothing_while_a_race_measures(qtbot, window) -> None:
    """Both runs of a race are timed with the main view held (it drew a speculative run's
    bars at 30 fps on the same cores: 0.89-0.99x measured in the app against 1.22-1.28x
    held); it draws again once the race is over, and after a race stopped half-way."""
    drawing: list[tuple[str, bool]] = []
    window.controller.yielded.connect(
        lambda e: drawing.append((window.race_runner.phase, window.run_view.timer.isActive())))
    window.actions_by_name["race"].trigger()
    view = window.race_window.view
    qtbot.waitUntil(lambda: view.race is not None and not window.race_runner.phase,
                    timeout=WAIT_MS)
    assert {phase for phase, _ in drawing} == {"speculative", "baseline"}
    assert not any(active for _, active in drawing)
    assert window.run_view.timer.isActive()
    window.actions_by_name["run"].trigger()  # a normal run draws live again
    qtbot.waitUntil(lambda: window.controller.state == "idle", timeout=WAIT_MS)
    assert window.run_view.timer.isActive()
    window.controls.max_new.setValue(100_000)  # a race stopped in its first half draws again too
    window.actions_by_name["race"].trigger()
    qtbot.waitUntil(lambda: not window.run_view.timer.isActive(), timeout=WAIT_MS)
    window.actions_by_name["stop"].trigger()
    qtbot.waitUntil(lambda: not window.race_runner.phase, timeout=WAIT_MS)
    assert window.run_view.timer.isActive()


def test_the_step_is_measured_when_a_pair_loads(qtbot, window) -> None:
    window.load_pair()
    qtbot.waitUntil(lambda: ("tiny-target", "cpu") in window.run_view.target_step_s,
                    timeout=WAIT_MS)
    assert window.run_view.target_step_s[("tiny-target", "cpu")] > 0
    window.actions_by_name["run"].trigger()
    qtbot.waitUntil(lambda: window.controller.state == "idle", timeout=WAIT_MS)
    window.run_view.flush()
    name = window.run_view.speed.names["measured_speedup"].text()
    assert "one-token step" in name and "measured at load" in name


@pytest.mark.parametrize("broken", [False, True])
def test_the_cost_policy_is_calibrated_at_load_not_in_the_first_run(
        qtbot, settings_store, tiny_pair, monkeypatch, broken: bool) -> None:
    """The target's passes of 1-17 tokens that the cost policy needs are timed while the pair
    loads: the first run (a race's speculative half) must not pay them on its own clock."""
    import weakref

    from specviz.core import drafters as drafters_mod
    from specviz.core import engine as engine_mod

    monkeypatch.setattr(engine_mod, "_VERIFY_COSTS", weakref.WeakKeyDictionary())  # not yet
    if broken:  # the loader no longer calibrates: the first run times the passes itself
        monkeypatch.setattr(engine_mod, "calibrate", lambda pair, context=32: {})
    window = make_window(qtbot, settings_store, tiny_pair)
    window.controls.k_policy.setCurrentText("cost")
    window.load_pair()
    qtbot.waitUntil(lambda: window.controller.pair is not None and not window.controller.loading,
                    timeout=WAIT_MS)
    timed = {"n": 0}
    real = drafters_mod.CachedModel.time_pass

    def counting(self, n: int, token: int) -> float:
        timed["n"] += 1
        return real(self, n, token)

    monkeypatch.setattr(drafters_mod.CachedModel, "time_pass", counting)
    window.controls.max_new.setValue(12)
    with qtbot.waitSignal(window.controller.finished, timeout=WAIT_MS):
        window.actions_by_name["run"].trigger()
    window.run_view.flush()
    started = window.run_view.record.started
    assert started is not None and started.settings.k_policy == "cost"
    assert (timed["n"] == 0) == (not broken)
    window.close()


def test_file_menu_has_export_and_race_recordings(window) -> None:
    file_menu = next(a.menu() for a in window.menuBar().actions()
                     if a.menu() is not None and a.menu().title() == "&File")
    titles = [a.text() for a in file_menu.actions()]
    assert "Open race recording (.jsonl)…" in titles and "&Export" in titles
    export_menu = next(a.menu() for a in file_menu.actions() if a.text() == "&Export")
    labels = " ".join(a.text() for a in export_menu.actions())
    for what in ("PNG", "SVG", "HTML", "GIF"):
        assert what in labels


def test_open_race_recording_plays_it(qtbot, window, tmp_path: Path) -> None:
    path = tmp_path / "race.jsonl"
    path.write_text("".join(to_json(e) + "\n" for e in scripted_race()), encoding="utf-8")
    assert window.stage.open_race_recording(str(path))
    assert window.race_window.view.race is not None
    single = tmp_path / "run.jsonl"
    single.write_text("".join(to_json(e) + "\n" for e in speculative_events()), encoding="utf-8")
    assert not window.stage.open_race_recording(str(single))
    # Said in the window (the stage's failed signal reaches it), not dropped.
    assert "run.jsonl is not a race" in window.status_label.text()


# -- the Race option in the controls: Run (F5) with it ticked races as F7 does ----------------


def test_run_with_race_ticked_starts_the_race(qtbot, window) -> None:
    window.controls.race.setChecked(True)
    window.actions_by_name["run"].trigger()
    view = window.race_window.view
    qtbot.waitUntil(lambda: view.race is not None, timeout=WAIT_MS)
    race = view.race
    assert (race.speculative.started.mode, race.baseline.started.mode) == \
        ("speculative", "baseline")
    assert race.speculative.started.settings.seed == race.baseline.started.settings.seed
    assert window.race_window.isVisible() and view.playing
    view.set_time(view.duration_s)
    assert view.state().identity.startswith("T = 0: identical text ✓")


def test_run_without_race_is_a_normal_run(qtbot, window) -> None:
    jobs: list[int] = []
    window.controller.started.connect(jobs.append)
    assert not window.controls.race.isChecked()
    window.actions_by_name["run"].trigger()
    qtbot.waitUntil(lambda: window.run_view.record.finished is not None, timeout=WAIT_MS)
    qtbot.waitUntil(lambda: window.controller.state == "idle", timeout=WAIT_MS)
    qtbot.wait(50)  # a second job would have been asked for by now
    assert len(jobs) == 1 and window.controller.state == "idle"
    assert window.run_view.record.started.mode == "speculative"
    assert window.race_window.view.events == [] and not window.race_window.isVisible()


def test_stop_ends_a_race_with_its_first_half(qtbot, window) -> None:
    window.controls.max_new.setValue(100_000)  # long enough to be stopped mid-run
    window.controls.race.setChecked(True)
    window.actions_by_name["run"].trigger()
    view = window.race_window.view
    qtbot.waitUntil(lambda: len(view.events) > 2, timeout=WAIT_MS)
    window.actions_by_name["stop"].trigger()
    qtbot.waitUntil(lambda: window.controller.state == "idle" and not window.race_runner.phase,
                    timeout=WAIT_MS)
    qtbot.wait(50)
    assert window.controller.state == "idle"
    assert [type(e).__name__ for e in view.events].count("RunStarted") == 1


def test_the_race_option_is_shown_kept_and_excludes_target_alone(qtbot, window,
                                                                settings_store) -> None:
    from specviz.gui.windows.controls import ControlsPanel

    race = window.controls.race
    window.show()
    assert race.isVisible() and race.text() == "Race vs the target alone"
    tip = race.toolTip()
    assert "one after the other" in tip and "one clock" in tip and "F5" in tip
    window.controls.baseline.setChecked(True)
    race.setChecked(True)
    assert not window.controls.baseline.isChecked()  # a race runs the target alone itself
    window.controls.baseline.setChecked(True)
    assert not race.isChecked()
    race.setChecked(True)
    assert window.controls.run_button.text() == "▶ Race"  # Run races now, and says so
    window.controls.save(settings_store)
    again = ControlsPanel()
    qtbot.addWidget(again)
    again.restore(settings_store)
    assert again.race.isChecked() and not again.baseline.isChecked()
    assert again.run_button.text() == "▶ Race"
    again.race.setChecked(False)
    assert again.run_button.text() == "▶ Run"
    assert window.sampling() == again.settings()  # a run mode: no Settings field


# -- a race recording made by specviz-cli --race --json, opened as --replay opens it ---------


@pytest.fixture(scope="module")
def cli_race(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``specviz-cli --race --json`` on tiny models saved to folders, written to a file."""
    import contextlib
    import io

    import torch

    from specviz.cli import main as cli_main
    from tests.tiny import tiny_llama, word_tokenizer

    base = tmp_path_factory.mktemp("race")
    tok = word_tokenizer(eos=False)
    for name, seed in (("draft", 1), ("target", 2)):
        tiny_llama(len(tok), seed=seed, dtype=torch.float32, sharpness=8.0).save_pretrained(
            base / name)
        tok.save_pretrained(base / name)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = cli_main(["--race", "--json", "--draft", str(base / "draft"), "--target",
                           str(base / "target"), "--device", "cpu", "--prompt", "the cat",
                           "--temperature", "0", "--max-new-tokens", "10"])
    assert status == 0
    path = base / "race.jsonl"
    path.write_text(out.getvalue(), encoding="utf-8")
    return path


def test_a_cli_race_recording_replays_as_a_race(qtbot, window, cli_race: Path,
                                                tmp_path: Path) -> None:
    window.open_recording(str(cli_race))  # what File → Open and specviz --replay call
    view = window.race_window.view
    # Found at once (stage.open_if_race) or once the file is read (a Replayer that detects
    # races, s16/replay): either way it plays in the race window.
    qtbot.waitUntil(lambda: view.race is not None and window.race_window.isVisible(),
                    timeout=WAIT_MS)
    assert view.playing and len(view.events) == len(cli_race.read_text().splitlines())
    view.set_time(view.duration_s)
    assert view.state().identity.startswith("T = 0: identical text ✓")
    assert view.state().speedup.startswith("Measured speedup")
    assert "race.jsonl" in window.status_label.text()
    # Two runs that are no race (the target alone twice): the ordinary replay, as before.
    lines = cli_race.read_text(encoding="utf-8").splitlines()
    second = next(i for i, line in enumerate(lines) if '"mode": "baseline"' in line)
    twice = tmp_path / "twice.jsonl"
    twice.write_text("\n".join(lines[second:] * 2) + "\n", encoding="utf-8")
    window.race_window.hide()
    view.clear()
    window.open_recording(str(twice))
    qtbot.waitUntil(lambda: window.run_view.record.started is not None, timeout=WAIT_MS)
    assert window.run_view.record.started.mode == "baseline"
    assert not window.race_window.isVisible() and view.race is None


import specviz.gui.stage.stage as STAGE  # noqa: E402, N812 - the module whose parts are broken below

STAGE_MUTANTS = {
    "a seed per run": ("test_the_race_action_runs_both_one_after_the_other", "RaceRunner",
                       [("if settings.seed is None:  # both runs draw from one seed",
                         "if False:")]),
    "the target alone started at once, beside the speculative run": (
        "test_the_race_action_runs_both_one_after_the_other", "RaceRunner",
        [('        self._start_phase("speculative")\n',
          '        self._start_phase("speculative")\n        self._start_phase("baseline")\n')]),
    "the window draws while the race measures": (
        "test_the_window_draws_nothing_while_a_race_measures", "RaceRunner",
        [("        self._hold(True)  # the race window", "        pass  # the race window")]),
    "no Export submenu": ("test_file_menu_has_export_and_race_recordings", "Stage",
                          [("file_menu.insertMenu(first, build_export_menu(window, race_window, "
                            "self.export_progress))", "pass")]),
    "any recording opens as a race": (
        "test_open_race_recording_plays_it", "open_race_recording",
        [("if as_race(events) is None:", "if False:")]),
    "Stop mid-race still starts the target alone": (
        "test_stop_ends_a_race_with_its_first_half", "RaceRunner",
        [('self._finished_run = isinstance(event, RunFinished) and \\\n'
          '                event.stop_reason != "stopped"',
          "self._finished_run = isinstance(event, RunFinished)")]),
    "the measured step not handed to the run view": (
        "test_the_step_is_measured_when_a_pair_loads", "Stage",
        [("window.controller.step_measured.connect(window.run_view.set_target_step)",
          "pass")]),
}


@pytest.mark.parametrize("name", list(STAGE_MUTANTS))
def test_each_window_test_rejects_its_broken_variant(name: str, qtbot, settings_store,
                                                     tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from pytestqt.exceptions import TimeoutError as QtTimeout

    from tests.tiny import tiny_pair

    test_name, attr, edits = STAGE_MUTANTS[name]
    broken = mutant(getattr(STAGE, attr), *edits)
    monkeypatch.setattr(STAGE, attr, broken)
    if attr == "Stage":  # the window calls the name it imported
        monkeypatch.setattr(sys.modules["specviz.gui.windows.app"], attr, broken)
    monkeypatch.setitem(globals(), "WAIT_MS", 8_000)  # a broken variant may never get there
    w = make_window(qtbot, settings_store, tiny_pair(sharpness=8.0))
    try:
        with pytest.raises((AssertionError, QtTimeout)):
            if test_name == "test_open_race_recording_plays_it":
                globals()[test_name](qtbot, w, tmp_path)
            elif test_name == "test_file_menu_has_export_and_race_recordings":
                globals()[test_name](w)
            else:
                globals()[test_name](qtbot, w)
    finally:
        w.close()


import specviz.gui.windows.app as APP  # noqa: E402, N812
import specviz.gui.windows.controls as CONTROLS  # noqa: E402, N812

# Open/--replay finds races in two places: stage.open_if_race (small files, at once, on the
# GUI thread) and the Replayer's own detection (detect_races=True: pipes and files being
# read). The broken variant switches off whichever are present.
_APP_SOURCE = inspect.getsource(APP.MainWindow)
RACE_DETECTION_OFF = [edit for edit, present in (
    (("speed=1.0, detect_races=True)", "speed=1.0, detect_races=False)"),
     "detect_races=True" in _APP_SOURCE),
    (("if self.stage.open_if_race(path):", "if False:"),
     "self.stage.open_if_race(path)" in _APP_SOURCE))
    if present]
RACE_OPTION_MUTANTS = {
    "Run ignores the Race box": (
        "test_run_with_race_ticked_starts_the_race", APP, "MainWindow",
        [("if self.controls.race.isChecked() and not (paused or steps):", "if False:")]),
    "Run always races": (
        "test_run_without_race_is_a_normal_run", APP, "MainWindow",
        [("if self.controls.race.isChecked() and not (paused or steps):",
          "if not (paused or steps):")]),
    "Race and Target alone both ticked": (
        "test_the_race_option_is_shown_kept_and_excludes_target_alone", CONTROLS,
        "ControlsPanel",
        [("self.race.toggled.connect(lambda on: on and self.baseline.setChecked(False))",
          "pass")]),
    "the Run button silent about the race": (
        "test_the_race_option_is_shown_kept_and_excludes_target_alone", CONTROLS,
        "ControlsPanel",
        [('self.race.toggled.connect(lambda on: self.run_button.setText("▶ Race" if on else '
          '"▶ Run"))', "pass")]),
    "the tooltip silent on how it is measured": (
        "test_the_race_option_is_shown_kept_and_excludes_target_alone", CONTROLS, "RACE_HELP",
        None),
    "Open/--replay never looks for a race": (
        "test_a_cli_race_recording_replays_as_a_race", APP, "MainWindow",
        RACE_DETECTION_OFF),
    **({"any two runs open as a race": (
        "test_a_cli_race_recording_replays_as_a_race", STAGE, "race_recording",
        [("return events if as_race(events) is not None else None", "return events")])}
       if "self.stage.open_if_race(path)" in inspect.getsource(APP.MainWindow) else {}),
    "the Race box not in FIELDS (not kept)": (
        "test_the_race_option_is_shown_kept_and_excludes_target_alone", CONTROLS, "FIELDS",
        None),
}


@pytest.mark.parametrize("name", list(RACE_OPTION_MUTANTS))
def test_each_race_option_test_rejects_its_broken_variant(
        name: str, qtbot, settings_store, cli_race: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from pytestqt.exceptions import TimeoutError as QtTimeout

    from tests.tiny import tiny_pair

    test_name, module, attr, edits = RACE_OPTION_MUTANTS[name]
    if attr == "RACE_HELP":
        broken = "Race: the speculative run and the target alone."
    elif attr == "FIELDS":
        broken = tuple(f for f in CONTROLS.FIELDS if f.key != "mode/race")
    else:
        broken = mutant(getattr(module, attr), *edits)
    monkeypatch.setattr(module, attr, broken)
    if module is CONTROLS and hasattr(APP, attr):  # the name the window imported
        monkeypatch.setattr(APP, attr, broken)
    monkeypatch.setitem(globals(), "WAIT_MS", 8_000)  # a broken variant may never get there
    w = make_window(qtbot, settings_store, tiny_pair(sharpness=8.0))
    try:
        with pytest.raises((AssertionError, QtTimeout)):
            if test_name == "test_the_race_option_is_shown_kept_and_excludes_target_alone":
                globals()[test_name](qtbot, w, settings_store)
            elif test_name == "test_a_cli_race_recording_replays_as_a_race":
                globals()[test_name](qtbot, w, cli_race, tmp_path)
            else:
                globals()[test_name](qtbot, w)
    finally:
        w.close()

"""The Diagnose tab ("where the draft goes wrong"): its rounds open in the main window, and it
reads a prompt file as the Prompt set tab does, one speculative run per prompt.

Broken variants shown rejected (test_each_check_rejects_its_broken_variant):
- the main window replaying up to the round before (seek(index)): the round shown is not the
  one the tab points at;
- the tab handing the main window every run's events (not the one run's): another run shows;
- the prompt file read as plain lines (Spec-Bench's JSON lines run as prompts).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from specviz.core.events import Event, Round, RunFinished, RunStarted
from specviz.core.lineup import split_runs
from specviz.core.promptset import PromptItem
from specviz.gui.windows import explore
from specviz.gui.windows.app import MainWindow
from specviz.gui.windows.explore import DiagnosePanel, ExploreWindow
from tests.core.test_lineup import three_lanes
from tests.gui.test_explore_set import prompt_file
from tests.tiny import tiny_pair

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support propagateSizeHints",
                                       "This plugin does not support raise")

SAMPLED_K3 = "drafter=model k=3 k_policy=fixed temperature=1"


@pytest.fixture
def windows(qtbot, settings_store):  # noqa: ANN001, ANN201 - pytest-qt's fixtures
    """A main window and the Explore window it opens (offered its rounds)."""
    main = MainWindow(loader=None, settings=settings_store, autoload=False)
    qtbot.addWidget(main)
    main.run_view.timer.stop()
    ex = ExploreWindow(lambda: tiny_pair(sharpness=8.0), main.show_recorded_round)
    qtbot.addWidget(ex)
    yield main, ex
    ex.close()
    main.close()


def jump_problems(main: MainWindow, panel: DiagnosePanel, run: int, index: int,
                  jump: Callable[[], None]) -> list[str]:
    """After ``jump()``, the main window must show run ``run`` of the tab's events up to its
    round ``index``, paused there, with the token rejected in that round."""
    want = split_runs(panel.events)[run]
    jump()
    record = main.run_view.record
    problems = []
    if record.started != want.started:
        problems.append(f"another run shows ({record.started and record.started.settings})")
    shown = [r.index for r in record.rounds]
    if shown != list(range(index + 1)):
        problems.append(f"rounds {shown[-3:]} shown, want up to {index}")
    if record.rounds and record.rounds[-1] != want.rounds[index]:
        problems.append("the last round shown is not the run's round")
    if main.run_view.bars.round is not (record.rounds[-1] if record.rounds else None):
        problems.append("the bars show another round")
    if not main.replayer.paused or f"round {index + 1} of" not in main.replayer.status_text():
        problems.append(f"not paused there: {main.replayer.status_text()!r}")
    return problems


def rejected_in(rnd: Round, text: str) -> bool:
    return any(d.status == "rejected" and d.text == text for d in rnd.drafted)


def test_a_token_row_opens_its_rounds_in_the_main_window(windows) -> None:  # noqa: ANN001
    main, ex = windows
    panel = ex.diagnose_panel
    panel.show_events(three_lanes(), "lanes.jsonl")
    # Draft positions 1…3 (K up to 5, reached up to 3): whole ticks (pyqtgraph's: 1.5, 2.5).
    assert panel.positions.getAxis("bottom")._tickLevels == [[(1, "1"), (2, "2"), (3, "3")]]
    assert panel.show_button.isVisibleTo(panel)
    assert not panel.show_button.isEnabled()  # no row chosen yet
    panel.tokens.setCurrentCell(0, 0)
    token = panel.rows[0]
    assert panel.show_button.isEnabled() and len({r for r, _ in token.rounds}) == 2
    run, index = token.rounds[0]
    assert not jump_problems(main, panel, run, index, panel.show_button.click)
    assert rejected_in(main.run_view.record.rounds[-1], token.text)
    assert "lanes.jsonl, run 1" in main.replayer.status_text()
    # Each round listed is a link: the one in the second run opens that run.
    run, index = token.rounds[1]
    link = f"round:{run}:{index}"
    assert f"href='{link}'" in panel.detail.text()
    assert not jump_problems(main, panel, run, index,
                             lambda: panel.detail.linkActivated.emit(link))
    assert rejected_in(main.run_view.record.rounds[-1], token.text)


def test_alone_the_window_offers_no_jump(qtbot) -> None:  # noqa: ANN001
    ex = ExploreWindow(lambda: tiny_pair(sharpness=8.0))
    qtbot.addWidget(ex)
    panel = ex.diagnose_panel
    panel.show_events(three_lanes(), "lanes.jsonl")
    panel.tokens.setCurrentCell(0, 0)
    assert not panel.show_button.isVisibleTo(panel) and "href" not in panel.detail.text()
    assert "run 1 (model, K 3, T=1), round" in panel.detail.text()
    ex.close()


def run_prompts(qtbot, ex: ExploreWindow, path: Path) -> list[Event]:  # noqa: ANN001
    panel = ex.diagnose_panel
    panel.path.setText(str(path))
    panel.per_category.setValue(1)  # the first of each category: prompts 1 and 3
    panel.new_tokens.setValue(8)
    panel.config.setText(SAMPLED_K3)
    with qtbot.waitSignal(ex.ended, timeout=120_000):
        panel.run_button.click()
    return panel.events


def prompt_problems(events: list[Event]) -> list[str]:
    """Spec-Bench's file: one run per first prompt of each category, its question's text."""
    starts = [e for e in events if isinstance(e, RunStarted)]
    problems = []
    if len(starts) != 2:
        problems.append(f"{len(starts)} runs, want 2")
    for start, question in zip(starts, ("the cat", "the sun"), strict=False):
        if question not in start.prompt or "question_id" in start.prompt:
            problems.append(f"prompt {start.prompt[:50]!r}, want the question {question!r}")
        if (start.mode, start.settings.k, start.settings.temperature) != ("speculative", 3, 1):
            problems.append(f"run {start.mode} K {start.settings.k}, not the configuration")
    return problems


def test_a_prompt_file_runs_here_and_is_diagnosed(qtbot, windows, tmp_path: Path  # noqa: ANN001
                                                  ) -> None:
    main, ex = windows
    panel = ex.diagnose_panel
    events = run_prompts(qtbot, ex, prompt_file(tmp_path))
    assert not prompt_problems(events)
    assert panel.run_names == ["prompt 1, writing", "prompt 3, math"]
    assert panel.status.text().startswith("Done: 2 prompts. q.jsonl: ")
    assert "tested drafts" in panel.status.text()
    assert panel.run_button.isEnabled() and panel.open_button.isEnabled()
    assert ex.sweep_panel.run_button.isEnabled()  # the worker is free again
    if panel.rows:  # a rejected token's rounds name their prompt, and open in the main window
        panel.tokens.setCurrentCell(0, 0)
        run, index = panel.rows[0].rounds[0]
        assert f"run {run + 1} ({panel.run_names[run]})" in panel.detail.text()
        assert not jump_problems(main, panel, run, index, panel.show_button.click)


def test_cancel_keeps_the_whole_runs_done(qtbot, tmp_path: Path) -> None:  # noqa: ANN001
    ex = ExploreWindow(lambda: tiny_pair(sharpness=8.0))
    qtbot.addWidget(ex)
    panel = ex.diagnose_panel
    ex.worker.recorded.connect(lambda _: ex.cancel())  # as the first prompt's run ends
    events = run_prompts(qtbot, ex, prompt_file(tmp_path))
    starts = [e for e in events if isinstance(e, RunStarted)]
    assert len(starts) == 1 and isinstance(events[-1], RunFinished)  # no run cut short
    assert panel.status.text().startswith("Cancelled after 1/2 prompts: the figures are of "
                                          "those. q.jsonl: ")
    assert panel.run_button.isEnabled() and panel.use_lineup_button.isEnabled()
    ex.close()


@pytest.mark.parametrize(("field", "text", "said"), [
    ("path", "", "Choose a prompt file"),
    ("path", "/nonexistent/q.jsonl", "cannot read"),
    ("config", "k=zero", "Configuration: "),
])
def test_bad_fields_say_why_and_start_nothing(qtbot, tmp_path: Path, field: str, text: str,  # noqa: ANN001
                                              said: str) -> None:
    ex = ExploreWindow(lambda: tiny_pair(sharpness=8.0))
    qtbot.addWidget(ex)
    panel = ex.diagnose_panel
    panel.path.setText(str(prompt_file(tmp_path)))
    getattr(panel, field).setText(text)
    panel.run_button.click()
    assert said in panel.status.text() and not ex.busy and panel.run_button.isEnabled()
    ex.close()


def _seek_one_short(self: MainWindow, events: list[Event], index: int, name: str) -> None:
    self.replayer.start(list(events), name)
    self.replayer.pause()
    self.replayer.seek(index)  # broken: the round before the one pointed at


def _every_run(self: DiagnosePanel, run: int, index: int) -> None:
    assert self.show_round is not None
    self.show_round(self.events, index, self.name)  # broken: not the run's own events


def _plain_lines(path: str, per_category: int) -> list[PromptItem]:
    lines = Path(path).read_text(encoding="utf-8").splitlines()  # broken: JSON lines as text
    return [PromptItem(str(i), "lines", line) for i, line in enumerate(lines)][:2]


@pytest.mark.parametrize("variant", ["seek one short", "every run", "plain lines"])
def test_each_check_rejects_its_broken_variant(variant: str, qtbot, windows,  # noqa: ANN001
                                               tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    main, ex = windows
    panel = ex.diagnose_panel
    if variant == "plain lines":
        monkeypatch.setattr(explore, "read_prompt_items", _plain_lines)
        problems = prompt_problems(run_prompts(qtbot, ex, prompt_file(tmp_path)))
        assert problems
        return
    if variant == "seek one short":
        monkeypatch.setattr(MainWindow, "show_recorded_round", _seek_one_short)
        main_jump = main.show_recorded_round  # the panel holds the method it was given:
        monkeypatch.setattr(panel, "show_round", main_jump)  # hand it the broken one
    else:
        monkeypatch.setattr(DiagnosePanel, "show_in_main", _every_run)
    panel.show_events(three_lanes(), "lanes.jsonl")
    panel.tokens.setCurrentCell(0, 0)
    run, index = panel.rows[0].rounds[1]  # in the second run
    problems = jump_problems(main, panel, run, index,
                             lambda: panel.detail.linkActivated.emit(f"round:{run}:{index}"))
    assert problems

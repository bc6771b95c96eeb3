"""The explore window's prompt-set tab: a prompt file on the worker thread, the table by
category filled as prompts finish, Cancel keeping the prompts done, and its exports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from specviz.core.promptset import table, to_csv, to_markdown
from specviz.gui.windows import explore
from specviz.gui.windows.explore import ExploreWindow
from tests.mutation import mutant
from tests.tiny import tiny_pair

GREEDY_K2 = "k=2 drafter=model k_policy=fixed"


def prompt_file(tmp_path: Path) -> Path:
    """Spec-Bench's form, written here (the real file is never copied): 2 + 2 prompts."""
    rows = [{"question_id": 1, "category": "writing", "turns": ["the cat", "and then?"]},
            {"question_id": 2, "category": "writing", "turns": ["a dog ran"]},
            {"question_id": 3, "category": "math", "turns": ["the sun"]},
            {"question_id": 4, "category": "math", "turns": ["a red mat"]}]
    path = tmp_path / "q.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


def window(qtbot) -> ExploreWindow:  # noqa: ANN001 - pytest-qt's fixture
    w = ExploreWindow(lambda: tiny_pair(sharpness=8.0))
    qtbot.addWidget(w)
    return w


def shown(panel: explore.SetPanel) -> list[list[str]]:
    items = [[panel.table.item(i, j) for j in range(panel.table.columnCount())]
             for i in range(panel.table.rowCount())]
    return [[item.text() if item is not None else "" for item in row] for row in items]


def test_a_prompt_set_fills_its_table_by_category_and_exports(qtbot, tmp_path: Path  # noqa: ANN001
                                                              ) -> None:
    w = window(qtbot)
    panel = w.set_panel
    panel.path.setText(str(prompt_file(tmp_path)))
    panel.per_category.setValue(0)  # all
    panel.tokens.setValue(8)
    panel.configs[0].setText(GREEDY_K2)
    panel.configs[1].setText("")
    with qtbot.waitSignal(w.ended, timeout=120_000):
        panel.run_button.click()
    assert panel.progress.value() == panel.total == 4
    assert panel.status.text() == "Done: 4 prompts, 8 runs."
    assert [(r.item.id, r.config) for r in panel.results] == [
        (i, c) for i in "1234" for c in ("target alone", GREEDY_K2)]
    rows = shown(panel)
    # category, configuration, prompts … identical at T = 0 (speculative decoding is exact)
    assert [r[:3] for r in rows] == [["writing", "target alone", "2"], ["writing", GREEDY_K2, "2"],
                                     ["math", "target alone", "2"], ["math", GREEDY_K2, "2"],
                                     ["all", "target alone", "4"], ["all", GREEDY_K2, "4"]]
    assert [r[-1] for r in rows] == ["-", "2/2", "-", "2/2", "-", "4/4"]
    assert rows[0][3] == "-" and 0 <= float(rows[1][3]) <= 1  # α only where something is drafted
    assert panel.run_button.isEnabled() and not panel.cancel_button.isEnabled()
    assert panel.save_csv(str(tmp_path / "t.csv")) and panel.save_markdown(str(tmp_path / "t.md"))
    assert (tmp_path / "t.csv").read_text("utf-8") == to_csv(table(panel.results))
    assert (tmp_path / "t.md").read_text("utf-8") == to_markdown(table(panel.results))
    assert panel.save_png(str(tmp_path / "t.png"))
    width, height = Image.open(tmp_path / "t.png").size
    assert width > 600 and height > 7 * 28  # a title, the header and six rows
    assert not panel.save_csv(str(tmp_path / "absent" / "t.csv"))
    assert panel.status.text().startswith("Could not save t.csv:")
    w.close()


def test_cancel_keeps_the_prompts_done(qtbot, tmp_path: Path) -> None:  # noqa: ANN001
    w = window(qtbot)
    panel = w.set_panel
    panel.path.setText(str(prompt_file(tmp_path)))
    panel.per_category.setValue(0)
    panel.tokens.setValue(16)
    panel.configs[1].setText(GREEDY_K2)
    def cancel_at_first(n: int) -> None:  # as the first prompt ends
        if n:
            w.cancel()

    panel.progress.valueChanged.connect(cancel_at_first)
    with qtbot.waitSignal(w.ended, timeout=120_000):
        panel.run_button.click()
    done = panel.done
    assert 1 <= done < panel.total == 4
    assert len(panel.results) == 3 * done  # whole prompts only: two configurations + the target
    assert panel.status.text() == (f"Cancelled after {done}/4 prompts: the table is of those "
                                   "(Resume runs the rest).")
    assert panel.table.rowCount() == len(table(panel.results)) > 0
    assert panel.png_button.isEnabled() and panel.run_button.isEnabled()
    assert panel.resume_button.isEnabled()
    # Resume: the prompts done are kept (the same results), only the rest run.
    panel.progress.valueChanged.disconnect(cancel_at_first)
    kept = list(panel.results)
    ran = []
    w.worker.compared.connect(ran.append)  # what the worker runs now
    with qtbot.waitSignal(w.ended, timeout=120_000):
        panel.resume_button.click()
    assert panel.status.text() == "Done: 4 prompts, 12 runs."
    assert [o.item.id for o in ran] == ["1234"[i] for i in range(done, 4)]
    assert panel.results[:len(kept)] == kept and len(panel.results) == 12
    assert [r.item.id for r in panel.results] == [i for i in "1234" for _ in range(3)]
    assert [r[2] for r in shown(panel) if r[0] == "all"] == ["4", "4", "4"]
    assert not panel.resume_button.isEnabled()
    w.close()


def test_a_prompt_too_long_for_the_context_is_a_skipped_row(qtbot, tmp_path: Path  # noqa: ANN001
                                                              ) -> None:
    w = window(qtbot)
    panel = w.set_panel
    rows = [{"question_id": 1, "category": "writing", "turns": ["the cat"]},
            {"question_id": 242, "category": "writing", "turns": [" ".join(["the"] * 300)]},
            {"question_id": 3, "category": "math", "turns": ["the sun"]}]
    path = tmp_path / "q.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    panel.path.setText(str(path))
    panel.per_category.setValue(0)
    panel.tokens.setValue(8)
    panel.configs[0].setText(GREEDY_K2)
    panel.configs[1].setText("")
    with qtbot.waitSignal(w.ended, timeout=120_000):
        panel.run_button.click()
    assert panel.done == panel.progress.value() == 3  # the prompt after it ran too
    assert panel.status.text().startswith("Done: 3 prompts, 4 runs. Skipped 1: prompt 242: "
                                          "The prompt is 30")
    table_rows = shown(panel)
    assert [r[:3] for r in table_rows] == [
        ["writing", "target alone", "1"], ["writing", GREEDY_K2, "1"],
        ["math", "target alone", "1"], ["math", GREEDY_K2, "1"],
        ["all", "target alone", "2"], ["all", GREEDY_K2, "2"],
        ["writing", "skipped: prompt 242", "0"]]
    assert "context is 256" in table_rows[-1][3]
    assert panel.save_markdown(str(tmp_path / "t.md"))
    assert (tmp_path / "t.md").read_text("utf-8").rstrip().endswith(panel.skipped)
    w.close()


@pytest.mark.parametrize("field, text, message", [
    ("path", "", "Choose a prompt file"),
    ("path", "absent.jsonl", "cannot read"),
    ("path", "bad.jsonl", "line 2: not a JSON object"),
    ("config", "k=99", "Configuration 1: "),
    ("config", "", "Fill in at least one configuration"),
])
def test_bad_fields_say_why_and_start_nothing(qtbot, tmp_path: Path, field: str, text: str,  # noqa: ANN001
                                              message: str) -> None:
    w = window(qtbot)
    panel = w.set_panel
    (tmp_path / "bad.jsonl").write_text('{"turns": ["a"]}\nnot json\n', encoding="utf-8")
    panel.path.setText(str(prompt_file(tmp_path)))
    if field == "path":
        panel.path.setText(str(tmp_path / text) if text else "")
    else:
        panel.configs[0].setText(text)
        panel.configs[1].setText("")
    panel.run_button.click()
    assert message in panel.status.text()
    assert panel.run_button.isEnabled() and w.worker.pair is None and not panel.results
    w.close()


MUTANTS = {
    # The table of the last prompt only (each prompt replacing the one before).
    "last prompt only": (test_a_prompt_set_fills_its_table_by_category_and_exports, "SetPanel",
                         [("self.rows = table(self.results)",
                           "self.rows = table(self.results[-self.per_prompt:])")]),
    # Skipped prompts left out of the table (only a count would say anything happened).
    "skipped rows hidden": (test_a_prompt_too_long_for_the_context_is_a_skipped_row, "SetPanel",
                            [("skipped = [o for o in self.outcomes if o.skipped is not None]",
                              "skipped = []")]),
    # Resume runs the prompts done again …
    "resume reruns": (test_cancel_keeps_the_prompts_done, "ExploreWorker",
                      [("stop=self.stop, done=job.done)", "stop=self.stop)")]),
    # … or drops them from the table.
    "resume drops": (test_cancel_keeps_the_prompts_done, "SetPanel",
                     [("self.outcomes = list(kept)", "self.outcomes = []")]),
    # Cancel not handed to the run: every prompt runs.
    "cancel ignored": (test_cancel_keeps_the_prompts_done, "ExploreWorker",
                       [("stop=self.stop, done=job.done)", "stop=None, done=job.done)")]),
}


@pytest.mark.parametrize("name", list(MUTANTS))
def test_each_test_rejects_its_broken_variant(name: str, qtbot, tmp_path: Path,  # noqa: ANN001
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    test, attr, edits = MUTANTS[name]
    monkeypatch.setattr(explore, attr, mutant(getattr(explore, attr), *edits))
    with pytest.raises(AssertionError):
        test(qtbot, tmp_path)

"""The explore window: a sweep and a lineup on the worker thread, with progress and Cancel."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from specviz.core.lineup import as_lineup
from specviz.core.sweep import planned_runs, samples_from_json, schedule
from specviz.gui.stage.lineup_view import lane_html
from specviz.gui.windows import explore
from specviz.gui.windows.explore import ExploreWindow
from tests.core.test_lineup import three_lanes
from tests.gui.scripted import speculative_events
from tests.mutation import mutant
from tests.tiny import tiny_pair


def window(qtbot) -> ExploreWindow:  # noqa: ANN001 - pytest-qt's fixture
    w = ExploreWindow(lambda: tiny_pair(sharpness=8.0))
    qtbot.addWidget(w)
    return w


def test_a_sweep_fills_the_plot_and_table_live_and_exports(qtbot, tmp_path: Path) -> None:  # noqa: ANN001
    w = window(qtbot)
    panel = w.sweep_panel
    panel.ks.setText("1,2")
    panel.prompts.setPlainText("the cat\na dog")
    panel.tokens.setValue(8)
    with qtbot.waitSignal(w.ended, timeout=120_000):
        panel.run_button.click()
    assert panel.progress.value() == panel.total == 6  # (2 K + the target alone) × 2 prompts
    assert panel.table.rowCount() == 2 and panel.status.text() == "Done: 6 runs."
    assert len(panel.measured.getData()[0]) == 2 and len(panel.predicted.getData()[0]) == 2
    # The key is above the plot (a legend inside covered points), and K's ticks are whole.
    assert panel.plot.getPlotItem().legend is None
    title = panel.plot.getPlotItem().titleLabel.text
    assert "measured (geomean)" in title and "predicted" in title
    assert panel.plot.getAxis("bottom")._tickLevels == [[(1, "1"), (2, "2")]]
    assert panel.run_button.isEnabled() and not panel.cancel_button.isEnabled()
    panel.export_png(str(tmp_path / "s.png"))
    assert Image.open(tmp_path / "s.png").size == (960, 600)
    panel.save_json(str(tmp_path / "s.json"))
    assert samples_from_json((tmp_path / "s.json").read_text()) == panel.samples
    w.close()


def test_cancel_keeps_what_the_sweep_has(qtbot) -> None:  # noqa: ANN001
    w = window(qtbot)
    panel = w.sweep_panel
    panel.ks.setText("1,2,3")
    panel.prompts.setPlainText("the cat")
    panel.tokens.setValue(8)
    panel.progress.valueChanged.connect(lambda n: n and w.cancel())  # as the first run ends
    with qtbot.waitSignal(w.ended, timeout=120_000):
        panel.run_button.click()
    assert 1 <= len(panel.samples) < panel.total
    assert panel.status.text().startswith(f"Cancelled after {len(panel.samples)}/4 runs")
    kept = list(panel.samples)
    # Resume runs only the rest; what was kept stays.
    panel.progress.valueChanged.disconnect()
    assert panel.resume_button.isEnabled()
    with qtbot.waitSignal(w.ended, timeout=120_000):
        panel.resume_button.click()
    assert panel.samples[:len(kept)] == kept and len(panel.samples) == panel.total == 4
    assert sorted(s.key for s in panel.samples) == sorted(schedule(3, 1, 1))
    assert panel.status.text() == "Done: 4 runs." and not panel.resume_button.isEnabled()
    w.close()


def settled_sweep(qtbot, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    """The Settle field reaches the sweep (run_sweep's settle, and on Resume the samples kept,
    which settling reads), and the progress counts the runs the sweep will take with it."""
    from specviz.core import sweep

    calls = []
    real = sweep.run_sweep

    def spy(*args: Any, **kw: Any) -> Any:
        calls.append(kw)
        return real(*args, **kw)

    monkeypatch.setattr(sweep, "run_sweep", spy)  # the worker imports it when it runs
    w = window(qtbot)
    panel = w.sweep_panel
    panel.ks.setText("1,2")
    panel.prompts.setPlainText("the cat")
    panel.tokens.setValue(8)
    panel.repeats.setValue(3)
    panel.settle.setValue(5.0)  # %
    assert panel.job() is not None and panel.job().settle == 0.05

    def cancel_at_first(n: int) -> None:
        if n:
            w.cancel()

    panel.progress.valueChanged.connect(cancel_at_first)
    with qtbot.waitSignal(w.ended, timeout=120_000):
        panel.run_button.click()
    panel.progress.valueChanged.disconnect(cancel_at_first)
    kept = list(panel.samples)
    assert panel.resume_button.isEnabled(), panel.status.text()
    with qtbot.waitSignal(w.ended, timeout=120_000):
        panel.resume_button.click()
    assert [c.get("settle") for c in calls] == [0.05, 0.05]
    assert list(calls[1].get("earlier", ())) == kept and calls[1]["done"] == {s.key for s in kept}
    # However the timings settle the points, the sweep ends at the runs it planned with them.
    assert len(panel.samples) == panel.total == planned_runs(2, panel.samples, 3, 1, 0.05)
    assert panel.status.text() == f"Done: {panel.total} runs."
    panel.settle.setValue(0.0)
    assert panel.settle.text() == "off" and panel.job().settle is None
    w.close()


def test_the_settle_field_reaches_the_sweep(qtbot, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    settled_sweep(qtbot, monkeypatch)


@pytest.mark.parametrize("edit", [
    ("settle=job.settle, earlier=job.earlier", "earlier=job.earlier"),  # the field ignored
    ("settle=job.settle, earlier=job.earlier", "settle=job.settle"),  # resumed without the kept
])
def test_the_settle_test_rejects_its_broken_variants(qtbot, monkeypatch: pytest.MonkeyPatch,  # noqa: ANN001
                                                    edit: tuple[str, str]) -> None:
    monkeypatch.setattr(explore, "ExploreWorker", mutant(explore.ExploreWorker, edit))
    with pytest.raises(AssertionError):
        settled_sweep(qtbot, monkeypatch)


def test_bad_fields_say_why_and_start_nothing(qtbot) -> None:  # noqa: ANN001
    w = window(qtbot)
    w.sweep_panel.ks.setText("1,x")
    w.sweep_panel.run_button.click()
    assert "comma-separated whole numbers" in w.sweep_panel.status.text()
    assert w.sweep_panel.run_button.isEnabled() and w.worker.pair is None
    w.lineup_panel.configs[0].setText("k=99")
    w.lineup_panel.run_button.click()
    assert w.lineup_panel.status.text().startswith("Lane 1: ") and "K must be" in \
        w.lineup_panel.status.text()
    w.close()


def test_a_lineup_runs_then_replays_on_one_clock(qtbot) -> None:  # noqa: ANN001
    w = window(qtbot)
    panel = w.lineup_panel
    panel.prompt.setText("the cat")
    panel.tokens.setValue(8)
    panel.configs[0].setText("k=1 drafter=model k_policy=fixed")
    panel.configs[1].setText("k=3 drafter=model k_policy=fixed")
    panel.configs[2].setText("")
    with qtbot.waitSignal(w.ended, timeout=120_000):
        panel.run_button.click()
    assert panel.lineup is not None and len(panel.lineup.lanes) == 3
    assert panel.card.rowCount() == 3
    assert [panel.card.item(i, 5).text() for i in range(3)].count("yes") == 2  # T = 0
    # The replay shows each lane at the shared time from its own recorded times.
    view = panel.view
    view.load(as_lineup(three_lanes()))
    panel.show_at(0.45)
    assert [bar.value() for _, bar, _ in view.bars] == [7, 0, 1]
    # Lane 1 at 0.45 s: its first two rounds, every token in its fate's style.
    html = view.texts[0].text()
    assert html == lane_html(view.lineup.lanes[0].rounds[:2]) and "猫" in html
    assert view.texts[1].text() == ""  # nothing yet at 0.45 s: its first round ends at 0.5
    w.close()


def test_lane_text_styles_each_token_by_its_fate() -> None:
    rounds = [e for e in speculative_events() if type(e).__name__ == "Round"]
    html = lane_html(rounds[:1])  # " the", " cat" kept, " sat" rejected, " dog" resampled
    assert html == ('<span style="color:#0072B2"> the</span>'
                    '<span style="color:#0072B2"> cat</span>'
                    '<span style="color:#D55E00;text-decoration:line-through"> sat</span>'
                    '<span style="color:#D55E00;text-decoration:underline"> dog</span>')
    assert '<span style="color:#009E73;font-weight:bold">猫</span>' in lane_html(rounds[:2])


def test_a_lineup_recording_saves_and_opens_again(qtbot, tmp_path: Path) -> None:  # noqa: ANN001
    from specviz.core.events import to_json

    w = window(qtbot)
    panel = w.lineup_panel
    path = tmp_path / "l.jsonl"
    path.write_text("".join(to_json(e) + "\n" for e in three_lanes()), encoding="utf-8")
    assert panel.open_recording(str(path))
    assert panel.lineup == as_lineup(three_lanes()) and panel.card.rowCount() == 3
    panel.save_recording(str(tmp_path / "again.jsonl"))
    assert (tmp_path / "again.jsonl").read_text(encoding="utf-8") == path.read_text("utf-8")
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{}\n", encoding="utf-8")
    assert not panel.open_recording(str(bad))
    assert panel.status.text().startswith("bad.jsonl: line 1:")
    assert panel.lineup == as_lineup(three_lanes())  # what was shown stays
    w.close()


def test_the_diagnose_tab_counts_rejections_and_shows_their_rounds(qtbot, tmp_path: Path  # noqa: ANN001
                                                                   ) -> None:
    from specviz.core.events import to_json

    w = window(qtbot)
    panel = w.diagnose_panel
    path = tmp_path / "l.jsonl"
    path.write_text("".join(to_json(e) + "\n" for e in three_lanes()), encoding="utf-8")
    assert panel.open_recording(str(path))
    # Each scripted speculative lane rejects " sat", " red" and " x" once (two lanes).
    assert sorted(panel.tokens.item(i, 0).text() for i in range(3)) == ["␣red", "␣sat", "␣x"]
    assert [panel.tokens.item(i, 1).text() for i in range(3)] == ["2", "2", "2"]
    assert list(panel.position_bars.opts["height"]) == [6 / 8, 4 / 6, 2 / 4]
    assert len(panel.curve.getData()[0]) == 5  # q bins with tested drafts
    panel.tokens.setCurrentCell(0, 0)
    detail = panel.detail.text()
    assert "run 1 (model, K 3, T=1)" in detail and "run 2 (model, K 5, T=1)" in detail
    assert "line-through" in detail
    assert not panel.open_recording(str(tmp_path / "absent.jsonl"))
    assert "cannot read" in panel.status.text()
    w.close()


def test_a_lane_with_a_draft_that_cannot_load_says_why(qtbot) -> None:  # noqa: ANN001
    w = window(qtbot)
    panel = w.lineup_panel
    panel.tokens.setValue(8)
    panel.configs[0].setText("k=2 drafter=model k_policy=fixed draft=/nonexistent/model")
    panel.configs[1].setText("")
    panel.configs[2].setText("")
    job = panel.job()
    assert job is not None and job.lanes[0].draft == "/nonexistent/model"
    with qtbot.waitSignal(w.ended, timeout=120_000):
        panel.run_button.click()
    assert "No model folder or .gguf file at '/nonexistent/model'" in panel.status.text()
    assert panel.run_button.isEnabled() and not panel.events  # nothing ran; the window is usable
    w.close()

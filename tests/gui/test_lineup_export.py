"""A lineup's exports: the slide view on the shared clock, the GIF's moments, the last frame
as PNG and the HTML page of every lane; from the Explore window and from the export CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from specviz.core.events import to_json
from specviz.core.lineup import as_lineup
from specviz.gui.stage import export, lineup_view
from specviz.gui.stage.export import (
    MIN_FRAME_MS,
    export_animation,
    final_frame,
    plan_animation,
    transcript_tokens,
)
from specviz.gui.windows.explore import ExploreWindow
from tests.core.test_lineup import three_lanes
from tests.gui.scripted import baseline_events, speculative_events
from tests.mutation import mutant
from tests.tiny import tiny_pair

SMALL = (480, 270)


def test_the_slide_view_shows_each_lane_at_its_own_times_and_ranks_the_done(qtbot) -> None:  # noqa: ANN001
    view = lineup_view.LineupView(slide=True)  # through the module: a mutant replaces it
    qtbot.addWidget(view)
    view.load(as_lineup(three_lanes()))
    # K 3 (rounds end 0.2, 0.3, 0.9, 1.0 s), K 5 (0.5 … 0.8 s), target alone (0.4, 0.8, 1.2 s)
    for t, tokens in {0.25: [3, 0, 0], 0.45: [7, 0, 1], 0.85: [7, 10, 2], 1.3: [10, 10, 3]}.items():
        view.show_at(t)
        assert [bar.value() for _, bar, _ in view.bars] == tokens, t
    view.show_at(0.85)  # only K 5 is done: it is the fastest lane (12.5 tok/s)
    figures = [speed.text() for _, _, speed in view.bars]
    assert "✓ #1, 5.21×" in figures[1] and "✓" not in figures[0] + figures[2]
    view.show_at(1.3)
    figures = [speed.text() for _, _, speed in view.bars]
    assert "✓ #2, 3.79×" in figures[0] and figures[2].endswith("✓ #3")
    assert view.clock.text() == "shared clock: 1.30 s of 1.25 s"
    assert "seed 7" in view.title.text()


def test_the_gif_has_a_frame_at_each_moment_a_lane_changes() -> None:
    lineup = as_lineup(three_lanes())
    assert lineup_view.lineup_moments(lineup) == pytest.approx(
        [0, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.25])
    # At least 150 ms apart, the end kept (it replaces 1.2 s, 50 ms before it).
    assert lineup_view.lineup_moments(lineup, 0.15) == pytest.approx(
        [0, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25])
    # Frames 80 ms apart at least: 0, 0.2, 0.3 … 1.1, then 1.25 s (in place of 1.2 s).
    plan = plan_animation(three_lanes(), SMALL)
    assert MIN_FRAME_MS == 80 and plan.durations == [200, *[100] * 9, 150, 4000]
    plan.frames.close()


def test_gif_png_and_html_of_a_lineup(qtbot, tmp_path: Path) -> None:  # noqa: ANN001
    events = three_lanes()
    n = export_animation(events, tmp_path / "l.gif", SMALL)
    with Image.open(tmp_path / "l.gif") as gif:
        assert gif.size == SMALL and n == gif.n_frames > 5
    image = final_frame(events, SMALL)
    assert (image.width(), image.height()) == SMALL
    colours = [image.pixelColor(x, y) for x in range(SMALL[0]) for y in range(SMALL[1])]
    orange = sum(c.red() > 160 and c.green() < 140 and c.blue() < 80 for c in colours)
    assert orange > 30  # the lanes' rejected and resampled tokens are drawn, in their colour
    html = export.transcript_html(events)
    lineup = as_lineup(events)
    assert html.count("<h2>") == 3 and html.count("<tr>") == 3
    assert html.index("model, K 5, T=1") < html.index("model, K 3, T=1")  # ranked: K 5 first
    spans = sum(len(transcript_tokens(lane.events)) for lane in lineup.lanes)
    assert html.count('<span class="tok ') == spans + 5  # every lane's tokens, and the legend
    # A race stays a race: one run's transcript, no ranking.
    race = [*speculative_events(), *baseline_events()]
    assert "<h2>" not in export.transcript_html(race)


def test_the_explore_window_exports_its_lineup(qtbot, tmp_path: Path) -> None:  # noqa: ANN001
    w = ExploreWindow(lambda: tiny_pair(sharpness=8.0))
    qtbot.addWidget(w)
    panel = w.lineup_panel
    assert not panel.export_button.isEnabled()
    path = tmp_path / "l.jsonl"
    path.write_text("".join(to_json(e) + "\n" for e in three_lanes()), encoding="utf-8")
    assert panel.open_recording(str(path)) and panel.export_button.isEnabled()
    assert panel.export_png(str(tmp_path / "l.png"), SMALL)
    assert Image.open(tmp_path / "l.png").size == SMALL
    assert panel.export_html(str(tmp_path / "l.html"))
    assert "model, K 5, T=1" in (tmp_path / "l.html").read_text("utf-8")
    assert panel.export_gif(str(tmp_path / "l.gif"), SMALL)
    with qtbot.waitSignal(panel.gif_job.finished, timeout=60_000):
        pass  # frames are drawn on the window's timer, encoded on a thread
    assert Image.open(tmp_path / "l.gif").n_frames > 5
    assert panel.status.text().startswith("Saved l.gif (")
    assert not panel.export_png(str(tmp_path / "absent" / "l.png"), SMALL)
    assert "the folder does not exist" in panel.status.text()
    w.close()


MUTANTS = {
    # Lanes ranked in their running order, not by measured speed.
    "rank by order": (lambda qtbot, tmp: (
        test_the_slide_view_shows_each_lane_at_its_own_times_and_ranks_the_done(qtbot)),
                      lineup_view, "LineupView",
                      [("f\" ✓ #{ranked.index(lane) + 1}\"", "f\" ✓ #{i + 1}\"")]),
    # Frames only where a lane ends: the rounds between are never seen.
    "ends only": (lambda qtbot, tmp: test_the_gif_has_a_frame_at_each_moment_a_lane_changes(),
                  lineup_view, "lineup_moments",
                  [("[r.elapsed_s for lane in lineup.lanes for r in lane.rounds\n"
                    "                     if r.elapsed_s <= end] + ", "")]),
    # The page of a lineup shows its last lane only (as for a single run).
    "last lane only": (lambda qtbot, tmp: test_gif_png_and_html_of_a_lineup(qtbot, tmp),
                       export, "transcript_html",
                       [("    if lineup is not None:  # every lane, ranked\n"
                         "        return lineup_html(lineup)\n", "")]),
}


@pytest.mark.parametrize("name", list(MUTANTS))
def test_each_test_rejects_its_broken_variant(name: str, qtbot, tmp_path: Path,  # noqa: ANN001
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    test, module, attr, edits = MUTANTS[name]
    monkeypatch.setattr(module, attr, mutant(getattr(module, attr), *edits))
    with pytest.raises(AssertionError):
        test(qtbot, tmp_path)

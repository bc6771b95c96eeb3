"""Nothing clipped, nothing overlapping: the window at 1366×768 and 1920×1080, controls shown
and hidden, K = 1, 4 and 16, before, during and after a run (scripted events, RunView.apply).

The checks are in tests/gui/layout_check.py. What they caught before this layout (commit
41675c4), at 1366×768 after the scripted run:
  window minimum 1376×471 (1403 with the old 360 px dock) exceeds the screen 1366×768
  bar panel titles 216×65 in 203×62 (three lines cut); every bar panel's left axis:
    tick labels dropped ['␣mat', '␣sun', '▶ </s>'] (the bonus / resampled token's label)
  'Acceptance by position' outside its view (the plot ran past the right edge)
  acceptance plots' left axes: tick labels dropped ['0', '0.5', '1']
Later, in a real window (Xvfb + openbox, maximised at 1366×768), and then here too:
  the stream's placeholder cut ('The prompt and every generated' …: Qt does not wrap it)
  acceptance plots cut on the right once a splitter was dragged over them
The test_old_* cases below put each old behaviour back and check that it is reported.
"""

from __future__ import annotations

import gc

import pyqtgraph as pg
import pytest
from PySide6.QtCore import QRect, QSize
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import QApplication

from specviz.core.events import (
    DraftPosition,
    ExtraToken,
    PairInfo,
    Round,
    RunFailed,
    RunFinished,
    RunStarted,
    Summary,
    TopN,
)
from specviz.gui.app import MainWindow
from specviz.gui.geometry import first_geometry
from specviz.gui.stats import POS_TITLE
from tests.gui.layout_check import window_problems
from tests.plain import plain

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support propagateSizeHints",
                                       "This plugin does not support raise")

SIZES = [(1366, 768), (1920, 1080)]
FRAME = 60  # px a desktop takes from the screen's height: a panel and the title bar

# Long, wide and awkward token texts: 10 characters, CJK, whitespace, a special.
WORDS = [" tokenizers", "猫猫猫猫猫猫猫猫", " ", "\n", "</s>", " speculative", " x",
         "ĠĠĠĠĠĠĠĠĠĠ", " the", " 1234567890"]


def _top(ids: list[int], probs: list[float]) -> TopN:
    return TopN(tuple(ids), tuple(probs), tuple(WORDS[i % len(WORDS)] for i in ids))


def _draft(i: int, tok: int, status: str) -> DraftPosition:
    ids = [tok, *[(tok + j) % 40 for j in range(1, 10)]]
    probs = [0.4, *[0.06] * 9]
    return DraftPosition(index=i, token_id=tok, text=WORDS[tok % len(WORDS)], q=0.4,
                         p=0.3 if status == "accepted" else 0.01, ratio=0.75,
                         r=None if status == "discarded" else 0.5,
                         status=status,  # type: ignore[arg-type]
                         q_top=_top(ids, probs), p_top=_top(ids[::-1], probs))


def k_events(k: int, rounds: int = 6) -> list:
    """RunStarted, rounds alternating all-accepted (bonus) and a rejection, RunFinished."""
    settings = plain(k=k, temperature=1.0, max_new_tokens=400, seed=3)
    started = RunStarted(mode="speculative", prompt="Explain speculative decoding " * 3,
                         prompt_ids=(1, 2), settings=settings,
                         pair=PairInfo(draft="a-rather-long-draft-model-name",
                                       target="an-even-longer-target-model-name-on-the-hub",
                                       device="cpu", dtype="float32", vocab_size=40))
    events: list = [started]
    n = 0
    for r in range(rounds):
        reject = None if r % 2 == 0 else (r * 3) % k
        statuses = ["accepted" if reject is None or i < reject else
                    "rejected" if i == reject else "discarded" for i in range(k)]
        drafted = [_draft(i, (r * 7 + i) % 40, s) for i, s in enumerate(statuses)]
        accepted = k if reject is None else reject
        tok = (r * 11) % 40
        kind = "bonus" if reject is None else "resampled"
        extra = ExtraToken(kind=kind, token_id=tok, text=WORDS[tok % len(WORDS)], prob=0.5,
                           p=0.4, dist_top=_top([tok, 5, 6, 7, 8, 9], [0.5, .1, .1, .1, .1, .1]))
        appended = [d.token_id for d in drafted[:accepted]] + [tok]
        n += len(appended)
        events.append(Round(
            index=r, k=k, drafted=tuple(drafted), n_accepted=accepted, extra=extra,
            bonus_top=None, appended_ids=tuple(appended),
            appended_text="".join(WORDS[i % len(WORDS)] for i in appended),
            appended_texts=tuple(WORDS[i % len(WORDS)] for i in appended),
            draft_time_s=0.01 * k, verify_time_s=0.05, n_generated=n, target_calls=r + 1,
            draft_calls=(r + 1) * k, elapsed_s=0.1 * (r + 1)))
    events.append(RunFinished(
        generated_ids=tuple(range(n)), text="x" * n, stop_reason="max_new_tokens",
        summary=Summary(tokens=n, rounds=rounds, drafted=rounds * k, accepted=n - rounds,
                        acceptance_rate=0.6, mean_tokens_per_round=n / rounds,
                        acceptance_by_position=tuple([0.6] * k), target_calls=rounds,
                        draft_calls=rounds * k, draft_time_s=0.1, verify_time_s=0.3,
                        wall_time_s=0.6, tokens_per_s=123.4, alpha=0.6)))
    return events


@pytest.fixture
def make_window(qtbot, settings_store):
    made: list[MainWindow] = []

    def make(size: tuple[int, int], controls: bool = True) -> MainWindow:
        window = MainWindow(loader=None, settings=settings_store, autoload=False)
        qtbot.addWidget(window)
        window.showNormal()
        window.resize(*size)
        window.dock.setVisible(controls)
        window.run_view.timer.stop()  # frames by hand
        settle(window)
        made.append(window)
        return window

    yield make
    for window in made:
        window.close()
    # Collect these windows' pyqtgraph cycles here, on the GUI thread: the decode worker calls
    # gc.collect() on its own thread, and a Qt item freed there crashes the process.
    QApplication.processEvents()
    gc.collect()


def settle(window: MainWindow) -> None:
    for _ in range(3):
        window.run_view.flush()
        QApplication.processEvents()


def check(window: MainWindow, size: tuple[int, int], when: str) -> None:
    assert window.size() == QSize(*size), f"{when}: the window became {window.size()}"
    problems = window_problems(window, (size[0], size[1] - FRAME))
    assert not problems, f"{when} at {size}:\n" + "\n".join(problems)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("controls", [True, False], ids=["controls", "no-controls"])
@pytest.mark.parametrize("k", [1, 4, 16])
def test_nothing_clipped(make_window, size, controls, k) -> None:
    window = make_window(size, controls)
    check(window, size, "before a run")
    events = k_events(k)
    for e in events[:3]:
        window.run_view.apply(e)
    settle(window)
    check(window, size, "during a run")
    for e in events[3:]:
        window.run_view.apply(e)
    settle(window)
    check(window, size, "after the run")
    window.run_view.select_round(1)  # a round with a rejection
    settle(window)
    check(window, size, "a selected round")
    # The user drags every splitter as far as it goes: each side at its minimum.
    for splitter in window.run_view.splitters:
        for sizes in ([10_000, 0], [0, 10_000]):
            splitter.setSizes(sizes)
            settle(window)
            check(window, size, f"splitter dragged to {sizes}")


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_a_huge_error_message_neither_widens_nor_clips(make_window, size) -> None:
    window = make_window(size)
    window._on_failed(RunFailed("Could not load: " + "x" * 20_000 + " end", "load"))
    window._on_failed(RunFailed("word " * 4000, "load"))
    settle(window)
    check(window, size, "after a 20,000-character error")


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_speed_captions_stay_on_their_lines(make_window, size) -> None:
    """"tokens /↵s": a caption is on as many lines as it has, at any width it gets."""
    window = make_window(size)
    for e in k_events(4):
        window.run_view.apply(e)
    settle(window)
    for label in window.run_view.speed.names.values():
        lines = label.text().count("\n") + 1
        assert label.sizeHint().height() <= lines * label.fontMetrics().lineSpacing() + 4
        assert label.width() >= label.sizeHint().width(), label.text()


def test_empty_plots_have_whole_number_axes(make_window) -> None:
    window = make_window(SIZES[0])
    acc = window.run_view.acceptance
    for plot in (acc.rate_plot, acc.hist_plot, acc.pos_plot):
        for side in ("bottom",) if plot is not acc.hist_plot else ("bottom", "left"):
            levels = plot.getAxis(side)._tickLevels  # noqa: SLF001
            assert levels, (plot.titleLabel.text, side)
            assert all(float(v).is_integer() and s == str(int(v)) for v, s in levels[0])


def test_first_launch_fits_the_screen() -> None:
    laptop = QRect(0, 0, 1366, 740)
    rect, maximised = first_geometry(laptop)
    assert maximised and laptop.contains(rect)
    rect, maximised = first_geometry(QRect(0, 0, 1920, 1050))
    assert not maximised and QRect(0, 0, 1920, 1050).contains(rect)
    assert rect.size() == QSize(1600, 950)


def test_f11_and_f9_give_back_what_was_there(make_window) -> None:
    window = make_window(SIZES[0])
    dock_width = window.dock.width()
    window.showMaximized()
    QApplication.processEvents()
    window.present_action.setChecked(True)
    QApplication.processEvents()
    assert window.isFullScreen() and not window.dock.isVisible()
    window.present_action.setChecked(False)
    QApplication.processEvents()
    assert window.isMaximized() and window.dock.isVisible() and window.menuBar().isVisible()
    assert window.dock.width() >= window.controls.minimumSizeHint().width()
    window.showNormal()
    window.resize(*SIZES[0])
    window.dock.toggleViewAction().trigger()  # F9: hide
    window.dock.toggleViewAction().trigger()  # F9: show
    settle(window)
    assert window.dock.width() >= min(dock_width, window.controls.minimumSizeHint().width())
    check(window, SIZES[0], "after F11 and F9")


def test_controls_come_back_unless_hidden_on_purpose(qtbot, settings_store) -> None:
    window = MainWindow(loader=None, settings=settings_store, autoload=False)
    qtbot.addWidget(window)
    window.show()
    window.present_action.setChecked(True)  # closed in presentation mode
    window.close()
    gc.collect()
    again = MainWindow(loader=None, settings=settings_store, autoload=False)
    qtbot.addWidget(again)
    again.show()
    assert again.dock.isVisible() and not again.isFullScreen()
    again.dock.toggleViewAction().trigger()  # F9: hidden on purpose
    again.close()
    third = MainWindow(loader=None, settings=settings_store, autoload=False)
    qtbot.addWidget(third)
    third.show()
    assert not third.dock.isVisible()
    third.close()
    QApplication.processEvents()
    gc.collect()


# -- the checks catch the old layout ------------------------------------------------------


def test_old_one_line_legend_and_info_are_caught(make_window) -> None:
    """The old legend and info line never wrapped: the window could not be narrower."""
    window = make_window(SIZES[0])
    for e in k_events(4):
        window.run_view.apply(e)
    settle(window)
    window.run_view.legend.setWordWrap(False)
    window.run_view.info.setWordWrap(False)
    window.dock.setMinimumWidth(360)  # and the old dock width
    settle(window)
    problems = window_problems(window, (1366, 768 - FRAME))
    assert any("exceeds the screen" in p for p in problems), problems


def test_old_dropped_tick_labels_are_caught(make_window) -> None:
    window = make_window(SIZES[0])
    for e in k_events(4):
        window.run_view.apply(e)
    settle(window)
    # The old labels, cut at ten characters whatever their width: CJK ones did not fit. A CJK
    # glyph is wide only where a CJK font is installed (a bare machine draws a narrow box), so
    # it is used only there; "W", wide in every font, stands in elsewhere.
    cjk = QFontDatabase.families(QFontDatabase.WritingSystem.SimplifiedChinese)
    wide = "猫" if cjk else "W"
    panel = window.run_view.bars.visible_panels()[0]
    old = [(i, f"▶ {wide * 8}" if i == 0 else f"{i}{wide * 7}") for i in range(6)]
    panel.plot.getAxis("left").setTicks([old, []])
    window.run_view.acceptance.pos_plot.showGrid(y=True)  # the old grid: "0" and "1" hidden
    QApplication.processEvents()
    problems = window_problems(window, (1366, 768 - FRAME))
    assert any("dropped" in p and POS_TITLE in p for p in problems), problems
    assert any("dropped" in p and wide in p for p in problems), problems


def test_old_panel_grid_without_scrolling_is_caught(make_window) -> None:
    """The old bars view: every panel squeezed into the visible area, none scrolled to."""
    window = make_window(SIZES[0])
    for e in k_events(16):
        window.run_view.apply(e)
    settle(window)
    bars = window.run_view.bars
    bars.graphics.setMinimumHeight(0)
    bars.graphics.resize(bars.scroll.viewport().size())
    QApplication.processEvents()
    problems = window_problems(window, (1366, 768 - FRAME))
    assert any(isinstance(p, str) and ("overlap" in p or "dropped" in p or "<" in p)
               for p in problems), problems


def test_old_cut_title_is_caught(make_window) -> None:
    window = make_window(SIZES[0])
    for e in k_events(4):
        window.run_view.apply(e)
    settle(window)
    panel = window.run_view.bars.visible_panels()[0]
    panel.plot.titleLabel.setMaximumHeight(62)  # the old fixed three-line height
    panel.plot.layout.setRowFixedHeight(0, 30)
    QApplication.processEvents()
    problems = window_problems(window, (1366, 768 - FRAME))
    assert any("title" in p for p in problems), problems
    assert pg  # pyqtgraph is what draws these

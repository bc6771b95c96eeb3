"""Plots over rounds ("Kept ÷ drafted", "K / round"): their x-axis labels never run together.

Seen on the stage at 1920×1080 after 26 rounds: the K plot's labels read "11162126" (six
fixed ticks 1, 6, …, 26 in projector type on a narrow plot). Each check draws the axis as
pyqtgraph does (generateDrawSpecs: tickValues → tickStrings → the tick font's text rects)
and asserts no two labels overlap, at 5, 26, 100 and 400 rounds, 1366×768 and 1920×1080,
in the window and presenting.

Broken variant shown rejected: test_old_fixed_round_ticks_are_caught puts the old spacing
back (six or eight ticks whatever the plot's width, AcceptanceView before this fix).
"""

from __future__ import annotations

import pyqtgraph as pg
import pytest
from PySide6.QtGui import QFontMetricsF
from PySide6.QtWidgets import QApplication

from specviz.gui.views.stats import RoundAxis, integer_ticks
from specviz.gui.windows.app import MainWindow
from tests.gui.layout_check import axis_problems, drawn_tick_labels, screen_window
from tests.gui.test_layout import k_events

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support propagateSizeHints",
                                       "This plugin does not support raise")

SCREENS = [(1366, 768), (1920, 1080)]
ROUNDS = (5, 26, 100, 400)


def rounds_axes(window: MainWindow) -> dict[str, pg.AxisItem]:
    acc = window.run_view.acceptance
    return {"Kept ÷ drafted": acc.rate_plot.getAxis("bottom"),
            "K / round": acc.k_plot.getAxis("bottom")}


def round_tick_problems(window: MainWindow, rounds: int) -> list[str]:
    """Labels that overlap or touch (under a digit's width apart: "11" "16" touching read
    "1116"), or too few to read the axis by; and layout_check's axis checks."""
    problems = []
    for name, axis in rounds_axes(window).items():
        where = f"{name} at {rounds} rounds"
        problems.extend(axis_problems(axis, where))
        labels = drawn_tick_labels(axis)
        digit = QFontMetricsF(axis.style["tickFont"]).horizontalAdvance("0")
        for (_, a1, s0), (b0, _, s1) in zip(labels, labels[1:], strict=False):
            if b0 - a1 < digit:
                problems.append(f"{where}: labels {s0!r} and {s1!r} {b0 - a1:.1f} px apart "
                                f"(< {digit:.1f}): they overlap or run together")
        texts = [s for _, _, s in labels]
        top = max(axis.range)  # the rate plot's axis grows in steps: past the last round
        if len(texts) < 2 or not all(s.isdigit() and 1 <= int(s) <= top for s in texts):
            problems.append(f"{where}: labels {texts}")
    return problems


@pytest.fixture
def feed(qtbot, settings_store, monkeypatch):
    """A window on ``screen`` (presenting or not), fed 400 rounds; what the checks find at
    each of ROUNDS."""
    made: list[MainWindow] = []

    def run(screen: tuple[int, int], presenting: bool) -> list[str]:
        w = screen_window(qtbot, settings_store, monkeypatch, screen, presenting)
        made.append(w)
        events = k_events(4, rounds=max(ROUNDS))
        problems = []
        for e in events[:1]:
            w.run_view.apply(e)
        done = 0
        for n in ROUNDS:
            for e in events[1 + done:1 + n]:
                w.run_view.apply(e)
            done = n
            for _ in range(3):
                w.run_view.flush(now=0.0)
                QApplication.processEvents()
            assert len(w.run_view.record.k_per_round) == n
            problems.extend(round_tick_problems(w, n))
        return problems

    yield run
    for w in made:
        w.close()
    QApplication.processEvents()


@pytest.mark.parametrize("screen", SCREENS, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("presenting", [False, True], ids=["window", "presenting"])
def test_round_labels_never_overlap(feed, screen, presenting) -> None:
    problems = feed(screen, presenting)
    assert not problems, "\n".join(problems)


class FixedRoundAxis(RoundAxis):
    """The old spacing: 1-2-5 steps for at most six labels from 1 (the K plot's; the rate
    plot's allowed eight), however narrow the plot and large the type."""

    def tickValues(self, minVal, maxVal, size):  # noqa: ANN001, ANN201, N802, N803 - pyqtgraph's
        shown = round(maxVal - 0.5)
        values = [v for v, _ in integer_ticks(shown, most=6, first=1, cover=False)]
        return [(values[1] - values[0] if len(values) > 1 else 1, values)]


def test_old_fixed_round_ticks_are_caught(feed, monkeypatch) -> None:
    monkeypatch.setattr(RoundAxis, "tickValues", FixedRoundAxis.tickValues)
    problems = feed((1920, 1080), True)
    assert any("K / round at 26 rounds: labels '11' and '16'" in p for p in problems), problems


def test_round_axis_labels_are_whole_rounds_from_one() -> None:
    axis = RoundAxis("bottom")
    for top, size in ((5, 300), (26, 160), (400, 160), (400, 1600), (3, 40)):
        (step, values), = axis.tickValues(0.5, top + 0.5, size)
        assert values and all(float(v).is_integer() and 1 <= v <= top for v in values)
        assert axis.tickStrings(values, 1.0, step) == [str(int(v)) for v in values]
        assert values[0] == 1 or step > 1  # "1" leads unless it would crowd the next label

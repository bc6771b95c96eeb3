"""A tree round staged (Step: the drafts, the one pass, each sibling's test, the residual) at
1366×768 with the controls shown: at every phase the run view does not scroll and the tree
keeps at least its least height; at 1920×1080 and presenting, as before.

Seen at 1366×768 (the window 1366×708), the scripted round of seven drafts staged: the step
row (the caption beside the r line, 86 px) and the tree's least (98 px) asked 184 px of a
lower pane of 133, so the run view scrolled vertically (its minimum 703 px in 652) at each
sibling's test, and at the draft, score and residual phases the caption's second line took
the tree's (83 px of 98). The speed numbers, two rows of long captions (148 px), now yield
to one row (78 px) while a staged round needs their height.

Broken variant shown rejected: the numbers never yielding (test_numbers_kept_whole_is_caught).
"""

from __future__ import annotations

import pytest

from specviz.gui.views.run_view import RunView
from tests.gui import test_tree_layout
from tests.gui.layout_check import widget_problems
from tests.gui.test_tree_layout import SCREENS, settle, tree_problems

tree_window = test_tree_layout.tree_window  # its fixture: the scripted tree run in a window

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support propagateSizeHints",
                                       "This plugin does not support raise")


def staged_problems(window, where: str) -> list[str]:  # noqa: ANN001
    """Each tree round of the scripted run staged, walked phase by phase: what tree_problems
    finds (the run view scrolling included), and the step row's own widgets cut."""
    view = window.run_view
    problems = []
    for index in (0, 1):  # seven drafts, three deep; four drafts to a leaf
        view.stage(view.record.rounds[index])
        settle(window)
        while True:
            phase = view.stager.phases[view.stager.index]
            at = f"{where}, round {index + 1} step {view.stager.index + 1} ({phase.name})"
            assert view.tree.isVisible() and view.stage_panel.isVisible()
            problems.extend(tree_problems(window, at))
            problems.extend(f"{at}: {p}" for p in widget_problems(view.stage_panel))
            if not view.stager.forward():
                break
            settle(window)
        view.stager.stop()
        settle(window)
    return problems


@pytest.mark.parametrize("screen", SCREENS, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("presenting", [False, True], ids=["window", "presenting"])
def test_staged_tree_round_fits_at_every_phase(tree_window, screen, presenting) -> None:
    window = tree_window(screen, presenting)
    problems = staged_problems(window, f"{screen}, {'presenting' if presenting else 'window'}")
    assert not problems, "\n".join(problems)
    # Staging over, the numbers are as they were: compact presenting only.
    assert window.run_view.speed.compact == presenting


def test_numbers_yield_only_where_needed(tree_window) -> None:
    """At 1920×1080 the numbers keep their captions while a round is staged; at 1366×768
    they go to one row where the round needs it, and come back when staging ends."""
    for screen, short in (((1920, 1080), False), ((1366, 768), True)):
        window = tree_window(screen, False)
        view = window.run_view
        view.stage(view.record.rounds[1])  # the numbers show round 1: a tree's long captions
        settle(window)
        assert view.speed.compact == short, screen
        # Step: a round staged at once after another (the one before stops, its numbers whole
        # again, with no event between): the same need, the same answer.
        view.stage(view.record.rounds[1])
        assert view.speed.compact == short, screen
        settle(window)
        assert not tree_problems(window, f"{screen}, the next round staged")
        view.select_round(0)  # staging ends
        settle(window)
        assert not view.speed.compact
        view.stage(view.record.rounds[0])  # no round before it: one row of numbers suffices
        settle(window)
        assert not view.speed.compact
        view.select_round(0)
        settle(window)
        assert not view.speed.compact


def test_numbers_kept_whole_is_caught(tree_window, monkeypatch) -> None:
    # Before: the staged round's need never counted, the numbers kept their two rows.
    monkeypatch.setattr(RunView, "_make_room", lambda self: None)
    problems = staged_problems(tree_window((1366, 768), False), "numbers whole")
    assert any("scrolls vertically" in p for p in problems), problems
    assert any("TreeView" in p and "< minimum" in p for p in problems), problems


def test_staged_height_is_the_minimum_the_window_sees(tree_window, monkeypatch) -> None:
    """At a sibling's test (the r line sets the step row's height) with the numbers kept
    whole, staged_height is the run view's minimum as its scroll area computes it."""
    monkeypatch.setattr(RunView, "_make_room", lambda self: None)
    window = tree_window((1366, 768), False)
    view = window.run_view
    view.stage(view.record.rounds[1])  # the numbers show round 1: a tree's long captions
    while view.stager.phases[view.stager.index].name != "test":
        view.stager.forward()
    settle(window)
    assert view.staged_height() == window.centralWidget().widget().minimumSizeHint().height()
    assert view.staged_height() > view.room()  # what the numbers yield for

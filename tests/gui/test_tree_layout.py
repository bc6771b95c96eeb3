"""A tree round's panels: the tree and the siblings' tests beside it share the row by what
each needs, at 1366×768 and 1920×1080, in the window and presenting; nothing scrolls
sideways, nothing is cut.

Seen at 1366×768 (the window 1366×708 with the controls shown), the scripted round of seven
drafts selected: the tests took a fixed 2/5 of the row (396 px of mostly wrapped text) and
left the tree 595 px of the 636 it needs at its smallest type, so the tree scrolled sideways;
and under the cost policy's reason line, the headline's second line pushed the tree's view
(100 px at least) out of the bottom of its pane.

Broken variants shown rejected: the old fixed split (test_old_fixed_split_is_caught) and the
old 100 px view under an always-whole headline (test_old_tall_tree_view_is_caught).
"""

from __future__ import annotations

import dataclasses

import pytest
from PySide6.QtWidgets import QApplication

import specviz.gui.views.tree as tree_module
from specviz.core.events import Round
from specviz.gui.views.tree import TESTS_SHARE, Beside, TreeView, headline, reason_tooltip
from specviz.gui.windows.app import MainWindow
from tests.gui.layout_check import SLACK, screen_window, scroll_problems, widget_problems
from tests.gui.scripted import tree_events

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support propagateSizeHints",
                                       "This plugin does not support raise")

SCREENS = [(1366, 768), (1920, 1080)]
# A cost-policy reason as a real model-tree run gives it: one more line under the headline.
REASON = ("α 0.70, c 0.12; stopped at q 1.00 (keeps 0.99): K 2 32.4 tok/s at v 1.1 ≥ K 7 "
          "24.9 tok/s at v 2.2 → K 2; tree 1+1 1.19 tok/r 13 tok/s at v 1.1 > chain 1 1.05 "
          "tok/r 12.3 tok/s at v 1.1 → tree")


def tree_problems(window: MainWindow, where: str) -> list[str]:
    """The tree round's panels: layout_check's widget checks (cut labels, widgets under their
    minimum or out of their parent, sideways bars), each pane's content within its view's
    width (the tests' panel has no sideways bar: wider content would be cut, not scrolled),
    the tests' panel no wider than the tree's unless the tree has all it needs, and the run
    view not scrolling in its window."""
    tree = window.run_view.tree
    problems = [f"{where}: {p}" for p in widget_problems(tree)]
    for name, area, need in (("tree", tree.scroll, tree.canvas.minimumWidth()),
                             ("tests", tree.residual_scroll,
                              tree.residuals.minimumSizeHint().width())):
        room = area.viewport().width()
        if area.horizontalScrollBar().isVisible() or need > room + SLACK:
            problems.append(f"{where}: the {name} needs {need} px sideways, its view has {room}")
    tree_w, tests_w = tree.scroll.width(), tree.residual_scroll.width()
    if tests_w > tree_w + SLACK and tree.canvas.minimumWidth() > tree.scroll.viewport().width():
        problems.append(f"{where}: the tests take {tests_w} px, the tree {tree_w} and is cut")
    problems.extend(f"{where}: {p}" for p in scroll_problems(window))
    return problems


def reasoned(events: list) -> list:
    return [dataclasses.replace(e, policy_reason=REASON) if isinstance(e, Round) else e
            for e in events]


@pytest.fixture
def tree_window(qtbot, settings_store, monkeypatch):
    """A window on ``screen`` (presenting or not, the controls shown), fed the scripted
    lookup-tree run with a policy reason on each round; returns the window."""
    made: list[MainWindow] = []

    def make(screen: tuple[int, int], presenting: bool) -> MainWindow:
        w = screen_window(qtbot, settings_store, monkeypatch, screen, presenting)
        made.append(w)
        for e in reasoned(tree_events()):
            w.run_view.apply(e)
        settle(w)
        return w

    yield make
    for w in made:
        w.close()
    QApplication.processEvents()


def settle(window: MainWindow) -> None:
    for _ in range(4):
        window.run_view.flush(now=0.0)
        QApplication.processEvents()


def selected_problems(window: MainWindow, where: str) -> list[str]:
    """Each tree round of the run selected in turn: what tree_problems finds."""
    problems = []
    for index in (0, 1):  # seven drafts, three deep; four drafts to a leaf
        window.run_view.select_round(index)
        settle(window)
        assert window.run_view.tree.isVisible()
        problems.extend(tree_problems(window, f"{where}, round {index + 1}"))
    return problems


@pytest.mark.parametrize("screen", SCREENS, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("presenting", [False, True], ids=["window", "presenting"])
def test_tree_round_panels_fit_their_row(tree_window, screen, presenting) -> None:
    window = tree_window(screen, presenting)
    problems = selected_problems(window, f"{screen}, {'presenting' if presenting else 'window'}")
    assert not problems, "\n".join(problems)


def test_the_tests_panel_takes_what_the_tree_leaves(qtbot) -> None:  # noqa: ANN001
    """Room to spare: the tests get their text unwrapped or half the row, the tree the rest;
    two fifths where the tree can spare it; no room: the tree keeps a sliver."""
    tree = TreeView()
    qtbot.addWidget(tree)
    tree.resize(1600, 500)
    tree.show()
    rnd = reasoned(tree_events())[1]
    tree.show_round(rnd)
    bar = tree.residual_scroll.verticalScrollBar().sizeHint().width()
    assert tree.tests_width(4000, 400) == tree.residuals.sizeHint().width() + bar
    assert tree.tests_width(1000, 400) <= (1000 - Beside.GAP) // 2
    # Two fifths of the row where the tree, at its floor type, still fits beside it.
    assert tree.tests_width(1000, 400) >= min(int((1000 - Beside.GAP) * TESTS_SHARE),
                                              1000 - Beside.GAP - tree.tree_widths(400)[1])
    assert tree.tests_width(300, 400) == 300 - Beside.GAP - Beside.LEAST
    row = tree.row
    assert tree.scroll.width() + Beside.GAP + tree.residual_scroll.width() == row.width()
    # The tests' text never wider than its view: no word cut at the right edge.
    assert tree.residuals.width() <= tree.residual_scroll.viewport().width()


class OldHeadline:
    """The headline whole unless presenting, whatever its lines (before this fix)."""

    def _set_headline(self: TreeView) -> None:  # noqa: N805 - patched onto TreeView
        rnd = self.round
        if rnd is None:
            return
        self.header.setText(headline(rnd, self._selected, self.theme, short=self.presenting))
        self.header.setToolTip(reason_tooltip(rnd))


def test_old_fixed_split_is_caught(tree_window, monkeypatch) -> None:
    # The row's old QHBoxLayout: tree 3 : tests 2, the tests at least 280 px.
    monkeypatch.setattr(TreeView, "tests_width",
                        lambda self, width, height: max(280, 2 * (width - Beside.GAP) // 5))
    problems = selected_problems(tree_window((1366, 768), False), "old split")
    assert any("the tree needs" in p and "sideways" in p for p in problems), problems


def test_old_tall_tree_view_is_caught(tree_window, monkeypatch) -> None:
    monkeypatch.setattr(tree_module, "TREE_LEAST_HEIGHT", 100)
    monkeypatch.setattr(TreeView, "_set_headline", OldHeadline._set_headline)
    problems = selected_problems(tree_window((1366, 768), False), "old height")
    assert any("sticks out" in p or "< minimum" in p for p in problems), problems

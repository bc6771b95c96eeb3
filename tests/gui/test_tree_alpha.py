"""α of a run with tree rounds reads per position, with the siblings tested beside it; a chain's
α reads as before. A tree round's reason (the cost policy's tree-or-chain figures) is shown
whole in its headline at 1366 × 768 and 1920 × 1080, in the window and presenting.

Driven by the scripted lookup-tree run (tests/gui/scripted.py: two tree rounds, one chain
round) and by real lookup-tree and model-tree runs (tests/core/test_tree_tally.py), whose
caption and tooltip must give core's tally's counts, and those the counts made per parent.
Each check is shown rejecting a broken copy (tests/mutation.py): the caption's own mistakes,
and a record counting with a broken Tally (chains as trees, every sibling kept, ...).
"""

from __future__ import annotations

import dataclasses
import re
from html import escape

import pytest
from PySide6.QtCore import QSize
from PySide6.QtWidgets import QApplication

import specviz.gui.views.run_view as run_view_module
import specviz.gui.views.stats as stats_module
import specviz.gui.views.tree as tree_module
from specviz.core import tally as tally_mod
from specviz.core.events import Round
from specviz.core.record import RunRecord
from specviz.gui.views.run_view import RunView
from specviz.gui.views.stats import ALPHA_NAME, TREE_ALPHA_NAME
from specviz.gui.views.tree import TreeView
from specviz.gui.windows.app import MainWindow
from tests.core.test_tree_tally import BROKEN_TALLIES, counted_per_parent, rounds_in, tree_runs
from tests.gui.scripted import speculative_events, tree_events
from tests.mutation import mutant, with_globals

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support propagateSizeHints",
                                       "This plugin does not support raise")

# The form a2e71ae gave the cost policy's reason for a model-tree round (the longest one).
REASON = ("model-tree, α̂ 0.80, c 0.06; stopped at q 0.57 (keeps 0.77): K 2 3.72 tok/s at v 1.1 "
          "≥ K 3 3.25 tok/s at v 1.4 → K 2; tree 2+2 1.87 tok/r 1.62 tok/s at v 1.0 > chain 2 "
          "1.64 tok/r 1.45 tok/s at v 1.0 → tree")


def with_reason(events: list) -> list:
    return [dataclasses.replace(e, policy_reason=REASON) if isinstance(e, Round) else e
            for e in events]


def alpha_shown(qtbot, events: list, presenting: bool = False) -> tuple[str, str, str, RunView]:
    """α's caption, value and tooltip in a RunView fed ``events``."""
    view = RunView(frame_ms=10_000)
    qtbot.addWidget(view)
    view.resize(1600, 900)
    view.set_presenting(presenting)
    for e in events:
        view.apply(e)
    view.flush(now=0.0)
    speed = view.speed
    return (speed.names["alpha"].text(), speed.values["alpha"].text(),
            speed.values["alpha"].toolTip(), view)


def alpha_problems(qtbot) -> list[str]:
    """What the α card gets wrong on the scripted tree run and on a chain run.

    The tree run: at the root “ cat” is tested, then “ the” beside it (a sibling, kept); after
    “ the”, “ big” then “ sun” (a sibling, rejected); the second tree tests one draft at each
    of its 3 positions; the chain round tests 2. α = positions kept ÷ tested = 5 / 7."""
    problems = []
    caption, value, tip, view = alpha_shown(qtbot, tree_events())
    if caption != f"{TREE_ALPHA_NAME}\n+ 2 siblings tested, 1 kept":
        problems.append(f"tree run's caption {caption!r}")
    if value != f"{5 / 7:.2f}" or value != f"{view.record.alpha:.2f}":
        problems.append(f"tree run's α {value!r}")
    if "2 siblings tested" not in tip or "1 of them kept" not in tip \
            or "2 tree rounds" not in tip:
        problems.append(f"tree run's tooltip {tip!r}")
    caption, _, _, _ = alpha_shown(qtbot, tree_events(), presenting=True)
    if caption != TREE_ALPHA_NAME:  # the room's one line: the count is in the tooltip
        problems.append(f"tree run's caption presenting {caption!r}")
    caption, value, tip, _ = alpha_shown(qtbot, speculative_events())
    if caption != ALPHA_NAME or "per position" in tip or value != "0.67":
        problems.append(f"chain run's caption {caption!r}, α {value!r}, tooltip {tip!r}")
    # A tree run whose trees tested no sibling (each drafted one beside a rejected draft):
    # per position, and no sibling count.
    events = tree_events()
    events[1] = dataclasses.replace(events[1], drafted=tuple(
        dataclasses.replace(d, status="discarded") if d.index in (1, 5) else d
        for d in events[1].drafted))
    caption, _, _, _ = alpha_shown(qtbot, events)
    if caption != TREE_ALPHA_NAME:
        problems.append(f"tree run without siblings tested: caption {caption!r}")
    return problems + real_run_problems(qtbot)


CAPTION = re.compile(r"\+ (\d+) siblings? tested, (\d+) kept$")
TOOLTIP = re.compile(r"This run: (\d+) tree rounds?, (\d+) siblings? tested beside a "
                     r"position's first draft, (\d+) of them kept\.$")


def real_run_problems(qtbot) -> list[str]:
    """On real lookup-tree and model-tree runs: the counts in the caption and the tooltip
    are the record's tally's, and those are the counts made per parent."""
    problems = []
    for name, events in tree_runs().items():
        caption, _, tip, view = alpha_shown(qtbot, list(events))
        tally = view.record.tally
        want = counted_per_parent(rounds_in(events))
        shown = CAPTION.search(caption)
        told = TOOLTIP.search(tip)
        if shown is None or told is None:
            problems.append(f"{name}: caption {caption!r}, tooltip {tip!r}")
            continue
        counts = (int(told[1]), int(shown[1]), int(shown[2]))
        if counts != (tally.trees, tally.siblings, tally.siblings_kept) or counts != want \
                or (int(told[2]), int(told[3])) != counts[1:]:
            problems.append(f"{name}: (trees, siblings, kept) shown {counts}, told "
                            f"{told.groups()}, per parent {want}")
    return problems


def test_alpha_reads_per_position_on_tree_runs_only(qtbot) -> None:
    assert alpha_problems(qtbot) == []


@pytest.mark.parametrize("edit", [
    # The label left off: a tree run's α read as a chain's.
    ("if tally is None or not tally.trees:", "if True:"),
    # The siblings tested shown as the siblings kept.
    ('f"{tally.siblings_kept} kept"', 'f"{tally.siblings} kept"'),
], ids=["no-label", "tested-as-kept"])
def test_a_wrong_alpha_caption_is_caught(qtbot, monkeypatch, edit) -> None:  # noqa: ANN001
    monkeypatch.setattr(stats_module, "alpha_caption", mutant(stats_module.alpha_caption, edit))
    assert alpha_problems(qtbot) != []


@pytest.mark.parametrize("edits", BROKEN_TALLIES.values(), ids=BROKEN_TALLIES.keys())
def test_a_record_counting_with_a_broken_tally_is_caught(qtbot, monkeypatch, edits) -> None:  # noqa: ANN001
    """The view's records fold rounds with a broken Tally (the run view builds its records;
    core's modules stay as they are)."""
    broken = mutant(tally_mod.Tally, *edits)

    class Record(RunRecord):
        add = with_globals(RunRecord.add, Tally=broken)

    monkeypatch.setattr(run_view_module, "RunRecord", Record)
    assert alpha_problems(qtbot) != []


def reason_problems(window: MainWindow, screen: tuple[int, int],
                    presenting: bool) -> list[str]:
    """The selected tree round's reason: one line under its headline, inside the tree's pane
    with its whole height, cut at its start only, so its end (tree or chain, and the figures
    that chose it) is drawn whole; whole in its tooltip. Presenting, nothing in the window is
    cut either (tests/gui/layout_check.py)."""
    from tests.gui.layout_check import label_problems, window_problems

    tree = window.run_view.tree
    line = tree.reason
    problems = []
    if line.text() != f"[{REASON}]" or not line.isVisible():
        problems.append(f"reason line {line.text()!r}, visible {line.isVisible()}")
    if escape(REASON) not in line.toolTip() or escape(REASON) not in tree.header.toolTip():
        problems.append(f"tooltip without the reason: {line.toolTip()!r}")
    tail = REASON[REASON.rindex("; ") + 2:]  # "tree 2+2 … → tree"
    if not line.shown().endswith(tail + "]"):
        problems.append(f"the reason's end is cut: {line.shown()!r}")
    box = line.geometry()
    if box.top() < tree.header.geometry().bottom() or box.bottom() >= tree.height() \
            or box.height() < line.sizeHint().height():
        problems.append(f"reason line at {box.getRect()} in a tree pane {tree.height()} px tall")
    problems += label_problems(tree.header, "tree headline")
    if presenting:
        problems += window_problems(window, screen)
    return problems


@pytest.fixture
def tree_window(qtbot, settings_store, monkeypatch):
    """A window on ``screen`` fed the tree run with the long reason, its first (tree) round
    selected; presenting or not. Returns it and what reason_problems finds."""
    made = []

    def make(screen: tuple[int, int], presenting: bool) -> tuple[MainWindow, list[str]]:
        w = MainWindow(loader=None, settings=settings_store, autoload=False)
        qtbot.addWidget(w)
        made.append(w)
        w.showNormal()
        w.resize(*screen)  # maximised on that screen
        w.run_view.timer.stop()
        if presenting:
            monkeypatch.setattr(w, "showFullScreen", lambda: (w.showNormal(), w.resize(*screen)))
            monkeypatch.setattr(w.presentation, "screen_size", lambda: QSize(*screen))
            w.present_action.setChecked(True)
        for e in with_reason(tree_events()):
            w.run_view.apply(e)
        for _ in range(4):
            w.run_view.flush(now=0.0)
            QApplication.processEvents()
        w.run_view.select_round(0)
        for _ in range(2):
            QApplication.processEvents()
        return w, reason_problems(w, screen, presenting)

    yield make
    for w in made:
        w.close()


@pytest.mark.parametrize("presenting", [False, True], ids=["window", "presenting"])
@pytest.mark.parametrize("screen", [(1920, 1080), (1366, 768)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_a_tree_rounds_reason_is_shown_whole(tree_window, screen, presenting) -> None:  # noqa: ANN001
    window, problems = tree_window(screen, presenting)
    assert problems == [], "\n".join(problems)
    assert window.run_view.tree.round.index == 0


@pytest.mark.parametrize("broken", [
    ("self.reason.elide = Qt.TextElideMode.ElideLeft", "pass"),  # cut at its end
    ("self.reason.setVisible(bool(rnd.policy_reason))", "self.reason.hide()"),
], ids=["cut-at-end", "hidden"])
def test_a_cut_or_missing_reason_is_caught(tree_window, monkeypatch, broken) -> None:  # noqa: ANN001
    monkeypatch.setattr(run_view_module, "TreeView", mutant(tree_module.TreeView, broken))
    _, problems = tree_window((1366, 768), False)
    assert problems, "a broken reason line passed"


def test_the_reason_line_follows_the_round(qtbot) -> None:
    """A chain round's bars keep their own headline; a tree round without a reason hides the
    line (no empty brackets)."""
    view = TreeView()
    qtbot.addWidget(view)
    rnd = tree_events()[1]
    view.show_round(rnd)
    assert view.reason.isHidden() and view.reason.text() == "" and view.header.toolTip() == ""
    view.show_round(dataclasses.replace(rnd, policy_reason=REASON))
    assert not view.reason.isHidden() and view.reason.text() == f"[{REASON}]"

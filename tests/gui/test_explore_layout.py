"""The explore window at 1366×768: nothing clipped in any tab (gui/layout_check.py), every
table heading whole, and the lineup card's lane names not elided."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from PySide6.QtWidgets import QTableWidget

from specviz.core.events import RunStarted, to_json
from specviz.gui.windows import explore
from specviz.gui.windows.explore import ExploreWindow
from tests.core.test_lineup import three_lanes
from tests.gui.layout_check import window_problems
from tests.mutation import mutant
from tests.tiny import tiny_pair

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support propagateSizeHints")

SCREEN = (1366, 768)


def long_named_lanes() -> list:
    """The scripted lineup, its lanes named as long as real ones get ('hybrid, cost (K from
    3), T=1, lenience 0.5')."""
    return [replace(e, settings=replace(e.settings, drafter="hybrid", k_policy="cost",
                                        lenience=0.5))
            if isinstance(e, RunStarted) and e.mode == "speculative" else e
            for e in three_lanes()]


def cut(table: QTableWidget, name: str, column: int) -> list[str]:
    """Headings, and the cells of ``column`` (the token, the lane), cut short."""
    header = table.horizontalHeader()
    problems = [f"{name}: heading {table.horizontalHeaderItem(i).text()!r} "
                f"{header.sectionSize(i)} < {header.sectionSizeHint(i)} px"
                for i in range(table.columnCount())
                if header.sectionSize(i) + 1 < header.sectionSizeHint(i)]
    for row in range(table.rowCount()):
        item = table.item(row, column)
        if item is not None and table.sizeHintForColumn(column) > table.columnWidth(column) + 1:
            problems.append(f"{name}: {item.text()!r} elided in {table.columnWidth(column)} px")
            break
    return problems


def problems_at_1366(qtbot, tmp_path: Path) -> list[str]:  # noqa: ANN001 - pytest-qt's fixture
    # As the main window opens it: the Diagnose tab's "Show in the main window" takes room too.
    w = ExploreWindow(lambda: tiny_pair(sharpness=8.0), lambda *_: None)
    qtbot.addWidget(w)
    path = tmp_path / "l.jsonl"
    path.write_text("".join(to_json(e) + "\n" for e in long_named_lanes()), encoding="utf-8")
    assert w.lineup_panel.open_recording(str(path))
    assert w.diagnose_panel.open_recording(str(path))
    w.diagnose_panel.tokens.setCurrentCell(0, 0)  # a token's rounds listed, the button on
    w.resize(*SCREEN)
    w.show()
    qtbot.waitExposed(w)
    problems: list[str] = []
    for i in range(w.tabs.count()):
        w.tabs.setCurrentIndex(i)
        qtbot.wait(20)
        # A table's header asks a square minimum of Qt's own that no table gives it: not a cut.
        problems += [f"{w.tabs.tabText(i)}: {p}" for p in window_problems(w, SCREEN)
                     if not p.startswith("QHeaderView: ")]
    problems += cut(w.diagnose_panel.tokens, "diagnose tokens", 0)
    problems += cut(w.lineup_panel.card, "lineup card", 1)
    w.close()
    return problems


def test_every_tab_fits_1366x768(qtbot, tmp_path: Path) -> None:  # noqa: ANN001
    problems = problems_at_1366(qtbot, tmp_path)
    assert problems == [], "\n".join(problems)


@pytest.mark.parametrize("attr, edits", [
    # the diagnose table's five headings stretched over a narrow pane: "mean p(x)" cut
    ("DiagnosePanel", [("header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)",
                        "header.setSectionResizeMode(QHeaderView.ResizeMode.Stretch)"),
                       ("self._fit_tokens()\n        bins", "bins")]),
    # the sweep's axis label longer than its plot is high at 1366×768: cut
    ("SweepPanel", [('"speedup (×)"', '"speedup over the target alone"')]),
    # the lineup card's lane column as wide as the others: its names elided
    ("LinePanel", [("card_header.setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)",
                    "card_header.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)")]),
])
def test_the_layout_test_rejects_its_broken_variants(qtbot, tmp_path: Path, attr: str,  # noqa: ANN001
                                                     edits: list[tuple[str, str]],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(explore, attr, mutant(getattr(explore, attr), *edits))
    assert problems_at_1366(qtbot, tmp_path) != []

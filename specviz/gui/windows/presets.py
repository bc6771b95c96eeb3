"""Marks on the preset list: which pairs load offline, which are cached, which need a download."""

from __future__ import annotations

from PySide6.QtCore import QLocale, QModelIndex, QObject, Qt
from PySide6.QtGui import QColor, QIcon, QPainter, QPixmap
from PySide6.QtWidgets import QComboBox, QStyledItemDelegate

from specviz.gui.worker import AVAILABILITY_MARKS

COLOURS = {"bundled": "#2E8B57", "local": "#2E8B57", "cached": "#3A6FB0",
           "download": "#C77800", "missing": "#B22222"}
HINTS = {
    "bundled": "ships with specviz: works offline",
    "local": "local files: works offline",
    "cached": "in the local Hugging Face cache: loads without a network",
    "download": "not in the local cache: needs a network to download once",
    "missing": "not found here, and not a hub id",
}


def _dot(colour: str) -> QIcon:
    pix = QPixmap(12, 12)
    pix.fill(Qt.GlobalColor.transparent)
    painter = QPainter(pix)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setBrush(QColor(colour))
    painter.setPen(Qt.PenStyle.NoPen)
    painter.drawEllipse(1, 1, 10, 10)
    painter.end()
    return QIcon(pix)


class MarkedDelegate(QStyledItemDelegate):
    """The open list says it in words ("… — needs download"); the item text stays the name."""

    def __init__(self, marks: dict[str, str], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.marks = marks

    def displayText(self, value: object, locale: QLocale) -> str:  # noqa: N802 - Qt override
        text = super().displayText(value, locale)
        kind = self.marks.get(str(value))
        return f"{text} — {AVAILABILITY_MARKS[kind]}" if kind in AVAILABILITY_MARKS else text


def mark_presets(combo: QComboBox, availability: dict[str, str]) -> None:
    """Dot, tooltip and a word for each preset, from ``preset_availability()``.

    The item text stays the preset's name (settings and ``--pair`` match on it); the closed
    combo shows the dot, the open list the words.
    """
    marks = {name: kind for name, kind in availability.items() if kind in AVAILABILITY_MARKS}
    for i in range(combo.count()):
        kind = marks.get(combo.itemText(i))
        if kind is None:
            continue
        combo.setItemIcon(i, _dot(COLOURS[kind]))
        combo.setItemData(i, f"{AVAILABILITY_MARKS[kind]}: {HINTS[kind]}",
                          Qt.ItemDataRole.ToolTipRole)
    delegate = MarkedDelegate(marks, combo)
    combo.setItemDelegate(delegate)
    combo.setProperty("availability", marks)
    view = combo.view()  # the open list as wide as its longest marked name, not the combo
    view.setMinimumWidth(view.sizeHintForColumn(0) + 2 * view.frameWidth() + 24)


def preset_mark(combo: QComboBox, index: QModelIndex | int) -> str:
    """The words shown for a preset in the open list (tests read this)."""
    row = index if isinstance(index, int) else index.row()
    name = combo.itemText(row)
    delegate = combo.itemDelegate()
    if isinstance(delegate, MarkedDelegate):
        return delegate.displayText(name, QLocale())
    return name

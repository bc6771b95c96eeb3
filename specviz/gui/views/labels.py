"""Labels for text of any length: one that elides to its width, and a cap for messages."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QPainter, QPaintEvent
from PySide6.QtWidgets import QLabel, QSizePolicy, QWidget

from specviz.core.options import k_text as k_text  # re-exported: the views' headers

if TYPE_CHECKING:  # torch comes with it: the views import neither at start-up
    from specviz.core.cross_tokenizer import VocabReport

TOOLTIP_CHARS = 2000
_LONG_WORD = re.compile(r"\S{40,}")


def breakable(text: str, every: int = 30) -> str:
    """A zero-width space every ``every`` characters inside very long words (paths, hashes,
    a 20,000-character line): a word-wrapped label can then wrap them instead of widening."""
    return _LONG_WORD.sub(lambda m: "\u200b".join(m.group(0)[i:i + every]
                                                  for i in range(0, len(m.group(0)), every)),
                          text)


def vocab_text(report: VocabReport) -> str:
    """The header's word on a pair across tokenizers: "across tokenizers: 7 shared of 12;
    25.0% of recent target tokens outside" (VocabReport.text() has it at length)."""
    line = f"across tokenizers: {report.shared:,} shared of {report.target_size:,}"
    if report.counted:
        line += f"; {100 * report.outside_share:.1f}% of recent target tokens outside"
    return line


def capped(text: str, limit: int) -> str:
    """At most ``limit`` characters, saying how many were left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit:,} more characters)"


class ElidedLabel(QLabel):
    """One line of plain text that ends in "…" where it does not fit; the tooltip has it all.

    Its size hint asks for no width, so a long message never widens the window.
    ``text()`` is the full text.
    """

    def __init__(self, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setProperty("elides", True)  # cut on purpose (tests/gui/layout_check.py)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.elide = Qt.TextElideMode.ElideRight  # where the "…" goes (ElideLeft: keep the end)
        self.setText(text)

    def setText(self, text: str) -> None:  # noqa: N802 - Qt override
        one_line = " ".join(text.split("\n"))
        super().setText(one_line)
        self.setToolTip(capped(one_line, TOOLTIP_CHARS) if len(one_line) > 60 else "")
        self.update()

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt override
        return QSize(40, super().minimumSizeHint().height())

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt override
        return QSize(40, super().sizeHint().height())

    def shown(self, width: int | None = None) -> str:
        """The text as drawn in ``width`` pixels (default: the label's contents now)."""
        width = self.contentsRect().width() if width is None else width
        return self.fontMetrics().elidedText(self.text(), self.elide, width)

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 - Qt override
        painter = QPainter(self)
        rect = self.contentsRect()
        shown = self.shown(rect.width())
        painter.drawText(rect, int(self.alignment() | Qt.AlignmentFlag.AlignVCenter), shown)
        painter.end()  # now, not when the frame is freed (a profiler may hold it)



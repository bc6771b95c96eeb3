"""What "nothing clipped, nothing overlapping" means, as checks on a shown window.

Widgets: every visible widget at least its minimumSizeHint; a QLabel's text fits (or the
label word-wraps with room for its lines, or elides on purpose: property "elides");
no horizontal scroll bar on the controls. Plots (pyqtgraph): every plot inside its view,
titles and axis labels fit, tick labels neither overlap nor go missing.
"""

from __future__ import annotations

from typing import Any

import pyqtgraph as pg
from PySide6.QtGui import QImage, QPainter
from PySide6.QtWidgets import (
    QAbstractScrollArea,
    QLabel,
    QMainWindow,
    QScrollArea,
    QTextEdit,
    QWidget,
)

SLACK = 1  # px: rounding in size hints
FRAME = 60  # px a desktop takes from the screen's height (tests/gui/test_layout.py)


def screen_window(qtbot: Any, settings: Any, monkeypatch: Any, screen: tuple[int, int],
                  presenting: bool) -> Any:
    """A main window as on ``screen``: shown at its width and its height less FRAME, frames
    drawn by hand (its timer stopped), and presenting on a screen of that size when asked
    (the offscreen screen is 800 × 800, so "full screen" is the one asked for)."""
    from PySide6.QtCore import QSize

    from specviz.gui.windows.app import MainWindow

    w = MainWindow(loader=None, settings=settings, autoload=False)
    qtbot.addWidget(w)
    w.showNormal()
    w.resize(screen[0], screen[1] - FRAME)
    w.run_view.timer.stop()
    if presenting:
        monkeypatch.setattr(w, "showFullScreen", lambda: (w.showNormal(), w.resize(*screen)))
        monkeypatch.setattr(w.presentation, "screen_size", lambda: QSize(*screen))
        w.present_action.setChecked(True)
    return w


def _name(w: QWidget) -> str:
    text = ""
    if isinstance(w, QLabel):
        text = f" {w.text()[:40]!r}"
    elif hasattr(w, "text") and callable(w.text):
        try:
            text = f" {str(w.text())[:40]!r}"
        except TypeError:
            text = ""
    return f"{type(w).__name__}{'#' + w.objectName() if w.objectName() else ''}{text}"


def _inside_scroll(w: QWidget) -> bool:
    """A scroll area's content: its size may exceed what shows (it scrolls). Only the
    content itself: what is inside it must still fit its own parent."""
    p = w.parentWidget()
    area = p.parentWidget() if p is not None else None
    return isinstance(area, QScrollArea) and area.widget() is w


def widget_problems(root: QWidget) -> list[str]:
    problems: list[str] = []
    for w in [root, *root.findChildren(QWidget)]:
        if not w.isVisible() or w.isWindow() and w is not root:
            continue
        if w.objectName().startswith("qt_"):  # Qt's own parts (a spin box's line edit)
            continue
        name = _name(w)
        hint = w.minimumSizeHint()
        low = w.minimumSize()
        need_w = max(hint.width(), low.width())
        need_h = max(hint.height(), low.height())
        if w.width() + SLACK < need_w or w.height() + SLACK < need_h:
            problems.append(f"{name}: {w.width()}×{w.height()} < minimum "
                            f"{need_w}×{need_h}")
        if isinstance(w, QLabel) and w.text() and not w.property("elides"):
            problems.extend(label_problems(w, name))
        if isinstance(w, QAbstractScrollArea) and w.horizontalScrollBar().isVisible() \
                and isinstance(w, QScrollArea) and w.objectName() != "central":
            problems.append(f"{name}: horizontal scroll bar (content wider than its panel)")
        if isinstance(w, QTextEdit) and w.document().isEmpty() and w.placeholderText():
            room = w.viewport().width() - 2 * w.document().documentMargin()
            for line in w.placeholderText().split("\n"):  # drawn without wrapping
                if w.fontMetrics().horizontalAdvance(line) > room:
                    problems.append(f"{name}: placeholder line {line[:30]!r} is cut")
        parent = w.parentWidget()
        if parent is not None and not w.isWindow() and not _inside_scroll(w) \
                and not isinstance(parent, QAbstractScrollArea):
            r = w.geometry()
            pr = parent.rect()
            if r.right() > pr.right() + SLACK or r.bottom() > pr.bottom() + SLACK:
                problems.append(f"{name}: sticks out of its parent {_name(parent)} "
                                f"({r.right()},{r.bottom()} > {pr.right()},{pr.bottom()})")
    return problems


def label_problems(label: QLabel, name: str) -> list[str]:
    cr = label.contentsRect()
    if label.wordWrap():
        need = label.heightForWidth(label.width())
        if need > label.height() + SLACK:
            return [f"{name}: wrapped text needs {need} px, has {label.height()}"]
        return []
    need = label.sizeHint().width() - (label.width() - cr.width())
    # sizeHint covers the text (rich or plain) plus margins; compare text to the contents.
    if label.sizeHint().width() > label.width() + SLACK:
        return [f"{name}: text needs {label.sizeHint().width()} px, has {label.width()} "
                f"(text {need} px)"]
    return []


def _text_width(item: pg.LabelItem) -> float:
    return item.item.boundingRect().width()


def plot_problems(view: pg.GraphicsView, where: str) -> list[str]:
    """Every PlotItem of a visible pyqtgraph view: inside it, titles, axes, tick labels."""
    problems: list[str] = []
    if not view.isVisible():
        return problems
    shown = view.mapToScene(view.viewport().rect()).boundingRect()
    for item in view.scene().items():
        if not isinstance(item, pg.PlotItem) or not item.isVisible():
            continue
        title = item.titleLabel
        label = f"{where} plot {title.text[:30]!r}" if title.text else f"{where} plot"
        r = item.sceneBoundingRect()
        if r.right() > shown.right() + SLACK or r.bottom() > shown.bottom() + SLACK \
                or r.left() < shown.left() - SLACK or r.top() < shown.top() - SLACK:
            problems.append(f"{label}: outside its view ({r} vs {shown})")
        minimum = item.effectiveSizeHint(pg.QtCore.Qt.SizeHint.MinimumSize)
        if r.width() + SLACK < minimum.width() or r.height() + SLACK < minimum.height():
            problems.append(f"{label}: {r.width():.0f}×{r.height():.0f} < minimum "
                            f"{minimum.width():.0f}×{minimum.height():.0f}")
        if title.isVisible() and title.text:
            text = title.item.boundingRect()
            box = title.boundingRect()
            if text.width() > box.width() + SLACK or text.height() > box.height() + SLACK:
                problems.append(f"{label}: title {text.width():.0f}×{text.height():.0f} "
                                f"in {box.width():.0f}×{box.height():.0f}")
        for side in ("left", "bottom"):
            axis = item.getAxis(side)
            if axis.isVisible():
                problems.extend(axis_problems(axis, f"{label} {side} axis"))
    return problems


def draw_specs(axis: pg.AxisItem) -> tuple | None:
    """pyqtgraph's draw specs for ``axis`` as it is now (None: no length yet)."""
    image = QImage(8, 8, QImage.Format.Format_ARGB32)
    painter = QPainter(image)  # text metrics need an active painter
    try:
        return axis.generateDrawSpecs(painter)
    finally:
        painter.end()


def drawn_tick_labels(axis: pg.AxisItem) -> list[tuple[float, float, str]]:
    """(start, end, text) of each tick label pyqtgraph draws on ``axis`` as it is now (along
    the axis: left and right on a horizontal one), in order."""
    specs = draw_specs(axis)
    if specs is None:
        return []
    horizontal = axis.orientation in ("bottom", "top")
    return sorted((r.left(), r.right(), s) if horizontal else (r.top(), r.bottom(), s)
                  for r, _, s in specs[2])


def axis_problems(axis: pg.AxisItem, label: str) -> list[str]:
    problems: list[str] = []
    if axis.label.isVisible() and axis.labelText:
        text = axis.label.boundingRect()
        length = axis.boundingRect().width() if axis.orientation in ("bottom", "top") \
            else axis.boundingRect().height()
        along = text.width()
        if along > length + SLACK:
            problems.append(f"{label}: label {axis.labelText!r} {along:.0f} px > {length:.0f}")
    specs = draw_specs(axis)
    if specs is None:  # an axis with no length yet
        return [f"{label}: has no room to draw"]
    _, _, texts = specs
    drawn = [(rect, s) for rect, _, s in texts]
    horizontal = axis.orientation in ("bottom", "top")
    spans = sorted(((r.left(), r.right(), s) if horizontal else (r.top(), r.bottom(), s))
                   for r, s in drawn)
    for (_a0, a1, s0), (b0, _b1, s1) in zip(spans, spans[1:], strict=False):
        if b0 < a1 - SLACK:
            problems.append(f"{label}: tick labels {s0!r} and {s1!r} overlap")
    if axis.orientation == "left":
        width = axis.boundingRect().width()
        for r, s in drawn:
            if r.left() < -SLACK or r.width() > width + SLACK:
                problems.append(f"{label}: tick label {s!r} wider than the axis")
    fixed = axis._tickLevels  # noqa: SLF001 - explicit ticks, all meant to be read
    if fixed:
        lo, hi = sorted(axis.range)
        wanted = {s for level in fixed for v, s in level if lo <= v <= hi and s}
        missing = wanted - {s for _, s in drawn}
        if missing:
            problems.append(f"{label}: tick labels dropped: {sorted(missing)[:5]}")
    return problems


def scroll_problems(window: QMainWindow) -> list[str]:
    """The run view scrolling in its window ("central", gui/geometry.py: allowed only when
    zoomed in)."""
    area = window.centralWidget()
    if not isinstance(area, QScrollArea) or area.widget() is None:
        return []
    bars = [name for name, bar in (("horizontally", area.horizontalScrollBar()),
                                   ("vertically", area.verticalScrollBar())) if bar.isVisible()]
    if not bars:
        return []
    need = area.widget().minimumSizeHint()  # the run view's (geometry._Fill)
    room = area.viewport().size()
    return [f"run view minimum {need.width()}×{need.height()} exceeds its room "
            f"{room.width()}×{room.height()}: it scrolls {' and '.join(bars)}"]


def window_problems(window: QMainWindow, screen: tuple[int, int],
                    may_scroll: bool = False) -> list[str]:
    """All of the above, plus: the window's minimum size fits the screen, and the run view
    its window without scrolling (``may_scroll``: zoomed in, it may scroll)."""
    problems = [] if may_scroll else scroll_problems(window)
    hint = window.minimumSizeHint()
    low = window.minimumSize()
    w, h = max(hint.width(), low.width()), max(hint.height(), low.height())
    if w > screen[0] or h > screen[1]:
        problems.append(f"window minimum {w}×{h} exceeds the screen {screen[0]}×{screen[1]}")
    problems.extend(widget_problems(window))
    for view in window.findChildren(pg.GraphicsView):
        problems.extend(plot_problems(view, type(view).__name__ if not view.objectName()
                                      else view.objectName()))
    return problems


__all__ = ["axis_problems", "drawn_tick_labels", "label_problems", "plot_problems",
           "scroll_problems", "widget_problems", "window_problems"]

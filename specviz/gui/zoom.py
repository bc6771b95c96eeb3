"""Zoom for the stage: one factor scales every text and plot of a run view together.

Ctrl+plus / Ctrl+minus / Ctrl+0 and Ctrl+wheel change it; presentation mode (F11) opens at
a factor that makes token text at least 40 px and labels at least 24 px tall, readable from
the back of a room on a 1920×1080 projector. The clicker keys (PgDn / Right / Space, PgUp /
Left) and Esc live here too: they are what a presenter presses.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QEvent, QObject, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QKeySequence, QWheelEvent
from PySide6.QtWidgets import QWidget

from .run_view import RunView
from .style import PLOT_POINT_SIZE, STREAM_POINT_SIZE, UI_POINT_SIZE

MIN_FACTOR = 0.6
MAX_FACTOR = 4.0
STEP = 1.15  # one Ctrl+plus: big enough to see, small enough to land where wanted
TOKEN_PX = 40  # presentation mode: token text at least this tall (px)
LABEL_PX = 24  # and every label at least this tall
BASE_PT = "specviz_base_pt"  # widget property: its font's point size at factor 1


def px_per_pt(widget: QWidget) -> float:
    """Pixels per point on the widget's screen (96 dpi: 4/3)."""
    return widget.logicalDpiY() / 72.0


def presentation_factor(widget: QWidget) -> float:
    """The smallest factor with tokens ≥ TOKEN_PX and labels ≥ LABEL_PX on this screen."""
    ppt = px_per_pt(widget)
    smallest_label = min(UI_POINT_SIZE, PLOT_POINT_SIZE - 2)  # the speed numbers' captions
    return max(1.0, TOKEN_PX / (STREAM_POINT_SIZE * ppt), LABEL_PX / (smallest_label * ppt))


class Zoom(QObject):
    """The zoom factor of one RunView: widgets' fonts, the stream, the bars and the plots."""

    changed = Signal(float)

    def __init__(self, view: RunView) -> None:
        super().__init__(view)
        self.view = view
        self.factor = 1.0
        # Ctrl+wheel over any part of the run view. On the view's own widgets, not the
        # application: an application filter sees every event of every window, and windows
        # left behind (a test suite makes hundreds) made each event call hundreds of them.
        for widget in (view, *view.findChildren(QWidget)):
            widget.installEventFilter(self)

    def set_factor(self, factor: float) -> None:
        factor = min(MAX_FACTOR, max(MIN_FACTOR, factor))
        self.factor = factor
        view = self.view
        widgets = [view, *view.findChildren(QWidget)]
        # Bases first: a parent's new font would reach children that inherit theirs.
        for widget in widgets:
            if widget.property(BASE_PT) is None and widget.font().pointSizeF() > 0:
                widget.setProperty(BASE_PT, widget.font().pointSizeF())
        for widget in widgets:
            base = widget.property(BASE_PT)
            if base is None:
                continue
            font = widget.font()
            font.setPointSizeF(float(base) * factor)
            widget.setFont(font)
        view.stream.set_scale(factor)
        view.bars.set_scale(factor)
        view.acceptance.set_scale(factor)
        # Presenting: the panes' shares for the new type size, now and once the larger
        # labels above them are laid out (the splitter's height follows them).
        view.fit_panes()
        QTimer.singleShot(0, view.fit_panes)
        self.changed.emit(factor)

    def zoom_in(self) -> None:
        self.set_factor(self.factor * STEP)

    def zoom_out(self) -> None:
        self.set_factor(self.factor / STEP)

    def reset(self) -> None:
        self.set_factor(1.0)

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt override
        if event.type() == QEvent.Type.Wheel and isinstance(obj, QWidget):
            assert isinstance(event, QWheelEvent)
            if event.modifiers() & Qt.KeyboardModifier.ControlModifier:
                dy = event.angleDelta().y()
                if dy > 0:
                    self.zoom_in()
                elif dy < 0:
                    self.zoom_out()
                return True
        return False


def step_back(view: RunView, staged_back: Callable[[], bool] | None = None) -> None:
    """One phase back in a staged round; otherwise select the previous round in the bars."""
    if staged_back is not None and staged_back():
        return
    n = len(view.record.rounds)
    current = view.selected if view.selected is not None else n - 1
    if current > 0:
        view.select_round(current - 1)


def step_forward(view: RunView, step: Callable[[], None],
                 staged_forward: Callable[[], bool] | None = None) -> None:
    """One phase on in a staged round; a past round selected: the next one; else Step."""
    if staged_forward is not None and staged_forward():
        return
    n = len(view.record.rounds)
    if view.selected is not None and view.selected < n - 1:
        view.select_round(view.selected + 1)
        return
    if view.selected is not None:
        view.select_round(None)
    step()


def add_actions(window: QWidget, zoom: Zoom, forward: Callable[[], None],
                back: Callable[[], None], leave: Callable[[], None]) -> dict[str, QAction]:
    """Zoom, clicker and Esc actions on ``window`` (window-wide: editors keep their keys)."""
    specs = {
        "zoom_in": ("Zoom in", ["Ctrl++", "Ctrl+="], zoom.zoom_in),
        "zoom_out": ("Zoom out", ["Ctrl+-"], zoom.zoom_out),
        "zoom_reset": ("Actual size", ["Ctrl+0"], zoom.reset),
        # A text editor with focus takes Space / arrows / PgUp for itself (ShortcutOverride).
        "forward": ("Forward (PgDn, →, Space)", ["PgDown", "Right", "Space"], forward),
        "back": ("Back (PgUp, ←)", ["PgUp", "Left"], back),
        "leave": ("Leave presentation mode (Esc)", ["Esc"], leave),
    }
    actions = {}
    for name, (text, keys, slot) in specs.items():
        action = QAction(text, window)
        action.setShortcuts([QKeySequence(k) for k in keys])
        action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        action.triggered.connect(slot)
        window.addAction(action)
        actions[name] = action
    return actions

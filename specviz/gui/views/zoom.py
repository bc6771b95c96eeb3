"""Zoom for the stage: one factor scales every text and plot of a run view together.

Ctrl+plus / Ctrl+minus / Ctrl+0 and Ctrl+wheel change it; presentation mode (F11) opens at
a factor that makes token text at least 40 px and labels at least 24 px tall, readable from
the back of a room on a 1920×1080 projector (on a 1366×768 screen the same height on the
wall: 28 and 17 px). The clicker keys (PgDn / Right / Space, PgUp /
Left) and Esc live here too: they are what a presenter presses.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from PySide6.QtCore import QEvent, QObject, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QKeySequence, QWheelEvent
from PySide6.QtWidgets import QDockWidget, QMainWindow, QWidget

from specviz.gui.look.style import PLOT_POINT_SIZE, STREAM_POINT_SIZE, UI_POINT_SIZE
from specviz.gui.views.run_view import RunView

MIN_FACTOR = 0.6
MAX_FACTOR = 4.0
STEP = 1.15  # one Ctrl+plus: big enough to see, small enough to land where wanted
TOKEN_PX = 40  # presentation mode: token text at least this tall (px)
LABEL_PX = 24  # and every label at least this tall
PROJECTOR_LINES = 1080  # the two above are for a 1080-line picture; fewer lines, fewer px
BASE_PT = "specviz_base_pt"  # widget property: its font's point size at factor 1


def px_per_pt(widget: QWidget) -> float:
    """Pixels per point on the widget's screen (96 dpi: 4/3)."""
    return widget.logicalDpiY() / 72.0


def room_px(px: float, screen_height: int | None) -> float:
    """``px`` on a 1080-line projector, as tall on the wall on a screen ``screen_height`` px
    high (a 1366×768 laptop on the same projector: 0.71 of it); None: 1080 lines."""
    return px * min(1.0, (screen_height or PROJECTOR_LINES) / PROJECTOR_LINES)


def presentation_factor(widget: QWidget, screen_height: int | None = None) -> float:
    """The smallest factor with tokens ≥ TOKEN_PX and labels ≥ LABEL_PX on the wall, on a
    screen ``screen_height`` px high (None: 1080)."""
    ppt = px_per_pt(widget)
    smallest_label = min(UI_POINT_SIZE, PLOT_POINT_SIZE - 2)  # the speed numbers' captions
    return max(1.0, room_px(TOKEN_PX, screen_height) / (STREAM_POINT_SIZE * ppt),
               room_px(LABEL_PX, screen_height) / (smallest_label * ppt))


class Zoom(QObject):
    """The zoom factor of one RunView: widgets' fonts, the stream, the bars and the plots."""

    changed = Signal(float)

    def __init__(self, view: RunView, others: Sequence[QWidget] = ()) -> None:
        super().__init__(view)
        self.view = view
        self.others = tuple(others)  # more widgets whose type follows (the controls panel)
        self._dock_base: int | None = None  # the controls' dock width at 1× (_fit_dock)
        self._dock_factor = 1.0
        self.factor = 1.0
        # Ctrl+wheel over any part of the run view. On the view's own widgets, not the
        # application: an application filter sees every event of every window, and windows
        # left behind (a test suite makes hundreds) made each event call hundreds of them.
        for root in (view, *self.others):
            for widget in (root, *root.findChildren(QWidget)):
                widget.installEventFilter(self)

    def set_factor(self, factor: float) -> None:
        factor = min(MAX_FACTOR, max(MIN_FACTOR, factor))
        self.factor = factor
        view = self.view
        widgets = [w for root in (view, *self.others) for w in (root, *root.findChildren(QWidget))]
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
        view.tree.set_scale(factor)
        view.acceptance.set_scale(factor)
        view.speed.refit()  # the numbers in one row again once they fit (after F11 → Esc)
        view.arrange_top()  # zoomed in on a narrow window: the plots under the text
        for other in self.others:
            other.updateGeometry()  # the dock learns the panel's new minimum width
            self._fit_dock(other, factor)
        # Presenting: the panes' shares for the new type size, now and once the larger
        # labels above them are laid out (the splitter's height follows them).
        view.fit_panes()
        QTimer.singleShot(0, view.fit_panes)
        self.changed.emit(factor)

    def _fit_dock(self, panel: QWidget, factor: float) -> None:
        """The dock holding ``panel`` as wide as at 1× times ``factor``: zoomed back, the
        window's views get their width back (the dock once kept its zoomed 485 px)."""
        dock = panel.parentWidget()
        window = dock.parentWidget() if isinstance(dock, QDockWidget) else None
        if not isinstance(window, QMainWindow) or not dock.isVisible():
            return
        if self._dock_base is None or abs(self._dock_factor - 1.0) < 1e-9:
            self._dock_base = dock.width()  # at 1× (the user may have dragged it since)
        self._dock_factor = factor
        window.resizeDocks([dock], [round(self._dock_base * factor)], Qt.Orientation.Horizontal)

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

"""Window geometry: a first launch that fits the screen, state that survives launches, and a
presentation mode (F11) that gives back exactly the window it took.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from PySide6.QtCore import QByteArray, QEvent, QObject, QRect, QSettings, QSize, Qt
from PySide6.QtGui import QGuiApplication, QResizeEvent
from PySide6.QtWidgets import (
    QBoxLayout,
    QDockWidget,
    QFrame,
    QMainWindow,
    QScrollArea,
    QWidget,
)

FIRST_SIZE = QSize(1600, 950)  # the size a first launch asks for, where the screen has room


def available(window: QWidget) -> QRect:
    """The screen area the window may use (without panels and task bars)."""
    screen = window.screen() or QGuiApplication.primaryScreen()
    return screen.availableGeometry()


def first_geometry(area: QRect, wanted: QSize = FIRST_SIZE) -> tuple[QRect, bool]:
    """(geometry, maximised) of a first launch on a screen with ``area`` free.

    Where the wanted size does not fit (a 1366×768 laptop), the window is maximised: every
    pixel goes to the views, and leaving full screen comes back to it.
    """
    if wanted.width() > area.width() or wanted.height() > area.height():
        return QRect(area), True
    rect = QRect(0, 0, wanted.width(), wanted.height())
    rect.moveCenter(area.center())
    return rect, False


def restore_window(window: QMainWindow, store: QSettings, dock: QDockWidget | None = None) -> None:
    """Geometry and dock layout from ``store``, or a first launch that fits the screen."""
    geometry = store.value("window/geometry")
    if isinstance(geometry, QByteArray) and window.restoreGeometry(geometry):
        _clamp(window)
    else:
        rect, maximised = first_geometry(available(window))
        window.setGeometry(rect)
        if maximised:
            window.setWindowState(window.windowState() | Qt.WindowState.WindowMaximized)
    state = store.value("window/state")
    if isinstance(state, QByteArray):
        window.restoreState(state)
    if dock is not None:
        # Shown at every launch unless the user hid them (F9, View menu, its ✕); presentation
        # mode (F11) never counts, it is over when the window closes.
        hidden = str(store.value("window/controls_hidden", "false")).lower() == "true"
        dock.setVisible(not hidden)
    # A state saved in full screen (by an older version) must not start in full screen.
    if window.windowState() & Qt.WindowState.WindowFullScreen:
        window.setWindowState(window.windowState() & ~Qt.WindowState.WindowFullScreen)


def _clamp(window: QMainWindow) -> None:
    """A saved size larger than this screen (another monitor, a lower resolution) shrinks."""
    area = available(window)
    rect = window.geometry()
    if rect.width() <= area.width() and rect.height() <= area.height() \
            and area.contains(rect.center()):
        return
    rect.setWidth(min(rect.width(), area.width()))
    rect.setHeight(min(rect.height(), area.height()))
    rect.moveCenter(area.center())
    window.setGeometry(rect)


@dataclass
class Before:
    """What presentation mode changed, to give it back."""

    state: Qt.WindowState
    geometry: QByteArray
    dock_visible: bool
    menu_visible: bool
    status_visible: bool = True
    zoom: float = 1.0
    splits: list[list[int]] = field(default_factory=list)




class Presentation(QObject):
    """Full screen without controls and menu, type sized for the room; leaving restores the
    window exactly: geometry, zoom, the splitters' sizes, what was shown.

    ``view`` (a RunView) and ``zoom`` (its Zoom) are optional: without them only the
    window is changed.
    """

    def __init__(self, window: QMainWindow, dock: QDockWidget, view: Any = None,
                 zoom: Any = None) -> None:
        super().__init__(window)
        self.window = window
        self.dock = dock
        self.view = view
        self.zoom = zoom
        self.before: Before | None = None

    @property
    def active(self) -> bool:
        return self.before is not None

    def enter(self) -> None:
        if self.before is not None:
            return
        w = self.window
        # Everything is taken down before anything changes: a zoom first would grow a
        # window whose minimum no longer fits, and that size would be "given back".
        self.before = Before(w.windowState(), w.saveGeometry(), self.dock.isVisibleTo(w),
                             w.menuBar().isVisibleTo(w), w.statusBar().isVisibleTo(w),
                             self.zoom.factor if self.zoom is not None else 1.0,
                             [s.sizes() for s in self.view.splitters]
                             if self.view is not None else [])
        self.dock.hide()
        w.menuBar().hide()
        w.statusBar().hide()  # small type the room cannot read; its height goes to the bars
        w.showFullScreen()
        if self.view is not None:
            self.view.set_presenting(True)  # every bar panel in view, nothing cut
        if self.zoom is not None:
            self.zoom.set_factor(max(self.before.zoom, self._room_factor()))

    def screen_size(self) -> QSize:
        """The size of the screen the window goes full screen on."""
        screen = self.window.screen() or QGuiApplication.primaryScreen()
        return screen.geometry().size()

    def _room_factor(self) -> float:
        """The zoom for that screen: type as tall on the wall at any resolution
        (gui/views/zoom.py)."""
        from specviz.gui.views.zoom import presentation_factor

        return presentation_factor(self.window, self.screen_size().height())

    def leave(self) -> None:
        before, self.before = self.before, None
        if before is None:
            return
        w = self.window
        # The type first: the controls, shown again at the room's size, kept that width
        # (the dock 382 px, not 333, at 1366 × 768).
        if self.zoom is not None:
            self.zoom.set_factor(before.zoom)
        if self.view is not None:
            self.view.set_presenting(False)
        self.dock.setVisible(before.dock_visible)
        w.menuBar().setVisible(before.menu_visible)
        w.statusBar().setVisible(before.status_visible)
        if before.state & Qt.WindowState.WindowMaximized:
            w.showMaximized()
        else:
            w.showNormal()
            w.restoreGeometry(before.geometry)
        # The user's sizes, not the shares Qt kept through full screen.
        if self.view is not None:
            for splitter, sizes in zip(self.view.splitters, before.splits, strict=False):
                splitter.setSizes(sizes)

    def controls_hidden(self) -> bool:
        """Whether the user hid the controls (what they were before presentation mode)."""
        if self.before is not None:
            return not self.before.dock_visible
        return not self.dock.isVisibleTo(self.window)


class _Fill(QWidget):
    """One widget filling this one, without a layout: a scroll area then sizes it by its
    minimum, not by the preferred height a word-wrapping layout reports for a width."""

    def __init__(self, view: QWidget) -> None:
        super().__init__()
        self.view = view
        view.setParent(self)

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt override
        hint = self.view.minimumSizeHint().expandedTo(self.view.minimumSize())
        layout = self.view.layout()
        if layout is None or not layout.hasHeightForWidth():
            return hint
        # Word-wrapped labels need more lines at this width than their minimum hint says:
        # every item at its height for this width, except the stretching ones (the views'
        # splitter) at their minimum.
        width = max(self.width(), hint.width())
        height = layout.totalHeightForWidth(width)
        stretching = [i for i in range(layout.count())
                      if isinstance(layout, QBoxLayout) and layout.stretch(i) > 0]
        for i in stretching:
            item = layout.itemAt(i)
            height -= max(0, item.sizeHint().height() - item.minimumSize().height())
        return QSize(hint.width(), max(hint.height(), height))

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt override
        return self.view.sizeHint()

    def event(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.LayoutRequest:  # the view's minimum changed
            self.updateGeometry()
        return super().event(event)

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt override
        self.view.setGeometry(self.rect())
        if event.size().width() != event.oldSize().width():
            self.updateGeometry()  # the wrapped labels' lines changed with the width


def scrolled(view: QWidget) -> QScrollArea:
    """``view`` in a scroll area that scrolls only when the view's minimum exceeds the
    window (zoomed in on a small screen); otherwise the view fills it, as if unwrapped."""
    area = QScrollArea()
    area.setObjectName("central")
    area.setWidgetResizable(True)
    area.setFrameShape(QFrame.Shape.NoFrame)
    area.setWidget(_Fill(view))
    return area


def save_window(window: QMainWindow, store: QSettings,
                presentation: Presentation | None = None) -> None:
    """Geometry, dock layout and whether the controls were hidden, outside presentation mode."""
    if presentation is not None and presentation.before is not None:
        store.setValue("window/geometry", presentation.before.geometry)
    else:
        store.setValue("window/geometry", window.saveGeometry())
    store.setValue("window/state", window.saveState())
    if presentation is not None:
        store.setValue("window/controls_hidden",
                       "true" if presentation.controls_hidden() else "false")

"""Window geometry: a first launch that fits the screen, state that survives launches, and a
presentation mode (F11) that gives back exactly the window it took.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QByteArray, QRect, QSettings, QSize, Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QDockWidget, QMainWindow, QWidget

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


class Presentation:
    """Full screen without controls and menu; leaving restores the window exactly."""

    def __init__(self, window: QMainWindow, dock: QDockWidget) -> None:
        self.window = window
        self.dock = dock
        self.before: Before | None = None

    @property
    def active(self) -> bool:
        return self.before is not None

    def enter(self) -> None:
        if self.before is not None:
            return
        w = self.window
        self.before = Before(w.windowState(), w.saveGeometry(), self.dock.isVisibleTo(w),
                             w.menuBar().isVisibleTo(w), w.statusBar().isVisibleTo(w))
        self.dock.hide()
        w.menuBar().hide()
        w.statusBar().hide()  # small type the room cannot read; its height goes to the bars
        w.showFullScreen()

    def leave(self) -> None:
        before, self.before = self.before, None
        if before is None:
            return
        w = self.window
        self.dock.setVisible(before.dock_visible)
        w.menuBar().setVisible(before.menu_visible)
        w.statusBar().setVisible(before.status_visible)
        if before.state & Qt.WindowState.WindowMaximized:
            w.showMaximized()
        else:
            w.showNormal()
            w.restoreGeometry(before.geometry)

    def controls_hidden(self) -> bool:
        """Whether the user hid the controls (what they were before presentation mode)."""
        if self.before is not None:
            return not self.before.dock_visible
        return not self.dock.isVisibleTo(self.window)


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

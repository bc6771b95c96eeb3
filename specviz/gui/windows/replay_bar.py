"""The replay bar: play / pause, speed, a round back or on, and a slider over the rounds.

Shown at the bottom of the window while an ordinary recording is on screen (a race plays in
the race window). The keys a presenter already uses drive it: F5 plays, F6 pauses, F10 and
the clicker's forward keys (PgDn, →, Space) give one round more, PgUp / ← one round less.
While a recording plays, the controls panel shows the recording's settings, read-only; a live
run, Stop or ✕ Close leaves the replay and gives the user's own settings back.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFont
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QSlider,
    QToolBar,
    QWidget,
)

from specviz.core.events import RunStarted
from specviz.gui.look.style import UI_POINT_SIZE
from specviz.gui.replay.player import ROUND_BY_ROUND, SPEEDS, Replayer, speed_text
from specviz.gui.stage.race_view import user_text
from specviz.gui.views.zoom import Zoom
from specviz.gui.windows.controls import ControlsPanel, WideComboBox

BAR_POINT_SIZE = UI_POINT_SIZE + 4  # read from the back row, like the run's own numbers
BAR_HEIGHT = 48  # px: buttons a presenter hits without looking
SPEED_CHOICES = (*SPEEDS, ROUND_BY_ROUND)
# A seek rebuilds the view from the run's start: ~0.1 s for a short run, ~0.6 s at 3,000
# rounds (a busy 2-core machine). Longer runs seek when the slider is let go, not per pixel.
TRACK_MAX = 200


class ReplayBar(QWidget):
    """The controls of one Replayer; redrawn from its ``changed`` signal."""

    close_requested = Signal()

    def __init__(self, replayer: Replayer, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.replayer = replayer
        font = QFont()
        font.setPointSize(BAR_POINT_SIZE)
        font.setBold(True)
        self.setFont(font)

        def button(text: str, tip: str, slot: Any) -> QPushButton:
            b = QPushButton(text)
            b.setToolTip(tip)
            b.setFont(font)
            b.setMinimumHeight(BAR_HEIGHT)
            b.setFocusPolicy(Qt.FocusPolicy.NoFocus)  # the clicker's keys stay the window's
            b.clicked.connect(slot)
            return b

        self.back_button = button("◀◀ Back", "One round back (PgUp, ←)", replayer.step_back)
        self.play_button = button("▶ Play", "Play (F5) / Pause (F6)", replayer.toggle_pause)
        self.play_button.setMinimumWidth(
            self.play_button.fontMetrics().horizontalAdvance("❚❚ Pause") + 36)
        self.step_button = button("Step ▶▶", "One round more (F10, PgDn, →, Space)",
                                  replayer.step)
        self.speed = WideComboBox()  # as wide as "0.25×"; its list shows "round by round"
        self.speed.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.speed.setMinimumContentsLength(5)
        self.speed.setFont(font)
        self.speed.setMinimumHeight(BAR_HEIGHT)
        self.speed.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        for value in SPEED_CHOICES:
            self.speed.addItem(speed_text(value), value)
        self.speed.setToolTip("Speed: times the recorded timing (each round takes the time it "
                              "took); round by round: a round only on Step (F10)")
        self.speed.setCurrentIndex(SPEED_CHOICES.index(1.0))
        self.speed.activated.connect(self._on_speed_chosen)
        self.slider = QSlider(Qt.Orientation.Horizontal)
        self.slider.setMinimumHeight(BAR_HEIGHT)
        self.slider.setMinimumWidth(240)
        self.slider.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.slider.setToolTip("Drag to any round: the views show the run as it was then")
        self.slider.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.slider.setStyleSheet(
            "QSlider::groove:horizontal { height: 14px; background: #C9D3DD; "
            "border-radius: 7px; }"
            "QSlider::sub-page:horizontal { background: #0072B2; border-radius: 7px; }"
            "QSlider::handle:horizontal { background: #0B2E4F; width: 30px; "
            "margin: -10px 0; border-radius: 15px; }")
        self.slider.valueChanged.connect(self._on_slider_changed)
        self.where = QLabel()
        self.where.setFont(font)
        self.where.setMinimumWidth(self.where.fontMetrics().horizontalAdvance(
            "round 888 / 888 · paused") + 8)
        self.close_button = button("✕ Close", "Leave the replay: your own settings come back",
                                   self.close_requested.emit)

        row = QHBoxLayout(self)
        row.setContentsMargins(8, 4, 8, 4)
        row.setSpacing(10)
        for widget in (self.back_button, self.play_button, self.step_button, self.speed):
            row.addWidget(widget)
        row.addWidget(self.slider, 1)
        row.addWidget(self.where)
        row.addWidget(self.close_button)
        self._updating = False
        replayer.changed.connect(self.refresh)
        self.refresh()

    def set_scale(self, factor: float) -> None:
        """Zoom (Ctrl +/-, presentation mode): the bar grows with the run's views."""
        texts: tuple[QWidget, ...] = (self, self.back_button, self.play_button,
                                      self.step_button, self.speed, self.where,
                                      self.close_button)
        for widget in texts:
            font = widget.font()
            font.setPointSizeF(BAR_POINT_SIZE * factor)
            widget.setFont(font)
        for control in (self.back_button, self.play_button, self.step_button, self.speed,
                        self.slider, self.close_button):
            control.setMinimumHeight(round(BAR_HEIGHT * factor))
        self.play_button.setMinimumWidth(
            self.play_button.fontMetrics().horizontalAdvance("❚❚ Pause") + 36)
        self.where.setMinimumWidth(self.where.fontMetrics().horizontalAdvance(
            "round 888 / 888 · paused") + 8)

    def _on_speed_chosen(self, index: int) -> None:
        self.replayer.set_speed(self.speed.itemData(index))

    def _on_slider_changed(self, value: int) -> None:
        if not self._updating:
            self.replayer.seek(value)

    def refresh(self) -> None:
        """Buttons, slider and label from the replayer's state."""
        r = self.replayer
        self._updating = True
        try:
            self.slider.setMaximum(r.rounds_known)
            self.slider.setTracking(r.rounds_known <= TRACK_MAX)
            self.slider.setValue(r.rounds_shown)
        finally:
            self._updating = False
        self.play_button.setText("▶ Play" if r.paused or r.at_end else "❚❚ Pause")
        self.back_button.setEnabled(r.rounds_shown > 0)
        self.step_button.setEnabled(r.position < len(r.events))
        if r.speed is not None and r.speed in SPEED_CHOICES:
            self.speed.setCurrentIndex(SPEED_CHOICES.index(r.speed))
        following = r.live and not r.ended
        self.speed.setEnabled(not following)  # a stream shows what comes as it comes
        state = ("live" if following and not r.paused and r.position >= len(r.events)
                 else "done" if r.at_end
                 else "F10: next" if r.speed == ROUND_BY_ROUND and not following
                 else "paused" if r.paused else "playing")
        total = f"{r.rounds_known}" if r.ended or following else f"{r.rounds_known}…"
        self.where.setText(f"round {r.rounds_shown} / {total} · {state}")


class ReplayToolbar(QToolBar):
    """The bar at the bottom of a main window, shown while a recording is on screen; it shows
    the recording's settings in ``controls`` (read-only) and says what plays through
    :attr:`said` (the status line) and :attr:`corner` (the state corner)."""

    said = Signal(str)
    corner = Signal(str)  # "idle" once the replay is left: the window's live run may own it

    def __init__(self, replayer: Replayer, controls: ControlsPanel, zoom: Zoom,
                 parent: QWidget | None = None) -> None:
        super().__init__("Replay", parent)
        self.replayer = r = replayer
        self.controls = controls
        self.bar = bar = ReplayBar(r)
        self.setObjectName("replay_bar")
        self.setMovable(False)
        self.setFloatable(False)
        self.toggleViewAction().setVisible(False)  # it comes and goes with a recording
        self.addWidget(bar)
        self.hide()
        zoom.changed.connect(bar.set_scale)
        r.changed.connect(self._on_changed)
        r.run_shown.connect(self._on_run_shown)
        r.left.connect(controls.release)
        bar.close_requested.connect(r.stop)

    def _on_changed(self) -> None:
        r = self.replayer
        self.setVisible(r.loaded)
        if r.loaded:
            self.said.emit(r.status_text())
            # The corner says what plays, not "idle" (the worker's states are for live runs).
            self.corner.emit("replay ended" if r.at_end
                             else "❚❚ replay paused" if r.paused else "▶ replaying")
        else:
            self.corner.emit("idle")

    def _on_run_shown(self, started: RunStarted) -> None:
        pair, words = started.pair, user_text(started.prompt)
        self.controls.show_recording(started.settings, (pair.draft, pair.target, pair.device),
                                     baseline=started.mode == "baseline", prompt=words,
                                     chat=words != started.prompt.strip())


__all__ = ["ReplayBar", "ReplayToolbar"]

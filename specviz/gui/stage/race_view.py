"""The race view: the speculative run and the target alone, side by side on one shared clock.

The two runs were measured one after the other (they would compete for the same cores);
each pane plays its own run from its own timestamps, and both follow one clock, so the
audience sees them as if they had run at once. At the end: the measured speedup and, at
T = 0, whether the two texts are identical.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from PySide6.QtCore import QSize, Qt, QTimer, Signal
from PySide6.QtGui import QFont, QResizeEvent, QShowEvent
from PySide6.QtWidgets import (
    QComboBox,
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSlider,
    QVBoxLayout,
    QWidget,
)

from specviz.core.events import Event
from specviz.core.race import Race, Side, as_race, race_so_far
from specviz.gui.geometry import available
from specviz.gui.look.style import BLUISH_GREEN, FATES, GREY, INK, VERMILLION, char_format
from specviz.gui.look.themes import LIGHT, Theme, apply_palette
from specviz.gui.views.labels import k_text
from specviz.gui.views.run_view import legend_html
from specviz.gui.views.stream import REJECTED_SCALE, TokenStreamView
from specviz.gui.views.zoom import BASE_PT

FRAME_MS = 33
REFERENCE = QSize(1600, 950)  # the window the race's type is made for (scale 1)
FRAME = QSize(0, 40)  # a title bar and frame: a window sized to the free area still fits it
MIN_SCALE = 0.6


def fit_scale(size: QSize) -> float:
    """The type's scale for a window of ``size``: its share of REFERENCE, at most 1."""
    share = min(size.width() / REFERENCE.width(), size.height() / REFERENCE.height())
    return max(MIN_SCALE, min(1.0, share))

PANE_TEXT_POINTS = 30  # 40 px at 96 dpi: the back row of a room reads it on a 1920 × 1080 projector
SPEEDS = (0.25, 0.5, 1.0, 2.0, 4.0)
NOTE = ("Measured one after the other on this machine (speculative first, then the target "
        "alone: run together they would share the same cores), and replayed here side by "
        "side on one clock from each run's own timestamps.")


CHAT_USER = (
    re.compile(r"<\|im_start\|>user\n(.*?)<\|im_end\|>", re.S),  # ChatML (SmolLM2, Qwen)
    re.compile(r"<\|user\|>\n?(.*?)(?:</s>|<\|end\|>|<\|assistant\|>)", re.S),  # Zephyr, Phi
    re.compile(r"\[INST\](.*?)\[/INST\]", re.S),  # Llama 2, Mistral
    re.compile(r"<\|start_header_id\|>user<\|end_header_id\|>\n*(.*?)<\|eot_id\|>", re.S),
)


def user_text(prompt: str) -> str:
    """The user's message inside a chat-templated prompt (the whole prompt if none is found)."""
    for pattern in CHAT_USER:
        found = pattern.findall(prompt)
        if found:
            return str(found[-1]).strip()
    return prompt.strip()


def _font(points: int, bold: bool = False) -> QFont:
    font = QFont()
    font.setPointSize(points)
    font.setBold(bold)
    return font


@dataclass(frozen=True)
class PaneState:
    """What one pane shows: for tests and for exporting frames."""

    title: str
    rounds: int
    tokens: int
    clock: str
    tokens_per_s: str
    status: str
    text: str


@dataclass(frozen=True)
class RaceState:
    """What the whole race view shows at one moment of the shared clock."""

    time_s: float
    speculative: PaneState
    baseline: PaneState
    speedup: str
    identity: str


class RacePane(QFrame):
    """One side: its title, its own clock, tokens/s and token count, and its coloured text."""

    def __init__(self, kind: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.kind = kind  # "speculative" or "baseline"
        fate = FATES["accepted" if kind == "speculative" else "target"]
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setObjectName("pane")
        self.setStyleSheet(f"#pane {{ border: 4px solid {fate.foreground}; border-radius: 6px; }}")
        self.title = QLabel("Speculative" if kind == "speculative" else "Target alone")
        self.title.setFont(_font(18, bold=True))
        self.title.setStyleSheet(f"color: {fate.foreground}")
        self.title.setWordWrap(True)
        self.clock = QLabel("0.00 s")
        self.rate = QLabel("— tok/s")
        self.count = QLabel("0 tokens")
        self.status = QLabel("waiting")
        numbers = QGridLayout()
        for col, (label, name, size) in enumerate(((self.clock, "elapsed (own clock)", 34),
                                                    (self.rate, "tokens / s", 34),
                                                    (self.count, "generated", 24))):
            label.setFont(_font(size, bold=True))
            label.setStyleSheet(f"color: {INK}")
            label.setAlignment(Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignBottom)
            caption = QLabel(name)
            caption.setFont(_font(18))
            caption.setStyleSheet(f"color: {GREY}")
            caption.setAlignment(Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignTop)
            numbers.addWidget(label, 0, col)
            numbers.addWidget(caption, 1, col)
        self.status.setFont(_font(18, bold=True))
        self.stream = TokenStreamView(strike_delay_s=0.3)
        self._enlarge(self.stream, PANE_TEXT_POINTS)
        self.stream.setPlaceholderText("")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 8, 10, 8)
        layout.addWidget(self.title)
        layout.addLayout(numbers)
        layout.addWidget(self.status)
        layout.addWidget(self.stream, 1)
        self.side: Side | None = None
        self.shown = 0  # rounds drawn in the stream
        self.tokens = 0  # tokens generated by the shown rounds
        self.finished_first = False  # set by the race view once both durations are known
        self.theme = LIGHT
        self.scale = 1.0  # RaceView.set_scale: the window's size, not the user's zoom

    def set_theme(self, theme: Theme) -> None:
        """Border, title, numbers, captions and the stream in ``theme``."""
        self.theme = theme
        kind = "accepted" if self.kind == "speculative" else "target"
        # A style sheet on the pane: its text view takes its ground from the sheet, not the
        # palette (it stayed white in the dark theme).
        self.setStyleSheet(f"#pane {{ border: 4px solid {theme.ink(kind)}; "
                           f"border-radius: 6px; }} QTextEdit {{ background: {theme.base}; "
                           f"color: {theme.text}; }}")
        self.title.setStyleSheet(f"color: {theme.ink(kind)}")
        for label in self.findChildren(QLabel):
            if label is self.title:
                continue
            if label is self.status:
                label.setStyleSheet(f"color: {theme.text}")
                continue
            big = label.font().pointSize() > 20
            label.setStyleSheet(f"color: {theme.text if big else theme.muted}")
        self.stream.set_theme(theme)
        self._enlarge(self.stream, PANE_TEXT_POINTS * self.scale, theme)

    @staticmethod
    def _enlarge(stream: TokenStreamView, points: float, theme: Theme = LIGHT) -> None:
        """The stream's token formats at ``points`` (the same fates, larger type)."""
        formats = getattr(stream, "_formats", None)
        if not isinstance(formats, dict):
            return
        for kind in list(formats):
            fate = "rejected" if kind == "rejected_pending" else kind
            fmt = char_format(fate, points, theme.fates[fate])
            if kind == "rejected_pending":
                fmt.setFontStrikeOut(False)
            elif kind == "rejected":
                fmt.setFontPointSize(points * REJECTED_SCALE)
            formats[kind] = fmt

    def set_scale(self, scale: float) -> None:
        """The text's type for a window of this share of the reference size; drawn again."""
        self.scale = scale
        self._enlarge(self.stream, PANE_TEXT_POINTS * scale, self.theme)
        self.set_side(self.side)  # the next show_time draws the text in the new type

    def set_side(self, side: Side | None) -> None:
        """Show another run (or none); the stream restarts from its prompt."""
        self.side = side
        self.shown = self.tokens = 0
        self.stream.clear_run()
        if side is None:
            self.title.setText("Speculative" if self.kind == "speculative" else "Target alone")
            return
        # The prompt is shown once, above both panes: each pane holds only what its run wrote.
        pair, s = side.started.pair, side.started.settings
        if self.kind == "speculative":
            self.title.setText(f"Speculative: {pair.draft} → {pair.target}, "
                               f"{k_text(s, [r.k for r in side.rounds])}")
        else:
            self.title.setText(f"Target alone: {pair.target}, one pass per token")

    def show_time(self, t: float, waiting: str = "") -> None:
        """Draw the run as it stood at time ``t`` of its own clock."""
        side = self.side
        if side is None:
            self.clock.setText("0.00 s")
            self.rate.setText("—")
            self.count.setText("0")
            self.status.setText(waiting or "waiting")
            return
        n = side.rounds_at(t)
        if n < self.shown:  # the clock went back: redraw from the prompt
            self.set_side(side)
        if n > self.shown:
            self.stream.add_rounds(list(side.rounds[self.shown:n]), now=t)
            self.shown = n
        else:
            self.stream.add_rounds([], now=t)  # strikes that fell due
        done = side.done_at(t)
        own = min(t, side.duration_s) if side.finished is not None else t
        self.clock.setText(f"{own:.2f} s")
        rate = side.tokens_per_s_at(t)
        self.rate.setText(f"{rate:.1f}" if rate > 0 else "—")
        self.tokens = side.tokens_at(t)
        self.count.setText(f"{self.tokens}")
        if side.failed is not None and n == len(side.rounds):
            self.status.setText(f"failed: {side.failed.message}")
        elif done:
            first = " — finished first" if self.finished_first else ""
            self.status.setText(f"✔ done in {side.duration_s:.2f} s{first}")
        elif side.finished is None and n == len(side.rounds):
            self.status.setText("running (measuring now)…")
        else:
            self.status.setText("running")

    def state(self) -> PaneState:
        return PaneState(self.title.text(), self.shown, self.tokens, self.clock.text(),
                         self.rate.text(), self.status.text(), self.stream.toPlainText())


class RaceView(QWidget):
    """Two panes on one shared clock, with the measured speedup and the T = 0 identity check."""

    time_changed = Signal(float)

    def __init__(self, parent: QWidget | None = None, frame_ms: int = FRAME_MS) -> None:
        super().__init__(parent)
        self.events: list[Event] = []
        self.race: Race | None = None
        self.time_s = 0.0
        self.speed = 1.0
        self.playing = False
        self._last_tick = 0.0

        self.heading = QLabel("Race: speculative decoding vs the target alone — same prompt, "
                              "seed and settings")
        self.heading.setFont(_font(20, bold=True))
        self.heading.setWordWrap(True)
        self.note = QLabel(NOTE)
        self.note.setFont(_font(18))
        self.note.setWordWrap(True)
        self.note.setStyleSheet("color: #333333")
        self.prompt = QLabel("")
        self.prompt.setFont(_font(18))
        self.prompt.setWordWrap(True)
        self.prompt.setTextFormat(Qt.TextFormat.PlainText)
        self.legend = QLabel(legend_html())
        self.legend.setFont(_font(18, bold=True))
        self.legend.setWordWrap(True)  # one line was 1,742 px: the window opened 1758 wide

        self.panes = {"speculative": RacePane("speculative"), "baseline": RacePane("baseline")}
        row = QHBoxLayout()
        row.addWidget(self.panes["speculative"], 1)
        row.addWidget(self.panes["baseline"], 1)

        self.result = QLabel("Speedup: when both runs have finished")
        self.result.setFont(_font(30, bold=True))
        self.result.setWordWrap(True)
        self.result.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.identity = QLabel("")
        self.identity.setFont(_font(24, bold=True))
        self.identity.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.identity.setWordWrap(True)
        self.shared_clock = QLabel("shared clock 0.00 s")
        self.shared_clock.setFont(_font(16, bold=True))

        self.play_button = QPushButton("▶ Play")
        self.play_button.clicked.connect(self.toggle_play)
        self.restart_button = QPushButton("⟲ Restart")
        self.restart_button.clicked.connect(self.restart)
        self.speed_box = QComboBox()
        for s in SPEEDS:
            self.speed_box.addItem(f"{s:g}×", s)
        self.speed_box.setCurrentIndex(SPEEDS.index(1.0))
        self.speed_box.setToolTip("Playback speed, relative to the measured timing")
        self.speed_box.currentIndexChanged.connect(
            lambda i: setattr(self, "speed", float(self.speed_box.itemData(i))))
        self.slider = QSlider(Qt.Orientation.Horizontal)
        self.slider.setRange(0, 1000)
        self.slider.sliderMoved.connect(self._on_slider_moved)
        self.controls_row = QWidget()  # hidden in exported frames: a slide has no buttons
        controls = QHBoxLayout(self.controls_row)
        controls.setContentsMargins(0, 0, 0, 0)
        for w in (self.play_button, self.restart_button, self.speed_box):
            w.setFont(_font(14, bold=True))
            controls.addWidget(w)
        controls.addWidget(self.slider, 1)
        controls.addWidget(self.shared_clock)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 8, 8, 8)
        layout.addWidget(self.heading)
        layout.addWidget(self.note)
        layout.addWidget(self.prompt)
        layout.addWidget(self.legend)
        layout.addLayout(row, 1)
        layout.addWidget(self.result)
        layout.addWidget(self.identity)
        layout.addWidget(self.controls_row)

        self.timer = QTimer(self)
        self.timer.setInterval(frame_ms)
        self.timer.timeout.connect(self._on_timeout)
        self.theme = LIGHT  # set_theme
        # The type follows the window's size, as a slide's does (fit_scale): a 1366 × 768
        # screen gets the whole race at 0.78 of its 1600 × 950 type, a projector all of it.
        self.scale = 1.0
        self._fitted = False  # the window sized to its screen once, at its first show
        self._rescale = QTimer(self)
        self._rescale.setSingleShot(True)
        self._rescale.setInterval(100)  # once a resize pauses: the panes are drawn again
        self._rescale.timeout.connect(lambda: self.set_scale(fit_scale(self.window().size())))
        self._draw()

    def set_scale(self, scale: float) -> None:
        """Every text at ``scale`` of its size (1: the 1600 × 950 window it was made for)."""
        if abs(scale - self.scale) < 0.01:
            return
        self.scale = scale
        widgets = [self, *self.findChildren(QWidget)]
        for widget in widgets:  # bases first: a parent's font reaches children
            if widget.property(BASE_PT) is None and widget.font().pointSizeF() > 0:
                widget.setProperty(BASE_PT, widget.font().pointSizeF())
        for widget in widgets:
            base = widget.property(BASE_PT)
            if base is not None:
                font = widget.font()
                font.setPointSizeF(float(base) * scale)
                widget.setFont(font)
        for pane in self.panes.values():
            pane.set_scale(scale)
            if self.race is None and pane.side is not None:  # live: what was measured so far
                pane.show_time(pane.side.duration_s)
        self._draw()

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 - Qt override
        super().showEvent(event)
        if not self._fitted:  # first shown: the window within its screen, type to match
            self._fitted = True
            window = self.window()
            area = available(window)
            if window.width() > area.width() or window.height() > area.height():
                window.resize(window.size().boundedTo(area.size() - FRAME))
            self.set_scale(fit_scale(window.size()))

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        if self._fitted:
            self._rescale.start()

    def set_theme(self, theme: Theme) -> None:
        """Both panes, the legend, the note and the result lines in ``theme``."""
        self.theme = theme
        apply_palette(self, theme)
        self.legend.setText(legend_html(theme))
        self.note.setStyleSheet(f"color: {theme.text}")
        for pane in self.panes.values():
            pane.set_theme(theme)
            if pane.side is not None:  # the text drawn again in the new colours
                side = pane.side
                pane.set_side(side)
        self._draw()

    # -- feeding -----------------------------------------------------------------------------

    def load(self, events: list[Event]) -> bool:
        """Show a finished race (a race recording); False if the events are not a race."""
        race = as_race(events)
        if race is None:
            return False
        self.events = list(events)
        self.race = race
        self.panes["speculative"].set_side(race.speculative)
        self.panes["baseline"].set_side(race.baseline)
        self._show_prompt(race.speculative)
        both = race.complete
        self.panes["speculative"].finished_first = both and \
            race.speculative.duration_s < race.baseline.duration_s
        self.panes["baseline"].finished_first = both and \
            race.baseline.duration_s < race.speculative.duration_s
        self.set_time(0.0)
        return True

    def apply(self, event: Event) -> None:
        """Live: events of a race as they are measured; once both runs end, it replays."""
        self.events.append(event)
        race = as_race(self.events)
        if race is not None and race.complete:
            self.load(self.events)
            self.play()
            return
        spec, base = race_so_far(self.events)
        for kind, side in (("speculative", spec), ("baseline", base)):
            pane = self.panes[kind]
            if side is None:
                if pane.side is not None:
                    pane.set_side(None)
                pane.show_time(0.0, "runs after the speculative run (same cores)"
                               if kind == "baseline" else "waiting")
                continue
            if pane.side is None or pane.side.started is not side.started:
                pane.set_side(side)
                if kind == "speculative":
                    self._show_prompt(side)
            pane.side = side
            pane.show_time(side.duration_s)
        self.result.setText("Measuring… then both runs replay together")
        self.identity.setText("")

    def _show_prompt(self, side: Side | None) -> None:
        text = user_text(side.started.prompt) if side is not None else ""
        self.prompt.setText(f"Prompt (both runs): “{text}”" if text else "")

    def clear(self) -> None:
        self.pause()
        self.events, self.race, self.time_s = [], None, 0.0
        for pane in self.panes.values():
            pane.set_side(None)
        self._show_prompt(None)
        self._draw()

    # -- the shared clock --------------------------------------------------------------------

    @property
    def duration_s(self) -> float:
        return self.race.duration_s if self.race is not None else 0.0

    def set_time(self, t: float) -> None:
        """Move both panes to time ``t`` of the shared clock."""
        self.time_s = max(0.0, min(t, self.duration_s))
        self._draw()
        self.time_changed.emit(self.time_s)

    def play(self) -> None:
        if self.race is None:
            return
        if self.time_s >= self.duration_s:
            self.set_time(0.0)
        self.playing = True
        self._last_tick = time.monotonic()
        self.timer.start()
        self.play_button.setText("❚❚ Pause")

    def pause(self) -> None:
        self.playing = False
        self.timer.stop()
        self.play_button.setText("▶ Play")

    def toggle_play(self) -> None:
        self.pause() if self.playing else self.play()

    def restart(self) -> None:
        self.set_time(0.0)
        self.play()

    def _on_timeout(self) -> None:
        now = time.monotonic()
        dt, self._last_tick = now - self._last_tick, now
        self.set_time(self.time_s + dt * self.speed)
        if self.time_s >= self.duration_s:
            self.pause()

    def _on_slider_moved(self, value: int) -> None:
        self.set_time(self.duration_s * value / 1000)

    # -- drawing -----------------------------------------------------------------------------

    def _draw(self) -> None:
        race, t = self.race, self.time_s
        if race is None:
            for pane in self.panes.values():
                pane.show_time(0.0)
            self.result.setText("Speedup: when both runs have finished")
            self.identity.setText("")
            self.shared_clock.setText("shared clock 0.00 s")
            return
        for pane in self.panes.values():
            pane.show_time(t)
        self.shared_clock.setText(f"shared clock {t:.2f} s of {race.duration_s:.2f} s")
        if race.duration_s > 0:
            self.slider.blockSignals(True)
            self.slider.setValue(round(1000 * t / race.duration_s))
            self.slider.blockSignals(False)
        self.result.setText(self.result_text(race, t))
        self.result.setStyleSheet(f"color: {self.theme.text}")
        text, colour = self.identity_text(race, t)
        colour = {VERMILLION: self.theme.bad, GREY: self.theme.muted,
                  BLUISH_GREEN: self.theme.good}.get(colour, colour)
        self.identity.setText(text)
        self.identity.setStyleSheet(f"color: {colour}")

    @staticmethod
    def result_text(race: Race, t: float) -> str:
        if not race.complete:
            return "Speedup: one run did not finish, so none is measured"
        if t < race.duration_s:
            spec_n, base_n = race.speculative.tokens_at(t), race.baseline.tokens_at(t)
            return f"{spec_n} vs {base_n} tokens so far · speedup when both have finished"
        spec = race.speculative.finished
        base = race.baseline.finished
        assert spec is not None and base is not None
        return (f"Measured speedup {race.speedup:.2f}×  "
                f"({spec.summary.tokens_per_s:.1f} vs {base.summary.tokens_per_s:.1f} tokens/s)")

    @staticmethod
    def identity_text(race: Race, t: float) -> tuple[str, str]:
        """The identity line and its colour."""
        settings = race.speculative.started.settings
        temp = settings.temperature
        lenience = getattr(settings, "lenience", 1.0)
        if lenience < 1.0:
            return (f"lenience {lenience:g} < 1: the speculative text no longer follows the "
                    "target, so no identity is expected", VERMILLION)
        if not race.greedy:
            return (f"T = {temp:g}: the texts differ by design (same distribution, other "
                    "draws); identity is checked at T = 0", GREY)
        if t < race.duration_s or race.identical is None:
            return "T = 0: identical text? checked when both have finished", GREY
        if race.identical:
            return "T = 0: identical text ✓ (exact: same tokens as the target alone)", \
                BLUISH_GREEN
        where = race.first_difference()
        return (f"T = 0: identical text ✗ (they part at output token {(where or 0) + 1})",
                VERMILLION)

    def state(self) -> RaceState:
        """What the view shows now (for tests and frame exports)."""
        return RaceState(round(self.time_s, 6), self.panes["speculative"].state(),
                         self.panes["baseline"].state(), self.result.text(),
                         self.identity.text())


__all__ = ["NOTE", "PaneState", "RacePane", "RaceState", "RaceView"]

"""RunView: every view of a run, fed by one entry point, ``apply(event)``, drawn on a timer.

Live runs, replays of JSON-lines recordings and tests all drive it the same way: with
``specviz.core.events`` objects, never with the engine.
"""

from __future__ import annotations

import copy
import time
from collections import deque
from collections.abc import Callable
from html import escape
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QEvent, Qt, QTimer, Signal
from PySide6.QtGui import QFont, QFontMetrics, QResizeEvent, QShowEvent
from PySide6.QtWidgets import (
    QAbstractScrollArea,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSplitter,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from specviz.core.events import Event, Round, RunFailed, RunFinished, RunStarted
from specviz.core.record import RunRecord
from specviz.gui.look.style import FATES, STREAM_KINDS, STREAM_POINT_SIZE, UI_POINT_SIZE
from specviz.gui.look.themes import LIGHT, Theme, apply_palette
from specviz.gui.views.bars import RoundBarsView
from specviz.gui.views.glossary import legend_tooltip
from specviz.gui.views.labels import TOOLTIP_CHARS, breakable, capped, k_text, vocab_text
from specviz.gui.views.staging import StagePanel, Stager
from specviz.gui.views.stats import AcceptanceView, SpeedView
from specviz.gui.views.stream import TokenStreamView
from specviz.gui.views.tree import TreeView, is_tree

if TYPE_CHECKING:  # torch comes with it: imported on the load thread, not at start-up
    from specviz.core.cross_tokenizer import SharedVocab, VocabReport

BANNER_CHARS = 160  # two lines at 1366 px in the app font: the views keep their room
FRAME_MS = 33  # ~30 fps: data arrives by signal, drawing happens only here
# What one frame of the timer may draw, so a frame's work never grows with what arrived
# (a full-speed replay hands hundreds of rounds a frame; a live run brings a round or two):
FRAME_FRAGMENTS = 160  # tokens (kept or struck) appended to the stream; the rest wait a frame
FRAME_PANELS = 6  # p-vs-q panels drawn (K + 1 a round); at K = 16 a round takes three frames
STATS_S = 0.1  # the acceptance plots and numbers redraw at most this often
STREAM_COLUMNS = 24  # characters of text at least beside the plots (else they go under it)
RECENT_TOKENS = 256  # the target tokens the share outside the shared vocabulary counts

STOP_REASONS = {
    "eos": "the model ended its answer (EOS)",
    "max_new_tokens": "reached max new tokens",
    "stopped": "stopped",
    "context": "reached the model's context length",
    "error": "failed",
}


Splitter = Callable[[str], list[int]]  # text -> where the draft's tokens start (characters)


def splitter(tokenizer: Any) -> Splitter:
    """Where ``tokenizer`` starts a token in a text. Its first use copies it: the decoder's
    thread encodes with the original, and a fast tokenizer is not to be shared between
    threads."""
    own: list[Any] = []

    def split(text: str) -> list[int]:
        if not own:
            own.append(copy.deepcopy(tokenizer))
        enc = own[0](text, add_special_tokens=False, return_offsets_mapping=True)
        # A character split over several byte tokens: their offsets are its own, each time.
        return sorted({start for start, end in enc["offset_mapping"] if end > start})

    return split


def fragments(rnd: Round) -> int:
    """Tokens a round adds to the stream: its decided drafts (kept or struck) and the extra."""
    return len(rnd.drafted) + 1


def legend_html(theme: Theme = LIGHT, notes: bool = True) -> str:
    """The legend: each fate drawn exactly as in the stream (colour and decoration)."""
    parts = []
    for kind in STREAM_KINDS:
        f = FATES[kind]
        foreground, background = theme.fates[kind]
        deco = []
        if f.strike:
            deco.append("line-through")
        if f.underline:
            deco.append("underline")
        if f.overline:
            deco.append("overline")
        style = (f"color:{foreground}; background:{background}; "
                 f"font-weight:{'900' if f.bold else '700'}; "
                 f"{'font-style:italic;' if f.italic else ''}"
                 f"text-decoration:{' '.join(deco) or 'none'}")
        label = f.label.replace(" ", "&nbsp;")  # a fate never breaks across lines
        parts.append(f"<span style='{style}'>&nbsp;{label}&nbsp;</span>")
    # Plain spaces between the fates: on a narrow window the legend wraps, never clips.
    if not notes:  # presentation: one line (the bars' key says p and q)
        return " &nbsp;".join(parts)
    return (" &nbsp;".join(parts)
            + f" &nbsp; <span style='color:{theme.text}'><b>p</b>&nbsp;=&nbsp;target, "
              f"<b>q</b>&nbsp;=&nbsp;draft,</span> <span style='color:{theme.text}'>"
              "dotted&nbsp;underline&nbsp;=&nbsp;copied&nbsp;by&nbsp;lookup</span>")

INEXACT_WARNING = ("Lenience B = {b:g} < 1: drafts are kept more often than p allows, so this "
                   "output NO LONGER follows the target's distribution (not exact).")


class RunView(QWidget):
    """Token stream, p-vs-q bars, acceptance plots and speed numbers for one run."""

    round_selected = Signal(object)  # int, or None when following the live round
    # A new round's bars begin at most this often (then the newest round; a round begun is
    # drawn to its end). Beginning every round's bars (a round every ~50 ms here) took CPU the
    # decoder needs on this 2-core machine: live runs ran 30.0-32.0 tok/s against 32.1-40.8 at
    # 0.2 s (cost policy; fixed K 4: 25.9-27.3 against 30.0-32.0; benchmarks/app_race.py
    # --live 3, benchmarks/results/2026-11-25-0342-app-race.md). Five rounds a second is still
    # more than a room reads; stepped and staged rounds draw every round.
    BARS_S = 0.2

    def __init__(self, parent: QWidget | None = None, frame_ms: int = FRAME_MS) -> None:
        super().__init__(parent)
        self.presenting = False  # presentation mode's fitted layout (set_presenting)
        self._fitted: int | None = None  # the bars' height the panes were last fitted to
        self.record = RunRecord()
        self.queue: deque[Event] = deque()
        self.selected: int | None = None  # a round the user clicked; None follows the latest
        self.baseline_tokens_per_s: dict[tuple[str, str], float] = {}
        self.user_prompt: str | None = None  # the text the app sent (found in the template)
        self.show_template = False  # the chat template hidden: the user's words only
        # The target's one-token step, timed when a pair loads: (target, device) -> seconds.
        self.target_step_s: dict[tuple[str, str], float] = {}
        self.target_step_kept: set[tuple[str, str]] = set()  # steps from an earlier launch
        # A pair across tokenizers: target -> (draft, the shared vocabulary, the draft's splits).
        self.shared_vocabs: dict[str, tuple[str, SharedVocab, Splitter]] = {}
        self.show_draft_splits = False  # View → the draft's token starts in the stream
        self._dirty = False  # the plots and numbers are behind the record
        self._bars_selected = False  # whether the bars' round was drawn as a selected one
        # Rounds folded into the record that the stream has not drawn yet (a frame's share is
        # bounded); a new run drops them, as the stream clears anyway.
        self.backlog: deque[Round] = deque()
        self._stats_at = -float("inf")  # when a frame last redrew the plots and numbers
        self._bars_at = -float("inf")  # when a frame last began drawing a round's bars
        self._last_heavy = "stats"  # which of bars / stats the last frame drew (they alternate)
        self.frames_drawn = {"bars": 0, "stats": 0, "fragments": 0}  # work done, for tests

        ui_font = QFont()
        ui_font.setPointSize(UI_POINT_SIZE)
        self.banner = QLabel()
        self.banner.setWordWrap(True)
        self.banner.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.theme = LIGHT  # set_theme
        self.banner.setStyleSheet(self._banner_css(LIGHT))
        # Sizes as fonts, not in the style sheet: zoom (gui/views/zoom.py) scales widget fonts.
        banner_font = QFont(ui_font)
        banner_font.setPointSize(15)
        self.banner.setFont(banner_font)
        self.banner_close = QToolButton()
        self.banner_close.setText("✕")
        self.banner_close.setToolTip("Dismiss")
        self.banner_close.clicked.connect(self.clear_error)
        banner_row = QHBoxLayout()
        banner_row.addWidget(self.banner, 1)
        banner_row.addWidget(self.banner_close)
        self.banner.hide()
        self.banner_close.hide()
        # Lenience < 1 changes what the run means: said in the view, in words, all run long.
        self.inexact = QLabel()
        self.inexact.setWordWrap(True)
        self.inexact.setStyleSheet(self._inexact_css(LIGHT))
        inexact_font = QFont(banner_font)
        inexact_font.setPointSize(14)
        inexact_font.setBold(True)
        self.inexact.setFont(inexact_font)
        self.inexact.hide()

        self.legend = QLabel(legend_html())
        legend_font = QFont()
        legend_font.setPointSize(UI_POINT_SIZE + 2)
        legend_font.setBold(True)
        self.legend.setFont(legend_font)
        self.legend.setWordWrap(True)
        self.legend.setToolTip(legend_tooltip())  # what each fate means (Help → Glossary)
        self.info = QLabel("Loading the models… the window works meanwhile.")
        self.info.setFont(ui_font)
        self.info.setWordWrap(True)
        self.follow_button = QPushButton("Follow live round")
        self.follow_button.setFont(ui_font)
        self.follow_button.setToolTip("Show the newest round again (click a token to pick one)")
        self.follow_button.clicked.connect(lambda: self.select_round(None))
        self.follow_button.setEnabled(False)
        info_row = QHBoxLayout()
        info_row.addWidget(self.info, 1)
        info_row.addWidget(self.follow_button)

        self.stream = TokenStreamView()
        self.stream.round_clicked.connect(self._on_round_clicked)
        self.bars = RoundBarsView()
        self.bars.width_changed.connect(self._redraw)  # titles cut to the new width
        # A tree round (drafts with parents other than a chain's) is drawn as a tree instead.
        self.tree = TreeView()
        self.tree.hide()
        self._drawn_round: Round | None = None  # the round the bars or the tree show now
        self.stage_panel = StagePanel()
        self.stager = Stager(self.bars, self.stage_panel, on_phase=self._on_stage_phase,
                             tree=self.tree)
        # A staged round shows only what its phase has revealed: its text, and the plots and
        # numbers without it (the record before it) until its last phase.
        self._before: RunRecord | None = None
        self._revealed: tuple | None = None  # what the stream shows of the staged round
        self.stage_next = False  # the next round unfolds in phases (Step with staging on)
        self._numbers_yield = False  # the speed numbers compact for a staged round (stage)
        self.acceptance = AcceptanceView()
        self.speed = SpeedView()

        # The speed numbers in one row across the width. Below, the text (widest: it is what
        # the audience reads) beside the acceptance plots; then the round's p-vs-q panels,
        # which wrap to rows and scroll when K is large. Nothing here shrinks below what it
        # needs: splitters keep their children's minimum sizes (not collapsible).
        top = QSplitter(Qt.Orientation.Horizontal)
        top.addWidget(self.stream)
        top.addWidget(self.acceptance)
        main = QSplitter(Qt.Orientation.Vertical)
        main.addWidget(top)
        bars_box = QWidget()
        bars_layout = QVBoxLayout(bars_box)
        bars_layout.setContentsMargins(0, 0, 0, 0)
        bars_layout.setSpacing(0)
        bars_layout.addWidget(self.stage_panel)
        bars_layout.addWidget(self.bars, 1)
        bars_layout.addWidget(self.tree, 1)
        main.addWidget(bars_box)
        for splitter in (top, main):
            splitter.setChildrenCollapsible(False)
        # A wider window widens the text, not the plots (a narrow one once left the text at
        # its minimum when the window grew again, the room going to the plots).
        top.setStretchFactor(0, 1)
        top.setStretchFactor(1, 0)
        self.splitters = (top, main)
        self._sized = False

        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.setSpacing(4)
        layout.addLayout(banner_row)
        layout.addWidget(self.inexact)
        layout.addWidget(self.legend)
        layout.addLayout(info_row)
        layout.addWidget(self.speed)
        layout.addWidget(main, 1)

        self.timer = QTimer(self)
        self.timer.setInterval(frame_ms)
        self.timer.timeout.connect(self._on_timeout)
        self.timer.start()

    @staticmethod
    def _banner_css(theme: Theme) -> str:
        fg, bg, border = theme.error
        return (f"QLabel {{ background: {bg}; color: {fg}; border: 3px solid {border}; "
                "padding: 8px; }")

    @staticmethod
    def _inexact_css(theme: Theme) -> str:
        fg, bg, border = theme.warning
        return (f"QLabel {{ background: {bg}; color: {fg}; border: 3px dashed {border}; "
                "padding: 6px; }")

    def set_theme(self, theme: Theme) -> None:
        """Every view of the run in ``theme`` (gui/look/themes.py): palette, text, plots,
        banners."""
        self.theme = theme
        apply_palette(self, theme)
        self.legend.setText(legend_html(theme, notes=not self.presenting))
        self.banner.setStyleSheet(self._banner_css(theme))
        self.inexact.setStyleSheet(self._inexact_css(theme))
        self.stream.set_theme(theme)
        self.acceptance.set_theme(theme)
        self.speed.set_theme(theme)
        self.bars.set_theme(theme)
        self.tree.set_theme(theme)
        if self.stager.active:
            self.stager.draw()

    def set_presenting(self, on: bool) -> None:
        """Presentation mode: the bars fit without scrolling, the formula goes to tooltips,
        and the splitters give each pane what it needs (fit_panes)."""
        self.presenting = on
        self.legend.setText(legend_html(self.theme, notes=not on))
        self.bars.set_fit(on)
        self.tree.set_presenting(on)
        self.speed.set_compact(on or self._numbers_yield)
        self.acceptance.set_compact(on)
        self._draw_stats()  # the numbers' captions, compact or not, before the panes fit
        self.fit_panes()

    def fit_panes(self) -> None:
        """Presenting: the acceptance plots their minimum width and the text the rest; the
        bars all the height their rows need and the text and plots the rest."""
        if not self.presenting:
            return  # the user's proportions (and a state being restored) stay as they are
        top, main = self.splitters
        total = sum(top.sizes())
        least = self.acceptance.minimumSizeHint().width()
        if total:  # the text gets all the width the plots can spare (it is what is read)
            top.setSizes([total - least, least])
        total = sum(main.sizes())
        bars = self.bars
        # The step's caption changes with each step and may take a second line: room for it.
        panel = self.stage_panel
        staged = max(panel.sizeHint().height(), panel.height()) \
            + panel.caption.fontMetrics().lineSpacing() if panel.isVisibleTo(self) else 0
        if total:
            bars.fit_rows(total - top.minimumSizeHint().height() - staged
                          - (bars.wanted_height() - bars.graphics.minimumHeight()))
            if self.stager.active:
                self.stager.draw()  # the staged phase again, with as many candidates
        lower = (self.tree if self.tree.isVisibleTo(self) else self.bars).wanted_height() \
            + staged
        upper = max(top.minimumSizeHint().height(), total - lower)
        if total:
            main.setSizes([upper, total - upper])

    def event(self, event: QEvent) -> bool:
        handled = super().event(event)
        if event.type() == QEvent.Type.LayoutRequest:
            # The parent is a scroll area's filler without a layout (gui/geometry.py): it
            # learns a new minimum (zoom, a second row of numbers) only from this.
            self.updateGeometry()
            if self.stager.active and not self._numbers_yield:
                # A staged phase's lines (its info line, its caption) may take more: the
                # numbers yield then, and the staged round gets what they gave.
                self._make_room()
                if self._numbers_yield and not self.presenting:
                    self._lower_at_least_upper()
        return handled

    def arrange_top(self) -> None:
        """Text beside the plots where both fit; zoomed in on a narrow window, the plots go
        under the text (the text once kept 70 px: a letter a line)."""
        top = self.splitters[0]
        font = QFont(self.stream.font())
        font.setPointSizeF(STREAM_POINT_SIZE * self.stream.scale)
        text = STREAM_COLUMNS * QFontMetrics(font).averageCharWidth()
        wide = self.width() >= text + self.acceptance.minimumSizeHint().width() + 24
        orientation = Qt.Orientation.Horizontal if wide or self.presenting \
            else Qt.Orientation.Vertical
        if top.orientation() != orientation:
            top.setOrientation(orientation)
            top.setSizes([1, 1])  # text and plots half each, then their minimums
            # Stacked, the view scrolls at its minimum height: three lines of text, not one.
            lines = QFontMetrics(font).lineSpacing() * 3 + 2 * self.stream.frameWidth() + 16
            self.stream.setMinimumHeight(0 if wide or self.presenting else lines)
            self.updateGeometry()

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        self.arrange_top()
        if self.presenting:
            # After the splitters have their new sizes (they follow this event).
            QTimer.singleShot(0, self.fit_panes)

    def showEvent(self, event: QShowEvent) -> None:  # noqa: N802 - Qt override
        super().showEvent(event)
        if not self._sized:  # proportions once; the user may drag the splitters after
            self._sized = True
            top, main = self.splitters
            top.setSizes([60 * top.width() // 100, 40 * top.width() // 100])
            # The round's panels get what the text and plots can spare (one row at least).
            upper = max(top.minimumSizeHint().height(), 42 * main.height() // 100)
            main.setSizes([upper, main.height() - upper])

    # -- the one entry point --------------------------------------------------------------

    def apply(self, event: Event) -> None:
        """Queue an event; the next frame draws it (cheap: safe to call per token)."""
        self.queue.append(event)

    def flush(self, now: float | None = None) -> None:
        """Fold every queued event in and draw all of it now (tests, errors, a new template)."""
        now = time.monotonic() if now is None else now
        self._fold(now)
        self._draw_stream(now, limit=None)
        if self._dirty or (not self.stager.active and self._bars_due()):
            self._dirty = False
            self._redraw(bars=False)

    def frame(self, now: float | None = None) -> None:
        """The timer's frame: fold in what arrived, and draw a bounded share of it.

        Folding is O(1) per event. Drawing is bounded whatever arrived: the stream appends
        at most FRAME_FRAGMENTS tokens (the rest next frame); the bars draw the newest round
        only; the plots and numbers redraw at most every STATS_S, and not in the frame that
        drew the bars while both are due (the two costliest redraws take turns). Drawing
        what is left costs nothing when nothing is left: the view ends as ``flush`` leaves it.
        """
        now = time.monotonic() if now is None else now
        self._fold(now)
        self._draw_stream(now, limit=FRAME_FRAGMENTS)
        if self.stager.active:  # staged: its own pace, as flush draws it
            if self._dirty:
                self._dirty = False
                self._redraw(bars=False)
            return
        bars_due = self._bars_due() and (self.bars.drawing or now - self._bars_at >= self.BARS_S)
        stats_due = self._dirty and now - self._stats_at >= STATS_S
        if bars_due and not (stats_due and self._last_heavy == "bars"):
            if self.bars.drawing:  # the round begun in an earlier frame: its next panels
                self.bars.draw_more(FRAME_PANELS)
                self.frames_drawn["bars"] += 1
            else:
                self._draw_bars(limit=FRAME_PANELS)
                self._bars_at = now
            self._last_heavy = "bars"
        elif stats_due:
            self._dirty = False
            self._stats_at = now
            self._draw_stats()
            self._last_heavy = "stats"

    def busy(self) -> bool:
        """Whether events wait to be folded in or drawn (a feeder may hold back meanwhile)."""
        return bool(self.queue or self.backlog)

    def _fold(self, now: float) -> None:
        """Queued events into the record (cheap); their rounds into the stream's backlog."""
        rounds: list[Round] = []
        while self.queue:
            event = self.queue.popleft()
            if isinstance(event, RunStarted):
                rounds = []
                self._begin(event)
            self.record.add(event)
            if isinstance(event, Round):
                rounds.append(event)
                self.backlog.append(event)
            elif isinstance(event, RunFinished):
                self._finish(event)
            elif isinstance(event, RunFailed):
                self.show_error(event.message, event.kind)
            self._dirty = True
        if rounds:
            if self.stage_next and rounds[-1].k > 0:
                self.stage_next = False
                self.stage(rounds[-1])
            else:
                self.stager.stop()

    def _draw_stream(self, now: float, limit: int | None) -> None:
        """Append backlog rounds, up to ``limit`` tokens (None: all; at least one round), and
        strike the rejected drafts that are due."""
        rounds: list[Round] = []
        used = 0
        while self.backlog and (limit is None or not rounds and limit > 0
                                or used + fragments(self.backlog[0]) <= limit):
            rnd = self.backlog.popleft()
            used += fragments(rnd)
            rounds.append(rnd)
        self.frames_drawn["fragments"] += used
        self.stream.add_rounds(rounds, now)

    def _on_timeout(self) -> None:
        self.frame()

    def hold(self) -> None:
        """Stop drawing; events still queue. A race measures its two runs while the window
        draws nothing: drawing a round's bars at 30 fps took ~30% of one of this machine's two
        cores and cost the speculative run more than the target alone (3 races in the app:
        0.89-0.99x drawing, 1.22-1.28x held; the CLI 1.26-1.35x)."""
        self.timer.stop()

    def release(self) -> None:
        """Draw again: the next frames catch up on what queued meanwhile."""
        if not self.timer.isActive():
            self.timer.start()

    # -- state changes ----------------------------------------------------------------------

    def _begin(self, started: RunStarted) -> None:
        self.record = RunRecord()
        self.stager.stop()  # a round staged in the run before: not this run's, nothing to show
        self.backlog.clear()  # a previous run's undrawn rounds: its text goes now anyway
        self.selected = None
        self.follow_button.setEnabled(False)
        self.clear_error()
        self._begin_stream(started, self.show_template)

    def stage(self, rnd: Round) -> None:
        """Unfold ``rnd`` phase by phase in the bars, which take all the room the text spares;
        the stream, plots and numbers show only what each phase has revealed."""
        self.selected = None
        self.bars.stop_drawing()
        if self.stager.active:
            self.stager.stop()  # the round staged before shows whole
        if self.backlog and self.backlog[-1] is rnd:
            self.backlog.pop()  # its text waits for its phases; the rounds before it draw now
        self._draw_stream(time.monotonic(), limit=None)
        events = self.record.events
        at = next((i for i in range(len(events) - 1, -1, -1) if events[i] is rnd), len(events))
        self._before = before = RunRecord()
        for event in events[:at]:
            before.add(event)
        self._revealed = None
        self.stager.start(rnd)
        self._draw_stats()  # the info line and numbers as staged: their lines, measured next
        self._make_room()
        if self.presenting:
            self.fit_panes()  # the step's caption row, and every panel still in view
            return
        self._lower_at_least_upper()

    def _lower_at_least_upper(self) -> None:
        """The text and plots at their least, the staged round below all the rest."""
        main = self.splitters[1]
        self.layout().activate()  # the splitter's new height, what the numbers gave included
        total = sum(main.sizes())
        upper = main.widget(0).minimumSizeHint().height()
        if upper < total:
            main.setSizes([upper, total - upper])

    def _make_room(self) -> None:
        """A staged round whose step row and least below need more than the window gives
        (1366 × 768, a tree round: the view scrolled, the tree went under its least): the
        numbers yield their captions' second lines until staging ends. Only ever this way
        while a round is staged (the info line's lines change with its phases): no see-saw."""
        if not (self.stager.active and not self.presenting and not self._numbers_yield
                and self.isVisible()):
            return
        self.speed.refit()  # one row or two for its new captions, as its next resize would
        if self.staged_height() > self.room():
            self._yield_numbers(True)

    def staged_height(self) -> int:
        """The height the view needs at its width with the staged round's step row (as tall
        as its phases ask) above the tree's or the bars' least, the text and plots at their
        least: the minimum the window's scroll area sees (gui/geometry.py), the step row's
        lines counted."""
        stager, (top, main) = self.stager, self.splitters
        if stager.round is None:
            return 0
        below = self.tree if is_tree(stager.round) else self.bars
        row = self.stage_panel.needed_height(
            main.width(), [p.caption for p in stager.phases],
            any(p.name == "test" for p in stager.phases))
        layout = self.layout()
        # Each line above at its height for this width (wrapped labels), the splitter apart.
        above = layout.totalHeightForWidth(self.width()) if layout.hasHeightForWidth() \
            else layout.totalSizeHint().height()
        above -= layout.itemAt(layout.indexOf(main)).sizeHint().height()
        return (above + top.minimumSizeHint().height() + main.handleWidth() + row
                + below.minimumSizeHint().height())

    def room(self) -> int:
        """The height the window gives the view: its scroll area's (gui/geometry.py), where
        it is in one (the view itself is at least its minimum, scrolling or not)."""
        w = self.parentWidget()
        while w is not None and not isinstance(w, QAbstractScrollArea):
            w = w.parentWidget()
        return w.viewport().height() if w is not None else self.height()

    def _yield_numbers(self, on: bool) -> None:
        """The speed numbers in one row, their captions' detail in tooltips (as presenting),
        while a staged round needs their height (``on``); presenting, always."""
        self._numbers_yield = on
        compact = on or self.presenting
        if self.speed.compact != compact:
            self.speed.set_compact(compact)
            self._draw_stats()  # the captions, short or whole

    def _on_stage_phase(self, rnd: Round, phase: object, end: bool) -> None:
        """The stager showed a phase (or ended, ``phase`` None): the stream shows as much of
        the round as that phase revealed; the plots and numbers take it in at its end."""
        # Only the newest round's text is held back (a past round staged by hand is history).
        current = bool(self.record.rounds) and self.record.rounds[-1] is rnd
        if phase is None:
            self._before = self._revealed = None
            self._yield_numbers(False)  # the numbers whole again (the next stage decides)
            if current:  # staging ended (the next round, a click): the round whole
                self.stream.show_partly(rnd, len(rnd.drafted), True)
            self._dirty = True
            return
        tested, extra = self.stager.revealed()
        state = (rnd.index, tested, extra, end)
        if current and state != self._revealed:
            self._revealed = state
            self.stream.show_partly(rnd, tested, extra)
            self._dirty = True

    def shown_record(self) -> RunRecord:
        """The record the plots, numbers and info line show: without a staged round until
        its last phase (the future stays hidden)."""
        if self._before is not None and not self.stager.at_end:
            return self._before
        return self.record

    def set_show_template(self, on: bool) -> None:
        """Show or hide the chat template: the stream is drawn again from the record."""
        self.show_template = on
        self.flush()
        started = self.record.started
        if started is None:
            return
        self.backlog.clear()  # drawn below with the rest
        self._begin_stream(started, on)
        rounds = list(self.record.rounds)
        staged = self.stager.round
        if staged is not None and rounds and rounds[-1] is staged:
            rounds.pop()  # drawn as far as its phase revealed it, below
        self.stream.add_rounds(rounds, now=0.0)
        self.stream.apply_strikes(now=float("inf"))
        if staged is not None:
            self._revealed = None
            self.stager.draw()

    def output_text(self) -> str:
        """The generated text alone (what "Copy output" copies)."""
        return "".join(r.appended_text for r in self.record.rounds)

    def _finish(self, finished: RunFinished) -> None:
        started = self.record.started
        if started is not None and started.mode == "baseline":
            key = (started.pair.target, started.pair.device)
            # Its decoding time only (a paused or stepped baseline run is no slower).
            self.baseline_tokens_per_s[key] = self.record.speed().tokens_per_s

    def set_target_step(self, target: str, device: str, seconds: float,
                        kept: bool = False) -> None:
        """The target's one-token step, measured at load (or ``kept`` from an earlier launch on
        this machine): the reference of the speed figures."""
        self.target_step_s[(target, device)] = seconds
        if kept:
            self.target_step_kept.add((target, device))
        else:
            self.target_step_kept.discard((target, device))
        self._dirty = True

    def set_shared_vocab(self, target: str, draft: str | None, vocab: SharedVocab | None,
                         draft_tokenizer: Any = None) -> None:
        """A loaded pair's shared vocabulary and the draft's own tokenizer (None: one
        tokenizer), for the info line and the draft's token starts in the stream."""
        if vocab is None or draft is None or draft_tokenizer is None:
            self.shared_vocabs.pop(target, None)
        else:
            self.shared_vocabs[target] = (draft, vocab, splitter(draft_tokenizer))
        self._dirty = True

    def _across(self, started: RunStarted | None, speculative: bool
                ) -> tuple[SharedVocab, Splitter] | None:
        """The loaded pair across tokenizers this run drafted with, if it did."""
        if started is None or not speculative or started.pair.draft is None:
            return None
        found = self.shared_vocabs.get(started.pair.target)
        # The drafter names its draft "<name> (own tokenizer)": this run is that pair's.
        if found is None or not (started.pair.draft == found[0] or
                                 started.pair.draft.startswith(found[0] + " ")):
            return None
        return found[1], found[2]

    def set_show_draft_splits(self, on: bool) -> None:
        """View → Draft's token starts: ticks in the stream where the draft's tokenizer cuts."""
        self.show_draft_splits = on
        self.stream.set_draft_splits(self.stream.draft_splitter, on)

    def _begin_stream(self, started: RunStarted, show_template: bool) -> None:
        self.stream.begin(started, self.user_prompt, show_template)
        across = self._across(started, started.mode == "speculative")
        self.stream.set_draft_splits(across[1] if across is not None else None,
                                     self.show_draft_splits)

    def vocab_report(self) -> VocabReport | None:
        """For a run across tokenizers: the shared vocabulary, measured on the run's recent
        target tokens (the prompt's, then the generated ones)."""
        rec = self.shown_record()
        started = rec.started
        across = self._across(started, rec.speculative)
        if started is None or across is None:
            return None
        vocab = across[0]
        ids: list[int] = []
        for rnd in reversed(rec.rounds):  # the newest first, as far as the report counts
            ids[:0] = rnd.appended_ids
            if len(ids) >= RECENT_TOKENS:
                break
        if len(ids) < RECENT_TOKENS:
            ids[:0] = started.prompt_ids
        return vocab.report(ids, RECENT_TOKENS)

    def show_error(self, message: str, kind: str = "error") -> None:
        """A clear message above the views; what was generated stays on screen."""
        title = {"oom": "Out of memory", "load": "Could not load the models",
                 "tokenizer": "Incompatible tokenizers", "input": "Check the settings",
                 "decoder": "The decoder failed", "recording": "Could not read the recording",
                 "stopped": "Stopped"}.get(kind, "Error")
        # Capped and breakable: a 20,000-character line once made the window 237,013 px wide.
        shown = breakable(escape(capped(message, BANNER_CHARS)))
        self.banner.setText(f"<b>{title}.</b> {shown}")
        self.banner.setToolTip(capped(message, TOOLTIP_CHARS) if shown != message else "")
        self.banner.show()
        self.banner_close.show()

    def clear_error(self) -> None:
        self.banner.hide()
        self.banner_close.hide()
        self.banner.clear()

    def select_round(self, index: int | None) -> None:
        """Show a past round in the bars (None: follow the newest)."""
        if index is not None and not 0 <= index < len(self.record.rounds):
            return
        self.stager.stop()
        self.selected = index
        self.follow_button.setEnabled(index is not None)
        self.round_selected.emit(index)
        self._redraw()

    def _on_round_clicked(self, index: int) -> None:
        self.select_round(index)

    # -- drawing ------------------------------------------------------------------------------

    def shown_round(self) -> Round | None:
        rounds = self.record.rounds
        if self.selected is not None and self.selected < len(rounds):
            return rounds[self.selected]
        return rounds[-1] if rounds else None

    def _redraw(self, bars: bool = True) -> None:
        """Every view from the record; ``bars=False``: the bars only if their round changed."""
        if self.stager.active:
            self.stager.draw()
        elif bars or self._bars_due():
            self._draw_bars()
        self._draw_stats()

    def _bars_due(self) -> bool:
        """Whether the bars show another round than the one to show (or another selection),
        or have panels of theirs still to draw."""
        return (self.bars.drawing or self.shown_round() is not self._drawn_round
                or (self.selected is not None) != self._bars_selected)

    def _draw_bars(self, limit: int | None = None) -> None:
        # A past round picked while the run goes on: the frames after it leave its panels be.
        shown, selected = self.shown_round(), self.selected is not None
        self._drawn_round = shown
        tree = is_tree(shown)
        if tree and not self.tree.isVisibleTo(self) and not self.presenting:
            QTimer.singleShot(0, self._room_for_tree)  # once laid out: the tree's height known
        if tree:
            assert shown is not None
            self.bars.stop_drawing()
            self.tree.show_round(shown, selected=selected)
        else:
            self.bars.show_round(shown, selected=selected, limit=limit)
        self.bars.setVisible(not tree)
        self.tree.setVisible(tree)
        self._bars_selected = selected
        self.frames_drawn["bars"] += 1
        if self.presenting and \
                self.bars.wanted_height() != self._fitted:
            self.fit_panes()  # K changed (rows of panels), or the headline's lines
            self._fitted = self.bars.wanted_height()
            QTimer.singleShot(0, self.fit_panes)  # again once the new text is laid out

    def _room_for_tree(self) -> None:
        """A tree takes the place of the bars: the lower pane grows to the tree's height, as
        far as the text and plots can spare (never shrinks: the user's drag stays)."""
        if not self.tree.isVisibleTo(self):
            return
        main = self.splitters[1]
        sizes = main.sizes()
        total = sum(sizes)
        lower = min(self.tree.wanted_height() + (self.stage_panel.height()
                                                 if self.stage_panel.isVisibleTo(self) else 0),
                    total - main.widget(0).minimumSizeHint().height())
        if total and lower > sizes[1]:
            main.setSizes([total - lower, lower])

    def _draw_stats(self) -> None:
        """The acceptance plots, the speed numbers, the info line and the exactness warning."""
        rec = self.shown_record()
        self.acceptance.update_from(rec, self.selected)
        baseline = step = None
        kept = False
        if rec.started is not None:
            key = (rec.started.pair.target, rec.started.pair.device)
            baseline = self.baseline_tokens_per_s.get(key)
            step = self.target_step_s.get(key)
            kept = key in self.target_step_kept
        self.speed.update_from(rec.speed(baseline, step, step_kept=kept), rec.speculative,
                               rec.tally)
        self.info.setText(self.info_text())
        self._show_exactness()
        self.frames_drawn["stats"] += 1

    def _show_exactness(self) -> None:
        rec = self.record
        inexact = rec.started is not None and rec.speculative and not rec.exact
        if inexact:
            assert rec.started is not None
            self.inexact.setText("⚠ " + INEXACT_WARNING.format(b=rec.started.settings.lenience))
        self.inexact.setVisible(inexact)

    def info_text(self) -> str:
        """One line: pair, mode, settings, progress."""
        rec = self.shown_record()
        if rec.started is None:
            return self.info.text()
        s, pair = rec.started.settings, rec.started.pair
        who = f"{pair.draft or 'lookup'} → {pair.target}" if rec.speculative else \
            f"{pair.target} alone"
        temp = rec.started.temperature_text()
        if rec.speculative:
            kind = k_text(s, rec.k_per_round)
            if s.drafter != "model":
                kind = f"{s.drafter} drafter, {kind}"
            if rec.rounds and rec.rounds[-1].policy_reason:
                kind += f" [{rec.rounds[-1].policy_reason}]"
        parts = [who, kind if rec.speculative else "baseline", temp, f"seed {s.seed}",
                 f"{len(rec.rounds)} rounds", f"{rec.token_count} tokens"]
        report = self.vocab_report()
        self.info.setToolTip(report.text() if report is not None else "")
        if self.presenting:  # one line in the room's type: the pair's long names go
            parts = parts[1:]
        elif report is not None:
            parts.insert(2, vocab_text(report))
        if rec.finished is not None:
            parts.append("done: " + STOP_REASONS.get(rec.finished.stop_reason,
                                                     rec.finished.stop_reason))
        elif rec.failed is not None:
            parts.append("failed")
        return " · ".join(parts)

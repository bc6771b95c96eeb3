"""p vs q for one round: per draft position the top candidates, the drafted token, the verdict."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from html import escape

import pyqtgraph as pg
from PySide6.QtCore import QRectF, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QResizeEvent
from PySide6.QtWidgets import (
    QFrame,
    QGraphicsItem,
    QLabel,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from specviz.core.events import DraftPosition, ExtraToken, Round, TopN
from specviz.gui.look.style import (
    FATES,
    PLOT_POINT_SIZE,
    configure_plots,
    fmt_prob,
    token_label,
)
from specviz.gui.look.themes import LIGHT, Theme, style_plot

configure_plots()

N_SHOW = 6  # candidates per panel: enough to see the shape, few enough to read the labels
AXIS_WIDTH = 124  # px: room for “▶ ” and a 10-character label at the tick font
PANEL_MIN_WIDTH = 280  # px: the label axis plus bars long enough to compare; the title fits
PANEL_MIN_HEIGHT = 230  # px: the title, N_SHOW rows of labels that do not touch, the x axis
LABEL_CHARS = 10
SCROLL_MIN = 100  # px of panels at least (zoomed in: a whole row, RoundBarsView.set_scale)
# Presentation mode (fit): every panel in view, none scrolled to. Fewer candidates per panel
# and narrower panels, so K = 8 (nine panels) fits two rows under the text at 1920 × 1080.
FIT_N_SHOW = 4
FIT_WIDTH = 0.75  # of PANEL_MIN_WIDTH: the label axis keeps its width, the bars give way
FIT_TITLE_CHARS = 7  # the token in a title, presenting: two short lines, not three
BAR = 0.4  # bar thickness; p above q within a candidate's row
# Where the probability axis may end: a few fixed ends, so a new top probability each round
# seldom moves the axis (a range change re-lays out and repaints the plot's axes).
X_ENDS = (0.11, 0.22, 0.33, 0.44, 0.55, 0.77, 1.1)


@dataclass(frozen=True)
class Candidate:
    token_id: int
    text: str
    p: float | None  # None when the token is outside the event's top-N of that distribution
    q: float | None


def candidates(d: DraftPosition, n: int = N_SHOW) -> list[Candidate]:
    """Union of p's and q's top tokens, by p then q, keeping the drafted token in view."""
    p = dict(zip(d.p_top.ids, d.p_top.probs, strict=True))
    q = dict(zip(d.q_top.ids, d.q_top.probs, strict=True))
    text = dict(zip(d.q_top.ids, d.q_top.texts, strict=True))
    text.update(zip(d.p_top.ids, d.p_top.texts, strict=True))
    # An id with p = q = 0 (a special token in a top-N of a peaked distribution) says nothing.
    shown = {i for i in set(p) | set(q) if p.get(i, 0.0) > 0 or q.get(i, 0.0) > 0}
    ids = sorted(shown, key=lambda i: (-p.get(i, 0.0), -q.get(i, 0.0), i))[:n]
    if not ids:
        ids = [d.token_id]
    elif d.token_id not in ids:
        if len(ids) < n:
            ids.append(d.token_id)
        else:
            ids[-1] = d.token_id
    p.setdefault(d.token_id, d.p)
    q.setdefault(d.token_id, d.q)
    text.setdefault(d.token_id, d.text)
    return [Candidate(i, text[i], p.get(i), q.get(i)) for i in ids]


def top_candidates(dist: TopN, chosen: int, n: int = N_SHOW) -> list[tuple[int, str, float]]:
    """The first ``n`` entries of a top-N, keeping ``chosen`` in view."""
    rows = [r for r in zip(dist.ids, dist.texts, dist.probs, strict=True)
            if r[2] > 0 or r[0] == chosen][:n]  # zero-probability ids say nothing
    if not rows:
        return rows
    if chosen not in [r[0] for r in rows]:
        extra = [r for r in zip(dist.ids, dist.texts, dist.probs, strict=True) if r[0] == chosen]
        if extra:
            rows[-1] = extra[0]
    return rows


def _title_min(label: pg.LabelItem) -> None:
    """LabelItem.updateMin, keeping the height but not the width of the text."""
    height = label.itemRect().height()
    label.setMinimumWidth(0)
    label.setMinimumHeight(height)
    label._sizeHint = {  # noqa: SLF001 - LabelItem keeps its hints here
        Qt.SizeHint.MinimumSize: (0, height),
        Qt.SizeHint.PreferredSize: (0, height),
        Qt.SizeHint.MaximumSize: (-1, -1),
        Qt.SizeHint.MinimumDescent: (0, 0),
    }
    label.updateGeometry()


def _retitle(label: pg.LabelItem, text: str) -> None:
    """``LabelItem.setText`` (same options) for a title in a fixed row: the new HTML, centred.

    setText also updates the label's size hints and geometry, which re-lays out the plot
    (title, axes, view box) and the grid around it every round; the title's row has a fixed
    height (BarPanel.show), so nothing there can move.
    """
    opts = label.opts
    if opts.get("justify", "center") != "center":
        label.setText(text)
        return
    style = ["color: " + pg.mkColor(opts["color"] if opts["color"] is not None else
                                    pg.getConfigOption("foreground"))
             .name(QColor.NameFormat.HexArgb)]
    if "family" in opts:
        style.append("font-family: " + opts["family"])
    if "size" in opts:
        style.append("font-size: " + opts["size"])
    for key, css, on, off in (("bold", "font-weight", "bold", "normal"),
                              ("italic", "font-style", "italic", "normal")):
        if opts.get(key) in (True, False):
            style.append(f"{css}: {on if opts[key] else off}")
    label.text = text
    label.item.setHtml(f"<span style='{'; '.join(style)}'>{text}</span>")
    label.item.setPos(0, 0)  # centred in the label's rect, as LabelItem.resizeEvent does
    bounds = label.itemRect()
    bounds.moveCenter(label.rect().center())
    label.item.setPos(bounds.topLeft() - label.itemRect().topLeft())


class BarPanel:
    """One plot: horizontal bars, token labels on the left axis; made once, updated in place."""

    def __init__(self, font: QFont, scale: float = 1.0) -> None:
        self.scale = scale  # zoom (gui/views/zoom.py): fonts, axis width and title size follow it
        self.title_lines = 3  # two in presentation mode (RoundBarsView.set_fit)
        self.plot = pg.PlotItem()
        self.plot.setMenuEnabled(False)
        self.plot.hideButtons()
        self.plot.setMouseEnabled(False, False)
        self.plot.getViewBox().invertY(True)  # most probable candidate on top
        left = self.plot.getAxis("left")
        # Every candidate's label is drawn, the first and last too (they reach past the axis).
        left.setStyle(tickFont=font, tickLength=0, hideOverlappingLabels=False)
        bottom = self.plot.getAxis("bottom")
        bottom.setStyle(hideOverlappingLabels=False)
        # The title spans the label axis too, so three lines of it fit a narrow panel.
        title = self.plot.titleLabel
        self.plot.layout.removeItem(title)
        self.plot.layout.addItem(title, 0, 0, 1, 3)
        self.set_font(font, scale)
        self.theme = LIGHT  # set_theme
        self.p_bars = pg.BarGraphItem(x0=[], y=[], height=BAR, width=[], brush=LIGHT.p,
                                      pen=pg.mkPen(None))
        self.q_bars = pg.BarGraphItem(x0=[], y=[], height=BAR, width=[], brush=LIGHT.q,
                                      pen=pg.mkPen(None))
        # Outline around the chosen (drafted / resampled / bonus) token's row.
        self.mark = pg.BarGraphItem(x0=[], y=[], height=0.96, width=[], brush=None,
                                    pen=pg.mkPen(LIGHT.mark, width=3))
        for item in (self.p_bars, self.q_bars, self.mark):
            self.plot.addItem(item)
        # The title's text width must not set the panel's minimum width (then a row of
        # panels overflows the view): the grid decides the width, and the titles fit it.
        self.plot.titleLabel.updateMin = lambda label=self.plot.titleLabel: _title_min(label)
        self.labels: list[str] = []
        self.title = ""
        self._drawn: dict[str, object] = {}  # what the axes, ranges and title show now
        # Hidden (a round with fewer decided drafts), the panel keeps its cell: no re-layout.
        policy = self.plot.sizePolicy()
        policy.setRetainSizeWhenHidden(True)
        self.plot.setSizePolicy(policy)
        for name in ("left", "bottom"):  # no unit label: no setHtml on every range change
            self.plot.getAxis(name).enableAutoSIPrefix(False)
            # New bars next to an axis repaint it: from a pixmap, not its text drawn again.
            self.plot.getAxis(name).setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)

    def set_theme(self, theme: Theme) -> None:
        """Axes, q bars and the outline in ``theme``; p bars and the title at the next show."""
        self.theme = theme
        style_plot(self.plot, theme)
        self.q_bars.setOpts(brush=theme.q)
        self.mark.setOpts(pen=pg.mkPen(theme.mark, width=3))

    def set_font(self, font: QFont, scale: float) -> None:
        """Tick fonts, label axis width and title room for a zoom ``scale`` (font: unscaled)."""
        self.scale = scale
        big = QFont(font)
        big.setPointSizeF(font.pointSizeF() * scale)
        small = QFont(font)
        # Presenting (two-line titles), the probability ticks at full size: ≥ 24 px.
        small.setPointSizeF(font.pointSizeF() * (1.0 if self.title_lines == 2 else 0.8) * scale)
        self.plot.getAxis("left").setStyle(tickFont=big)
        self.plot.getAxis("left").setWidth(round(AXIS_WIDTH * scale))
        self.plot.getAxis("bottom").setStyle(tickFont=small)
        # The axis's height from its font, not pyqtgraph's running maximum: zoomed out and
        # back, that stayed at the small type's 14 px and dropped every probability label.
        self.plot.getAxis("bottom").setHeight(math.ceil(QFontMetricsF(small).height() + 12))
        self.title_height = self.title_lines * QFontMetricsF(big).lineSpacing() * 1.25 + 8
        self.metrics = QFontMetricsF(big)

    def show(self, rows: list[str], p: list[float], q: list[float] | None, marked: int,
             title: str, p_color: str | None = None) -> None:
        """Draw ``p`` (and ``q`` beside it, if given) for the candidates ``rows``."""
        p_color = p_color or self.theme.p
        n = len(rows)
        ys = list(range(n))
        if q is None:
            self.p_bars.setOpts(x0=[0] * n, y=ys, width=p, height=0.7, brush=p_color)
            self.q_bars.setOpts(x0=[], y=[], width=[])
        else:
            self.p_bars.setOpts(x0=[0] * n, y=[y - BAR / 2 for y in ys], width=p, height=BAR,
                                brush=p_color)
            self.q_bars.setOpts(x0=[0] * n, y=[y + BAR / 2 for y in ys], width=q, height=BAR)
        top = max([*p, *(q or []), 0.05])
        mark = (marked, top) if 0 <= marked < n else (-1, 0.0)
        if not self._changed("mark", mark):
            pass  # the outline stays where it is
        elif mark[0] >= 0:
            self.mark.setOpts(x0=[0], y=[marked], width=[top * 1.08])
        else:
            self.mark.setOpts(x0=[], y=[], width=[])
        # Cut by pixels, not characters: eight CJK characters are wider than ten Latin ones,
        # and a label wider than the axis is not drawn at all.
        room = AXIS_WIDTH * self.scale - 14
        self.labels = [self.metrics.elidedText(("▶ " if i == marked else "") + r,
                                               Qt.TextElideMode.ElideRight, room)
                       for i, r in enumerate(rows)]
        # Axes, ranges and the title only when they change: each call re-lays out and
        # repaints the plot (a frame's fixed cost), and most rounds change only the bars.
        if self._changed("labels", self.labels):
            self.plot.getAxis("left").setTicks([list(enumerate(self.labels)), []])
        right = next((end for end in X_ENDS if end >= top * 1.1 - 1e-9), top * 1.1)
        if self._changed("x", right):
            self.plot.setXRange(0, right, padding=0)
            self.plot.getAxis("bottom").setTicks([_x_ticks(right), []])
        # Room for three rows at least (one or two candidates are not fat bars); presenting,
        # as many as RoundBarsView.panel_height counted (two, for K = 8 on 768 lines).
        rows_shown = max(n, 2 if self.title_lines == 2 else 3)
        if self._changed("y", rows_shown):
            self.plot.setYRange(-0.6, rows_shown - 0.4, padding=0)
        self.title = title
        size = f"{(PLOT_POINT_SIZE - 1) * self.scale:g}pt"
        if self._changed("title style", (size, self.title_height, self.theme.key)):
            self._drawn["title"] = title
            self.plot.setTitle(title, size=size, color=self.theme.plot_text)
            # setTitle fixes the title row at 30 px (one line); ours has three.
            self.plot.titleLabel.setMaximumHeight(self.title_height)
            self.plot.layout.setRowFixedHeight(0, self.title_height)
        elif self._changed("title", title):
            _retitle(self.plot.titleLabel, title)  # the row stays: no re-layout of the plot

    def _changed(self, key: str, value: object) -> bool:
        """Whether ``value`` differs from what was last drawn for ``key`` (then remember it)."""
        if key in self._drawn and self._drawn[key] == value:
            return False
        self._drawn[key] = value
        return True


def _x_ticks(top: float) -> list[tuple[float, str]]:
    """Probability ticks, three or four of them, so they never run together."""
    step = next(s for s in (0.05, 0.1, 0.2, 0.25, 0.5) if top / s <= 4)
    n = int(top / step + 1e-9)
    return [(round(i * step, 4), f"{i * step:.2f}".rstrip("0").rstrip(".")) for i in range(n + 1)]


class RoundBarsView(QWidget):
    """The current (or selected) round, position by position, as p vs q bar charts."""

    width_changed = Signal()  # the panels' width changed: draw the round again (titles)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.scale = 1.0  # zoom: set_scale
        font = QFont()
        font.setPointSize(PLOT_POINT_SIZE)
        self._font = QFont(font)
        self._font.setPointSize(PLOT_POINT_SIZE - 1)  # tick labels
        self.header = QLabel("No round yet: press Run (F5) or Step (F10).")
        self.header.setWordWrap(True)
        self.header.setTextFormat(Qt.TextFormat.RichText)
        header_font = QFont(font)
        header_font.setPointSize(PLOT_POINT_SIZE + 2)
        self.header.setFont(header_font)
        self.theme = LIGHT  # set_theme
        self.key = QLabel(self.key_html(LIGHT))
        self.key.setFont(font)
        self.key.setWordWrap(True)
        self.graphics = pg.GraphicsLayoutWidget()
        self.graphics.setBackground("w")
        self.graphics.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.graphics.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        # Panels wrap to as many rows as K needs; rows that do not fit scroll (never shrink).
        self.scroll = QScrollArea()
        self.scroll.setWidgetResizable(True)
        self.scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.scroll.setWidget(self.graphics)
        self.scroll.setMinimumHeight(SCROLL_MIN)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.setSpacing(2)  # header, key and panels read as one block; the rows need the px
        layout.addWidget(self.header)
        layout.addWidget(self.key)
        layout.addWidget(self.scroll, 1)
        self.panels: list[BarPanel] = []  # grows to the largest round seen, then reused
        self._placed: list[tuple[int, int, int]] = []  # (panel, row, col) now in the layout
        self._shown = 0  # the first this many placed panels are visible; the others hold room
        self._widths: int | None = None  # the lone panel's maximum width now applied
        self.round: Round | None = None
        self._selected = False
        self._todo: list[Callable[[], None]] = []  # the shown round's panels not drawn yet
        self.panels_drawn = 0  # work done, for tests
        self.fit = False  # presentation mode: set_fit
        self.n_show = N_SHOW
        # The titles' tokens are cut to the panels' width (_title_token): a new width asks
        # for the round again (the owner knows whether it is staged), once the resizing (a
        # splitter dragged) has paused.
        self._titled_width = 0
        self._retitle = QTimer(self)
        self._retitle.setSingleShot(True)
        self._retitle.setInterval(120)
        self._retitle.timeout.connect(self.width_changed)

    def set_fit(self, fit: bool) -> None:
        """Presentation mode: all panels in view (fewer candidates, narrower, even rows)."""
        if fit == self.fit:
            return
        self.fit = fit
        self.n_show = FIT_N_SHOW if fit else N_SHOW
        self.scroll.setMinimumHeight(SCROLL_MIN)  # set_scale gives it back on leaving
        for panel in self.panels:
            panel.title_lines = 2 if fit else 3
            panel.set_font(self._font, self.scale)
        self._place(len(self._placed), force=True, shown=self._shown)
        self.show_round(self.round, self._selected)

    def panel_height(self) -> int:
        """The height one row of panels needs at this zoom."""
        panel = self._panel(0)
        line = panel.metrics.lineSpacing()
        # The title, a row per candidate (labels must not touch), the probability axis.
        need = math.ceil(panel.title_height + self.n_show * line * 1.15 + 1.75 * line)
        if not self.fit:  # zoomed out, the fixed parts (margins) no longer shrink with it
            return max(round(PANEL_MIN_HEIGHT * self.scale), need)
        return need

    def fit_rows(self, height: int) -> None:
        """Presenting: four candidates per panel, or three (K = 8 at 1920 × 1080), or two (K = 8
        staged: the step's caption takes a row) as the rows of panels fit ``height`` px; the
        round drawn again if that changed."""
        if not self.fit:
            return
        count = len(self._placed)
        rows = -(-count // self.columns(count)) if count else 1
        n = next((n for n in range(FIT_N_SHOW, 2, -1) if rows * self._with(n) <= height), 2)
        if n != self.n_show:
            self.n_show = n
            self.show_round(self.round, self._selected)

    def _with(self, n: int) -> int:
        """panel_height with ``n`` candidates."""
        old, self.n_show = self.n_show, n
        try:
            return self.panel_height()
        finally:
            self.n_show = old

    def wanted_height(self) -> int:
        """Header, key and every row of panels: what the view needs to show all of them."""
        layout = self.layout()
        m = layout.contentsMargins()
        width = self.width() - m.left() - m.right()
        header = self.header.heightForWidth(width) if self.header.isVisibleTo(self) else 0
        return (m.top() + m.bottom() + 2 * layout.spacing() + header
                + self.key.heightForWidth(width) + self.graphics.minimumHeight() + 2)

    @staticmethod
    def key_html(theme: Theme) -> str:
        return (f"<span style='color:{theme.p}'>■</span> <b>p</b> target &nbsp; "
                f"<span style='color:{theme.q}'>■</span> <b>q</b> draft &nbsp; "
                f"<span style='color:{theme.residual}'>■</span> residual norm(max(0, p − q))"
                f" &nbsp; <span style='color:{theme.mark}'>▶ ▭</span> token taken")

    def set_theme(self, theme: Theme) -> None:
        """Every panel, the key and the background in ``theme``; the round drawn again."""
        self.theme = theme
        self.graphics.setBackground(theme.plot_bg)
        self.key.setText(self.key_html(theme))
        for panel in self.panels:
            panel.set_theme(theme)
        self.show_round(self.round, self._selected)

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt override
        """The header and key at their wrapped height for this width, and a strip of panels."""
        hint = super().minimumSizeHint()
        layout = self.layout()
        m = layout.contentsMargins()
        width = max(self.width(), hint.width()) - m.left() - m.right()
        height = (m.top() + m.bottom() + 2 * layout.spacing()
                  + self.header.heightForWidth(width) + self.key.heightForWidth(width)
                  + self.scroll.minimumHeight())
        return QSize(hint.width(), max(hint.height(), height))

    def _panel(self, i: int) -> BarPanel:
        while len(self.panels) <= i:
            self.panels.append(BarPanel(self._font, self.scale))
            if self.fit:
                self.panels[-1].title_lines = 2
                self.panels[-1].set_font(self._font, self.scale)
            if self.theme is not LIGHT:
                self.panels[-1].set_theme(self.theme)
        return self.panels[i]

    def visible_panels(self) -> list[BarPanel]:
        return [self.panels[i] for i, _, _ in self._placed if i < self._shown]

    def columns(self, count: int) -> int:
        """As many columns as fit the width; more panels wrap to further rows."""
        width = self.scroll.viewport().width() - self.scroll.verticalScrollBar().sizeHint().width()
        least = PANEL_MIN_WIDTH * self.scale * (FIT_WIDTH if self.fit else 1.0)
        fit = max(1, int(width) // round(least))
        if self.fit and count:  # rows as even as they go: 9 panels in 5 + 4, not 6 + 3
            rows = -(-count // fit)
            return max(1, -(-count // rows))
        return max(1, min(count, fit))

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        self._place(len(self._placed), force=True, shown=self._shown)
        if event.size().width() != event.oldSize().width():
            self.updateGeometry()  # the header's and key's lines, and so the minimum, changed
            if self.round is not None and self._panel_width() != self._titled_width:
                self._retitle.start()

    def _place(self, count: int, force: bool = False, shown: int | None = None) -> None:
        """Put the first ``count`` panels in a grid (only when the arrangement changes).

        Only the first ``shown`` (default: all) are visible; the rest keep their cells, so
        rounds of one K, with more or fewer decided drafts, never re-fill the grid.
        """
        shown = count if shown is None else min(shown, count)
        cols = self.columns(count)
        if count:
            self._panel(count - 1)  # make sure every panel exists before sizing them
        rows = -(-count // cols)
        # none yet: nothing to scroll
        self.graphics.setMinimumHeight(rows * self.panel_height() if count else 0)
        # A lone panel (a baseline round) gets a third of the width, not all of it.
        lone = max(round(PANEL_MIN_WIDTH * self.scale), self.scroll.viewport().width() // 3)
        widths = lone if count == 1 else None  # None: Qt's default, no maximum
        if widths != self._widths:
            for panel in self.panels:
                panel.plot.setMaximumWidth(lone if count == 1 else 16_777_215)
            self._widths = widths
        for i, panel in enumerate(self.panels):  # those past count too: no stale panel shows
            panel.plot.setVisible(i < shown)
        self._shown = shown
        wanted = [(i, i // cols, i % cols) for i in range(count)]
        if wanted == self._placed:
            if force:
                self.graphics.ci.setGeometry(QRectF(self.graphics.viewport().rect()))
            return
        layout = self.graphics.ci
        # Only the cells that change: a round with fewer drafts (K capped by the tokens
        # left, at a run's end) takes the last panels out and puts nothing else back.
        stay = set(self._placed) & set(wanted)
        for i, row, col in self._placed:
            if (i, row, col) not in stay:
                layout.removeItem(self.panels[i].plot)
        for i, row, col in wanted:
            if (i, row, col) not in stay:
                layout.addItem(self._panel(i).plot, row, col)
        self._placed = wanted
        # Re-filling the grid shrinks the top item to its size hint; give it the view back.
        layout.setGeometry(QRectF(self.graphics.viewport().rect()))

    def set_scale(self, scale: float) -> None:
        """Zoom every panel (tick fonts, axis, titles, room per panel) and redraw the round."""
        self.scale = scale
        # Zoomed in, a whole row of panels stays in view (the window scrolls instead: it
        # once kept 70 px of them, titles and no bars); presenting, fit_rows sees to it.
        for panel in self.panels or [self._panel(0)]:
            panel.set_font(self._font, scale)  # panel_height reads the new type
        self.scroll.setMinimumHeight(max(SCROLL_MIN, self.panel_height())
                                     if scale > 1.0 and not self.fit else SCROLL_MIN)
        self.show_round(self.round, self._selected)
        self.updateGeometry()  # the new minimum (type, a row of panels) reaches the splitter

    def show_round(self, rnd: Round | None, selected: bool = False,
                   limit: int | None = None) -> None:
        """Draw one round: a panel per decided draft position, then the extra token's panel.

        ``limit``: draw at most that many panels now and the rest with ``draw_more`` (a
        frame's share at K = 16); the panels of one round are finished before another starts.
        """
        self.round = rnd
        self._selected = selected
        self._todo.clear()
        if rnd is None:
            self._place(0)
            self.header.setText("No round yet: press Run (F5) or Step (F10).")
            return
        decided = [d for d in rnd.drafted if d.status != "discarded"]
        discarded = len(rnd.drafted) - len(decided)
        count = len(decided) + (rnd.extra is not None)
        self._place(max(count, len(rnd.drafted) + (rnd.extra is not None)), shown=count)
        for i, d in enumerate(decided):
            self._todo.append(partial(self._show_draft, self.panels[i], d))
        if rnd.extra is not None:
            i = len(decided)
            self._todo.append(partial(self._show_extra, self.panels[i], rnd.extra, i))
        self.header.setText(self._headline(rnd, discarded, selected, self.theme.muted,
                                           short=self.fit))
        self.updateGeometry()  # a headline on two lines needs a taller minimum
        self.draw_more(limit)

    def draw_more(self, limit: int | None = None) -> int:
        """Draw up to ``limit`` (None: all) of the round's panels still to draw; how many."""
        n = len(self._todo) if limit is None else min(limit, len(self._todo))
        for draw in self._todo[:n]:
            draw()
        del self._todo[:n]
        self.panels_drawn += n
        return n

    @property
    def drawing(self) -> bool:
        """Whether panels of the shown round are still to draw (``draw_more``)."""
        return bool(self._todo)

    def stop_drawing(self) -> None:
        """Forget the panels still to draw (the staged view draws them its own way)."""
        self._todo.clear()

    def _show_draft(self, panel: BarPanel, d: DraftPosition) -> None:
        cands = candidates(d, self.n_show)
        marked = next(i for i, c in enumerate(cands) if c.token_id == d.token_id)
        verdict = (f"<span style='color:{self.theme.ink('accepted')}'>✓ accepted</span>"
                   if d.status == "accepted" else
                   f"<span style='color:{self.theme.ink('rejected')}'>✗ rejected</span>")
        small = f"<span style='font-size:{(PLOT_POINT_SIZE - 1) * self.scale:g}pt'>"
        # The figures a size down: "min(1,p/q) 0.750 · r 0.500" filled a panel at its least
        # width (zoomed in at 1366 × 768: 439 px in 430).
        smaller = f"<span style='font-size:{(PLOT_POINT_SIZE - 2) * self.scale:g}pt'>"
        if self.fit:  # two lines: the verdict, and the test that decided it
            ok = d.status == "accepted"
            sign = f"<span style='color:{self.theme.ink('accepted' if ok else 'rejected')}'>" \
                   f"{'✓' if ok else '✗'}</span>"
            r = f"{d.r:.2f}" if d.r is not None else "—"
            shown = self._title_token(d.text, FIT_TITLE_CHARS, f"#{d.index + 1} “” ✓")
            title = (f"<b>#{d.index + 1}</b> “{escape(shown)}”"
                     f" <b>{sign}</b><br>{small}r {r} {'&lt;' if ok else '≥'} min(1,p/q) "
                     f"{d.ratio:.2f}</span>")
        else:
            shown = self._title_token(d.text, LABEL_CHARS, f"#{d.index + 1} “” ✗ rejected")
            title = (f"<b>#{d.index + 1}</b> “{escape(shown)}” "
                     f"<b>{verdict}</b><br>"
                     f"{smaller}p {fmt_prob(d.p)} · q {fmt_prob(d.q)}<br>"
                     f"min(1,p/q) {fmt_prob(d.ratio)} · r {fmt_prob(d.r)}</span>")
        panel.show([token_label(c.text, LABEL_CHARS) for c in cands], [c.p or 0.0 for c in cands],
                   [c.q or 0.0 for c in cands], marked, title)

    def _show_extra(self, panel: BarPanel, e: ExtraToken, position: int) -> None:
        rows = top_candidates(e.dist_top, e.token_id, self.n_show)
        marked = next((i for i, r in enumerate(rows) if r[0] == e.token_id), -1)
        if e.kind == "resampled":
            color = self.theme.residual
            detail = f"from norm(max(0, p − q))<br>residual {fmt_prob(e.prob)} · p {fmt_prob(e.p)}"
        elif e.kind == "bonus":
            color = self.theme.bonus
            detail = f"all K kept: one more from p<br>p {fmt_prob(e.p)}"
        else:
            color = self.theme.p
            detail = f"drawn from p<br>p {fmt_prob(e.p)}"
        fate = FATES[e.kind]
        if self.fit:  # two lines: the token and its fate, where it was drawn from
            detail = detail.split("<br>")[0].replace("all K kept: one more from p",
                                                     "all K kept: from p")
            shown = self._title_token(e.text, FIT_TITLE_CHARS,
                                      f"#{position + 1} “” {fate.label}")
            title = (f"<b>#{position + 1}</b> “{escape(shown)}”"
                     f" <b><span style='color:{self.theme.ink(e.kind)}'>{fate.label}</span></b>"
                     f"<br><span style='font-size:{(PLOT_POINT_SIZE - 1) * self.scale:g}pt'>"
                     f"{detail}</span>")
            panel.show([token_label(r[1], LABEL_CHARS) for r in rows], [r[2] for r in rows],
                       None, marked, title, p_color=color)
            return
        shown = self._title_token(e.text, LABEL_CHARS, f"#{position + 1} “” {fate.label}")
        title = (f"<b>#{position + 1}</b> “{escape(shown)}” "
                 f"<b><span style='color:{self.theme.ink(e.kind)}'>{fate.label}</span></b><br>"
                 f"<span style='font-size:{(PLOT_POINT_SIZE - 1) * self.scale:g}pt'>"
                 f"{detail}</span>")
        labels = [token_label(r[1], LABEL_CHARS) for r in rows]
        panel.show(labels, [r[2] for r in rows], None, marked, title, p_color=color)

    def _panel_width(self) -> int:
        """The width of a panel's cell in the grid now."""
        return self.scroll.viewport().width() // self.columns(len(self._placed) or 1)

    def _title_token(self, text: str, limit: int, rest: str) -> str:
        """A token for a panel's first title line, cut to ``limit`` characters and to the
        pixels the panel has beside ``rest`` (the line's other words): CJK is twice as wide."""
        shown = token_label(text, limit)
        width = self._titled_width = self._panel_width()
        font = QFont(self._font)
        font.setPointSizeF((PLOT_POINT_SIZE - 1) * self.scale)
        font.setBold(True)  # the number and the verdict are bold: measure all of it so
        metrics = QFontMetricsF(font)
        room = width - metrics.horizontalAdvance(rest) - 28  # the plot's and grid's margins
        if metrics.horizontalAdvance(shown) <= room:
            return shown
        return metrics.elidedText(shown, Qt.TextElideMode.ElideRight, max(room, 0.0)) or "…"

    @staticmethod
    def _headline(rnd: Round, discarded: int, selected: bool, muted: str = "#595959",
                  short: bool = False) -> str:
        """The round in words (``short``, presenting: without the discarded drafts and the
        count added, which the panels and the stream show: one line of room type, not two)."""
        which = "selected round" if selected else "round"
        # The K policy's reason for this round's K (adaptive policies), e.g. "α̂ 0.62 … → K 3".
        why = f" <span style='color:{muted}'>[{escape(rnd.policy_reason)}]</span>" \
            if rnd.policy_reason else ""
        if rnd.k == 0:
            return f"<b>{which.capitalize()} {rnd.index + 1}</b>: the target alone, one token." \
                + why
        drafters = sorted({d.drafter for d in rnd.drafted})
        by = f" by {'+'.join(drafters)}" if drafters and drafters != ["model"] else ""
        text = f"<b>{which.capitalize()} {rnd.index + 1}</b>: drafted {rnd.k}{by}{why}, " \
               f"<b>{rnd.n_accepted} accepted</b>"
        if rnd.extra is not None and rnd.extra.kind == "resampled":
            text += f", rejected at #{rnd.n_accepted + 1} → resampled “" \
                    f"{escape(token_label(rnd.extra.text))}”"
        elif rnd.extra is not None and rnd.extra.kind == "bonus":
            text += f" → bonus “{escape(token_label(rnd.extra.text))}”"
        if short:
            return text
        if discarded:
            text += f" ({discarded} later draft{'s' if discarded > 1 else ''} discarded)"
        n = len(rnd.appended_ids)
        return text + f" · {n} token{'s' if n != 1 else ''} added"

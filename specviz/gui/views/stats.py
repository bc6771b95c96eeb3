"""Acceptance over time (rate, histogram, by position) and speed: plots made once, data updated."""

from __future__ import annotations

import math

import pyqtgraph as pg
from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QFont, QFontMetricsF, QResizeEvent
from PySide6.QtWidgets import QGridLayout, QLabel, QWidget

from specviz.core.record import RunRecord, SpeedStats
from specviz.core.tally import Tally
from specviz.gui.look.style import (
    BLUE,
    GREY,
    ORANGE,
    PLOT_POINT_SIZE,
    REDDISH_PURPLE,
    SKY_BLUE,
    VERMILLION,
    configure_plots,
)
from specviz.gui.look.themes import LIGHT, Theme, style_plot

configure_plots()


ACCEPTANCE_MIN_HEIGHT = 240  # px: two rows of plots, each with room for three tick labels
ACCEPTANCE_MIN_WIDTH = 360  # px: two plots side by side (their titles may ask for more)
DRAFTER_COLORS = {"model": SKY_BLUE, "lookup": ORANGE}  # bars; their labels name them too
DRAFTER_TICKS = {"model": "q"}  # the column is narrow: the draft model is q, as everywhere


def _style_plot(plot: pg.PlotItem, font: QFont, title: str) -> None:
    plot.setMenuEnabled(False)
    plot.hideButtons()
    plot.setMouseEnabled(False, False)
    plot.setTitle(title, size=f"{PLOT_POINT_SIZE}pt")
    for name in ("left", "bottom"):
        # Labels at the ends of an axis may reach past it (into the margin) rather than vanish.
        plot.getAxis(name).setStyle(tickFont=font, hideOverlappingLabels=False)
        plot.getAxis(name).enableAutoSIPrefix(False)  # no unit label: no setHtml per range
    # No showGrid: a gridded axis clips its end labels to the plot ("0" and "1" vanish).
    for y in (0.5, 1.0):
        plot.addItem(pg.InfiniteLine(y, angle=0, movable=False, pen=pg.mkPen("#DDDDDD")))


POS_TITLE = "Kept | reached"  # at each draft position (the x axis), given it was reached


def pos_tooltip(kept: list[int], reached: list[int]) -> str:
    """What the kept-by-position bars mean, with each position's counts."""
    lines = ["Kept ÷ tested at each draft position 1…K, <b>given the position was reached</b>:"
             " position i is tested only when drafts 1…i−1 were all kept, so a late position"
             " is measured on fewer rounds (a high last bar does not make it the best)."]
    if reached:
        lines.append(" · ".join(f"{i}: {k}/{r}" for i, (k, r) in
                                enumerate(zip(kept, reached, strict=False), 1)))
    return "<br>".join(lines)


def integer_ticks(top: float, most: int = 4, first: int = 0,
                  cover: bool = True) -> list[tuple[float, str]]:
    """Whole-number ticks from ``first`` up to ``top``, at most ``most`` of them.

    Counts and positions are integers: an empty plot must not show 0.5 or 2.5. With
    ``cover`` the last tick reaches past ``top`` (a y axis that holds the tallest bar).
    """
    span = max(1, math.ceil(top) - first)
    step = next(m * 10**e for e in range(12) for m in (1, 2, 5)
                if math.ceil(span / (m * 10**e)) + 1 <= most)
    last = first + (math.ceil(span / step) * step if cover else span)
    return [(v, str(v)) for v in range(first, last + 1, step)]


class RoundAxis(pg.AxisItem):  # type: ignore[misc]
    """An x axis of rounds: whole numbers 1-2-5 apart, as many as fit with a gap between them.

    Fixed ticks (six from 1 whatever the width) ran together on a narrow plot in projector
    type: "11162126" for 1, 6, …, 26. The spacing follows the axis' width and tick font, so a
    zoom, a resize or 400 rounds never crowd it.
    """

    GAP_DIGITS = 2.0  # the least room between two labels, in the font's digit widths

    def tickValues(self, minVal: float, maxVal: float,  # noqa: N802, N803 - pyqtgraph's
                   size: float) -> list[tuple[float, list[float]]]:
        lo, hi = sorted((minVal, maxVal))
        first, last = max(1, math.ceil(lo)), math.floor(hi)
        # The axis' length in the font's (logical) pixels: ``size`` is in device pixels.
        length = self.geometry().width() or size
        if last < first or hi - lo <= 0 or length <= 0:
            return [(1.0, [])]
        metrics = QFontMetricsF(self.style["tickFont"] or QFont())
        digit = metrics.horizontalAdvance("0")
        px = length / (hi - lo)  # pixels per round

        def x(v: int) -> float:
            return (v - lo) * px

        def width(v: int) -> float:
            return metrics.horizontalAdvance(str(v))

        def apart(a: int, b: int) -> bool:  # room for both half labels and the gap
            return x(b) - x(a) >= (width(a) + width(b)) / 2 + self.GAP_DIGITS * digit

        widest = width(last)
        step = next(m * 10**e for e in range(12) for m in (1, 2, 5)
                    if m * 10**e * px >= widest + self.GAP_DIGITS * digit)
        if step == 2:  # odd rounds: 1, 3, 5 (2, 4 would leave out where the rounds start)
            values = list(range(first + (first + 1) % 2, last + 1, 2))
        else:
            values = list(range(-(-first // step) * step, last + 1, step))
        if first not in values and (not values or apart(first, values[0])):
            values.insert(0, first)  # "1": where the rounds start
        # A label may reach half a digit past the axis' ends (into the margin), no further:
        # pyqtgraph drops one past 15 px, and a long one would reach the next plot's axis.
        values = [v for v in values if x(v) - width(v) / 2 >= -digit / 2
                  and x(v) + width(v) / 2 <= length + digit / 2]
        return [(float(step), [float(v) for v in values])]

    def tickStrings(self, values: list[float], scale: float,  # noqa: N802 - pyqtgraph's
                    spacing: float) -> list[str]:
        return [str(round(v)) for v in values]


def rate_title(theme: Theme) -> str:
    return (f"Kept ÷ drafted: <span style='color:{theme.line}'>━ total</span>"
            f" <span style='color:{theme.points}'>● per round</span>")


class AcceptanceView(pg.GraphicsLayoutWidget):  # type: ignore[misc]
    """Acceptance per round and cumulative; accepted-per-round histogram; by draft position."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._least = QSize(ACCEPTANCE_MIN_WIDTH, ACCEPTANCE_MIN_HEIGHT)  # set_scale
        self.compact = False  # presentation mode's layout (set_compact)
        self.theme = LIGHT  # set_theme
        self.setBackground("w")
        font = QFont()
        font.setPointSize(PLOT_POINT_SIZE - 1)
        self.rate_plot = self.addPlot(row=0, col=0, colspan=2,
                                      axisItems={"bottom": RoundAxis("bottom")})
        # Titles say what the axes are: axis captions would take rows the plots need.
        _style_plot(self.rate_plot, font, rate_title(LIGHT))
        self.rate_plot.setYRange(0, 1.05, padding=0)
        self.round_points = self.rate_plot.plot(
            [], [], pen=None, symbol="o", symbolSize=7, symbolBrush=SKY_BLUE,
            symbolPen=pg.mkPen(None))
        self.cumulative_line = self.rate_plot.plot([], [], pen=pg.mkPen(BLUE, width=4))
        self.selected_line = pg.InfiniteLine(angle=90, movable=False,
                                             pen=pg.mkPen(VERMILLION, width=2,
                                                          style=Qt.PenStyle.DashLine))
        self.selected_line.setVisible(False)
        self.rate_plot.addItem(self.selected_line)

        self.hist_plot = self.addPlot(row=1, col=0)
        _style_plot(self.hist_plot, font, "Kept / round ◆ i.i.d.")
        for item in list(self.hist_plot.items):  # counts, not shares: no 0.5 / 1 lines
            if isinstance(item, pg.InfiniteLine):
                self.hist_plot.removeItem(item)
        self.hist_bars = pg.BarGraphItem(x=[], height=[], width=0.75, brush=BLUE,
                                         pen=pg.mkPen(None))
        self.hist_plot.addItem(self.hist_bars)
        # Expected counts if every draft were accepted independently with the measured α.
        self.hist_expected = self.hist_plot.plot(
            [], [], pen=None, symbol="d", symbolSize=12, symbolBrush=REDDISH_PURPLE,
            symbolPen=pg.mkPen("k"))

        self.pos_plot = self.addPlot(row=1, col=1)
        # Conditional: position i is tested only when 1…i−1 were kept (a late position's
        # high bar is no sign the last position is best).
        _style_plot(self.pos_plot, font, POS_TITLE)
        self.pos_bars = pg.BarGraphItem(x=[], height=[], width=0.75, brush=SKY_BLUE,
                                        pen=pg.mkPen(BLUE, width=1))
        self.pos_plot.addItem(self.pos_bars)
        self.pos_plot.setYRange(0, 1.05, padding=0)
        for plot in (self.rate_plot, self.pos_plot):  # few ticks: the plots are short
            plot.getAxis("left").setTicks([[(0, "0"), (0.5, ".5"), (1, "1")], []])
        # K chosen each round (the K policies change it) and α split by drafter.
        self.k_plot = self.addPlot(row=0, col=2, axisItems={"bottom": RoundAxis("bottom")})
        _style_plot(self.k_plot, font, "K / round")
        for item in list(self.k_plot.items):  # K is a count: no 0.5 / 1 lines
            if isinstance(item, pg.InfiniteLine):
                self.k_plot.removeItem(item)
        self.k_line = self.k_plot.plot([], [], pen=pg.mkPen(BLUE, width=3), stepMode=None,
                                       symbol="s", symbolSize=6, symbolBrush=BLUE,
                                       symbolPen=pg.mkPen(None))
        self.k_plot.setToolTip("Drafts proposed each round: constant under the fixed policy; "
                               "the heuristic and cost policies change it (cost may pick 0)")
        self.drafter_plot = self.addPlot(row=1, col=2)
        _style_plot(self.drafter_plot, font, "α by drafter")
        self.drafter_bars = pg.BarGraphItem(x=[], height=[], width=0.7, brushes=[],
                                            pen=pg.mkPen("k", width=1))
        self.drafter_plot.addItem(self.drafter_bars)
        self.drafter_plot.setYRange(0, 1.05, padding=0)
        self.drafter_plot.getAxis("left").setTicks([[(0, "0"), (0.5, ".5"), (1, "1")], []])
        self.drafter_plot.setToolTip("α = kept ÷ tested, for the drafts each drafter proposed "
                                     "(n = drafts tested)")
        self._drafters: tuple[str, ...] | None = None
        self._reached: list[int] = []
        self._k_top = -1
        self._k_rounds = -1
        self.hist_plot.setToolTip("Rounds with 0…K drafts accepted; ◆ what i.i.d. acceptance "
                                  "with the measured α would give")
        self.pos_plot.setToolTip(pos_tooltip([], []))
        self.rate_plot.setToolTip("Accepted ÷ drafted: the running total and each round")
        for plot in (self.rate_plot, self.hist_plot, self.pos_plot, self.k_plot,
                     self.drafter_plot):
            plot.getAxis("left").setWidth(34)
        self.scale = 1.0
        self._tick_font = QFont(font)
        self._titles = {plot: plot.titleLabel.text
                        for plot in (self.rate_plot, self.hist_plot, self.pos_plot,
                                     self.k_plot, self.drafter_plot)}
        self._k = -2
        self._n = -1
        self._top = -1
        self._set_k(0)
        self._set_rounds(0)
        self._set_count_axis(0)
        self._count_top: float = 0
        self._record = RunRecord()
        self._update_drafting(self._record)  # whole-number axes before the first run
        # The drafter names have descenders ("q", "lookup") that digits lack: a taller axis,
        # and the same under the bars beside it so the three zero lines stay level.
        for plot in (self.hist_plot, self.pos_plot, self.drafter_plot):
            axis = plot.getAxis("bottom")
            axis.setHeight(axis.height() + 6)
        # Zoom scales the fixed axis heights from these.
        self._bottom_heights = {plot: plot.getAxis("bottom").fixedHeight
                                for plot in self._titles}

    def set_theme(self, theme: Theme) -> None:
        """Background, axes, titles, guide lines, bars, lines and symbols in ``theme``."""
        self.theme = theme
        self.setBackground(theme.plot_bg)
        self._titles[self.rate_plot] = rate_title(theme)
        for plot in self._titles:
            style_plot(plot, theme)
            for item in plot.items:
                if isinstance(item, pg.InfiniteLine) and item is not self.selected_line:
                    item.setPen(pg.mkPen(theme.plot_grid))
        self.set_scale(self.scale)  # the titles again, in the theme's ink
        self.round_points.setSymbolBrush(theme.points)
        self.cumulative_line.setPen(pg.mkPen(theme.line, width=4))
        self.selected_line.setPen(pg.mkPen(theme.mark, width=2, style=Qt.PenStyle.DashLine))
        self.hist_bars.setOpts(brush=theme.line)
        self.hist_expected.setSymbolBrush(theme.expected)
        self.hist_expected.setSymbolPen(pg.mkPen(theme.plot_text))
        self.pos_bars.setOpts(brush=theme.points, pen=pg.mkPen(theme.line, width=1))
        self.k_line.setPen(pg.mkPen(theme.line, width=3))
        self.k_line.setSymbolBrush(theme.line)
        self.drafter_bars.setOpts(pen=pg.mkPen(theme.plot_text, width=1),
                                  brushes=[self.drafter_color(n) for n in self._drafters or ()])

    def set_scale(self, scale: float) -> None:
        """Zoom: titles, tick fonts, axis widths and the minimum size follow ``scale``."""
        self.scale = scale
        tick = QFont(self._tick_font)
        tick.setPointSizeF(self._tick_font.pointSizeF() * scale)
        for plot, title in self._titles.items():
            plot.setTitle(title, size=f"{PLOT_POINT_SIZE * scale:g}pt",
                          color=self.theme.plot_text)
            # setTitle fixes the title row at 30 px: zoomed, the text is taller than that.
            height = max(30, math.ceil(plot.titleLabel.item.boundingRect().height()))
            plot.titleLabel.setMaximumHeight(height)
            plot.layout.setRowFixedHeight(0, height)
            for name in ("left", "bottom"):
                plot.getAxis(name).setStyle(tickFont=tick)
            plot.getAxis("left").setWidth(round(34 * scale))
            base = self._bottom_heights[plot]
            if base is not None:  # a fixed height (room for descenders): scaled with the text
                plot.getAxis("bottom").setHeight(round(base * scale))
        # Height grows less than the text: on a projector the round's bars need the room.
        # In the size hint, not setMinimumSize: an explicit minimum replaces the hint for a
        # splitter, which then squeezed the plots' titles (after F11 → Esc, "K / round" cut).
        height = self._compact_height(tick) if self.compact else \
            round(ACCEPTANCE_MIN_HEIGHT * min(scale, 1.2))
        self._least = QSize(round(ACCEPTANCE_MIN_WIDTH * scale), height)
        self.ci.layout.invalidate()
        self.updateGeometry()  # a splitter holding it learns the new minimum now

    def _compact_height(self, tick: QFont) -> int:
        """Presenting (the y axes keep their two ends): each row of plots its title, its x
        axis and room for the two tick labels; no taller than at 1× (the round's panels need
        the room: K = 8 on a 768-line screen)."""
        line = QFontMetricsF(tick).lineSpacing()
        need = 0.0
        for row in ((self.rate_plot, self.k_plot),
                    (self.hist_plot, self.pos_plot, self.drafter_plot)):
            need += max(plot.layout.rowMinimumHeight(0) + plot.getAxis("bottom").height()
                         for plot in row) + 2.6 * line
        return min(ACCEPTANCE_MIN_HEIGHT, math.ceil(need) + 24)  # the layout's margins

    def set_compact(self, on: bool) -> None:
        """Presentation mode: the plots' minimum height stays at 1× (set_scale), so the y axes
        keep their two ends only (three labels of projector type would touch)."""
        self.compact = on
        shares = [(0, "0"), (1, "1")] if on else [(0, "0"), (0.5, ".5"), (1, "1")]
        for plot in (self.rate_plot, self.pos_plot, self.drafter_plot):
            plot.getAxis("left").setTicks([shares, []])
        self._top = self._k_top = -1  # the count axes again, with or without their middles
        self._set_count_axis(self._count_top)
        self._update_drafting(self._record)
        self.set_scale(self.scale)

    def _ends(self, ticks: list[tuple[int, str]]) -> list[tuple[int, str]]:
        return [ticks[0], ticks[-1]] if self.compact else ticks

    def _set_k(self, k: int) -> None:
        """x axes that depend on K only: whole numbers, few enough to read at K = 16."""
        if k == self._k:
            return
        self._k = k
        shown = max(k, 1)
        self.hist_plot.setXRange(-0.6, shown + 0.6, padding=0)
        self.hist_plot.getAxis("bottom").setTicks([integer_ticks(shown, most=6, cover=False),
                                                   []])
        self.pos_plot.setXRange(0.4, shown + 0.6, padding=0)
        self.pos_plot.getAxis("bottom").setTicks(
            [integer_ticks(shown, most=6, first=1, cover=False), []])

    def _set_rounds(self, n: int) -> None:
        # Past ten rounds the axis grows in steps of about a tenth of it (1-2-5): not every
        # round (each change re-lays out and repaints the axis), never more than ~20% empty.
        step = next(m * 10**e for e in range(12) for m in (1, 2, 5) if m * 10**e * 10 >= n)
        shown = max(5, -(-n // step) * step)
        if shown == self._n:
            return
        self._n = shown
        self.rate_plot.setXRange(0.5, shown + 0.5, padding=0)  # labels: RoundAxis

    def _set_count_axis(self, top: float) -> None:
        ticks = self._ends(integer_ticks(top, most=3))
        last = ticks[-1][0]
        if last == self._top:
            return
        self._top = last
        self.hist_plot.getAxis("left").setTicks([ticks, []])
        self.hist_plot.setYRange(0, last * 1.08, padding=0)

    def update_from(self, record: RunRecord, selected_round: int | None = None) -> None:
        """Push the record's arrays into the existing items."""
        n = len(record.cumulative_rate)
        xs = list(range(1, n + 1))
        self.cumulative_line.setData(xs, record.cumulative_rate)
        self.round_points.setData(xs, record.round_rate)
        self._set_rounds(n)
        if selected_round is not None:
            self.selected_line.setPos(selected_round + 1)
        self.selected_line.setVisible(selected_round is not None)

        hist = record.histogram
        k = len(hist) - 1
        self.hist_bars.setOpts(x=list(range(len(hist))), height=hist)
        expected = self.expected_histogram(record.alpha, k, sum(hist))
        self.hist_expected.setData(list(range(len(expected))), expected)
        by_pos = record.acceptance_by_position()
        self.pos_bars.setOpts(x=list(range(1, len(by_pos) + 1)), height=by_pos)
        reached = record.reached
        if reached != self._reached:  # the counts in the tooltip (only when they change)
            self._reached = list(reached)
            self.pos_plot.setToolTip(pos_tooltip(record.kept, reached))
        started = record.started
        self._set_k(max(k, started.settings.k if started is not None else 0))
        self._count_top = max([*hist, *expected, 1])
        self._set_count_axis(self._count_top)
        self._record = record
        self._update_drafting(record)

    def _update_drafting(self, record: RunRecord) -> None:
        """K per round (every round of a speculative run) and α per drafter."""
        ks = record.k_per_round if record.speculative else []
        self.k_line.setData(list(range(1, len(ks) + 1)), ks)
        n = max(len(ks), 5)
        if n != self._k_rounds:  # a redraw with no new round leaves the axis be
            self._k_rounds = n
            self.k_plot.setXRange(0.5, n + 0.5, padding=0)  # labels: RoundAxis
        top = max([*ks, record.k, 1])
        if top != self._k_top:
            self._k_top = top
            ticks = self._ends(integer_ticks(top, most=3))
            self.k_plot.getAxis("left").setTicks([ticks, []])
            self.k_plot.setYRange(0, ticks[-1][0] * 1.08, padding=0)
        split = record.alpha_by_drafter() if record.speculative else {}
        names = tuple(split)
        self.drafter_bars.setOpts(
            x=list(range(len(names))), height=[a for a, _ in split.values()],
            brushes=[self.drafter_color(name) for name in names])
        if names != self._drafters:
            self._drafters = names
            self.drafter_plot.getAxis("bottom").setTicks(
                [[(i, DRAFTER_TICKS.get(name, name)) for i, name in enumerate(names)], []])
            self.drafter_plot.setXRange(-0.6, max(len(names), 1) - 0.4, padding=0)
            self.updateGeometry()  # new tick labels may need more room: tell the splitter
        self.drafter_plot.setToolTip(
            "α = kept ÷ tested, for the drafts each drafter proposed: " + ", ".join(
                f"{name} {alpha:.2f} (n = {tested} tested)"
                for name, (alpha, tested) in split.items()))

    def drafter_color(self, name: str) -> str:
        if self.theme is LIGHT:
            return DRAFTER_COLORS.get(name, GREY)
        return {"model": self.theme.q, "lookup": self.theme.lookup}.get(name, self.theme.muted)

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt override
        """What the plots need (titles on one line, axes, some plot): a splitter keeps it."""
        need = self.ci.effectiveSizeHint(Qt.SizeHint.MinimumSize)
        return QSize(max(self._least.width(), int(need.width()) + 4),
                     max(self._least.height(), int(need.height()) + 4))

    @staticmethod
    def expected_histogram(alpha: float, k: int, rounds: int) -> list[float]:
        """Rounds expected with n accepted if drafts were kept i.i.d. with probability α."""
        if k < 0 or rounds == 0:
            return []
        probs = [alpha**n * (1 - alpha) for n in range(k)] + [alpha**k]
        return [rounds * p for p in probs]


def paper_tooltip(stats: SpeedStats) -> str:
    """The paper's form (verify = one step) beside the measured one, for the tooltip."""
    lines = ["Expected speedup = E[tokens per round] ÷ (K·c + v), in one-token target steps:",
             "E = (1 − α^(K+1)) / (1 − α), c = draft pass ÷ step, v = verify pass ÷ step."]
    if stats.target_step_s > 0:
        lines.append(f"Measured: c = {stats.cost_ratio:.2f}, v = {stats.verify_cost:.2f} "
                     f"(step {stats.target_step_s * 1000:.1f} ms).")
    else:
        lines.append("No target step measured yet (it is timed when a pair loads): no figure.")
    if stats.paper_speedup:
        lines.append(f"Paper's form (Leviathan et al., v = 1): {stats.paper_speedup:.2f}×, "
                     "which assumes verifying K + 1 positions costs one step.")
    return "\n".join(lines)


ALPHA_NAME = "α = P(draft kept)"  # a chain's α: each draft tested counts once
TREE_ALPHA_NAME = "α per position"  # a run with tree rounds: each position (depth) counts once


def alpha_caption(tally: Tally | None, compact: bool = False) -> str:
    """α's caption: a chain's, or per position where the run drafted trees, with the siblings
    tested beside the positions and how many were kept (measured; presenting: in the tooltip).
    The counts are core's tally's (a run's RunRecord folds each round in once)."""
    if tally is None or not tally.trees:
        return ALPHA_NAME
    if not tally.siblings or compact:
        return TREE_ALPHA_NAME
    s = "" if tally.siblings == 1 else "s"
    return (f"{TREE_ALPHA_NAME}\n+ {tally.siblings} sibling{s} tested, "
            f"{tally.siblings_kept} kept")


def alpha_tooltip(tally: Tally | None) -> str:
    """What α counts, in words (a tree run: per position, the siblings apart)."""
    chain = ("α = kept ÷ tested: P(a draft kept | it was tested). Drafts after a rejection are "
             "never tested and do not count.")
    if tally is None or not tally.trees:
        return chain
    return (f"α per position = positions kept ÷ positions tested. In a tree round each position "
            f"(depth) counts once however many drafts were tested there, as a chain's draft "
            f"does, so α is comparable with a chain's; a position counts as kept when its first "
            f"draft or a sibling beside it was kept. This run: {tally.trees} tree round"
            f"{'' if tally.trees == 1 else 's'}, {tally.siblings} sibling"
            f"{'' if tally.siblings == 1 else 's'} tested beside a position's first draft, "
            f"{tally.siblings_kept} of them kept.")


class SpeedView(QWidget):
    """Big numbers: tokens/s, target passes per token, expected and measured speedup.

    Six columns, one row, where the width allows; three columns, two rows, where not. A
    caption never wraps inside its words ("tokens /↵s"): it stays on its lines.
    """

    FIELDS = (
        ("tokens_per_s", "tokens / s"),
        ("target_calls_per_token", "p passes / token"),
        ("alpha", ALPHA_NAME),
        ("cost_ratio", "cost ratio c"),
        ("expected_speedup", "expected speedup"),
        ("measured_speedup", "measured speedup"),
    )
    AGAINST: dict[str, str] = {}  # what measured_against reads as under the number
    FORMULA = ("expected = E[tokens / round] ÷ (K·c + v), E = (1 − α<sup>K+1</sup>) / (1 − α);"
               " c, v = draft pass, verify pass ÷ one target step")

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.compact = False  # presentation mode's layout (set_compact)
        self.tally: Tally | None = None  # the shown run's counts: α's caption (update_from)
        self.grid = grid = QGridLayout(self)
        grid.setContentsMargins(8, 4, 8, 4)
        grid.setVerticalSpacing(0)
        grid.setHorizontalSpacing(14)
        name_font = QFont()
        name_font.setPointSize(PLOT_POINT_SIZE - 2)
        value_font = QFont()
        value_font.setPointSize(PLOT_POINT_SIZE + 9)
        value_font.setBold(True)
        self.values: dict[str, QLabel] = {}
        self.names: dict[str, QLabel] = {}
        for key, name in self.FIELDS:
            value = QLabel("—")
            value.setFont(value_font)
            value.setAlignment(Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignBottom)
            label = QLabel(name)
            label.setFont(name_font)
            label.setAlignment(Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignTop)
            label.setStyleSheet(f"color: {GREY}")
            self.values[key] = value
            self.names[key] = label
        for key in ("expected_speedup", "measured_speedup", "cost_ratio"):
            self.names[key].setToolTip(self.FORMULA)
            self.values[key].setToolTip(self.FORMULA)
        self.formula = QLabel(self.FORMULA)
        self.formula.setFont(name_font)
        self.formula.setStyleSheet(f"color: {GREY}")
        self.formula.setAlignment(Qt.AlignmentFlag.AlignHCenter)
        self.formula.setWordWrap(True)
        self.columns = 0
        self._arrange(6)

    def set_theme(self, theme: Theme) -> None:
        """Captions and the formula in the theme's muted ink (numbers: the palette's)."""
        for label in (*self.names.values(), self.formula):
            label.setStyleSheet(f"color: {theme.muted}")

    def set_compact(self, on: bool) -> None:
        """Presentation mode: the formula line goes (it stays in the numbers' tooltips)."""
        self.compact = on
        self.formula.setVisible(self.columns == 6 and not on)
        self.names["alpha"].setText(alpha_caption(self.tally, on))

    def _arrange(self, columns: int) -> None:
        """Put the numbers in ``columns`` columns (each number above its caption)."""
        if columns == self.columns:
            return
        self.columns = columns
        for w in (*self.values.values(), *self.names.values(), self.formula):
            self.grid.removeWidget(w)
        for c in range(6):
            self.grid.setColumnStretch(c, 1 if c < columns else 0)
        for i, (key, _) in enumerate(self.FIELDS):
            row, col = 2 * (i // columns), i % columns
            self.grid.addWidget(self.values[key], row, col)
            self.grid.addWidget(self.names[key], row + 1, col)
        self.grid.addWidget(self.formula, 2 * (6 // columns), 0, 1, columns)
        # Narrow: the numbers take two rows, and the formula stays in the tooltips.
        self.formula.setVisible(columns == 6 and not self.compact)

    def refit(self) -> None:
        """One row or two for the numbers' new type size (zoom) at the present width."""
        columns = 6 if self._wide_enough(self.width()) else 3
        if columns != self.columns:
            self._arrange(columns)
            self.updateGeometry()

    def _wide_enough(self, width: int) -> bool:
        columns = sum(max(self.values[k].sizeHint().width(), self.names[k].sizeHint().width())
                      for k, _ in self.FIELDS)
        m = self.grid.contentsMargins()
        return width >= columns + 5 * self.grid.horizontalSpacing() + m.left() + m.right()

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        self._arrange(6 if self._wide_enough(event.size().width()) else 3)

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt override
        """Three columns' worth: narrower than that, captions would be cut."""
        hint = super().minimumSizeHint()
        if self.columns == 6:
            m = self.grid.contentsMargins()
            width = 0
            for i in range(3):
                keys = [self.FIELDS[i][0], self.FIELDS[i + 3][0]]
                width += max(max(self.values[k].sizeHint().width(),
                                 self.names[k].sizeHint().width()) for k in keys)
            hint.setWidth(width + 2 * self.grid.horizontalSpacing() + m.left() + m.right())
        return hint

    def update_from(self, stats: SpeedStats | None, speculative: bool = True,
                    tally: Tally | None = None) -> None:
        """Show the numbers (dashes before the first round); ``tally``: the run's counts,
        whose tree rounds make α's caption read per position (alpha_caption)."""
        self.tally = tally = tally if speculative else None
        caption = alpha_caption(tally, self.compact)
        tip = alpha_tooltip(tally)
        self.names["alpha"].setText(caption)
        self.names["alpha"].setToolTip(tip)
        self.values["alpha"].setToolTip(tip)
        if stats is None or stats.tokens_per_s == 0:
            for label in self.values.values():
                label.setText("—")
            return
        self.values["tokens_per_s"].setText(f"{stats.tokens_per_s:.1f}")
        self.values["target_calls_per_token"].setText(f"{stats.target_calls_per_token:.2f}")
        dash = "—"
        self.values["alpha"].setText(f"{stats.alpha:.2f}" if speculative else dash)
        self.values["cost_ratio"].setText(f"{stats.cost_ratio:.2f}" if speculative else dash)
        self.values["expected_speedup"].setText(
            f"{stats.expected_speedup:.2f}×" if stats.expected_speedup else dash)
        tip = paper_tooltip(stats)
        self.values["expected_speedup"].setToolTip(tip)
        self.names["expected_speedup"].setToolTip(tip)
        self.values["measured_speedup"].setText(
            f"{stats.measured_speedup:.2f}×" if stats.measured_speedup else dash)
        against = self.AGAINST.get(stats.measured_against, stats.measured_against)
        # Long references break before "measured at load" so the caption stays narrow.
        against = against.replace(" measured at load", "\nmeasured at load")
        against = against.replace(" kept from an earlier launch", "\nkept from an earlier launch")
        if self.compact:  # presenting: one line; what it is measured against is in its tooltip
            against = ""  # (two more lines took the room of K = 8's second row at 1366 × 768)
        self.names["measured_speedup"].setText("measured speedup"
                                               + (f"\n{against}" if against else ""))
        self.refit()  # a longer caption may no longer fit one row of six (zoomed in)
        self.names["measured_speedup"].setToolTip(
            "Measured: tokens/s of this run ÷ tokens/s of the target alone (a race), or ÷ "
            "1 / (the target's one-token step, timed when the pair loaded). Never estimated. "
            "Against the step, a run drawn live reads low: the window's drawing shares the "
            "cores with it, the step was timed without it. A race (F7) times both runs with "
            "the main window held.")

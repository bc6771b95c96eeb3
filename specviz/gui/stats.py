"""Acceptance over time (rate, histogram, by position) and speed: plots made once, data updated."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QFont
from PySide6.QtWidgets import QGridLayout, QLabel, QWidget

from .record import RunRecord, SpeedStats
from .style import (
    BLUE,
    GREY,
    PLOT_POINT_SIZE,
    REDDISH_PURPLE,
    SKY_BLUE,
    VERMILLION,
    configure_plots,
)

configure_plots()


def _style_plot(plot: pg.PlotItem, font: QFont, title: str) -> None:
    plot.setMenuEnabled(False)
    plot.hideButtons()
    plot.setMouseEnabled(False, False)
    plot.setTitle(title, size=f"{PLOT_POINT_SIZE}pt")
    for name in ("left", "bottom"):
        plot.getAxis(name).setStyle(tickFont=font)
    plot.showGrid(x=False, y=True, alpha=0.25)


class AcceptanceView(pg.GraphicsLayoutWidget):  # type: ignore[misc]
    """Acceptance per round and cumulative; accepted-per-round histogram; by draft position."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setBackground("w")
        font = QFont()
        font.setPointSize(PLOT_POINT_SIZE - 1)
        self.rate_plot = self.addPlot(row=0, col=0, colspan=2)
        _style_plot(self.rate_plot, font,
                    f"Accepted ÷ drafted: <span style='color:{BLUE}'>━ cumulative</span>"
                    f" &nbsp;<span style='color:{SKY_BLUE}'>● this round</span>")
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
        self.rate_plot.setLabel("bottom", "round")

        self.hist_plot = self.addPlot(row=1, col=0)
        _style_plot(self.hist_plot, font, "Accepted per round (◆ i.i.d. α)")
        self.hist_bars = pg.BarGraphItem(x=[], height=[], width=0.75, brush=BLUE,
                                         pen=pg.mkPen(None))
        self.hist_plot.addItem(self.hist_bars)
        # Expected counts if every draft were accepted independently with the measured α.
        self.hist_expected = self.hist_plot.plot(
            [], [], pen=None, symbol="d", symbolSize=12, symbolBrush=REDDISH_PURPLE,
            symbolPen=pg.mkPen("k"))
        self.hist_plot.setLabel("bottom", "accepted of K (0…K)")

        self.pos_plot = self.addPlot(row=1, col=1)
        _style_plot(self.pos_plot, font, "Acceptance by position")
        self.pos_bars = pg.BarGraphItem(x=[], height=[], width=0.75, brush=SKY_BLUE,
                                        pen=pg.mkPen(BLUE, width=1))
        self.pos_plot.addItem(self.pos_bars)
        self.pos_plot.setYRange(0, 1.05, padding=0)
        for plot in (self.rate_plot, self.pos_plot):  # few ticks: the plots are short
            plot.getAxis("left").setTicks([[(0, "0"), (0.5, "0.5"), (1, "1")], []])
        self.pos_plot.setLabel("bottom", "draft position")
        self._k = -1

    def update_from(self, record: RunRecord, selected_round: int | None = None) -> None:
        """Push the record's arrays into the existing items."""
        n = len(record.cumulative_rate)
        xs = list(range(1, n + 1))
        self.cumulative_line.setData(xs, record.cumulative_rate)
        self.round_points.setData(xs, record.round_rate)
        self.rate_plot.setXRange(0.5, max(n, 5) + 0.5, padding=0)
        if selected_round is not None:
            self.selected_line.setPos(selected_round + 1)
        self.selected_line.setVisible(selected_round is not None)

        k = len(record.histogram) - 1
        hist = record.histogram
        self.hist_bars.setOpts(x=list(range(len(hist))), height=hist)
        expected = self.expected_histogram(record.alpha, k, sum(hist))
        self.hist_expected.setData(list(range(len(expected))), expected)
        by_pos = record.acceptance_by_position()
        self.pos_bars.setOpts(x=list(range(1, len(by_pos) + 1)), height=by_pos)
        if k != self._k:  # axes depend on K only
            self._k = k
            self.hist_plot.setXRange(-0.6, max(k, 1) + 0.6, padding=0)
            self.hist_plot.getAxis("bottom").setTicks([[(i, str(i)) for i in range(k + 1)], []])
            self.pos_plot.setXRange(0.4, max(k, 1) + 0.6, padding=0)
            self.pos_plot.getAxis("bottom").setTicks([[(i, str(i)) for i in range(1, k + 1)],
                                                      []])
        self.hist_plot.setYRange(0, max([*hist, *expected, 1]) * 1.1, padding=0)

    @staticmethod
    def expected_histogram(alpha: float, k: int, rounds: int) -> list[float]:
        """Rounds expected with n accepted if drafts were kept i.i.d. with probability α."""
        if k < 0 or rounds == 0:
            return []
        probs = [alpha**n * (1 - alpha) for n in range(k)] + [alpha**k]
        return [rounds * p for p in probs]


FORMULA = ("expected = E[tokens / round] ÷ (K·c + v), E = (1 − α<sup>K+1</sup>) / (1 − α);"
           " c, v = draft pass, verify pass ÷ one target step")


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


class SpeedView(QWidget):
    """Big numbers: tokens/s, target passes per token, expected and measured speedup."""

    FIELDS = (
        ("tokens_per_s", "tokens / s"),
        ("target_calls_per_token", "target passes / token"),
        ("alpha", "α = P(draft kept)"),
        ("cost_ratio", "cost ratio c"),
        ("expected_speedup", "expected speedup"),
        ("measured_speedup", "measured speedup"),
    )

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        grid = QGridLayout(self)
        grid.setContentsMargins(8, 4, 8, 4)
        grid.setVerticalSpacing(0)
        name_font = QFont()
        name_font.setPointSize(PLOT_POINT_SIZE - 2)
        value_font = QFont()
        value_font.setPointSize(PLOT_POINT_SIZE + 9)
        value_font.setBold(True)
        self.values: dict[str, QLabel] = {}
        self.names: dict[str, QLabel] = {}
        for i, (key, name) in enumerate(self.FIELDS):
            row, col = 2 * (i // 3), i % 3  # three numbers a row, each above its name
            value = QLabel("—")
            value.setFont(value_font)
            value.setAlignment(Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignBottom)
            label = QLabel(name)
            label.setFont(name_font)
            label.setWordWrap(True)
            label.setAlignment(Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignTop)
            label.setStyleSheet(f"color: {GREY}")
            grid.addWidget(value, row, col)
            grid.addWidget(label, row + 1, col)
            self.values[key] = value
            self.names[key] = label
        self.formula = QLabel(FORMULA)
        self.formula.setFont(name_font)
        self.formula.setStyleSheet(f"color: {GREY}")
        self.formula.setAlignment(Qt.AlignmentFlag.AlignHCenter)
        grid.addWidget(self.formula, 4, 0, 1, 3)

    def update_from(self, stats: SpeedStats | None, speculative: bool = True) -> None:
        """Show the numbers (dashes before the first round)."""
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
        against = f" ({stats.measured_against})" if stats.measured_against else ""
        self.names["measured_speedup"].setText("measured speedup" + against)
        self.names["measured_speedup"].setToolTip(
            "Measured: tokens/s of this run ÷ tokens/s of the target alone (a race), or ÷ "
            "1 / (the target's one-token step, timed when the pair loaded). Never estimated.")

"""A lineup's lanes side by side on one clock: the Explore window's replay, and its slides.

Each lane: its name, a bar of tokens so far, tokens/s and tokens per round at the shared
time (from the lane's own timestamps), and its text with every token styled by its fate.
The same view draws the slides (:mod:`specviz.gui.stage.export`): the last frame as PNG,
every moment a lane changes as a GIF (each frame held until the next moment).
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont
from PySide6.QtWidgets import QGridLayout, QLabel, QProgressBar, QVBoxLayout, QWidget

from specviz.core.events import Event, Round
from specviz.core.lineup import Lineup, Side

BLUE, ORANGE, GREEN = "#0072B2", "#D55E00", "#009E73"
# A token's fate as the app's legend draws it, told apart by more than hue.
FATE_STYLE = {
    "accepted": f"color:{BLUE}",
    "rejected": f"color:{ORANGE};text-decoration:line-through",
    "resampled": f"color:{ORANGE};text-decoration:underline",
    "bonus": f"color:{GREEN};font-weight:bold",
    "target": "",
}
SLIDE_TAIL_CHARS = 220  # a slide scrolls nowhere: each lane shows the end of its text


def _pieces(rounds: Sequence[Round]) -> list[tuple[str, str]]:
    """(fate, text) of each token shown, in order (rejected drafts included, struck)."""
    out: list[tuple[str, str]] = []
    for rnd in rounds:
        kept = len(rnd.appended_ids)
        for i, d in enumerate(rnd.drafted):
            if d.status == "accepted" and i < kept:
                out.append(("accepted", rnd.appended_texts[i]))
            elif d.status == "rejected":
                out.append(("rejected", d.text))
        if rnd.extra is not None and kept > rnd.n_accepted:
            out.append((rnd.extra.kind, rnd.appended_texts[rnd.n_accepted]))
    return out


def lane_html(rounds: Sequence[Round], tail_chars: int | None = None) -> str:
    """A lane's text so far, each token styled by its fate (rejected drafts struck);
    with ``tail_chars``, only the last tokens that fit, after an ellipsis."""
    pieces = _pieces(rounds)
    if tail_chars is not None:
        n, used = len(pieces), 0
        while n and used + len(pieces[n - 1][1]) <= tail_chars:
            used += len(pieces[n - 1][1])
            n -= 1
        pieces = [("target", "…"), *pieces[n:]] if n else pieces

    def span(kind: str, text: str) -> str:
        text = escape(text).replace("\n", "↵ ")
        style = FATE_STYLE[kind]
        return f'<span style="{style}">{text}</span>' if style else text

    return "".join(span(kind, text) for kind, text in pieces)


def lane_figures(lineup: Lineup, lane: Side) -> str:
    """A finished lane's figures: tokens/s, tokens per round, speedup, greedy identity."""
    if lane.finished is None:
        return "did not finish"
    s = lane.finished.summary
    speedup = lineup.speedup(lane)
    same = lineup.identical(lane)
    return (f"{s.tokens_per_s:.1f} tok/s, {s.mean_tokens_per_round:.2f} tok/round"
            + (f", {speedup:.2f}× the target alone" if speedup and lane is not lineup.baseline
               else "")
            + ("" if same is None else ", same ids as the target alone" if same
               else ", NOT the target alone's ids"))


class LineupView(QWidget):
    """Every lane of a lineup at one time of the shared clock (rank shown once done)."""

    def __init__(self, slide: bool = False) -> None:
        super().__init__()
        self.slide = slide
        self.lanes_box = QGridLayout()
        self.clock = QLabel("")
        layout = QVBoxLayout(self)
        if slide:
            self.title = QLabel("")
            self.title.setWordWrap(True)
            layout.addWidget(self.title)
        layout.addLayout(self.lanes_box)
        layout.addWidget(self.clock)
        if slide:
            layout.addStretch(1)
        self.bars: list[tuple[QLabel, QProgressBar, QLabel]] = []
        self.texts: list[QLabel] = []
        self.shown_rounds: list[int] = []
        self.lineup: Lineup | None = None

    def make_lanes(self, names: Sequence[str], budget: int) -> None:
        """One row per lane (a name, a bar of ``budget`` tokens, its figures) and its text."""
        while self.lanes_box.count():
            item = self.lanes_box.takeAt(0)
            widget = item.widget() if item is not None else None
            if widget is not None:
                widget.deleteLater()
        self.bars, self.texts, self.shown_rounds = [], [], []
        for i, name in enumerate(names):
            label, bar, speed = QLabel(name), QProgressBar(), QLabel("waiting")
            bar.setRange(0, budget)
            bar.setValue(0)
            bar.setFormat("%v tokens")
            text = QLabel("")
            text.setWordWrap(True)
            text.setTextFormat(Qt.TextFormat.RichText)
            if self.slide:
                bold = QFont(label.font())
                bold.setBold(True)
                label.setFont(bold)
                big = QFont(text.font())
                big.setPointSizeF(big.pointSizeF() * 1.5)
                text.setFont(big)
                text.setAlignment(Qt.AlignmentFlag.AlignTop)
                text.setMinimumHeight(3 * text.fontMetrics().lineSpacing())
            self.lanes_box.addWidget(label, 2 * i, 0)
            self.lanes_box.addWidget(bar, 2 * i, 1)
            self.lanes_box.addWidget(speed, 2 * i, 2)
            self.lanes_box.addWidget(text, 2 * i + 1, 0, 1, 3)
            self.bars.append((label, bar, speed))
            self.texts.append(text)
            self.shown_rounds.append(-1)
        self.lanes_box.setColumnStretch(1, 1)

    def load(self, lineup: Lineup) -> None:
        """Lanes for ``lineup``, shown at time 0."""
        self.lineup = lineup
        self.make_lanes([lineup.label(lane) for lane in lineup.lanes],
                        lineup.lanes[0].started.settings.max_new_tokens)
        if self.slide:
            started = lineup.lanes[0].started
            temp = ("greedy (T = 0)" if started.settings.temperature == 0
                    else started.temperature_text(eq=" = "))
            self.title.setText(f"<b>A lineup on one clock</b>: {escape(started.pair.target)}, "
                               f"{temp}, seed {started.settings.seed}. Lanes ran one after the "
                               "other; each plays from its own timestamps.")
        self.show_at(0.0)

    def show_at(self, t: float) -> None:
        """Every lane at time ``t`` of the shared clock; the rank of each lane once done."""
        if self.lineup is None:
            return
        ranked = self.lineup.ranking()
        tail = SLIDE_TAIL_CHARS if self.slide else None
        for i, ((label, bar, speed), state) in enumerate(zip(self.bars, self.lineup.at(t),
                                                             strict=False)):
            label.setText(state.label)
            bar.setValue(state.tokens)
            lane = self.lineup.lanes[i]
            if i < len(self.texts) and state.rounds != self.shown_rounds[i]:  # only on change
                self.shown_rounds[i] = state.rounds
                self.texts[i].setText(lane_html(lane.rounds[:state.rounds], tail))
            figures = f"{state.tokens_per_s:5.1f} tok/s, {state.tokens_per_round:.2f} tok/round"
            if state.done:
                speedup = self.lineup.speedup(lane)
                figures += (f" ✓ #{ranked.index(lane) + 1}"
                            + (f", {speedup:.2f}×" if speedup and lane is not self.lineup.baseline
                               else ""))
            speed.setText(figures)
        self.clock.setText(f"shared clock: {t:.2f} s of {self.lineup.duration_s:.2f} s")


def lineup_moments(lineup: Lineup, min_gap_s: float = 0.0) -> list[float]:
    """0, then each time a lane shows something new (rounds and ends), at least ``min_gap_s``
    apart (the lineup's end always kept)."""
    end = lineup.duration_s
    times = sorted({round(t, 6) for t in
                    [r.elapsed_s for lane in lineup.lanes for r in lane.rounds
                     if r.elapsed_s <= end] + [lane.duration_s for lane in lineup.lanes]})
    out = [0.0]
    for t in times:
        if t - out[-1] >= min_gap_s and t > 0:
            out.append(t)
    if out[-1] < end:
        if len(out) > 1 and end - out[-1] < min_gap_s:
            out[-1] = end
        else:
            out.append(end)
    return out


def lineup_of(events: Sequence[Event]) -> Lineup | None:
    """The finished lineup of a recording that is not a race (a race plays as a race)."""
    from specviz.core.lineup import as_lineup
    from specviz.core.race import as_race

    if as_race(events) is not None:
        return None
    lineup = as_lineup(events)
    return lineup if lineup is not None and lineup.complete else None


__all__ = ["FATE_STYLE", "LineupView", "lane_figures", "lane_html", "lineup_moments",
           "lineup_of"]

"""Staged rounds: in step mode a round unfolds phase by phase, each with a one-line caption.

Everything comes from the Round event alone (q_top, p_top, ratio, r, status, extra.dist_top):
the draft proposes x₁…x_K (q bars); the target scores all K+1 positions in one pass (p bars
appear); each tested x_i in turn, r as a marker against min(1, p/q) on a 0–1 line, kept or
rejected; the discarded drafts greyed; the residual max(0, p − q) (or p at K+1) appears; the
resampled or bonus token is drawn. Forward and back (PgDn / PgUp).

A tree round (gui/views/tree.py) unfolds in the tree instead: the drafter's tree, the
target's one pass, then the siblings one by one in the walk's order, each against the p the
rejections before it left (the residual), the nodes off the path discarded, the extra token.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from html import escape

from PySide6.QtCore import QEvent, QRect, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QFont, QPainter, QPaintEvent, QPen
from PySide6.QtWidgets import QHBoxLayout, QLabel, QSizePolicy, QWidget

from specviz.core.events import DraftPosition, Round
from specviz.gui.look.style import (
    FATES,
    PLOT_POINT_SIZE,
    fmt_prob,
    token_label,
)
from specviz.gui.look.themes import LIGHT, contrast_ratio
from specviz.gui.views.bars import LABEL_CHARS, RoundBarsView, candidates, top_candidates
from specviz.gui.views.tree import ROOT, Reveal, TreeView, is_tree, kept_path, marked, sibling_tests

GREYED = "#C8C8C8"
SUB = "₀₁₂₃₄₅₆₇₈₉"


def sub(n: int) -> str:
    return "".join(SUB[int(c)] for c in str(n))


@dataclass(frozen=True)
class Phase:
    name: str  # draft / score / test / discard / dist / extra
    caption: str
    tested: int = 0  # drafts whose verdict is shown


def phases(rnd: Round) -> list[Phase]:
    """The phases of one round, in order, with their captions."""
    if is_tree(rnd):
        return tree_phases(rnd)
    k = len(rnd.drafted)
    drafts = " ".join(f"“{token_label(d.text)}”" for d in rnd.drafted)
    out = [Phase("draft", f"The draft q proposes x{sub(1)}…x{sub(k)}: {drafts}"),
           Phase("score", f"The target p scores all {k + 1} positions in one pass")]
    tested = [d for d in rnd.drafted if d.status != "discarded"]
    for j, d in enumerate(tested, 1):
        sign, verdict = ("<", "kept") if d.status == "accepted" else ("≥", "rejected")
        out.append(Phase("test", f"x{sub(d.index + 1)} “{token_label(d.text)}”: r {fmt_prob(d.r)}"
                                 f" {sign} min(1, p/q) {fmt_prob(d.ratio)} → {verdict}", j))
    n = len(tested)
    if len(tested) < k:
        out.append(Phase("discard", f"x{sub(n + 1)}…x{sub(k)} come after a rejection: "
                                    "discarded, never tested", n))
    e = rnd.extra
    if e is not None and e.kind == "resampled":
        out.append(Phase("dist", "The residual max(0, p − q), normalised, forms at "
                                 f"position {n}", n))
        out.append(Phase("extra", f"“{token_label(e.text)}” is drawn from the residual "
                                  "(resampled)", n))
    elif e is not None:
        out.append(Phase("dist", f"All {k} kept: p at position {k + 1} gives a bonus token", n))
        out.append(Phase("extra", f"Bonus “{token_label(e.text)}” drawn from p", n))
    return out


def tree_phases(rnd: Round) -> list[Phase]:
    """A tree round's phases: the tree, the one pass, each sibling's test in the walk's order
    (against p, then the residual each rejection leaves), the discards, the extra token."""
    k = len(rnd.drafted)
    first = sum(1 for d in rnd.drafted if d.parent == ROOT)
    out = [Phase("draft", f"The drafter proposes a tree of {k} tokens, {first} candidates for "
                          "the next one; branches share their start"),
           Phase("score", f"The target scores all {k + 1} contexts in one pass (a tree "
                          "attention mask: each node sees only its ancestors)")]
    walk = sibling_tests(rnd)
    for j, t in enumerate(walk, 1):
        d = rnd.drafted[t.node]
        who = f"Candidate {t.order} “{token_label(d.text)}” vs {marked(t.order - 1)}"
        if d.status == "accepted":
            then = "its children next" if any(c.parent == d.index for c in rnd.drafted) \
                else "a leaf"
            out.append(Phase("test", f"{who}: r {fmt_prob(d.r)} < {fmt_prob(d.ratio)} → kept; "
                                     f"{then}", j))
        else:
            out.append(Phase("test", f"{who}: r {fmt_prob(d.r)} ≥ {fmt_prob(d.ratio)} → "
                                     f"rejected; the next meets {marked(t.order)}", j))
    n = len(walk)
    off = k - n
    if off:
        out.append(Phase("discard", f"{off} node{'s' if off > 1 else ''} off the path: "
                                    "discarded, never tested", n))
    e = rnd.extra
    if e is not None and e.kind == "resampled":
        last = walk[-1].order if walk else 0
        path = kept_path(rnd)
        where = f"after “{token_label(rnd.drafted[path[-1]].text)}”" if path \
            else "at the first step"
        out.append(Phase("dist", f"No candidate kept {where}: {marked(last)}, the residual, is "
                                 "what the target still owes there", n))
        out.append(Phase("extra", f"“{token_label(e.text)}” is drawn from {marked(last)} "
                                  "(resampled)", n))
    elif e is not None:
        out.append(Phase("dist", "The path reached a leaf: p after it gives a bonus token", n))
        out.append(Phase("extra", f"Bonus “{token_label(e.text)}” drawn from p", n))
    return out


class RLine(QWidget):
    """A 0–1 line: the accept zone [0, min(1, p/q)) shaded, the draw r as a marker."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.ratio: float | None = None
        self.r: float | None = None
        self.accepted = False
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt override
        return QSize(200, round(2.6 * self.fontMetrics().lineSpacing()) + 24)

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt override
        return self.sizeHint()

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 - Qt override
        super().changeEvent(event)
        if event.type() == QEvent.Type.FontChange:  # zoom: room for the captions
            self.updateGeometry()

    def set(self, ratio: float | None, r: float | None, accepted: bool) -> None:
        self.ratio, self.r, self.accepted = ratio, r, accepted
        self.update()

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 - Qt override
        if self.ratio is None:
            return
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        font = self.font()
        p.setFont(font)
        fm = p.fontMetrics()
        left, right = fm.horizontalAdvance("0 ") + 6, self.width() - fm.horizontalAdvance(" 1") - 6
        y = self.height() / 2
        span = right - left
        theme = getattr(self, "theme", LIGHT)  # the bars' theme (Stager.draw)
        p.fillRect(QRectF(left, y - 10, span * self.ratio, 20), QColor(theme.bg("accepted")))
        p.setPen(QPen(QColor(theme.text), 3))
        p.drawLine(left, int(y), right, int(y))
        p.drawText(2, int(y + fm.ascent() / 2), "0")
        p.drawText(right + 6, int(y + fm.ascent() / 2), "1")
        x = left + span * self.ratio
        p.setPen(QPen(QColor(theme.line), 4))
        p.drawLine(int(x), int(y - 16), int(x), int(y + 16))
        # Captions: min(1, p/q) above its tick, r below its marker (the accept zone is shaded).
        small = QFont(font)
        small.setPointSizeF(font.pointSizeF() * 0.8)
        p.setFont(small)
        sm = p.fontMetrics()
        text = "min(1, p/q)"
        tx = min(max(2, int(x - sm.horizontalAdvance(text) / 2)),
                 self.width() - sm.horizontalAdvance(text) - 2)
        p.drawText(tx, int(y - 18), text)
        if self.r is not None:
            xr = left + span * self.r
            # Kept: r lies in the shaded zone, so the marker takes the ink that reads on it.
            kept = theme.fg("accepted") if contrast_ratio(theme.fg("accepted"),
                                                         theme.bg("accepted")) >= 3 \
                else theme.text
            color = QColor(kept if self.accepted else theme.mark)
            p.setPen(QPen(color, 3))
            p.setBrush(color)
            p.drawEllipse(QRectF(xr - 9, y - 9, 18, 18))
            p.drawText(int(xr - sm.horizontalAdvance("r") / 2), int(y + 14 + sm.ascent()), "r")
        p.end()


class StagePanel(QWidget):
    """The caption line and the r line above the bars while a round is staged."""

    CAPTION_SHARE, RLINE_SHARE = 3, 2  # the row's stretch beside the step count

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.caption = QLabel()
        self.caption.setWordWrap(True)
        # Plain text: a token such as "<s>" is shown, not taken for a tag (it struck the rest).
        self.caption.setTextFormat(Qt.TextFormat.PlainText)
        font = QFont()
        font.setPointSize(PLOT_POINT_SIZE + 3)
        font.setBold(True)
        self.caption.setFont(font)
        self.step_label = QLabel()
        self.step_label.setFont(font)
        self.rline = RLine()
        plain = QFont(font)
        plain.setBold(False)
        self.rline.setFont(plain)
        row = QHBoxLayout(self)
        row.setContentsMargins(4, 0, 4, 0)
        row.addWidget(self.step_label)
        row.addWidget(self.caption, self.CAPTION_SHARE)
        row.addWidget(self.rline, self.RLINE_SHARE)

    def needed_height(self, width: int, captions: list[str], tested: bool) -> int:
        """The row's height ``width`` px wide for the tallest of ``captions`` (wrapped in
        the caption's share of the row beside the r line), and the r line's where a draft is
        ``tested``: what a round's phases will ask, before they are shown."""
        layout = self.layout()
        m = layout.contentsMargins()
        room = width - m.left() - m.right() - self.step_label.sizeHint().width() \
            - 2 * max(0, layout.spacing())
        share = max(1, room * self.CAPTION_SHARE // (self.CAPTION_SHARE + self.RLINE_SHARE))
        fm = self.caption.fontMetrics()
        flags = int(Qt.TextFlag.TextWordWrap)
        text = max((fm.boundingRect(QRect(0, 0, share, 1 << 20), flags, c).height()
                    for c in captions), default=0)
        cm = self.caption.contentsMargins()
        return max(text + cm.top() + cm.bottom() + m.top() + m.bottom(),
                   self.rline.sizeHint().height() if tested else 0)


class Stager:
    """Which phase of which round the bars show; forward / back move one phase."""

    def __init__(self, bars: RoundBarsView, panel: StagePanel,
                 on_phase: Callable[[Round | None, Phase | None, bool], None] | None = None,
                 tree: TreeView | None = None) -> None:
        self.bars = bars
        self.tree = tree  # where a tree round unfolds (the bars keep chains)
        self.panel = panel
        self.round: Round | None = None
        self.phases: list[Phase] = []
        self.index = 0
        # Told each phase shown (round, phase, whether it is the round's last), and
        # (round, None, True) when staging ends: the other views reveal as much, no more.
        self.on_phase = on_phase
        panel.hide()

    @property
    def at_end(self) -> bool:
        """Whether the round is fully revealed (its last phase, or no round staged)."""
        return self.round is None or self.index >= len(self.phases) - 1

    def revealed(self) -> tuple[int, bool]:
        """How much of the staged round the phase shown has revealed: drafts whose verdict
        is shown, and whether the resampled / bonus token is drawn."""
        if self.round is None:
            return 0, False
        phase = self.phases[self.index]
        return phase.tested, phase.name == "extra" or self.at_end

    @property
    def active(self) -> bool:
        return self.round is not None

    def start(self, rnd: Round) -> None:
        self.round = rnd
        self.phases = phases(rnd)
        self.index = 0
        self.panel.show()
        self.draw()

    def stop(self) -> None:
        rnd, self.round = self.round, None
        self.panel.hide()
        self.bars.header.show()
        if self.tree is not None:
            self.tree.header.show()
        if rnd is not None and self.on_phase is not None:
            self.on_phase(rnd, None, True)  # staging ends: the round shows whole

    def forward(self) -> bool:
        if self.round is None or self.index >= len(self.phases) - 1:
            return False
        self.index += 1
        self.draw()
        return True

    def back(self) -> bool:
        if self.round is None or self.index == 0:
            return False
        self.index -= 1
        self.draw()
        return True

    def draw(self) -> None:
        rnd = self.round
        if rnd is None:
            return
        phase = self.phases[self.index]
        if self.tree is not None and is_tree(rnd):
            self._draw_tree(rnd, phase)
            return
        if self.tree is not None:
            self.tree.hide()
            self.bars.show()
        bars = self.bars
        scale = bars.scale
        t = bars.theme
        self.panel.rline.theme = t  # type: ignore[attr-defined]
        greyed = GREYED if t is LIGHT else t.greyed
        names = [p.name for p in self.phases[: self.index + 1]]
        scored = "score" in names
        discard = "discard" in names
        dist = "dist" in names
        drawn = "extra" in names
        k = len(rnd.drafted)
        # Once the residual forms, the discarded drafts (already shown greyed) make room for it.
        shown = [d for d in rnd.drafted if d.status != "discarded"] if dist else rnd.drafted
        count = len(shown) + (1 if dist and rnd.extra is not None else 0)
        bars._place(count)  # noqa: SLF001 - the bars view's own grid
        small = f"<span style='font-size:{(PLOT_POINT_SIZE - 1) * scale:g}pt'>"
        for i, d in enumerate(shown):
            panel = bars.panels[i]
            cands = candidates(d, bars.n_show)
            marked = next(j for j, c in enumerate(cands) if c.token_id == d.token_id)
            label = escape(token_label(d.text, LABEL_CHARS))
            grey = discard and d.status == "discarded"
            if i < phase.tested or (discard and d.status != "discarded"):
                verdict = (f"<span style='color:{t.ink('accepted')}'>✓ kept</span>"
                           if d.status == "accepted" else
                           f"<span style='color:{t.ink('rejected')}'>✗ rejected</span>")
                detail = f"min(1,p/q) {fmt_prob(d.ratio)} · r {fmt_prob(d.r)}"
            elif grey:
                verdict = f"<span style='color:{t.muted}'>discarded</span>"
                detail = "never tested"
            else:
                verdict, detail = ("scored" if scored else "proposed"), ""
            figures = f"p {fmt_prob(d.p)} · q {fmt_prob(d.q)}" if scored else \
                f"q {fmt_prob(d.q)}"
            title = (f"<b>x{sub(i + 1)}</b> “{label}” <b>{verdict}</b><br>"
                     f"{small}{figures}<br>{detail}</span>")
            if bars.fit:  # presentation: two lines (the panels' title room)
                title = (f"<b>x{sub(i + 1)}</b> “{escape(token_label(d.text, 8))}” "
                         f"<b>{verdict}</b><br>{small}{detail or figures}</span>")
            ps = [(c.p or 0.0) if scored else 0.0 for c in cands]
            panel.show([token_label(c.text, LABEL_CHARS) for c in cands], ps,
                       [c.q or 0.0 for c in cands], marked, title,
                       p_color=greyed if grey else t.p)
            panel.q_bars.setOpts(brush=greyed if grey else t.q)
        if dist and rnd.extra is not None:
            e = rnd.extra
            rows = top_candidates(e.dist_top, e.token_id, bars.n_show)
            marked = next((j for j, r in enumerate(rows) if r[0] == e.token_id), -1) \
                if drawn else -1
            color = t.residual if e.kind == "resampled" else t.bonus
            what = "residual norm(max(0, p − q))" if e.kind == "resampled" else \
                f"p at position {k + 1}"
            head = (f"<b>“{escape(token_label(e.text, LABEL_CHARS))}” "
                    f"{FATES[e.kind].label}</b>") if drawn else "<b>drawing…</b>"
            bars.panels[len(shown)].show([token_label(r[1], LABEL_CHARS) for r in rows],
                                [r[2] for r in rows], None, marked,
                                f"{head}<br>{small}{what}</span>", p_color=color)
        # The residual / bonus panel may wrap to a row below: bring it into view when it forms.
        bar = bars.scroll.verticalScrollBar()
        bar.setValue(bar.maximum() if dist else 0)
        # The caption line says where we are; the bars' header line goes, the panels get it.
        bars.header.setText(f"<b>Round {rnd.index + 1}</b>, step {self.index + 1} of "
                            f"{len(self.phases)} (PgDn / PgUp)")
        bars.header.hide()
        tested = ([x for x in rnd.drafted if x.status != "discarded"][phase.tested - 1]
                  if phase.name == "test" else None)
        self._show_phase(rnd, phase, tested)

    def _draw_tree(self, rnd: Round, phase: Phase) -> None:
        """The phase in the tree: as much as it has revealed, the sibling under test ringed."""
        tree = self.tree
        assert tree is not None
        names = [p.name for p in self.phases[: self.index + 1]]
        reveal = Reveal(scored="score" in names, tested=phase.tested,
                        discarded="discard" in names, dist="dist" in names,
                        extra="extra" in names)
        walk = sibling_tests(rnd)
        current = walk[phase.tested - 1].node if phase.name == "test" else None
        self.bars.hide()
        tree.show()
        tree.show_round(rnd, reveal=reveal, current=current)
        tree.header.hide()  # the caption line says where we are: the tree gets the room
        self.panel.rline.theme = tree.theme  # type: ignore[attr-defined]
        self._show_phase(rnd, phase, rnd.drafted[current] if current is not None else None)

    def _show_phase(self, rnd: Round, phase: Phase, tested: DraftPosition | None) -> None:
        """What every phase shows below the bars or the tree, chain or tree alike: the step
        count, the caption, and the r line of the draft under test (``tested``), if any."""
        self.panel.step_label.setText(f"Round {rnd.index + 1} · {self.index + 1}/"
                                      f"{len(self.phases)}")
        self.panel.step_label.setToolTip("PgDn / → / Space: next step · PgUp / ←: back")
        self.panel.caption.setText(phase.caption)
        if tested is not None:
            self.panel.rline.set(tested.ratio, tested.r, tested.status == "accepted")
            self.panel.rline.show()
        else:
            self.panel.rline.set(None, None, False)
            self.panel.rline.hide()
        if self.on_phase is not None:
            self.on_phase(rnd, phase, self.at_end)

    def snapshot(self) -> tuple:
        """What is on screen (for tests): caption, r line, every visible panel's bars."""
        rows = []
        for panel in self.bars.visible_panels():
            rows.append((panel.title, tuple(panel.labels),
                         tuple(panel.p_bars.opts["width"]), tuple(panel.q_bars.opts["width"]),
                         str(panel.p_bars.opts["brush"])))
        return (self.panel.caption.text(), self.panel.rline.ratio, self.panel.rline.r,
                self.bars.header.text(), tuple(rows))

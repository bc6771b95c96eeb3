"""A tree round drawn as a tree: each node's token, q and p; the kept path; the siblings tested
in turn, each rejection's residual; the discarded branches greyed (folded below their first
node).

p = target, q = draft. Everything comes from the Round event: ``DraftPosition.parent`` links
the nodes (-1: the committed text), the statuses say the path (the accepted nodes), and after
a rejection the next sibling is tested against the residual: ``residual_top`` where the event
carries it (format 3), else, for a one-hot q (lookup; EAGLE-style top-k), p without the
rejected siblings, renormalised, which the parent's p_top gives exactly at every id it lists.
Chain rounds (no parents, or parents 0, 1, 2, ...) keep the bars.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from html import escape

from PySide6.QtCore import QPointF, QRectF, QSize, Qt, QTimer
from PySide6.QtGui import (
    QColor,
    QFont,
    QFontMetricsF,
    QPainter,
    QPaintEvent,
    QPen,
    QResizeEvent,
)
from PySide6.QtWidgets import (
    QFrame,
    QLabel,
    QScrollArea,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from specviz.core.events import DraftPosition, Round
from specviz.gui.look.style import FATES, PLOT_POINT_SIZE, fmt_prob, token_label
from specviz.gui.look.themes import LIGHT, Theme
from specviz.gui.views.labels import ElidedLabel

ROOT = -1
# The tree's type shrinks to fit its view down to this share of the app's plot type (zoomed
# in, as presenting, it may give back the zoom's extra first), then scrolls.
MIN_FIT = 0.75
TOKEN_CHARS = 10  # a node's token, cut (the box's width follows the widest node)
RESIDUAL_TOP = 3  # tokens of each residual listed beside the tree
TESTS_CHARS = 30  # the tests beside the tree: at least this many characters a line
TREE_LEAST_HEIGHT = 64  # px the tree's view asks for however short the pane
TESTS_LEAST = 200  # px the tests' panel asks of a row however narrow (it wraps, then scrolls)
TESTS_SHARE = 0.4  # of the row for the tests where the tree, at its floor type, can spare it
MARKS = "′″‴"  # p′, p″, p‴: the p after one, two, three rejections at a context


def is_tree(rnd: Round | None) -> bool:
    """Whether the round's drafts branch: a parent other than the chain's -1, 0, 1, ..."""
    return rnd is not None and rnd.branches


def kept_path(rnd: Round) -> list[int]:
    """The kept nodes from the root down: at each context the accepted child, while there is
    one (the statuses say it; a rejected or untested node never lies on the path)."""
    path: list[int] = []
    at = ROOT
    while True:
        kept = [d.index for d in rnd.drafted if d.parent == at and d.status == "accepted"]
        if not kept:
            return path
        path.append(kept[0])
        at = kept[0]


def marked(n: int) -> str:
    """p, p′, p″, ... : p after ``n`` rejections at one context."""
    if n <= 0:
        return "p"
    return "p" + (MARKS[n - 1] if n <= len(MARKS) else f"({n})")


@dataclass(frozen=True)
class SiblingTest:
    """One sibling's test, in the walk's order, and what the next sibling meets after it."""

    node: int
    context: int  # its parent: -1 the committed text
    order: int  # 1 for the first sibling tested at its context, 2 for the next ...
    against: tuple[tuple[str, float], ...]  # top of the p it was tested against
    residual: tuple[tuple[str, float], ...] | None  # after a rejection; None kept / not known
    recorded: bool  # the residual is the event's own (else computed from p_top)


def _first_p(d: DraftPosition) -> list[tuple[int, str, float]]:
    """p at a node's parent context: its p_top, with the node's own p where it is missing."""
    rows = list(zip(d.p_top.ids, d.p_top.texts, d.p_top.probs, strict=True))
    if d.token_id not in d.p_top.ids:
        rows.append((d.token_id, d.text, d.p))
    return rows


def residual_after(rnd: Round, node: int) -> tuple[list[tuple[int, str, float]], bool] | None:
    """The p the next sibling meets once ``node`` is rejected, as (id, text, prob) rows by
    prob, and whether the event carried it; None when the event does not say it.

    Computed (q one-hot: every sibling's q(x) = 1, as lookup drafts): p at the context with
    the rejected siblings so far removed, divided by 1 − their p (exact at each listed id).
    """
    d = rnd.drafted[node]
    if d.status != "rejected":
        return None
    if d.residual_top is not None:
        top = d.residual_top
        return [r for r in zip(top.ids, top.texts, top.probs, strict=True) if r[2] > 0], True
    siblings = [s for s in rnd.drafted if s.parent == d.parent and s.index <= node]
    if any(s.q < 1.0 for s in siblings):
        return None  # q not one-hot: the residual needs all of p and q, not their top-N
    gone = {s.token_id for s in siblings}
    mass = 1.0 - sum(s.p for s in siblings)
    if mass <= 0.0:
        return None
    rows = [(i, t, p / mass) for i, t, p in _first_p(d) if i not in gone and p > 0.0]
    return sorted(rows, key=lambda r: -r[2]), False


def sibling_tests(rnd: Round) -> list[SiblingTest]:
    """Every tested node in the walk's order (which is node order: a parent comes before its
    children, a sibling before the next)."""
    out: list[SiblingTest] = []
    seen: dict[int, int] = {}
    before: dict[int, list[tuple[int, str, float]]] = {}  # context -> p the next sibling meets
    for d in rnd.drafted:
        if d.status == "discarded" or d.parent is None:
            continue
        order = seen[d.parent] = seen.get(d.parent, 0) + 1
        against = before.get(d.parent) or sorted(_first_p(d), key=lambda r: -r[2])
        after = residual_after(rnd, d.index)
        if after is not None:
            before[d.parent] = after[0]
        out.append(SiblingTest(d.index, d.parent, order,
                        tuple((t, p) for _, t, p in against[:RESIDUAL_TOP]),
                        tuple((t, p) for _, t, p in after[0][:RESIDUAL_TOP])
                        if after is not None else None,
                        after[1] if after is not None else False))
    return out


@dataclass(frozen=True)
class Placed:
    """A box of the picture: a draft node, the root (the committed text) or the extra token."""

    key: int  # draft index; ROOT; EXTRA for the extra token
    parent: int | None  # None for the root
    column: int  # depth: 0 the root
    row: float  # rows of boxes from the top (a parent sits midway between its children)


EXTRA = 10_000  # the extra token's key among the placed boxes


def _parent(rnd: Round, i: int) -> int:
    d = rnd.drafted[i]
    return d.parent if d.parent is not None else i - 1


def _shown(rnd: Round, i: int) -> bool:
    """Whether node ``i`` has a box: its parent is the root or a tested node."""
    parent = _parent(rnd, i)
    return parent == ROOT or rnd.drafted[parent].status != "discarded"


def hidden_below(rnd: Round) -> dict[int, int]:
    """Discarded branches fold into their first node: node -> how many nodes it hides (a
    lookup tree of 16 is mostly untested branches; the room sees what was decided)."""
    out: dict[int, int] = {}
    for d in rnd.drafted:
        if _shown(rnd, d.index):
            continue
        top = _parent(rnd, d.index)
        while not _shown(rnd, top):
            top = _parent(rnd, top)
        out[top] = out.get(top, 0) + 1
    return out


def place(rnd: Round) -> dict[int, Placed]:
    """Columns by depth, rows by leaves in drawing order; the extra token is the last child of
    the context the walk ended at (the last kept node, or the root). Nodes under a discarded
    one are folded into it (``hidden_below``)."""
    children: dict[int, list[int]] = {}
    for d in rnd.drafted:
        if _shown(rnd, d.index):
            children.setdefault(_parent(rnd, d.index), []).append(d.index)
    path = kept_path(rnd)
    if rnd.extra is not None:
        children.setdefault(path[-1] if path else ROOT, []).append(EXTRA)
    out: dict[int, Placed] = {}
    next_row = 0.0

    def visit(key: int, parent: int | None, column: int) -> float:
        nonlocal next_row
        kids = children.get(key, []) if key != EXTRA else []
        if not kids:
            row = next_row
            next_row += 1.0
        else:
            rows = [visit(k, key, column + 1) for k in kids]
            row = (rows[0] + rows[-1]) / 2
        out[key] = Placed(key, parent, column, row)
        return row

    visit(ROOT, None, 0)
    return out


@dataclass(frozen=True)
class Reveal:
    """How much of the round a staged phase shows (all of it when not staged)."""

    scored: bool = True  # p is known (the target's pass)
    tested: int = 1 << 30  # verdicts shown, in the walk's order
    discarded: bool = True  # the untested nodes are marked discarded
    dist: bool = True  # where the extra token will come from (its box, still empty)
    extra: bool = True  # the extra token is drawn


class TreeCanvas(QWidget):
    """The tree, painted: a box per node (its token and verdict; p and q), edges between
    them, the kept path thick; a discarded branch folded into its first node (+n)."""

    GAP_X = 30  # px between columns (the edges run here), at zoom 1
    GAP_Y = 8  # px between rows
    PAD = 6  # px inside a box

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.theme: Theme = LIGHT
        self.scale = 1.0
        self.round: Round | None = None
        self.reveal = Reveal()
        self.placed: dict[int, Placed] = {}
        self.hidden: dict[int, int] = {}  # a folded branch's top node -> nodes it hides
        self.path: list[int] = []
        self.fit = 1.0  # shrunk to fit the view (TreeView.fit): the type never below MIN_FIT
        self.current: int | None = None  # the node whose test the staged phase shows
        self.boxes: dict[int, QRectF] = {}  # key -> where it was laid out (tests read it)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)

    def fonts(self) -> tuple[QFont, QFont]:
        token = QFont(self.font())
        token.setPointSizeF((PLOT_POINT_SIZE + 2) * self.zoom)
        token.setBold(True)
        small = QFont(self.font())
        small.setPointSizeF(PLOT_POINT_SIZE * self.zoom)
        return token, small

    @property
    def zoom(self) -> float:
        """The type's factor: the user's zoom, times the fit to the view."""
        return self.scale * self.fit

    def set_round(self, rnd: Round | None, reveal: Reveal, current: int | None = None) -> None:
        self.round, self.reveal, self.current = rnd, reveal, current
        self.placed = place(rnd) if rnd is not None else {}
        self.hidden = hidden_below(rnd) if rnd is not None else {}
        self.path = kept_path(rnd) if rnd is not None else []
        self.relayout()

    def lines(self, key: int) -> tuple[str, str]:
        """A box's two lines: the token with its verdict (✓ / ✗, as far as revealed; +n for a
        folded branch), and its p and q (q alone before the target's pass)."""
        rnd = self.round
        assert rnd is not None
        if key == ROOT:
            return "▶ the text", "so far"
        if key == EXTRA:
            e = rnd.extra
            assert e is not None
            label = FATES[e.kind].label
            if not self.reveal.extra:
                return "?", f"{label}…"
            return f"“{token_label(e.text, TOKEN_CHARS)}”", f"{label} {fmt_prob(e.prob)}"
        d = rnd.drafted[key]
        token = f"“{token_label(d.text, TOKEN_CHARS)}”"
        more = self.hidden.get(key, 0)
        if more:
            token += f" +{more}"
        q = "1" if d.q == 1.0 else fmt_prob(d.q)  # one-hot (lookup): the short form
        figures = f"p {fmt_prob(d.p)} · q {q}" if self.reveal.scored else f"q {q}"
        mark = {"accepted": "✓ ", "rejected": "✗ "}.get(self.state(key), "")
        return mark + token, figures

    def state(self, key: int) -> str:
        """What the box shows of the node's fate now: accepted / rejected / discarded /
        pending (not decided yet, or never decided in what is revealed)."""
        rnd = self.round
        assert rnd is not None
        d = rnd.drafted[key]
        if d.status != "discarded":
            order = [t.index for t in rnd.drafted if t.status != "discarded"].index(key)
            return d.status if order < self.reveal.tested else "pending"
        return "discarded" if self.reveal.discarded else "pending"

    def relayout(self) -> None:
        """Place the boxes at the type's size now; the canvas's minimum size follows."""
        self.boxes = {}
        if self.round is None:
            self.setMinimumSize(0, 0)
            return
        token, small = self.fonts()
        tm, sm = QFontMetricsF(token), QFontMetricsF(small)
        width = max(max(tm.horizontalAdvance(a), sm.horizontalAdvance(b))
                    for a, b in map(self.lines, self.placed))
        # Room for the verdict mark, so a box never grows as the round unfolds.
        width += tm.horizontalAdvance("✓ ")
        pad = self.PAD * self.zoom
        box_w = width + 2 * pad
        box_h = tm.lineSpacing() + sm.lineSpacing() + 2 * pad
        gap_x, gap_y = self.GAP_X * self.zoom, self.GAP_Y * self.zoom
        for key, at in self.placed.items():
            self.boxes[key] = QRectF(4 + at.column * (box_w + gap_x),
                                     4 + at.row * (box_h + gap_y), box_w, box_h)
        right = max(b.right() for b in self.boxes.values()) + 4
        bottom = max(b.bottom() for b in self.boxes.values()) + 4
        self.setMinimumSize(int(right) + 1, int(bottom) + 1)
        self.update()

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt override
        return self.minimumSize()

    def edge_colors(self) -> dict[int, tuple[str, float]]:
        """key -> (colour, width) of the edge into it: the kept path thick in the accepted
        ink, the edge to the extra token in its fate's ink, the rest thin."""
        t, out = self.theme, {}
        on_path = set(self.path[:self._kept_shown()])
        for key in self.placed:
            if key == ROOT:
                continue
            if key == EXTRA:
                kind = self.round.extra.kind if self.round and self.round.extra else "resampled"
                out[key] = (t.ink(kind), 5.0) if self.reveal.extra else (t.muted, 2.0)
            elif key in on_path:
                out[key] = (t.ink("accepted"), 6.0)
            else:
                out[key] = (t.muted if self.state(key) != "discarded" else t.greyed, 2.0)
        return out

    def drawn(self) -> list[int]:
        """The boxes painted now: all but the extra token's before the phase that shows where
        it comes from (its place is kept, so nothing moves when it appears)."""
        return [k for k in self.boxes if k != EXTRA or self.reveal.dist]

    def _kept_shown(self) -> int:
        """How many of the path's nodes have their verdict shown."""
        if self.round is None:
            return 0
        return sum(1 for k in self.path if self.state(k) != "pending")

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 - Qt override
        if self.round is None:
            return
        t = self.theme
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.fillRect(self.rect(), QColor(t.plot_bg))
        token, small = self.fonts()
        edges = self.edge_colors()
        # Edges first (the boxes cover their ends): thin ones under the kept path.
        for key in sorted(edges, key=lambda k: edges[k][1]):
            parent = self.placed[key].parent
            if parent is None or key == EXTRA and not self.reveal.dist:
                continue
            a, b = self.boxes[parent], self.boxes[key]
            color, width = edges[key]
            pen = QPen(QColor(color), width * self.zoom)
            if key != EXTRA and key not in self.path and self.state(key) == "discarded":
                pen.setStyle(Qt.PenStyle.DashLine)
            painter.setPen(pen)
            start = QPointF(a.right(), a.center().y())
            end = QPointF(b.left(), b.center().y())
            mid = (start.x() + end.x()) / 2
            painter.drawPolyline([start, QPointF(mid, start.y()), QPointF(mid, end.y()), end])
        for key in self.drawn():
            self._paint_box(painter, key, self.boxes[key], token, small)
        painter.end()

    def box_colors(self, key: int) -> tuple[str, str, str, float]:
        """(fill, text, border, border width) of a box in the theme."""
        t = self.theme
        if key == ROOT:
            return t.plot_bg, t.plot_text, t.plot_text, 2.0
        if key == EXTRA:
            kind = self.round.extra.kind if self.round and self.round.extra else "resampled"
            if not self.reveal.extra:
                return t.plot_bg, t.muted, t.muted, 2.0
            return t.bg(kind), t.fg(kind), t.ink(kind), 4.0
        state = self.state(key)
        if state == "accepted":
            return t.bg("accepted"), t.fg("accepted"), t.ink("accepted"), 4.0
        if state == "rejected":
            return t.bg("rejected"), t.fg("rejected"), t.ink("rejected"), 2.5
        if state == "discarded":
            return t.plot_bg, t.muted, t.greyed, 2.0
        return t.plot_bg, t.plot_text, t.plot_text, 2.0

    def _paint_box(self, painter: QPainter, key: int, box: QRectF, token: QFont,
                   small: QFont) -> None:
        fill, ink, border, width = self.box_colors(key)
        pen = QPen(QColor(border), width * self.zoom)
        if key not in (ROOT, EXTRA) and self.state(key) == "discarded":
            pen.setStyle(Qt.PenStyle.DashLine)
        if key == self.current:  # the sibling under test: a second ring in the mark colour
            painter.setPen(QPen(QColor(self.theme.mark), 4 * self.zoom))
            painter.setBrush(Qt.BrushStyle.NoBrush)
            grow = 5 * self.zoom
            painter.drawRoundedRect(box.adjusted(-grow, -grow, grow, grow), 8, 8)
        painter.setPen(pen)
        painter.setBrush(QColor(fill))
        painter.drawRoundedRect(box, 6, 6)
        first, second = self.lines(key)
        pad = self.PAD * self.zoom
        tm, sm = QFontMetricsF(token), QFontMetricsF(small)
        painter.setPen(QColor(ink))
        struck = QFont(token)
        # A rejected token is struck through, as in the stream: its fate reads without hue.
        struck.setStrikeOut(key not in (ROOT, EXTRA) and self.state(key) == "rejected")
        painter.setFont(struck)
        y = box.top() + pad + tm.ascent()
        painter.drawText(QPointF(box.left() + pad, y), first)
        painter.setFont(small)
        y += tm.descent() + (tm.lineSpacing() - tm.height()) + sm.ascent()
        painter.drawText(QPointF(box.left() + pad, y), second)


class Beside(QWidget):
    """Two panes side by side, the right one as wide as ``arrange`` says (TreeView.arrange
    calls place): a split by what each side needs, which a box layout's stretch can't say."""

    GAP = 6  # px between the panes
    LEAST = 80  # px the left pane keeps however narrow the row

    def __init__(self, left: QWidget, right: QWidget, arrange: Callable[[], None]) -> None:
        super().__init__()
        self.left, self.right, self._arrange = left, right, arrange
        left.setParent(self)
        right.setParent(self)

    def place(self, right_width: int) -> None:
        """The right pane ``right_width`` px wide at the row's right edge, the left the rest."""
        w, h = self.width(), self.height()
        left = max(0, w - right_width - self.GAP)
        self.left.setGeometry(0, 0, left, h)
        self.right.setGeometry(w - right_width, 0, right_width, h)

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt override
        right = self.right.minimumSizeHint()
        return QSize(self.LEAST + self.GAP + max(right.width(), TESTS_LEAST),
                     max(self.left.minimumHeight(), right.height()))

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt override
        return self.minimumSizeHint()

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        self._arrange()


class TreeView(QWidget):
    """A tree round: a headline, the tree, and beside it the siblings' tests and residuals."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.theme = LIGHT
        self.scale = 1.0
        self.round: Round | None = None
        self.presenting = False  # set_presenting: a one-line headline
        self._selected = False
        self._reveal = Reveal()  # what the shown round reveals (staging: a phase's share)
        self._current: int | None = None  # the sibling under test, staged
        self.natural_height = 0  # the tree's height at its type unshrunk (fit)
        font = QFont()
        font.setPointSize(PLOT_POINT_SIZE + 2)
        self.header = QLabel()
        self.header.setWordWrap(True)
        self.header.setTextFormat(Qt.TextFormat.RichText)
        self.header.setFont(font)
        self.canvas = TreeCanvas()
        self.scroll = QScrollArea()
        self.scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.scroll.setWidgetResizable(True)
        self.scroll.setWidget(self.canvas)
        # A row of boxes at the floor's type, and a bar to scroll by: at 1366 × 768 with the
        # controls shown the pane has ~80 px (100 cut the tree's bottom off).
        self.scroll.setMinimumHeight(TREE_LEAST_HEIGHT)
        self.residuals = QLabel()
        self.residuals.setWordWrap(True)
        self.residuals.setTextFormat(Qt.TextFormat.RichText)
        self.residuals.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        small = QFont()
        small.setPointSize(PLOT_POINT_SIZE)
        self.residuals.setFont(small)
        self.residual_scroll = QScrollArea()
        self.residual_scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.residual_scroll.setWidgetResizable(True)
        self.residual_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.residual_scroll.setWidget(self.residuals)
        self.row = Beside(self.scroll, self.residual_scroll, self.arrange)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.setSpacing(2)
        # The K policy's reason (the cost policy's tree-or-chain figures, 200 characters and
        # more): one muted line under the headline, cut at its start so the end (tree or
        # chain, and why) stays; whole in its tooltip. Wrapped, its two more lines took the
        # tree's room at 1366 × 768.
        self.reason = ElidedLabel()
        self.reason.elide = Qt.TextElideMode.ElideLeft
        self.reason.setFont(small)
        self.reason.hide()
        layout.addWidget(self.header)
        layout.addWidget(self.reason)
        layout.addWidget(self.row, 1)
        self.set_theme(LIGHT)

    def set_theme(self, theme: Theme) -> None:
        self.theme = theme
        self.canvas.theme = theme
        for scroll in (self.scroll, self.residual_scroll):
            scroll.setStyleSheet(f"QScrollArea {{ background: {theme.plot_bg}; }}")
        self.reason.setStyleSheet(f"color: {theme.muted}")
        self.residuals.setStyleSheet(f"QLabel {{ background: {theme.plot_bg}; "
                                     f"color: {theme.plot_text}; padding: 6px; }}")
        self.canvas.update()
        if self.round is not None:
            self.show_round(self.round, self._selected, self._reveal, self._current)

    def set_presenting(self, on: bool) -> None:
        """Presentation mode: a one-line headline (the tree and its tests say the rest)."""
        self.presenting = on
        if self.round is not None:
            self.show_round(self.round, self._selected, self._reveal, self._current)

    def set_scale(self, scale: float) -> None:
        """Zoom: the boxes' type and spacing follow (the labels follow the widget zoom)."""
        self.scale = self.canvas.scale = scale
        if self.round is not None:
            self.show_round(self.round, self._selected, self._reveal, self._current)

    def show_round(self, rnd: Round, selected: bool = False, reveal: Reveal | None = None,
                   current: int | None = None) -> None:
        """Draw ``rnd`` whole, or as far as a staged phase has revealed it."""
        self.round, self._selected = rnd, selected
        self._reveal = reveal = reveal or Reveal()
        self._current = current
        self.canvas.set_round(rnd, reveal, current)
        self._set_headline()
        self.reason.setText(f"[{rnd.policy_reason}]" if rnd.policy_reason else "")
        self.reason.setToolTip(reason_tooltip(rnd))
        self.reason.setVisible(bool(rnd.policy_reason))
        self.residuals.setText(tests_html(rnd, reveal, self.theme, current))
        self.arrange()  # the tree and its tests, both new: the row's split, the tree's type
        staged = reveal != Reveal()
        if staged:  # what the phase just revealed stays in view: the ringed node, the last line
            box = self.canvas.boxes.get(current if current is not None else ROOT)
            if box is not None:
                self.scroll.ensureVisible(int(box.center().x()), int(box.center().y()),
                                          int(box.width() / 2) + 8, int(box.height() / 2) + 8)
            QTimer.singleShot(0, self._last_line_in_view)  # once the new text is laid out
        else:
            self.residual_scroll.verticalScrollBar().setValue(0)

    def _set_headline(self) -> None:
        """The headline whole where it takes one line; else, and always presenting, without
        who drafted (the info line says) and the first step's width: at 1366 × 768 its second
        line took the tree's last rows."""
        rnd = self.round
        if rnd is None:
            return
        full = headline(rnd, self._selected, self.theme)
        m = self.layout().contentsMargins()
        width = max(1, self.width() - m.left() - m.right())
        self.header.setText(full)
        short = self.presenting or \
            self.header.heightForWidth(width) > 1.5 * self.header.fontMetrics().lineSpacing()
        if short:
            self.header.setText(headline(rnd, self._selected, self.theme, short=True))
        self.header.setToolTip(reason_tooltip(rnd))

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        if event.size().width() != event.oldSize().width():
            self._set_headline()  # one line or two at the new width

    def _last_line_in_view(self) -> None:
        bar = self.residual_scroll.verticalScrollBar()
        bar.setValue(bar.maximum())

    def arrange(self) -> None:
        """Split the row between the tree and its tests (tests_width), then fit the tree."""
        self.row.place(self.tests_width(self.row.width(), self.row.height()))
        self.fit()

    def tests_width(self, width: int, height: int) -> int:
        """The tests' panel's width in a row ``width`` × ``height``: what the tree leaves at
        the type its height allows, between TESTS_CHARS characters (or the longest word; or
        TESTS_SHARE of the row, where the tree still fits at its floor type beside it) and the
        text unwrapped or half the row.

        A fixed 3 : 2 split once left a tree that fitted the row scrolling sideways beside a
        panel of mostly wrapped text (1366 × 768)."""
        bar = self.residual_scroll.verticalScrollBar().sizeHint().width()
        pad = self.residuals.contentsMargins()  # the style sheet's padding
        chars = self.residuals.fontMetrics().averageCharWidth() * TESTS_CHARS
        room = width - Beside.GAP
        least = max(chars + pad.left() + pad.right(), self.residuals.minimumSizeHint().width()) \
            + bar  # the longest word: never wider than its panel (no sideways bar to reach it)
        wanted = smallest = 0
        if self.canvas.round is not None:
            wanted, smallest = self.tree_widths(height)
        unwrapped = self.residuals.sizeHint().width() + bar
        # Two fifths of the row (the split before), where the tree can give it: a big tree's
        # type shrinks a little rather than leave its tests a narrow column (presenting).
        least = max(least, min(int(room * TESTS_SHARE), room - smallest, unwrapped))
        # At most the text unwrapped, and half the row: what the tree does not need is the
        # picture's margin, not a wider column of text.
        most = max(least, min(unwrapped, room // 2))
        tests = max(least, min(most, room - wanted))
        # A row too narrow for both at their least: the tree keeps a sliver, the tests wrap.
        return max(0, min(tests, room - Beside.LEAST))

    def tree_widths(self, height: int) -> tuple[int, int]:
        """The widths the tree asks for in a view ``height`` px high, a vertical bar's room
        included: at the type the height allows, and at its floor type (fit's two bounds)."""
        canvas = self.canvas
        bar = self.scroll.verticalScrollBar().sizeHint().width()
        floor = min(1.0, MIN_FIT / canvas.scale)
        canvas.fit = 1.0
        canvas.relayout()
        fit = max(floor, min(1.0, (height - bar) / max(canvas.minimumHeight(), 1)))
        widths = []
        for shrink in (fit, floor):
            canvas.fit = shrink
            canvas.relayout()
            widths.append(canvas.minimumWidth() + bar)
        return widths[0], widths[1]

    def fit(self) -> None:
        """The tree's type shrinks (never below MIN_FIT of the unzoomed type) until the tree
        fits its view."""
        canvas = self.canvas
        if canvas.round is None:
            return
        canvas.fit = 1.0
        canvas.relayout()
        width, height = canvas.minimumWidth(), canvas.minimumHeight()
        self.natural_height = height  # what wanted_height asks for: the tree unshrunk
        room = self.scroll.size()
        bar = self.scroll.verticalScrollBar().sizeHint().width()  # a bar may take its room
        fit = min(1.0, (room.width() - bar) / max(width, 1), (room.height() - bar) / max(height, 1))
        least = min(1.0, MIN_FIT / canvas.scale)
        while fit < 1.0:  # type does not scale quite linearly (whole pixels): down till it fits
            canvas.fit = max(least, fit)
            canvas.relayout()
            if canvas.fit == least or (canvas.minimumWidth() <= room.width() - bar
                                       and canvas.minimumHeight() <= room.height() - bar):
                break
            fit *= 0.97

    def wanted_height(self) -> int:
        """The headline and the whole tree at its type unshrunk (presentation mode fits the
        panes to it; what they cannot give, the tree's fit takes from its type)."""
        m = self.layout().contentsMargins()
        return (m.top() + m.bottom() + self.layout().spacing()
                + self.header.heightForWidth(max(1, self.width() - m.left() - m.right()))
                + (self.reason.sizeHint().height() + self.layout().spacing()
                   if self.reason.isVisibleTo(self) else 0)
                + self.natural_height + 4)


def reason_tooltip(rnd: Round) -> str:
    """The round's reason whole, for a tooltip ('' without one): rich text, so Qt wraps it."""
    if not rnd.policy_reason:
        return ""
    return f"<p>Round {rnd.index + 1}, K = {rnd.k}: {escape(rnd.policy_reason)}</p>"


def headline(rnd: Round, selected: bool = False, theme: Theme = LIGHT,
             short: bool = False) -> str:
    """The round in words: how big the tree, the kept path, how it ended (``short``,
    presenting: without who drafted and the first step's width, one line of room type)."""
    which = "Selected round" if selected else "Round"
    path = kept_path(rnd)
    roots = sum(1 for d in rnd.drafted if d.parent == ROOT)
    by = "+".join(sorted({d.drafter for d in rnd.drafted}))
    text = (f"<b>{which} {rnd.index + 1}</b>: a tree of {len(rnd.drafted)} drafts"
            + ("" if short else f" by {by} ({roots} at the first step)")
            + f", <b>{len(path)} kept</b>")
    if path:
        words = " → ".join(f"“{escape(token_label(rnd.drafted[i].text, 8))}”" for i in path)
        text += f" <span style='color:{theme.ink('accepted')}'>{words}</span>"
    e = rnd.extra
    if e is not None:
        text += (f", then <span style='color:{theme.ink(e.kind)}'>{FATES[e.kind].label} "
                 f"“{escape(token_label(e.text, 8))}”</span>")
    return text


def tests_html(rnd: Round, reveal: Reveal = Reveal(), theme: Theme = LIGHT,  # noqa: B008
               current: int | None = None) -> str:
    """Beside the tree: per context, the p its first sibling meets, each rejection and the
    residual the next sibling meets, and how the context ended (as far as revealed)."""
    def tops(rows: tuple[tuple[str, float], ...]) -> str:
        return " · ".join(f"“{escape(token_label(t, 8))}” {fmt_prob(p)}" for t, p in rows)

    if not reveal.scored:
        return (f"<b>Siblings are tested in turn.</b><br><span style='color:{theme.muted}'>"
                "The target has not scored the tree yet.</span>")
    lines = ["<b>Siblings tested in turn</b>"]
    every = sibling_tests(rnd)
    shown = every[:reveal.tested]
    for t in shown:
        d = rnd.drafted[t.node]
        if t.order == 1:
            where = "the text so far" if t.context == ROOT else \
                f"“{escape(token_label(rnd.drafted[t.context].text, 8))}”"
            lines.append(f"<br><b>After {where}</b>, p: {tops(t.against)}")
        now = " style='font-weight:900'" if t.node == current else ""
        token = f"“{escape(token_label(d.text, 8))}”"
        if d.status == "accepted":
            lines.append(f"<span{now}><span style='color:{theme.ink('accepted')}'>✓ {token}"
                         f"</span> kept against {marked(t.order - 1)}: r {fmt_prob(d.r)} &lt; "
                         f"{fmt_prob(d.ratio)}</span>")
            continue
        lines.append(f"<span{now}><span style='color:{theme.ink('rejected')}'>✗ {token}</span>"
                     f" rejected against {marked(t.order - 1)}: r {fmt_prob(d.r)} ≥ "
                     f"{fmt_prob(d.ratio)}</span>")
        if t.residual is None:
            lines.append(f"<span style='color:{theme.muted}'>&nbsp;&nbsp;→ {marked(t.order)}: "
                         "not in this recording (q is not one-hot)</span>")
        else:
            how = " (the residual)" if t.recorded else \
                f" = p without {token}, renormalised" if t.order == 1 else \
                f" = p without these {t.order}, renormalised"
            lines.append(f"&nbsp;&nbsp;→ {marked(t.order)}{how}: {tops(t.residual)}")
        e = rnd.extra
        if t is every[-1] and reveal.extra and e is not None and e.kind == "resampled":
            lines.append(f"&nbsp;&nbsp;none kept: <span style='color:{theme.ink(e.kind)}'>"
                         f"“{escape(token_label(e.text, 8))}” drawn from {marked(t.order)}"
                         "</span>")
    if reveal.extra and rnd.extra is not None and rnd.extra.kind == "bonus":
        e = rnd.extra
        lines.append(f"<br>a leaf reached: <span style='color:{theme.ink(e.kind)}'>bonus "
                     f"“{escape(token_label(e.text, 8))}” from p after it</span>")
    return "<br>".join(lines)

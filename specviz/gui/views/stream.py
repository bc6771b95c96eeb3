"""The token stream: prompt, then each token coloured by its fate; hover explains, click selects."""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable
from dataclasses import dataclass
from html import escape

from PySide6.QtCore import QEvent, QMimeData, QPoint, Qt, Signal
from PySide6.QtGui import (
    QColor,
    QHelpEvent,
    QMouseEvent,
    QPainter,
    QPaintEvent,
    QPen,
    QTextCharFormat,
    QTextCursor,
)
from PySide6.QtWidgets import QTextEdit, QToolTip, QWidget

from specviz.core.events import DraftPosition, ExtraToken, Round, RunStarted
from specviz.gui.look.style import (
    FATES,
    INK,
    char_format,
    fmt_prob,
    inline_rejected,
    special_marker,
    token_label,
    with_newline_marks,
)
from specviz.gui.look.themes import LIGHT, Theme, apply_palette
from specviz.gui.views.prompt_text import visible_prompt

REJECTED_SCALE = 0.65  # size of a struck rejected draft, relative to the stream's text
# Who drafted a token, in words (tooltips). A token not drafted by the draft model gets a
# dotted underline in ink: no hue, and unlike the fates' solid lines (resampled's underline,
# the strike of a rejected draft, bonus' overline), so it reads on top of any fate.
DRAFTER_WORDS = {
    "model": "the draft model q",
    "lookup": "prompt lookup: copied what followed the same words earlier (q one-hot)",
}
DRAFTER_MARK = QTextCharFormat.UnderlineStyle.DotLine
# Qt's own underline is a hairline, gone from the back of a room: the view draws the mark
# again over it, as a dotted line this thick (px) just below the token's line.
DRAFTER_MARK_WIDTH = 3
DRAFT_SPLIT_WIDTH = 2  # a tick where the draft's own tokenizer starts a token


def drafter_marked(fmt: QTextCharFormat, drafter: str) -> QTextCharFormat:
    """``fmt`` with the drafter's mark (none for the draft model, the usual drafter)."""
    if drafter == "model":
        return fmt
    fmt = QTextCharFormat(fmt)
    fmt.setFontUnderline(True)
    fmt.setUnderlineStyle(DRAFTER_MARK)
    fmt.setUnderlineColor(QColor(INK))
    return fmt


@dataclass(frozen=True)
class TokenSpan:
    """One token as drawn: where it sits in the document and why it is there."""

    start: int
    end: int
    kind: str  # accepted / rejected / resampled / bonus / target
    round_index: int
    position: int  # position within the round (draft index, or n_accepted for the extra)
    token_number: int | None  # index in the generated output (None for rejected drafts)
    text: str
    draft: DraftPosition | None
    extra: ExtraToken | None
    round: Round | None = None  # the round it came from (its K and the policy's reason)
    output: str = ""  # what this token adds to the generated text ("" for a rejected draft)


class TokenStreamView(QTextEdit):
    """Append-only rich text: a round adds a few fragments, the document is never rebuilt."""

    round_clicked = Signal(int)

    def __init__(self, parent: QWidget | None = None, strike_delay_s: float = 0.45) -> None:
        super().__init__(parent)
        self.setReadOnly(True)
        self.setUndoRedoEnabled(False)  # undo history would grow with every token
        self.setMouseTracking(True)
        self.viewport().setMouseTracking(True)
        self.setLineWrapMode(QTextEdit.LineWrapMode.WidgetWidth)
        self.document().setDocumentMargin(14)
        # Short lines: Qt draws a text edit's placeholder without wrapping it.
        self.setPlaceholderText("The prompt and each generated token\nappear here. Hover a "
                                "token for its\nnumbers; click it to see its round.")
        self.strike_delay_s = strike_delay_s
        self.spans: list[TokenSpan] = []
        self._starts: list[int] = []
        self._marked: list[TokenSpan] = []  # spans not drafted by the model, in order
        self._marked_starts: list[int] = []
        self._pending_strikes: list[tuple[float, TokenSpan]] = []
        self._formats = {kind: char_format(kind) for kind in FATES}
        # A rejected draft first appears unstruck at full size, so the audience reads the
        # guess; then it is struck through and shrinks, so the kept text reads as text.
        self._formats["rejected_pending"] = fmt = char_format("rejected")
        fmt.setFontStrikeOut(False)
        struck = self._formats["rejected"]
        struck.setFontPointSize(struck.fontPointSize() * REJECTED_SCALE)
        self._cursor = QTextCursor(self.document())
        self.scale = 1.0  # zoom (gui/views/zoom.py)
        self.theme = LIGHT  # gui/look/themes.py: set_theme
        # Follow the newest text until the user scrolls up; scrolling back down follows again.
        self.following = True
        self._scrolling = False  # our own scroll, not the user's
        self.verticalScrollBar().valueChanged.connect(self._on_scrolled)
        # A run across tokenizers: where the draft's own tokenization of the output puts a token
        # start (text -> character offsets), drawn as ticks when show_draft_splits is on.
        self.draft_splitter: Callable[[str], list[int]] | None = None
        self.show_draft_splits = False
        self._splits: tuple[tuple[int, int], list[int]] | None = None  # (key, positions)

    def set_theme(self, theme: Theme) -> None:
        """Recolour every fragment drawn and every format to come (sizes and marks kept)."""
        self.theme = theme
        apply_palette(self, theme)
        for key, fmt in self._formats.items():
            kind = "rejected" if key == "rejected_pending" else key
            fmt.setForeground(QColor(theme.fg(kind)))
            if kind != "prompt":
                fmt.setBackground(QColor(theme.bg(kind)))
            if fmt.fontUnderline() and kind == "resampled":
                fmt.setUnderlineColor(QColor(theme.fg(kind)))
        cursor = QTextCursor(self.document())
        first = self.spans[0].start if self.spans else self.document().characterCount() - 1
        pieces = [(0, first, "prompt"), *((s.start, s.end, s.kind) for s in self.spans)]
        cursor.beginEditBlock()
        for start, end, kind in pieces:
            if end <= start:
                continue
            cursor.setPosition(start)
            cursor.setPosition(end, QTextCursor.MoveMode.KeepAnchor)
            fmt = QTextCharFormat()
            fmt.setForeground(QColor(theme.fg(kind)))
            if kind != "prompt":
                fmt.setBackground(QColor(theme.bg(kind)))
            cursor.mergeCharFormat(fmt)
        cursor.endEditBlock()
        self._cursor.movePosition(QTextCursor.MoveOperation.End)
        self.viewport().update()

    def set_scale(self, scale: float) -> None:
        """Zoom: every fragment already drawn and every format to come, by the same ratio."""
        ratio = scale / self.scale
        self.scale = scale
        for fmt in self._formats.values():
            fmt.setFontPointSize(fmt.fontPointSize() * ratio)
        block = self.document().begin()
        cursor = QTextCursor(self.document())
        while block.isValid():
            it = block.begin()
            while not it.atEnd():
                frag = it.fragment()
                size = frag.charFormat().fontPointSize()
                if frag.isValid() and size > 0:
                    cursor.setPosition(frag.position())
                    cursor.setPosition(frag.position() + frag.length(),
                                       QTextCursor.MoveMode.KeepAnchor)
                    fmt = QTextCharFormat()
                    fmt.setFontPointSize(size * ratio)
                    cursor.mergeCharFormat(fmt)
                it += 1
            block = block.next()
        self._cursor.movePosition(QTextCursor.MoveOperation.End)

    # -- building ---------------------------------------------------------------------------

    def clear_run(self) -> None:
        """Forget everything (a new run starts)."""
        self.document().clear()
        self.spans.clear()
        self._starts.clear()
        self._marked.clear()
        self._marked_starts.clear()
        self._pending_strikes.clear()
        self._splits = None
        self._cursor = QTextCursor(self.document())

    def begin(self, started: RunStarted, user_prompt: str | None = None,
              show_template: bool = False) -> None:
        """Show the prompt: the user's words; the chat template too if ``show_template``."""
        self.clear_run()
        prompt_fmt = QTextCharFormat(self._formats["prompt"])
        prompt_fmt.setFontPointSize(prompt_fmt.fontPointSize() * 0.8)  # context, not content
        self._cursor.insertText(visible_prompt(started.prompt, user_prompt, show_template),
                                prompt_fmt)
        self.following = True  # a new run: its output is what to see
        self._follow()

    def output_text(self, start: int = 0, end: int | None = None) -> str:
        """The generated text of the tokens drawn in [start, end): no rejected drafts, no marks.

        Text before the first token (the prompt) is kept as shown, when it is selected.
        """
        end = self.document().characterCount() if end is None else end
        first = self.spans[0].start if self.spans else end
        parts = []
        if start < first:
            cursor = QTextCursor(self.document())
            cursor.setPosition(start)
            cursor.setPosition(min(first, end), QTextCursor.MoveMode.KeepAnchor)
            parts.append(cursor.selectedText().replace("\u2029", "\n"))
        parts += [s.output for s in self.spans if s.start < end and s.end > start]
        return "".join(parts)

    def createMimeDataFromSelection(self) -> QMimeData:  # noqa: N802 - Qt override
        """Copy gives the generated text alone: rejected drafts and ↵ marks left out."""
        cursor = self.textCursor()
        data = QMimeData()
        data.setText(self.output_text(cursor.selectionStart(), cursor.selectionEnd()))
        return data

    def add_rounds(self, rounds: list[Round], now: float | None = None) -> None:
        """Append the tokens of several rounds, and strike what is due, in one edit block.

        One edit block means one re-layout of the last paragraph per frame, however many
        tokens arrived: the cost of a frame does not grow with the number of tokens in it.
        """
        now = time.monotonic() if now is None else now
        due = self._due_strikes(now)
        if not rounds and not due:
            return
        self._cursor.beginEditBlock()
        self._strike(due)
        for rnd in rounds:
            self._add_round(rnd, now)
        self._cursor.endEditBlock()
        self._follow()

    def _follow(self) -> None:
        """Show the newest text, unless the user scrolled up to read (a long prompt alone
        filling the view is no reason to stop following: the output comes below it)."""
        if self.following:
            self._scrolling = True
            bar = self.verticalScrollBar()
            bar.setValue(bar.maximum())
            self._scrolling = False

    def _on_scrolled(self, value: int) -> None:
        if not self._scrolling:  # the user's scroll: follow again once back at the bottom
            self.following = value >= self.verticalScrollBar().maximum() - 4

    def show_partly(self, rnd: Round, tested: int, extra: bool, now: float = 0.0) -> None:
        """A staged round as far as its phase has revealed it: the first ``tested`` verdicts
        and, if ``extra``, the drawn token; nothing of what comes later (drawn again each step,
        forward or back)."""
        self.drop_round(rnd.index)
        self._cursor.beginEditBlock()
        self._add_round(rnd, now, tested=tested, extra=extra)
        self._cursor.endEditBlock()
        self._follow()

    def drop_round(self, index: int) -> None:
        """Remove what is drawn of round ``index`` and after it (the stream's tail)."""
        cut = next((i for i, span in enumerate(self.spans) if span.round_index >= index), None)
        if cut is None:
            return
        start = self.spans[cut].start
        cursor = QTextCursor(self.document())
        cursor.setPosition(start)
        cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        cursor.removeSelectedText()
        del self.spans[cut:], self._starts[cut:]
        keep = [i for i, span in enumerate(self._marked) if span.start < start]
        self._marked = [self._marked[i] for i in keep]
        self._marked_starts = [self._marked_starts[i] for i in keep]
        self._pending_strikes = [(t, span) for t, span in self._pending_strikes
                                 if span.start < start]
        self._cursor.movePosition(QTextCursor.MoveOperation.End)

    def _add_round(self, rnd: Round, now: float, tested: int | None = None,
                   extra: bool = True) -> None:
        kept = len(rnd.appended_ids)
        first = rnd.n_generated - kept  # index in the output of this round's first token
        decided = [d for d in rnd.drafted if d.status != "discarded"]
        at = 0  # a kept draft's place in the output: a chain's index; in a tree, its depth
        for d in decided[:tested]:
            if d.status == "accepted" and at < kept:
                self._insert(special_marker(rnd.appended_texts[at], d.text), "accepted",
                             rnd, d.index, first + at, d, None,
                             output=rnd.appended_texts[at])
                at += 1
            elif d.status == "rejected":
                span = self._insert(inline_rejected(d.text), "rejected", rnd, d.index, None, d,
                                    None, fmt_key="rejected_pending")
                if span is not None:
                    self._pending_strikes.append((now + self.strike_delay_s, span))
        if not extra:
            return
        extra_token = rnd.extra
        if extra_token is not None and kept > rnd.n_accepted:
            i = rnd.n_accepted
            # The draft it replaces: the last one rejected (a chain's at i; a tree's, the last
            # sibling tested where the walk ended). None after a bonus.
            draft = next((d for d in reversed(rnd.drafted) if d.status == "rejected"), None)
            self._insert(special_marker(rnd.appended_texts[i], extra_token.text),
                         extra_token.kind, rnd, i, first + i, draft, extra_token,
                         output=rnd.appended_texts[i])

    def _insert(self, text: str, kind: str, rnd: Round, position: int, number: int | None,
                draft: DraftPosition | None, extra: ExtraToken | None,
                fmt_key: str | None = None, output: str = "") -> TokenSpan | None:
        if not text:  # the first half of a split character: it shows with the next token
            return None
        if kind != "rejected":
            text = with_newline_marks(text)
        self._cursor.movePosition(QTextCursor.MoveOperation.End)
        start = self._cursor.position()
        fmt = QTextCharFormat(self._formats[fmt_key or kind])
        if draft is not None and kind in ("accepted", "rejected"):
            fmt = drafter_marked(fmt, draft.drafter)
        self._cursor.insertText(text, fmt)
        span = TokenSpan(start, self._cursor.position(), kind, rnd.index, position, number,
                         text, draft, extra, round=rnd, output=output)
        self.spans.append(span)
        self._starts.append(start)
        if kind in ("accepted", "rejected") and draft is not None and draft.drafter != "model":
            self._marked.append(span)
            self._marked_starts.append(start)
        return span

    def apply_strikes(self, now: float | None = None) -> int:
        """Strike through rejected drafts whose moment has come; returns how many."""
        due = self._due_strikes(time.monotonic() if now is None else now)
        if due:
            self._cursor.beginEditBlock()
            self._strike(due)
            self._cursor.endEditBlock()
        return len(due)

    def _due_strikes(self, now: float) -> list[TokenSpan]:
        if not self._pending_strikes:
            return []
        due = [s for t, s in self._pending_strikes if t <= now]
        self._pending_strikes = [(t, s) for t, s in self._pending_strikes if t > now]
        return due

    def _strike(self, spans: list[TokenSpan]) -> None:
        cursor = self._cursor
        for span in spans:
            cursor.setPosition(span.start)
            cursor.setPosition(span.end, QTextCursor.MoveMode.KeepAnchor)
            fmt = self._formats["rejected"]
            cursor.setCharFormat(drafter_marked(fmt, span.draft.drafter) if span.draft else fmt)
        cursor.movePosition(QTextCursor.MoveOperation.End)

    # -- reading back -------------------------------------------------------------------------

    def span_at(self, pos: int) -> TokenSpan | None:
        """The token drawn at document position ``pos`` (None for the prompt or nothing)."""
        i = bisect.bisect_right(self._starts, pos) - 1
        if i < 0:
            return None
        span = self.spans[i]
        return span if span.start <= pos < span.end else None

    def span_at_point(self, point: QPoint) -> TokenSpan | None:
        """The token under a viewport point."""
        cursor = self.cursorForPosition(point)
        pos = cursor.position()
        # cursorForPosition rounds to the nearest gap; the character is on one side of it.
        rect = self.cursorRect(cursor)
        if point.x() < rect.x() and pos > 0:
            pos -= 1
        return self.span_at(pos)

    def format_at(self, pos: int) -> QTextCharFormat:
        """The character format of the character at ``pos``."""
        cursor = QTextCursor(self.document())
        cursor.setPosition(pos + 1)
        return cursor.charFormat()

    @staticmethod
    def describe(span: TokenSpan) -> str:
        """Tooltip HTML: round, position, p(x), q(x), min(1, p/q), r and the decision."""
        fate = FATES[span.kind]
        where = f"round {span.round_index + 1}"
        rnd = span.round
        if rnd is not None and rnd.policy_reason:
            where += f" (K = {rnd.k}: {escape(rnd.policy_reason)})"
        elif rnd is not None and rnd.k:
            where += f" (K = {rnd.k})"
        lines = [f"<b>{escape(token_label(span.text, 40))}</b> — "
                 f"<span style='color:{fate.foreground}'><b>{fate.label}</b></span>"]
        if span.draft is not None and span.kind in ("accepted", "rejected"):
            d = span.draft
            out = f", output token {span.token_number + 1}" if span.token_number is not None else ""
            tree = d.parent is not None and rnd is not None and rnd.branches
            if tree:  # a node of a token tree: where it hangs, and what a rejection leads to
                assert rnd is not None and d.parent is not None
                above = "the text so far" if d.parent < 0 else \
                    f"“{escape(token_label(rnd.drafted[d.parent].text))}”"
                lines.append(f"{where}, tree node {d.index + 1}, a candidate after {above}{out}")
            else:
                lines.append(f"{where}, draft position {d.index + 1}{out}")
            lines.append(f"p(x) = {fmt_prob(d.p)} &nbsp; q(x) = {fmt_prob(d.q)}")
            verdict = "r &lt; min(1, p/q): accept" if d.status == "accepted" else \
                "r ≥ min(1, p/q): reject; the next candidate meets the residual" if tree else \
                "r ≥ min(1, p/q): reject, resample from norm(max(0, p − q))"
            lines.append(f"min(1, p/q) = {fmt_prob(d.ratio)} &nbsp; r = {fmt_prob(d.r)}")
            lines.append(verdict)
            lines.append(f"drafted by {escape(DRAFTER_WORDS.get(d.drafter, d.drafter))}")
        elif span.extra is not None:
            e = span.extra
            out = f", output token {span.token_number + 1}" if span.token_number is not None else ""
            lines.append(f"{where}, position {span.position + 1}{out}")
            if e.kind == "resampled":
                lines.append(f"drawn from norm(max(0, p − q)): {fmt_prob(e.prob)}")
                lines.append(f"p(x) = {fmt_prob(e.p)}")
                if span.draft is not None:
                    guess = escape(token_label(span.draft.text))
                    lines.append(f"replaces the rejected draft “{guess}”")
            elif e.kind == "bonus":
                lines.append(f"all drafts accepted: drawn from p, p(x) = {fmt_prob(e.p)}")
            else:
                lines.append(f"target alone: drawn from p, p(x) = {fmt_prob(e.p)}")
        return "<br>".join(lines)

    # -- Qt events ------------------------------------------------------------------------------

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802 - Qt override
        super().paintEvent(event)
        if self._marked:
            self._paint_marks()
        if self.show_draft_splits and self.draft_splitter is not None and self.spans:
            self._paint_draft_splits()

    def set_draft_splits(self, splitter: Callable[[str], list[int]] | None,
                         show: bool | None = None) -> None:
        """The draft's tokenizer for a run across tokenizers (None: one tokenizer), and
        whether its token starts are drawn."""
        self.draft_splitter = splitter
        if show is not None:
            self.show_draft_splits = show
        self._splits = None
        self.viewport().update()

    def draft_split_positions(self) -> list[int]:
        """Document positions where the draft's tokenization of the kept output starts a
        token: at a target token's start (its box's left edge) or inside one (where the two
        tokenizers cut differently). Tokens drawn other than as their text (a newline's mark,
        a special token) take ticks at their start only. Cached until tokens are added."""
        kept = [span for span in self.spans if span.token_number is not None]
        key = (len(self.spans), self.document().characterCount())
        if self._splits is not None and self._splits[0] == key:
            return self._splits[1]
        positions: list[int] = []
        splitter = self.draft_splitter
        if splitter is not None and kept:
            starts, text = [], []
            at = 0
            for span in kept:
                starts.append(at)
                text.append(span.output)
                at += len(span.output)
            for offset in splitter("".join(text)):
                i = bisect.bisect_right(starts, offset) - 1
                if i < 0:
                    continue
                span, inside = kept[i], offset - starts[i]
                if inside == 0:
                    positions.append(span.start)
                elif span.text == span.output and inside < len(span.text):
                    positions.append(span.start + inside)
        self._splits = (key, positions)
        return positions

    def _paint_draft_splits(self) -> None:
        """A short tick rising from under the text at each of the draft's token starts."""
        positions = self.draft_split_positions()
        viewport = self.viewport()
        first = self.cursorForPosition(QPoint(0, 0)).position()
        last = self.cursorForPosition(QPoint(viewport.width(), viewport.height())).position()
        lo, hi = bisect.bisect_left(positions, first), bisect.bisect_right(positions, last)
        if lo >= hi:
            return
        painter = QPainter(viewport)
        pen = QPen(QColor(self.theme.text), DRAFT_SPLIT_WIDTH)
        pen.setCapStyle(Qt.PenCapStyle.FlatCap)
        painter.setPen(pen)
        cursor = QTextCursor(self.document())
        for position in positions[lo:hi]:
            cursor.setPosition(position)
            rect = self.cursorRect(cursor)
            tick = max(4, rect.height() // 4)
            painter.drawLine(rect.left(), rect.bottom() + 1, rect.left(), rect.bottom() + 1 - tick)
        painter.end()

    def _paint_marks(self) -> None:
        """The drafter mark, thick enough to read across a room; visible spans only."""
        viewport = self.viewport()
        first = self.cursorForPosition(QPoint(0, 0)).position()
        last = self.cursorForPosition(QPoint(viewport.width(), viewport.height())).position()
        lo = max(0, bisect.bisect_right(self._marked_starts, first) - 1)
        hi = bisect.bisect_right(self._marked_starts, last)
        if lo >= hi:
            return
        painter = QPainter(viewport)
        pen = QPen(QColor(self.theme.text), DRAFTER_MARK_WIDTH, Qt.PenStyle.DotLine)
        pen.setCapStyle(Qt.PenCapStyle.FlatCap)
        painter.setPen(pen)
        cursor = QTextCursor(self.document())
        for span in self._marked[lo:hi]:
            cursor.setPosition(span.start)
            a = self.cursorRect(cursor)
            cursor.setPosition(span.end)
            b = self.cursorRect(cursor)
            y = a.bottom() - 1
            if b.top() == a.top():  # on one line (a token that wraps keeps the hairline)
                painter.drawLine(a.left(), y, b.left(), y)
        painter.end()

    def viewportEvent(self, event: QEvent) -> bool:  # noqa: N802 - Qt override
        if event.type() == QEvent.Type.ToolTip:
            assert isinstance(event, QHelpEvent)
            span = self.span_at_point(event.pos())
            if span is None:
                QToolTip.hideText()
            else:
                QToolTip.showText(event.globalPos(), self.describe(span), self.viewport())
            return True
        return super().viewportEvent(event)

    def mouseMoveEvent(self, event: QMouseEvent) -> None:  # noqa: N802 - Qt override
        over = self.span_at_point(event.position().toPoint()) is not None
        self.viewport().setCursor(Qt.CursorShape.PointingHandCursor if over
                                  else Qt.CursorShape.IBeamCursor)
        super().mouseMoveEvent(event)

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:  # noqa: N802 - Qt override
        super().mouseReleaseEvent(event)
        if event.button() == Qt.MouseButton.LeftButton and not self.textCursor().hasSelection():
            span = self.span_at_point(event.position().toPoint())
            if span is not None:
                self.round_clicked.emit(span.round_index)

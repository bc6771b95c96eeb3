"""Exports for slides: plots as PNG / SVG, the coloured transcript as HTML, a run as a GIF.

Everything is drawn offscreen from events (a live run's, or a recording's), in fresh views
at projector size: a view is laid out at 1/scale of the requested pixels and drawn scaled
up, so its type comes out as on a projector (token text ≥ 40 px, labels ≥ 24 px at
1920 × 1080), and crisp: text and plots are drawn as vectors at the final size.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

import pyqtgraph as pg
from pyqtgraph.exporters import ImageExporter, SVGExporter
from PySide6.QtCore import QObject, QPoint, QRect, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QImage, QPainter
from PySide6.QtWidgets import QApplication, QWidget

from specviz.core.events import DraftPosition, Event, ExtraToken, Round, RunStarted
from specviz.core.lineup import Lineup
from specviz.core.race import as_race
from specviz.core.record import RunRecord
from specviz.gui.look.style import FATES, STREAM_KINDS, fmt_prob, special_marker, with_newline_marks
from specviz.gui.stage.lineup_view import LineupView, lane_figures, lineup_moments, lineup_of
from specviz.gui.views.bars import RoundBarsView
from specviz.gui.views.labels import k_text
from specviz.gui.views.stats import AcceptanceView
from specviz.gui.views.tree import TreeView, is_tree

PROJECTOR = (1920, 1080)
PROJECTOR_SCALE = 1.5  # at 1920 px wide: 20 pt stream text -> 40 px, 12 pt labels -> 24 px
RACE_SCALE = 1.1  # the race view: 30 pt tokens -> 44 px, 18 pt captions -> 26 px


def projector_scale(width: int) -> float:
    """How much to enlarge a view drawn for ``width`` pixels (1.5 at 1920, in proportion)."""
    return PROJECTOR_SCALE * width / PROJECTOR[0]


def _offscreen(widget: QWidget, size: tuple[int, int], scale: float) -> None:
    """Lay a widget out at the logical size that, scaled, fills ``size`` pixels."""
    widget.setAttribute(Qt.WidgetAttribute.WA_DontShowOnScreen)
    logical = (round(size[0] / scale), round(size[1] / scale))
    # Fixed: an offscreen top-level may otherwise keep a size of its own choosing (a
    # GraphicsLayoutWidget asked for 1280 × 720 stays at ~640 × 500). Export views are
    # throwaway views, so fixing their size costs nothing.
    widget.setFixedSize(*logical)
    widget.show()
    QApplication.processEvents()


def render_widget(widget: QWidget, size: tuple[int, int], scale: float | None = None) -> QImage:
    """The widget drawn into exactly ``size`` pixels, its contents enlarged by ``scale``."""
    scale = projector_scale(size[0]) if scale is None else scale
    _offscreen(widget, size, scale)
    image = QImage(QSize(*size), QImage.Format.Format_RGB32)
    image.fill(Qt.GlobalColor.white)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setRenderHint(QPainter.RenderHint.TextAntialiasing)
    painter.scale(scale, scale)
    widget.render(painter, QPoint(0, 0))
    painter.end()
    return image


# -- plots: pyqtgraph's exporters --------------------------------------------------------------


@contextmanager
def _closed_paths_tolerated() -> Iterator[None]:
    """pyqtgraph 0.14's SVG exporter reads every path token as "x,y"; Qt 6.11 closes paths
    with a bare "Z" (a view box's background) and the export fails. Drop those tokens for
    the export: the path already returns to its start, and a fill closes it anyway."""
    module = sys.modules[SVGExporter.__module__]
    original = getattr(module, "correctCoordinates")  # noqa: B009 - not in its stubs

    def correct(node: Any, defs: Any, item: Any, options: Any) -> Any:
        for path in node.getElementsByTagName("path"):
            d = path.getAttribute("d").strip()
            tokens = d.split(" ")
            kept = [t for t in tokens if "," in t]
            if kept and len(kept) != len(tokens):
                path.setAttribute("d", " ".join(kept))
        return original(node, defs, item, options)

    setattr(module, "correctCoordinates", correct)  # noqa: B010 - not in its stubs
    try:
        yield
    finally:
        setattr(module, "correctCoordinates", original)  # noqa: B010


def export_graphics(graphics: pg.GraphicsLayoutWidget, path: str | Path,
                    size: tuple[int, int] = PROJECTOR) -> Path:
    """A pyqtgraph layout as PNG (exactly ``size`` pixels) or SVG, by the path's suffix."""
    path = Path(path)
    scale = projector_scale(size[0])
    _offscreen(graphics, size, scale)
    graphics.ci.setGeometry(graphics.viewport().rect().toRectF())
    QApplication.processEvents()
    scene = graphics.scene()
    if path.suffix.lower() == ".svg":
        exporter = SVGExporter(scene)
        exporter.parameters()["width"] = size[0]
        with _closed_paths_tolerated():
            exporter.export(fileName=str(path))
        return path
    image_exporter = ImageExporter(scene)
    params = image_exporter.parameters()
    # Both sides exactly as asked (the source already has this aspect, up to rounding).
    params.param("width").setValue(size[0], blockSignal=image_exporter.widthChanged)
    params.param("height").setValue(size[1], blockSignal=image_exporter.heightChanged)
    image_exporter.export(fileName=str(path))
    return path


def export_bars(rnd: Round, path: str | Path, size: tuple[int, int] = PROJECTOR) -> Path:
    """The p/q panel of one round (one plot per position) as PNG or SVG; a tree round's
    tree (export_tree), as the window shows it."""
    if is_tree(rnd):
        return export_tree(rnd, path, size)
    view = RoundBarsView()
    view.graphics.setParent(None)  # the plots alone, at the requested size
    scale = projector_scale(size[0])
    _offscreen(view.graphics, size, scale)
    view.show_round(rnd)
    try:
        return export_graphics(view.graphics, path, size)
    finally:
        view.graphics.close()
        view.graphics.deleteLater()
        view.deleteLater()


def export_tree(rnd: Round, path: str | Path, size: tuple[int, int] = PROJECTOR) -> Path:
    """A tree round's tree and its siblings' tests (gui/views/tree.py) as PNG or SVG, in
    projector type."""
    from PySide6.QtSvg import QSvgGenerator

    path = Path(path)
    view = TreeView()
    view.show_round(rnd)
    scale = projector_scale(size[0])
    try:
        if path.suffix.lower() != ".svg":
            if not render_widget(view, size, scale).save(str(path)):
                raise OSError(f"could not write {path}")
            return path
        _offscreen(view, size, scale)
        svg = QSvgGenerator()
        svg.setFileName(str(path))
        svg.setSize(QSize(*size))
        svg.setViewBox(QRect(0, 0, *size))
        svg.setTitle(f"Round {rnd.index + 1}: a token tree")
        painter = QPainter(svg)
        painter.scale(scale, scale)
        view.render(painter, QPoint(0, 0))
        painter.end()
        return path
    finally:
        view.close()
        view.deleteLater()


def export_acceptance(events: Sequence[Event], path: str | Path,
                      size: tuple[int, int] = PROJECTOR) -> Path:
    """The acceptance plots of a run (the last run in ``events``) as PNG or SVG."""
    record = RunRecord()
    for event in events:
        if isinstance(event, RunStarted):
            record = RunRecord()
        record.add(event)
    view = AcceptanceView()
    scale = projector_scale(size[0])
    _offscreen(view, size, scale)
    view.update_from(record)
    try:
        return export_graphics(view, path, size)
    finally:
        view.close()
        view.deleteLater()


# -- the transcript as a standalone HTML page ----------------------------------------------------


@dataclass(frozen=True)
class Token:
    """One token as the stream draws it, with the figures of its tooltip."""

    text: str
    kind: str  # accepted / rejected / resampled / bonus / target
    round_index: int
    position: int
    draft: DraftPosition | None
    extra: ExtraToken | None

    def tooltip(self) -> str:
        """Plain-text figures: p, q, min(1, p/q), r and the decision."""
        where = f"round {self.round_index + 1}, position {self.position + 1}"
        d, e = self.draft, self.extra
        if self.kind in ("accepted", "rejected") and d is not None:
            decision = ("r < min(1, p/q): accepted" if self.kind == "accepted" else
                        "r ≥ min(1, p/q): rejected, resampled from norm(max(0, p − q))")
            return (f"{where} · p = {fmt_prob(d.p)} · q = {fmt_prob(d.q)} · "
                    f"min(1, p/q) = {fmt_prob(d.ratio)} · r = {fmt_prob(d.r)} · {decision}")
        assert e is not None
        if self.kind == "resampled" and d is not None:
            return (f"{where} · p = {fmt_prob(e.p)} · drawn from norm(max(0, p − q)) with "
                    f"probability {fmt_prob(e.prob)} · replaces the rejected draft "
                    f"(p = {fmt_prob(d.p)}, q = {fmt_prob(d.q)}, min(1, p/q) = "
                    f"{fmt_prob(d.ratio)}, r = {fmt_prob(d.r)}) · decision: resampled")
        if self.kind == "bonus":
            return f"{where} · p = {fmt_prob(e.p)} · all K drafts accepted · decision: bonus from p"
        return f"{where} · p = {fmt_prob(e.p)} · target alone: drawn from p"


def transcript_tokens(events: Sequence[Event]) -> list[Token]:
    """Every token of the last run in ``events``, in the order and with the kinds of the stream."""
    tokens: list[Token] = []
    for event in events:
        if isinstance(event, RunStarted):
            tokens = []
        if not isinstance(event, Round):
            continue
        kept = len(event.appended_ids)
        for d in event.drafted:
            if d.status == "accepted" and d.index < kept:
                text = special_marker(event.appended_texts[d.index], d.text)
                tokens.append(Token(text, "accepted", event.index, d.index, d, None))
            elif d.status == "rejected":
                tokens.append(Token(d.text, "rejected", event.index, d.index, d, None))
        if event.extra is not None and kept > event.n_accepted:
            i = event.n_accepted
            draft = event.drafted[i] if i < len(event.drafted) else None
            text = special_marker(event.appended_texts[i], event.extra.text)
            tokens.append(Token(text, event.extra.kind, event.index, i, draft, event.extra))
    return [t for t in tokens if t.text]  # half of a split character shows with the next


def _css() -> str:
    rules = ["body { font-family: 'DejaVu Sans', sans-serif; margin: 40px; color: #111; "
             "background: #fff; }",
             "h1 { font-size: 36px; } .meta, .legend { font-size: 24px; }",
             ".prompt { font-size: 30px; color: #5E5E5E; white-space: pre-wrap; }",
             ".text { font-size: 40px; line-height: 1.5; white-space: pre-wrap; }",
             ".tok { border-radius: 4px; }",
             ".rejected { font-size: 26px; }"]
    for key in ("prompt", *STREAM_KINDS):
        f = FATES[key]
        deco = " ".join(d for d, on in (("line-through", f.strike), ("underline", f.underline),
                                        ("overline", f.overline)) if on) or "none"
        rules.append(f".{key} {{ color: {f.foreground}; "
                     + (f"background: {f.background}; " if key != "prompt" else "")
                     + f"text-decoration: {deco}; font-weight: {'900' if f.bold else '400'}; "
                     f"font-style: {'italic' if f.italic else 'normal'}; }}")
    return "\n".join(rules)


def transcript_html(events: Sequence[Event], title: str = "specviz transcript") -> str:
    """A standalone page: the prompt, then each token coloured by its fate, figures on hover.

    The last run of the recording; of a race, its speculative run (the one with colours);
    of a lineup, every lane under its ranking.
    """
    lineup = lineup_of(events)
    if lineup is not None:  # every lane, ranked
        return lineup_html(lineup)
    race = as_race(events)
    if race is not None:
        events = race.speculative.events
    started = next((e for e in reversed(events) if isinstance(e, RunStarted)), None)
    legend = " ".join(f'<span class="tok {k}">&nbsp;{escape(FATES[k].label)}&nbsp;</span>'
                      for k in STREAM_KINDS)
    meta = ""
    if started is not None:
        s, pair = started.settings, started.pair
        rounds = [e for e in events if isinstance(e, Round)]
        who = (f"{pair.draft} → {pair.target}, {k_text(s, [r.k for r in rounds])}"
               if started.mode == "speculative"
               else f"{pair.target} alone")
        temp = ("greedy (T = 0)" if s.temperature == 0
                else started.temperature_text(eq=" = "))
        meta = f"{escape(who)} · {temp} · seed {s.seed} · p = target, q = draft"
    prompt = escape(started.prompt) if started is not None else ""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{escape(title)}</title>\n<style>\n{_css()}\n</style></head>\n<body>\n"
            f"<h1>{escape(title)}</h1>\n<p class=\"meta\">{meta}</p>\n"
            f"<p class=\"legend\">{legend} &nbsp; (hover a token for p, q, min(1, p/q), r and "
            "the decision)</p>\n"
            f"<div class=\"prompt\">{prompt}</div>\n"
            f"<div class=\"text\">{token_spans(events)}</div>\n</body></html>\n")


def token_spans(events: Sequence[Event]) -> str:
    """The last run's tokens as HTML spans, each of its fate's class, its figures on hover."""
    parts = []
    for tok in transcript_tokens(events):
        text = tok.text if tok.kind == "rejected" else with_newline_marks(tok.text)
        parts.append(f'<span class="tok {tok.kind}" data-round="{tok.round_index + 1}" '
                     f'title="{escape(tok.tooltip())}">{escape(text)}</span>')
    return "".join(parts)


def export_transcript(events: Sequence[Event], path: str | Path) -> Path:
    path = Path(path)
    path.write_text(transcript_html(events), encoding="utf-8")
    return path


# -- a lineup: its slides and its page ------------------------------------------------------------

LINEUP_SCALE = 1.5  # at 1920 px wide (in proportion below): labels 24 px, lane text 36 px


def lineup_frames(lineup: Lineup, times: Sequence[float],
                  size: tuple[int, int]) -> Iterator[QImage]:
    """The slide view drawn at each time (exactly ``size`` pixels)."""
    view = LineupView(slide=True)
    try:
        view.load(lineup)
        scale = LINEUP_SCALE * size[0] / PROJECTOR[0]
        for t in times:
            view.show_at(t)
            yield render_widget(view, size, scale)
    finally:
        view.deleteLater()


def lineup_html(lineup: Lineup, title: str = "specviz lineup") -> str:
    """A standalone page: the ranking, then each lane's text coloured by fate (figures on
    hover), as the race's transcript page draws one run."""
    started = lineup.lanes[0].started
    temp = ("greedy (T = 0)" if started.settings.temperature == 0
            else started.temperature_text(eq=" = "))
    legend = " ".join(f'<span class="tok {k}">&nbsp;{escape(FATES[k].label)}&nbsp;</span>'
                      for k in STREAM_KINDS)
    rows = "".join(
        f"<tr><td>{rank}</td><td>{escape(lineup.label(lane))}</td>"
        f"<td>{escape(lane_figures(lineup, lane))}</td></tr>\n"
        for rank, lane in enumerate(lineup.ranking(), 1))
    lanes = "".join(
        f'<h2>{escape(lineup.label(lane))} '
        f'<span class="meta">({escape(lane.started.pair.draft or "")}'
        f'{" → " if lane.started.pair.draft else ""}{escape(lane.started.pair.target)}; '
        f'{escape(lane_figures(lineup, lane))})</span></h2>\n'
        f'<div class="text">{token_spans(lane.events)}</div>\n'
        for lane in lineup.lanes)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{escape(title)}</title>\n<style>\n{_css()}\n"
            "h2 { font-size: 28px; margin-top: 36px; } table { font-size: 24px; "
            "border-collapse: collapse; } td { padding: 4px 16px; border-bottom: 1px solid "
            "#ccc; }\n</style></head>\n<body>\n"
            f"<h1>{escape(title)}</h1>\n<p class=\"meta\">{escape(started.pair.target)} · {temp}"
            f" · seed {started.settings.seed} · {len(lineup.lanes)} lanes run one after the "
            "other, ranked by measured speed · p = target, q = draft</p>\n"
            f"<table>{rows}</table>\n<p class=\"legend\">{legend} &nbsp; (hover a token for p, "
            "q, min(1, p/q), r and the decision)</p>\n"
            f"<div class=\"prompt\">{escape(started.prompt)}</div>\n{lanes}</body></html>\n")


def export_lineup_html(lineup: Lineup, path: str | Path) -> Path:
    path = Path(path)
    path.write_text(lineup_html(lineup), encoding="utf-8")
    return path


# -- an animation of a recording ------------------------------------------------------------------

MIN_FRAME_MS = 80
MAX_FRAME_MS = 2000
HOLD_LAST_MS = 4000


@dataclass
class FramePlan:
    """An animation before it is drawn: how many frames, how long each stays, and a
    generator that draws them one at a time (each a slice of GUI-thread work)."""

    durations: list[int]
    frames: Iterator[QImage]

    @property
    def count(self) -> int:
        return len(self.durations)


def plan_animation(events: Sequence[Event], size: tuple[int, int] = PROJECTOR,
                   speed: float = 1.0, reference: Any = None) -> FramePlan:
    """The frames of a recording, drawn one per ``next``: a race plays as a race.

    A run: the prompt, then one frame per round, each held for the round's measured time.
    A race: one frame at each moment either side finishes a round, on the shared clock; a
    lineup (3-5 runs of one prompt, or two that are not a race) likewise, its moments at
    least ``MIN_FRAME_MS`` apart.
    ``reference``: a RunView whose measured figures (the target's step, a baseline run) the
    run's speed card compares with, as the window did.
    """
    lineup = lineup_of(events)
    if lineup is not None:  # each moment a lane shows something new, on the shared clock
        times = lineup_moments(lineup, MIN_FRAME_MS / 1000 * speed)
        return FramePlan(_durations(times, speed), lineup_frames(lineup, times, size))
    race = as_race(events)
    if race is not None:
        # Each moment a side shows something new (to the µs: one frame for equal times).
        moments = sorted({round(t, 6) for t in
                          [r.elapsed_s for side in (race.speculative, race.baseline)
                           for r in side.rounds if r.elapsed_s <= race.duration_s]
                          + [race.speculative.duration_s, race.baseline.duration_s]})
        times = [0.0, *moments]
        return FramePlan(_durations(times, speed), _race_frames(list(events), times, size))
    times = [0.0]
    chunks: list[list[Event]] = []
    pending: list[Event] = []
    for event in events:
        pending.append(event)
        if isinstance(event, Round) and not event.final or isinstance(event, RunStarted):
            if isinstance(event, Round):
                times.append(event.elapsed_s)
            chunks.append(pending)
            pending = []
    if pending:  # the last round and the run's end: one frame
        last = next((e for e in reversed(pending) if isinstance(e, Round)), None)
        if last is not None:
            times.append(last.elapsed_s)
            chunks.append(pending)
        elif chunks:  # the end alone (after a round not marked final): the last frame with it
            chunks[-1] = chunks[-1] + pending
    return FramePlan(_durations(times[: len(chunks)], speed),
                     _run_frames(chunks, size, reference))


def _race_view(events: list[Event]) -> QWidget:
    from specviz.gui.stage.race_view import RaceView

    race_view = RaceView()
    race_view.controls_row.hide()
    race_view.load(events)
    for pane in race_view.panes.values():  # a slide scrolls nowhere: the newest text shows
        pane.stream.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
    return race_view


def _race_frames(events: list[Event], times: list[float],
                 size: tuple[int, int]) -> Iterator[QImage]:
    race_view = _race_view(events)
    # The race view's type is already large (30 pt tokens): 1.1 at 1920 gives 44 px
    # tokens and 26 px captions without squeezing two panes into 1280 px.
    scale = RACE_SCALE * size[0] / PROJECTOR[0]
    try:
        for t in times:
            race_view.set_time(t)
            for pane in race_view.panes.values():  # type: ignore[attr-defined]
                pane.stream.apply_strikes(now=t + 10.0)
            yield render_widget(race_view, size, scale)
    finally:
        race_view.deleteLater()


def _slide_run_view(size: tuple[int, int], reference: Any = None) -> Any:
    """A RunView laid out as a slide: no buttons, no scroll bars, every p/q panel whole."""
    from specviz.gui.views.run_view import RunView

    view = RunView(frame_ms=1_000_000)  # frames are drawn by hand
    view.timer.stop()
    if reference is not None:  # the figures the window measured (its speed card's reference)
        view.baseline_tokens_per_s = dict(reference.baseline_tokens_per_s)
        view.target_step_s = dict(reference.target_step_s)
        view.target_step_kept = set(reference.target_step_kept)
    view.follow_button.hide()
    view.stream.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
    view.bars.scroll.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
    _offscreen(view, size, projector_scale(size[0]))
    view.set_presenting(True)  # presentation's fit: every panel in view, axes uncut
    top = view.splitters[0]  # at projector type the plots need half the width
    top.setSizes([top.width() // 2, top.width() - top.width() // 2])
    QApplication.processEvents()
    return view


def _run_frames(chunks: list[list[Event]], size: tuple[int, int],
                reference: Any) -> Iterator[QImage]:
    view = _slide_run_view(size, reference)
    try:
        for chunk in chunks:
            yield _run_frame(view, chunk, size)
    finally:
        view.deleteLater()


def animation_frames(events: Sequence[Event], size: tuple[int, int] = PROJECTOR,
                     speed: float = 1.0, reference: Any = None) -> tuple[list[QImage], list[int]]:
    """Every frame of :func:`plan_animation` at once (and their durations in ms)."""
    plan = plan_animation(events, size, speed, reference)
    return list(plan.frames), plan.durations


def final_frame(events: Sequence[Event], size: tuple[int, int] = PROJECTOR,
                reference: Any = None) -> QImage:
    """The last frame of :func:`animation_frames` alone (a race or lineup at its end, or
    the run)."""
    lineup = lineup_of(events)
    if lineup is not None:
        return next(lineup_frames(lineup, [lineup.duration_s], size))
    race = as_race(events)
    if race is not None:
        return next(_race_frames(list(events), [race.duration_s], size))
    return next(_run_frames([list(events)], size, reference))


def _run_frame(view: QWidget, events: list[Event], size: tuple[int, int]) -> QImage:
    for event in events:
        view.apply(event)  # type: ignore[attr-defined]
    view.flush(now=0.0)  # type: ignore[attr-defined]
    view.stream.apply_strikes(now=1e9)  # type: ignore[attr-defined]
    QApplication.processEvents()  # laid out with this round's text, then fitted to it
    view.fit_panes()  # type: ignore[attr-defined]
    return render_widget(view, size)


def _durations(times: list[float], speed: float) -> list[int]:
    """How long each frame stays: until the next moment, at ``speed``; the last one holds."""
    out = []
    for now, nxt in zip(times, times[1:], strict=False):
        ms = 1000 * (nxt - now) / speed
        out.append(10 * round(min(MAX_FRAME_MS, max(MIN_FRAME_MS, ms)) / 10))  # GIF: 10 ms units
    out.append(HOLD_LAST_MS)
    return out


@dataclass
class RawFrame:
    """One drawn frame as bytes (RGB, row by row): what the encoding thread may touch."""

    data: bytes
    width: int
    height: int
    ms: int


def raw_frame(image: QImage, ms: int) -> RawFrame:
    """A QImage's pixels copied out (on the GUI thread; cheap next to quantising them)."""
    rgb = image.convertToFormat(QImage.Format.Format_RGB888)
    line = rgb.width() * 3
    data = bytes(rgb.constBits())
    if rgb.bytesPerLine() != line:  # rows padded to 4 bytes: drop the padding
        data = b"".join(data[y * rgb.bytesPerLine(): y * rgb.bytesPerLine() + line]
                        for y in range(rgb.height()))
    return RawFrame(data, rgb.width(), rgb.height(), ms)


class GifEncoder:
    """Quantises frames as they come and writes the GIF at the end (any thread, no Qt).

    A frame equal to the one before only holds it longer. The file is written in one go at
    the end, so a cancelled or failed export leaves nothing behind.
    """

    def __init__(self) -> None:
        self.frames: list[Any] = []
        self.held: list[int] = []
        self._last: bytes | None = None

    def add(self, frame: RawFrame) -> None:
        from PIL import Image

        if self._last == frame.data:  # nothing changed on screen: hold the frame longer
            self.held[-1] += frame.ms
            return
        self._last = frame.data
        image = Image.frombytes("RGB", (frame.width, frame.height), frame.data)
        self.frames.append(image.quantize(colors=128))
        self.held.append(frame.ms)

    def write(self, path: str | Path) -> int:
        """The GIF into ``path``; the number of frames in it (whatever Pillow merged)."""
        import io

        from PIL import Image

        buffer = io.BytesIO()
        self.frames[0].save(buffer, format="GIF", save_all=True,
                            append_images=self.frames[1:], duration=self.held, loop=0,
                            optimize=False, disposal=1)
        Path(path).write_bytes(buffer.getvalue())
        buffer.seek(0)
        with Image.open(buffer) as written:
            return int(getattr(written, "n_frames", 1))


def export_animation(events: Sequence[Event], path: str | Path,
                     size: tuple[int, int] = PROJECTOR, speed: float = 1.0,
                     reference: Any = None) -> int:
    """An animated GIF of a recording at ``size`` pixels, here and now (the command line;
    the window uses :class:`AnimationJob`); returns the number of frames."""
    plan = plan_animation(events, size, speed, reference)
    encoder = GifEncoder()
    for image, ms in zip(plan.frames, plan.durations, strict=True):
        encoder.add(raw_frame(image, ms))
    return encoder.write(path)


def writable_problem(path: str | Path) -> str:
    """Why ``path`` cannot be written, in a sentence (the file's name first: the full path
    may be long); "" if it looks writable."""
    path = Path(path)
    folder = path.parent
    if path.is_dir():
        return f"Cannot write {path.name}: it is a folder ({path}). Choose a file name."
    if not folder.is_dir():
        return f"Cannot write {path.name}: the folder does not exist ({folder})."
    if not os.access(folder, os.W_OK) or path.exists() and not os.access(path, os.W_OK):
        return f"Cannot write {path.name}: permission denied ({folder})."
    return ""


class AnimationJob(QObject):
    """A GIF export that never blocks the window.

    The GUI thread draws one frame per timer tick (a widget can only be drawn there); a
    thread of its own quantises the frames and writes the file. At most ``AHEAD`` drawn
    frames wait for it, so memory stays bounded. ``cancel`` stops both; nothing is written.
    """

    AHEAD = 2
    WAIT_MS = 20  # while the encoder is behind, look again this often
    drawn = Signal(int, int)  # frames drawn, frames in all (GUI thread)
    progressed = Signal(int, int)  # frames encoded, frames in all
    finished = Signal(str, int)  # path, frames in the file
    failed = Signal(str)  # one sentence
    cancelled = Signal()
    _encoded = Signal(int)  # from the encoding thread
    _ended = Signal(str, int, str)  # path, frames, problem ("" = written)

    def __init__(self, events: Sequence[Event], path: str | Path,
                 size: tuple[int, int] = PROJECTOR, speed: float = 1.0,
                 reference: Any = None, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.events, self.path, self.size = list(events), Path(path), size
        self.speed, self.reference = speed, reference
        self.plan: FramePlan | None = None
        self.done = 0  # frames drawn
        self.running = False
        self._drawing = False
        self._queue: queue.Queue[RawFrame | None] = queue.Queue()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._timer = QTimer(self)
        self._timer.setInterval(0)  # a frame, then whatever else waits, then the next frame
        self._timer.timeout.connect(self._on_tick)
        self._encoded.connect(self._on_encoded)
        self._ended.connect(self._on_ended)

    @property
    def total(self) -> int:
        return self.plan.count if self.plan is not None else 0

    def start(self) -> bool:
        """Begin; False (and ``failed``) if the path cannot be written."""
        problem = writable_problem(self.path)
        if problem:
            self.failed.emit(problem)
            return False
        self.plan = plan_animation(self.events, self.size, self.speed, self.reference)
        self.running = True
        self._thread = threading.Thread(target=self._encode, name="specviz-export-gif", daemon=True)
        self._thread.start()
        self._timer.start()
        return True

    def _on_tick(self) -> None:
        if self._drawing:  # drawing a widget processes events: this tick came from inside
            return
        behind = self._queue.qsize() >= self.AHEAD  # the encoder is: let it catch up,
        interval = self.WAIT_MS if behind else 0  # without spinning on the cores it needs
        if self._timer.interval() != interval:
            self._timer.setInterval(interval)
        if behind:
            return
        self._drawing = True
        try:
            self._draw_next()
        finally:
            self._drawing = False

    def _draw_next(self) -> bool:
        """Draw one frame and hand it to the encoder; False once every frame is drawn."""
        assert self.plan is not None
        image = next(self.plan.frames, None)
        if image is None or not self.running:
            self._timer.stop()
            self._queue.put(None)
            return False
        self._queue.put(raw_frame(image, self.plan.durations[self.done]))
        self.done += 1
        self.drawn.emit(self.done, self.total)
        return True

    def _encode(self) -> None:
        """The encoding thread: quantise each frame as it comes, then write the file."""
        encoder = GifEncoder()
        seen = 0
        try:
            while True:
                frame = self._queue.get()
                if self._stop.is_set():
                    return
                if frame is None:
                    break
                encoder.add(frame)
                seen += 1
                self._tell(self._encoded, seen)
            if not encoder.frames:
                self._tell(self._ended, str(self.path), 0, "Nothing to animate.")
                return
            n = encoder.write(self.path)
        except OSError as exc:
            self._tell(self._ended, str(self.path), 0, f"Cannot write {self.path.name}: "
                                                       f"{exc.strerror or exc} ({self.path}).")
            return
        self._tell(self._ended, str(self.path), n, "")

    def _tell(self, signal: Any, *args: Any) -> None:
        """Emit from the encoding thread, unless the job is gone (its window closed)."""
        if self._stop.is_set():
            return
        try:
            signal.emit(*args)
        except RuntimeError:  # the QObject was deleted meanwhile: nobody is listening
            self._stop.set()

    def _on_encoded(self, n: int) -> None:
        if self.running:
            self.progressed.emit(n, self.total)

    def _on_ended(self, path: str, n: int, problem: str) -> None:
        if not self.running:
            return
        self.running = False
        self._close_plan()
        if problem:
            self.failed.emit(problem)
        else:
            self.finished.emit(path, n)

    def cancel(self) -> None:
        """Stop drawing and encoding now; nothing is written (a no-op when not running)."""
        if not self.running:
            return
        self.running = False
        self._timer.stop()
        self._stop.set()  # before the wake-up below: the encoder ends without writing
        self._queue.put(None)
        self._close_plan()
        self.cancelled.emit()

    def _close_plan(self) -> None:
        if self.plan is not None:
            self.plan.frames.close()  # type: ignore[attr-defined]  # its views go
        self.events = []  # ended: the recording's events are not held any longer

    def wait(self, timeout_s: float | None = None) -> bool:
        """Wait for the encoding thread (tests); True if it has ended."""
        if self._thread is not None:
            self._thread.join(timeout_s)
            return not self._thread.is_alive()
        return True


__all__ = [
    "PROJECTOR",
    "AnimationJob",
    "FramePlan",
    "GifEncoder",
    "Token",
    "animation_frames",
    "export_acceptance",
    "export_animation",
    "export_bars",
    "export_tree",
    "export_graphics",
    "export_lineup_html",
    "export_transcript",
    "final_frame",
    "lineup_frames",
    "lineup_html",
    "plan_animation",
    "projector_scale",
    "render_widget",
    "token_spans",
    "transcript_html",
    "transcript_tokens",
]


def main(argv: list[str] | None = None) -> int:
    """Exports from a recording, without loading any model
    (``python -m specviz.gui.stage.export``)."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m specviz.gui.stage.export",
        description="Slides from a recording: the last frame as PNG, the run or race as a GIF, "
                    "the transcript as HTML, the acceptance plots as PNG/SVG.")
    parser.add_argument("recording", help="a .jsonl recording (a race plays as a race, a "
                        "lineup as a lineup)")
    parser.add_argument("--png", help="the last frame, as the audience sees it at the end")
    parser.add_argument("--gif", help="an animated GIF of the whole recording")
    parser.add_argument("--html", help="the coloured transcript (the last run; every lane "
                        "of a lineup)")
    parser.add_argument("--acceptance", help="the acceptance plots (.png or .svg)")
    parser.add_argument("--size", default="1920x1080", help="pixels, WIDTHxHEIGHT")
    parser.add_argument("--speed", type=float, default=1.0, help="GIF playback speed")
    args = parser.parse_args(argv)
    try:
        width, height = (int(v) for v in args.size.lower().split("x"))
    except ValueError:
        parser.error(f"--size must be WIDTHxHEIGHT in pixels, e.g. 1920x1080, got {args.size!r}")
    size = (width, height)
    if min(size) < 16 or max(size) > 8192:
        parser.error(f"--size must be between 16 and 8192 pixels a side, got {args.size}")
    if not 0.01 <= args.speed <= 100:
        parser.error(f"--speed must be between 0.01 and 100, got {args.speed:g}")
    outputs = [path for path in (args.png, args.gif, args.html, args.acceptance) if path]
    for path in outputs:  # before any work: an unwritable path costs nothing
        problem = writable_problem(path)
        if problem:
            return _fail(problem)
    from specviz.core.recording import RecordingError, read_recording

    try:
        events = read_recording(args.recording)
    except OSError as exc:
        return _fail(f"cannot read {args.recording}: {exc.strerror or exc}")
    except RecordingError as exc:  # its message names the file where it reads it
        return _fail(str(exc) if args.recording in str(exc) else f"{args.recording}: {exc}")
    if not any(isinstance(e, RunStarted) for e in events):
        return _fail(f"{args.recording} holds no run (no run_started event)")
    from specviz.gui.startup import make_app

    app = make_app()
    try:
        if args.png:
            if not final_frame(events, size).save(args.png):
                return _fail(f"cannot write {args.png} (a .png name, in a writable folder)")
            print(f"{args.png}: {width} × {height}")
        if args.gif:
            n = export_animation(events, args.gif, size, args.speed)
            print(f"{args.gif}: {n} frames")
        if args.html:
            print(export_transcript(events, args.html))
        if args.acceptance:
            print(export_acceptance(events, args.acceptance, size))
    except OSError as exc:
        return _fail(f"cannot write {exc.filename or 'the output'}: {exc.strerror or exc}")
    finally:
        del app
    return 0


def _fail(message: str) -> int:
    """One line on stderr, exit code 2 (the CLI's convention for bad input)."""
    print(f"python -m specviz.gui.stage.export: error: {message}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())

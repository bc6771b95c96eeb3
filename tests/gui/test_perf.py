"""Frame cost (issue 10 item 8): a frame redoes only what changed. Counts work, never time.

Each check counts calls that re-lay out or repaint a plot (grid re-fills, title setHtml,
axis setTicks, range changes); each broken variant puts back the old code, which did all of
them every round, and shows the check fails.
"""

from __future__ import annotations

import dataclasses
import gc
import weakref
from collections import Counter
from collections.abc import Iterator

import pytest
from PySide6.QtCore import QRectF
from PySide6.QtWidgets import QApplication

from benchmarks.frame_cost import scripted_rounds
from specviz.gui import worker as worker_module
from specviz.gui.replay.player import Replayer
from specviz.gui.views import bars as bars_module
from specviz.gui.views import run_view
from specviz.gui.views.bars import PANEL_MIN_HEIGHT, PANEL_MIN_WIDTH, BarPanel, RoundBarsView
from specviz.gui.views.run_view import FRAME_FRAGMENTS, FRAME_PANELS, STATS_S, RunView
from specviz.gui.views.stats import AcceptanceView
from specviz.gui.worker import PairSpec

# The offscreen platform cannot resize a window to its size hints; a real screen can.
pytestmark = pytest.mark.qt_log_ignore("This plugin does not support propagateSizeHints")


@pytest.fixture
def view(qtbot) -> Iterator[RunView]:
    v = RunView(frame_ms=1_000_000)
    v.timer.stop()
    qtbot.addWidget(v)
    v.resize(1366, 768)
    v.show()
    QApplication.processEvents()
    yield v


def spy(counts: Counter, name: str, obj: object, attr: str) -> None:
    """Count calls of ``obj.attr`` (an instance attribute shadowing the method)."""
    original = getattr(obj, attr)

    def wrapper(*args, **kwargs):
        counts[name] += 1
        return original(*args, **kwargs)

    setattr(obj, attr, wrapper)


def work_per_round(view: RunView, k: int, rounds: int = 8) -> Counter:
    """Calls that re-fill the grid or redraw titles, axes and ranges, over ``rounds`` rounds of
    one K after the first (rejections at changing positions: the panel count varies)."""
    events = scripted_rounds(k, rounds + 1)
    view.apply(events[0])
    view.apply(events[1])
    view.flush(now=0.0)
    QApplication.processEvents()
    counts: Counter = Counter()
    bars = view.bars
    spy(counts, "addItem", bars.graphics.ci, "addItem")
    spy(counts, "removeItem", bars.graphics.ci, "removeItem")
    for panel in bars.panels:
        spy(counts, "setHtml", panel.plot.titleLabel.item, "setHtml")
    for i, event in enumerate(events[2:]):
        view.apply(event)
        view.flush(now=float(i + 1))
    return counts


def redraw_same_round(view: RunView) -> Counter:
    """Calls made by drawing the round that is already on screen once more."""
    events = scripted_rounds(4, 3)
    for e in events:
        view.apply(e)
    view.flush(now=0.0)
    counts: Counter = Counter()
    for panel in view.bars.visible_panels():
        spy(counts, "setHtml", panel.plot.titleLabel.item, "setHtml")
        spy(counts, "setTicks", panel.plot.getAxis("left"), "setTicks")
        spy(counts, "setTicks", panel.plot.getAxis("bottom"), "setTicks")
        spy(counts, "setRange", panel.plot.getViewBox(), "setRange")
        spy(counts, "setXRange", panel.plot, "setXRange")
        spy(counts, "setYRange", panel.plot, "setYRange")
    view.bars.show_round(view.bars.round)
    view.select_round(None)  # the frame after a click on "Follow live round"
    return counts


@pytest.mark.parametrize("k", [4, 16])
def test_rounds_of_one_k_never_refill_the_grid(view: RunView, k: int) -> None:
    counts = work_per_round(view, k)
    assert counts["addItem"] == 0 and counts["removeItem"] == 0, counts
    # Titles change with the round (token, p, q): at most one setHtml per panel per round.
    assert counts["setHtml"] <= 8 * (k + 1), counts


def test_redrawing_the_same_round_sets_nothing_again(view: RunView) -> None:
    counts = redraw_same_round(view)
    assert sum(counts.values()) == 0, counts


def test_a_round_with_fewer_decided_drafts_keeps_the_panels_in_place(view: RunView) -> None:
    events = scripted_rounds(4, 3)  # round 0 all kept (5 panels), round 1 rejects at #2
    bars = view.bars
    for e in events[:2]:
        view.apply(e)
    view.flush(now=0.0)
    QApplication.processEvents()
    before = [p.plot.geometry() for p in bars.visible_panels()]
    assert len(before) == 5
    view.apply(events[2])
    view.flush(now=1.0)
    QApplication.processEvents()
    shown = bars.visible_panels()
    assert len(shown) < 5
    assert [p.plot.geometry() for p in shown] == before[:len(shown)]
    hidden = [p for p in bars.panels[:5] if p not in shown]
    assert hidden and not any(p.plot.isVisible() for p in hidden)
    assert all(p.plot.isVisible() for p in shown)
    # A new K re-fills the grid: every panel shown again, in the new arrangement.
    events = scripted_rounds(2, 1)
    bars.show_round(events[1])
    assert len(bars.visible_panels()) == 3
    assert all(p.plot.isVisible() for p in bars.visible_panels())


# -- broken variants: the old code, every round ------------------------------------------------


def old_place(self: RoundBarsView, count: int, force: bool = False,
              shown: int | None = None) -> None:
    """The old _place: one grid cell per shown panel, re-filled whenever that count changed."""
    count = count if shown is None else shown
    cols = self.columns(count)
    if count:
        self._panel(count - 1)
    rows = -(-count // cols)
    self.graphics.setMinimumHeight(rows * PANEL_MIN_HEIGHT)
    lone = max(PANEL_MIN_WIDTH, self.scroll.viewport().width() // 3)
    for panel in self.panels:
        panel.plot.setMaximumWidth(lone if count == 1 else 16_777_215)
    self._shown = count
    wanted = [(i, i // cols, i % cols) for i in range(count)]
    if wanted == self._placed:
        if force:
            self.graphics.ci.setGeometry(QRectF(self.graphics.viewport().rect()))
        return
    layout = self.graphics.ci
    for i, _, _ in self._placed:
        layout.removeItem(self.panels[i].plot)
    for i, row, col in wanted:
        layout.addItem(self._panel(i).plot, row, col)
    self._placed = wanted
    layout.setGeometry(QRectF(self.graphics.viewport().rect()))


def test_old_grid_refill_is_caught(view: RunView, monkeypatch) -> None:
    monkeypatch.setattr(RoundBarsView, "_place", old_place)
    counts = work_per_round(view, 4)
    assert counts["addItem"] > 0 and counts["removeItem"] > 0, counts


def test_old_redraw_of_everything_is_caught(view: RunView, monkeypatch) -> None:
    monkeypatch.setattr(BarPanel, "_changed", lambda self, key, value: True)  # no memory
    counts = redraw_same_round(view)
    assert counts["setHtml"] > 0 and counts["setTicks"] > 0, counts


def frames_with_a_past_round_selected(view: RunView) -> Counter:
    """Calls of bars.show_round over frames of new rounds while the user looks at round 1."""
    events = scripted_rounds(4, 8)
    for e in events[:3]:
        view.apply(e)
    view.flush(now=0.0)
    view.select_round(0)
    counts: Counter = Counter()
    spy(counts, "show_round", view.bars, "show_round")
    for i, e in enumerate(events[3:]):
        view.apply(e)
        view.flush(now=float(i + 1))
    assert view.bars.round is view.record.rounds[0]
    return counts


def test_frames_leave_a_selected_round_as_drawn(view: RunView) -> None:
    assert frames_with_a_past_round_selected(view)["show_round"] == 0
    view.select_round(None)  # following the live round again draws it at once
    assert view.bars.round is view.record.rounds[-1]
    assert "Selected" not in view.bars.header.text()


def rate_axis_changes(view: RunView, rounds: int = 60) -> int:
    """How often the acceptance-over-rounds x axis moved over ``rounds`` frames of one round."""
    events = scripted_rounds(4, rounds)
    counts: Counter = Counter()
    spy(counts, "setXRange", view.acceptance.rate_plot, "setXRange")
    for i, e in enumerate(events):
        view.apply(e)
        view.flush(now=float(i))
    return counts["setXRange"]


def test_the_rounds_axis_grows_in_steps(view: RunView) -> None:
    assert rate_axis_changes(view) <= 20  # 5..10, 12..20 by 2, 25..50 by 5, 60: 17 (old: 56)
    end = view.acceptance.rate_plot.getViewBox().viewRange()[0][1]
    assert 60 <= end <= 60 * 1.2 + 1  # holds every round, without much room to spare


def test_old_bars_redraw_on_every_frame_is_caught(view: RunView, monkeypatch) -> None:
    redraw = RunView._redraw
    monkeypatch.setattr(RunView, "_redraw", lambda self, bars=True: redraw(self, True))
    assert frames_with_a_past_round_selected(view)["show_round"] > 0


def test_old_rounds_axis_moving_every_round_is_caught(view: RunView, monkeypatch) -> None:
    def old_set_rounds(self, n: int) -> None:
        shown = max(n, 5)
        if shown == self._n:
            return
        self._n = shown
        self.rate_plot.setXRange(0.5, shown + 0.5, padding=0)

    monkeypatch.setattr(AcceptanceView, "_set_rounds", old_set_rounds)
    assert rate_axis_changes(view) > 20


# -- bounded frames: what arrives at once is drawn over several frames ---------------------------

FRAME_S = 0.033  # the frames' clock in these tests (``now``): no wall-clock time is read


def state(view: RunView) -> tuple:
    """What the user sees: text, fates and strikes, the bars' round, plots, numbers, info."""
    stream = view.stream
    return (stream.toPlainText(),
            [(s.kind, s.start, s.end, stream.format_at(s.start).fontStrikeOut())
             for s in stream.spans],
            view.bars.round, view.bars.header.text(),
            [p.title for p in view.bars.visible_panels()],
            list(view.acceptance.cumulative_line.getData()[1]),
            list(view.acceptance.round_points.getData()[1]),
            list(view.acceptance.hist_bars.opts["height"]),
            {key: label.text() for key, label in view.speed.values.items()},
            view.info.text())


def one_by_one(view: RunView, events: list) -> tuple:
    """The reference: each event applied and drawn in full before the next."""
    for i, e in enumerate(events):
        view.apply(e)
        view.flush(now=i * FRAME_S)
    view.stream.apply_strikes(now=float("inf"))
    return state(view)


def done(view: RunView) -> dict[str, int]:
    """Work the view's frames did so far: bars and stats redraws, tokens and panels drawn."""
    return {**view.frames_drawn, "panels": view.bars.panels_drawn}


def frames_until_idle(view: RunView, start: float = 0.0) -> list[dict[str, int]]:
    """Timer frames until nothing is left to draw; the work each frame did."""
    work = []
    now = start
    for _ in range(1000):
        if not (view.busy() or view._dirty or view._bars_due()):
            break
        before = done(view)
        view.frame(now=now)
        work.append({k: v - before[k] for k, v in done(view).items()})
        now += FRAME_S
    view.stream.apply_strikes(now=float("inf"))
    return work


def burst_frames(view: RunView, events: list) -> list[dict[str, int]]:
    """Everything handed over at once (a full-speed replay), then the timer's frames."""
    for e in events:
        view.apply(e)
    return frames_until_idle(view)


def fed_frames(view: RunView, events: list, per_frame: int) -> list[dict[str, int]]:
    """A steady feed (a replay at full speed): ``per_frame`` events before each frame."""
    work = []
    for i in range(0, len(events), per_frame):
        for e in events[i: i + per_frame]:
            view.apply(e)
        before = done(view)
        view.frame(now=i / per_frame * FRAME_S)
        work.append({k: v - before[k] for k, v in done(view).items()})
    return work + frames_until_idle(view, start=len(events) / per_frame * FRAME_S)


@pytest.fixture
def reference(qtbot) -> RunView:
    v = RunView(frame_ms=1_000_000)
    v.timer.stop()
    qtbot.addWidget(v)
    v.resize(1366, 768)
    return v


BURST = 300  # rounds handed over in one go


def test_a_burst_is_drawn_in_bounded_frames_and_ends_as_drawn_one_by_one(
        view: RunView, reference: RunView) -> None:
    events = scripted_rounds(4, BURST)
    work = burst_frames(view, events)
    assert len(work) > 1  # spread over frames
    for w in work:
        assert w["fragments"] <= FRAME_FRAGMENTS, w  # the stream's share of a frame
        assert w["bars"] + w["stats"] <= 1, w  # bars and plots take turns
    assert sum(w["fragments"] for w in work) == 5 * BURST  # every token, once
    assert state(view) == one_by_one(reference, events)


@pytest.mark.parametrize(("bars_s", "correct"), [(None, True), (0.0, False)])
def test_a_steady_feed_redraws_the_plots_at_most_every_stats_s(
        view: RunView, reference: RunView, bars_s: float | None, correct: bool) -> None:
    """(Broken: ``BARS_S`` 0, a new round's bars every frame, as before.)"""
    if bars_s is not None:
        view.BARS_S = bars_s
    events = scripted_rounds(4, BURST)
    work = fed_frames(view, events, per_frame=3)  # three rounds a frame, a hundred frames
    assert all(w["bars"] + w["stats"] <= 1 for w in work)
    assert sum(w["stats"] for w in work) <= len(work) * FRAME_S / STATS_S + 1
    # The newest round's bars, begun every BARS_S (K = 4: a round's 5 panels fit one frame),
    # neither more often (every frame drew them once, which held a live run to ~2/3 of its
    # speed here) nor less.
    every = len(work) * FRAME_S / RunView.BARS_S
    assert (every - 2 <= sum(w["bars"] for w in work) <= every + 1) == correct
    assert state(view) == one_by_one(reference, events)


def test_a_new_run_drops_the_rounds_of_the_last_one_not_yet_drawn(
        view: RunView, reference: RunView) -> None:
    runs = [scripted_rounds(4, 30) for _ in range(10)]  # ten runs handed over at once
    events = [e for run in runs for e in run]
    work = burst_frames(view, events)
    assert sum(w["fragments"] for w in work) == 5 * 30  # the last run's tokens only
    assert state(view) == one_by_one(reference, events)


def test_a_live_round_shows_in_its_frame_and_its_plots_in_the_next(view: RunView) -> None:
    events = scripted_rounds(4, 3)
    for e in events[:3]:
        view.apply(e)
    frames_until_idle(view)
    view.apply(events[3])
    before = done(view)
    view.frame(now=10.0)
    assert view.bars.round is events[3] and view.frames_drawn["fragments"] == before[
        "fragments"] + 5 and view.frames_drawn["stats"] == before["stats"]
    view.frame(now=10.0 + FRAME_S)
    assert view.frames_drawn["stats"] == before["stats"] + 1
    assert "2 rounds" not in view.info.text() and "3 rounds" in view.info.text()


def test_the_replayer_waits_while_the_view_has_rounds_to_draw(view: RunView) -> None:
    replayer = Replayer(view, interval_ms=0)
    for e in scripted_rounds(4, 100):
        view.apply(e)
    view.frame(now=0.0)
    assert not view.queue and view.backlog  # folded in, not all drawn yet
    assert replayer._live_batch() == 0
    frames_until_idle(view, start=1.0)
    assert replayer._live_batch() > 0


# -- broken variants ------------------------------------------------------------------------------


def test_a_frame_that_draws_everything_is_caught(view: RunView, monkeypatch) -> None:
    """The old frame: every queued event drawn in the frame (the stream, bars and plots)."""
    monkeypatch.setattr(RunView, "frame", RunView.flush)
    work = burst_frames(view, scripted_rounds(4, BURST))
    assert max(w["fragments"] for w in work) > FRAME_FRAGMENTS
    assert max(w["bars"] + w["stats"] for w in work) > 1


def test_plots_redrawn_every_frame_are_caught(view: RunView, monkeypatch) -> None:
    monkeypatch.setattr(run_view, "STATS_S", 0.0)
    work = fed_frames(view, scripted_rounds(4, BURST), per_frame=3)
    assert sum(w["stats"] for w in work) > len(work) * FRAME_S / STATS_S + 1


def test_a_new_run_drawing_the_last_ones_rounds_is_caught(
        view: RunView, reference: RunView, monkeypatch) -> None:
    begin = RunView._begin

    def keep_backlog(self: RunView, started) -> None:  # the old run's undrawn rounds kept
        kept = list(self.backlog)
        begin(self, started)
        self.backlog.extend(kept)

    monkeypatch.setattr(RunView, "_begin", keep_backlog)
    runs = [scripted_rounds(4, 30) for _ in range(10)]
    events = [e for run in runs for e in run]
    work = burst_frames(view, events)
    assert sum(w["fragments"] for w in work) > 5 * 30
    monkeypatch.setattr(RunView, "_begin", begin)
    assert state(view) != one_by_one(reference, events)


def test_a_replayer_that_looks_at_the_queue_only_is_caught(view: RunView,
                                                          monkeypatch) -> None:
    replayer = Replayer(view, interval_ms=0)
    monkeypatch.setattr(view, "busy", lambda: bool(view.queue))
    for e in scripted_rounds(4, 100):
        view.apply(e)
    view.frame(now=0.0)
    assert view.backlog and replayer._live_batch() > 0  # piles up behind the stream


# -- a round's titles: new text in the fixed title row, no re-layout of the plots ----------------


def title_layout_work(view: RunView, rounds: int = 6) -> Counter:
    """Calls that re-lay out a bar panel (its title's size hints, its layout's rows) over
    ``rounds`` rounds of one K after the first."""
    events = scripted_rounds(4, rounds + 1)
    for e in events[:2]:
        view.apply(e)
    view.flush(now=0.0)
    counts: Counter = Counter()
    for panel in view.bars.panels:
        # updateMin: the label's new size hints, then updateGeometry (a re-layout of the plot)
        spy(counts, "updateMin", panel.plot.titleLabel, "updateMin")
        spy(counts, "setRowFixedHeight", panel.plot.layout, "setRowFixedHeight")
        spy(counts, "setHtml", panel.plot.titleLabel.item, "setHtml")
    for i, e in enumerate(events[2:]):
        view.apply(e)
        view.flush(now=float(i + 1))
    return counts


def titles(view: RunView) -> list[tuple[str, str, tuple[float, float]]]:
    QApplication.processEvents()
    return [(p.plot.titleLabel.text, p.plot.titleLabel.item.toHtml(),
             (p.plot.titleLabel.item.pos().x(), p.plot.titleLabel.item.pos().y()))
            for p in view.bars.visible_panels()]


def test_new_titles_do_not_re_lay_out_the_panels(view: RunView) -> None:
    counts = title_layout_work(view)
    assert counts["setHtml"] > 0  # the titles did change
    assert counts["updateMin"] == 0 and counts["setRowFixedHeight"] == 0, counts


def test_a_retitled_panel_shows_what_a_new_one_shows(view: RunView, reference: RunView) -> None:
    """The light path (new text only) against pyqtgraph's setTitle on fresh panels."""
    reference.show()
    events = scripted_rounds(4, 4)
    for e in events:
        view.apply(e)
        view.flush(now=0.0)  # rounds 1-4 drawn in turn: the last titles are re-titles
    for e in (events[0], events[-1]):
        reference.apply(e)
    reference.flush(now=0.0)  # round 4 alone: every title set by setTitle
    assert titles(view) == titles(reference)


def test_titles_set_with_set_title_every_round_are_caught(view: RunView, monkeypatch) -> None:
    monkeypatch.setattr(bars_module, "_retitle", lambda label, text: label.setText(text))
    counts = title_layout_work(view)
    assert counts["updateMin"] > 0


def test_a_retitle_that_does_not_centre_is_caught(view: RunView, reference: RunView,
                                                  monkeypatch) -> None:
    def uncentred(label, text: str) -> None:
        label.text = text
        label.item.setHtml(f"<span style='font-size: {label.opts['size']}'>{text}</span>")

    monkeypatch.setattr(bars_module, "_retitle", uncentred)
    reference.show()
    events = scripted_rounds(4, 4)
    for e in events:
        view.apply(e)
        view.flush(now=0.0)
    for e in (events[0], events[-1]):
        reference.apply(e)
    reference.flush(now=0.0)
    assert titles(view) != titles(reference)


def k_axis_calls(view: RunView) -> int:
    """Calls moving the K plot's rounds axis over redraws that bring no new round."""
    for e in scripted_rounds(4, 8):
        view.apply(e)
    view.flush(now=0.0)
    counts: Counter = Counter()
    spy(counts, "setXRange", view.acceptance.k_plot, "setXRange")
    for _ in range(5):
        view.acceptance.update_from(view.record)
    return counts["setXRange"]


def test_a_redraw_without_new_rounds_leaves_the_k_axis_be(view: RunView) -> None:
    assert k_axis_calls(view) == 0


def test_a_k_axis_set_on_every_redraw_is_caught(view: RunView, monkeypatch) -> None:
    draw = AcceptanceView._update_drafting

    def forgetful(self, record) -> None:
        self._k_rounds = -1  # the old code: no memory of the axis
        draw(self, record)

    monkeypatch.setattr(AcceptanceView, "_update_drafting", forgetful)
    assert k_axis_calls(view) == 5


# -- a loaded pair leaves the garbage collector's walks --------------------------------------------


def pair_tracked_after_load(qtbot, tiny_pair, make_controller) -> bool:
    """Whether a full collection would still walk the pair's objects once it has loaded."""
    controller, _ = make_controller(lambda *a, **k: tiny_pair)
    with qtbot.waitSignal(controller.loaded, timeout=20000):
        controller.load(PairSpec("tiny-draft", "tiny-target", "cpu"))
    tracked = gc.get_objects()  # every generation a collection walks (not the frozen one)
    found = any(o is tiny_pair.target for o in tracked)
    del tracked
    return found


def test_a_loaded_pair_is_frozen_out_of_full_collections(qtbot, tiny_pair,
                                                         make_controller) -> None:
    assert not pair_tracked_after_load(qtbot, tiny_pair, make_controller)
    assert gc.get_freeze_count() > 0


def test_a_pair_left_in_the_collections_is_caught(qtbot, tiny_pair, make_controller,
                                                  monkeypatch) -> None:
    monkeypatch.setattr(worker_module.gc, "freeze", lambda: None)  # the old load: no freeze
    assert pair_tracked_after_load(qtbot, tiny_pair, make_controller)


def test_letting_a_pair_go_reaches_its_frozen_cycles(qtbot) -> None:
    """A reload collects everything, the frozen objects too, then freezes what survived."""
    class Node:
        pass

    a, b = Node(), Node()
    a.other, b.other = b, a  # a cycle only a collection frees
    gone = weakref.ref(a)
    gc.freeze()  # as if a pair had loaded with it alive
    del a, b
    gc.collect()
    assert gone() is not None  # frozen: out of reach of ordinary collections
    worker_module._collect_everything()
    assert gone() is None and gc.get_freeze_count() > 0


def test_at_k_16_a_frame_draws_a_bounded_share_of_the_panels(view: RunView,
                                                              reference: RunView) -> None:
    events = scripted_rounds(16, 12)
    work = fed_frames(view, events, per_frame=2)
    assert max(w["panels"] for w in work) == FRAME_PANELS  # 17 panels: three frames a round
    assert state(view) == one_by_one(reference, events)


def test_all_k_plus_1_panels_in_one_frame_is_caught(view: RunView, monkeypatch) -> None:
    monkeypatch.setattr(run_view, "FRAME_PANELS", None)  # the old frame: the whole round
    for e in scripted_rounds(16, 2):
        view.apply(e)
    view.frame(now=0.0)
    assert view.bars.panels_drawn > FRAME_PANELS


# -- a round with fewer drafts (K capped at a run's end) moves only the cells that change ---------


def capped(events: list, k: int) -> object:
    """The last round again with only ``k`` drafts (all kept), as at a run's end."""
    rnd = events[-1]
    drafted = tuple(dataclasses.replace(d, status="accepted") for d in rnd.drafted[:k])
    return dataclasses.replace(rnd, index=rnd.index + 1, k=k, drafted=drafted, n_accepted=k)


def grid_after(view: RunView, rounds: list) -> tuple[Counter, list]:
    """Grid calls over ``rounds`` drawn one after the other; then the panels' geometry."""
    counts: Counter = Counter()
    spy(counts, "addItem", view.bars.graphics.ci, "addItem")
    spy(counts, "removeItem", view.bars.graphics.ci, "removeItem")
    for rnd in rounds:
        view.bars.show_round(rnd)
        QApplication.processEvents()
    return counts, [p.plot.geometry() for p in view.bars.visible_panels()]


def test_a_capped_round_moves_only_the_cells_that_change(view: RunView,
                                                         reference: RunView) -> None:
    reference.show()
    events = scripted_rounds(4, 4)
    short = capped(events, 2)  # 3 panels after rounds of 5
    grid_after(view, [events[1]])
    counts, geometry = grid_after(view, [short])
    assert counts["removeItem"] == 2 and counts["addItem"] == 0, counts
    _, fresh = grid_after(reference, [short])  # the same round drawn on a fresh grid
    assert geometry == fresh
    counts, geometry = grid_after(view, [events[1]])  # and back to five
    assert counts["addItem"] == 2 and counts["removeItem"] == 0, counts
    assert geometry == grid_after(reference, [events[1]])[1]


def test_a_grid_re_filled_for_a_capped_round_is_caught(view: RunView, monkeypatch) -> None:
    place = RoundBarsView._place

    def refill(self, count: int, force: bool = False, shown: int | None = None) -> None:
        if [(i, i // self.columns(count), i % self.columns(count))
                for i in range(count)] != self._placed:
            for i, _, _ in self._placed:  # the old _place: every cell out, every cell in
                self.graphics.ci.removeItem(self.panels[i].plot)
            self._placed = []
        place(self, count, force, shown)

    monkeypatch.setattr(RoundBarsView, "_place", refill)
    events = scripted_rounds(4, 4)
    grid_after(view, [events[1]])
    counts, _ = grid_after(view, [capped(events, 2)])
    assert counts["removeItem"] > 2 and counts["addItem"] > 0, counts

"""Drafters in the app (issue 12 item 5): controls, lookup without a draft model, drafter marks,
α by drafter and K per round, the lenience warning.

Each check is a function run on the real code and, in the ``*_catches_*`` tests, on a broken
variant (monkeypatched), where it must fail: a check that passes on both checks nothing.
"""

from __future__ import annotations

import dataclasses

import pytest
from PySide6.QtGui import QTextCharFormat

from specviz.core import record as record_module
from specviz.core.events import Round, RunFinished, RunStarted, Settings
from specviz.core.options import APP_PROFILE, profile
from specviz.core.record import RunRecord
from specviz.gui.views import stream as stream_module
from specviz.gui.views.run_view import RunView
from specviz.gui.views.stats import AcceptanceView
from specviz.gui.views.stream import TokenStreamView
from specviz.gui.windows.app import CUSTOM, MainWindow
from specviz.gui.windows.controls import FIELDS, ControlsPanel
from tests.gui.scripted import speculative_events

APP = profile(APP_PROFILE)
DEFAULT_DRAFTER, APP_K_POLICY, DEFAULT_LOOKUP_K = APP["drafter"], APP["k_policy"], APP["lookup_k"]

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support propagateSizeHints")

# -- a scripted hybrid run --------
# The four scripted rounds, rounds 2 and 4 drafted by lookup, with K policy reasons:
#   round 1 model : accepted, accepted, rejected    -> model  tested 3, kept 2
#   round 2 lookup: accepted, accepted, accepted    -> lookup tested 3, kept 3
#   round 3 model : rejected, discarded, discarded  -> model  tested 1, kept 0
#   round 4 lookup: accepted, rejected (K = 2)      -> lookup tested 2, kept 1
# By hand: α(model) = 2/4 = 0.5 (n = 4), α(lookup) = 4/5 = 0.8 (n = 5); K per round 3, 3, 3, 2.
LOOKUP_ROUNDS = {1, 3}
REASONS = ("start at K 3", "all kept → K 3", "rejected → K 3", "α̂ 0.62, c 0.10, v 1.4 → K 2")
EXPECTED_SPLIT = {"model": (0.5, 4), "lookup": (0.8, 5)}
EXPECTED_K = [3, 3, 3, 2]


def hybrid_events(lenience: float = 1.0) -> list:
    out = []
    for event in speculative_events():
        if isinstance(event, RunStarted):
            settings = dataclasses.replace(event.settings, drafter="hybrid", k_policy="cost",
                                           lenience=lenience)
            event = dataclasses.replace(event, settings=settings)
        elif isinstance(event, Round):
            who = "lookup" if event.index in LOOKUP_ROUNDS else "model"
            event = dataclasses.replace(
                event, drafted=tuple(dataclasses.replace(d, drafter=who) for d in event.drafted),
                policy_reason=REASONS[event.index], exact=lenience >= 1.0)
        out.append(event)
    return out


def fill_stream(qtbot, events: list) -> TokenStreamView:
    view = TokenStreamView(strike_delay_s=0.0)
    qtbot.addWidget(view)
    view.begin(events[0])
    view.add_rounds([e for e in events if isinstance(e, Round)], now=0.0)
    view.apply_strikes(now=1.0)  # the marks must survive the strike
    return view


# -- 1. controls map to Settings and persist --------

DRAFTING = {"drafter": "lookup", "ngram_min": 2, "ngram_max": 5, "k_policy": "heuristic",
            "lenience": 0.8, "lookup_k": 6}  # none of them the defaults
# Seen failing on: the lookup_k FIELDS row without its Settings name (lookup_k stays 10).


def check_controls(qtbot, store) -> None:
    panel = ControlsPanel()
    qtbot.addWidget(panel)
    assert panel.settings().drafter == DEFAULT_DRAFTER and panel.settings().lenience == 1.0
    assert panel.settings().k_policy == APP_K_POLICY
    # The app's lookup defaults are the engine's and the CLI's (the app once matched 3 tokens,
    # the CLI 4); its lookup budget is the CLI's (DEFAULT_LOOKUP_K, measured; not Settings' 10).
    assert (panel.settings().ngram_max, panel.settings().lookup_k) == \
        (Settings.ngram_max, DEFAULT_LOOKUP_K)
    assert not panel.lenience_note.isVisibleTo(panel)  # exact by default: nothing to warn
    for name, value in DRAFTING.items():
        widget = getattr(panel, name)
        if hasattr(widget, "setCurrentText"):
            widget.setCurrentText(value)
        else:
            widget.setValue(value)
    s = panel.settings()
    assert {name: getattr(s, name) for name in DRAFTING} == DRAFTING
    assert panel.lenience_note.isVisibleTo(panel)
    panel.save(store)
    store.sync()
    again = ControlsPanel()
    qtbot.addWidget(again)
    assert again.settings().drafter == DEFAULT_DRAFTER
    again.restore(store)
    s = again.settings()
    assert {name: getattr(s, name) for name in DRAFTING} == DRAFTING


def test_controls_map_to_settings_and_persist(qtbot, settings_store) -> None:
    check_controls(qtbot, settings_store)
    assert {"drafting/drafter", "drafting/k_policy", "drafting/lenience"} <= \
        {f.key for f in FIELDS}


def test_controls_check_catches_a_row_left_out(qtbot, settings_store, monkeypatch) -> None:
    import specviz.gui.windows.controls as controls

    broken = tuple(f for f in FIELDS if f.key != "drafting/k_policy")
    monkeypatch.setattr(controls, "FIELDS", broken)
    with pytest.raises((AssertionError, TypeError)):
        check_controls(qtbot, settings_store)


def test_ngram_bounds_stay_ordered(qtbot) -> None:
    panel = ControlsPanel()
    qtbot.addWidget(panel)
    panel.ngram_max.setValue(2)
    panel.ngram_min.setValue(4)
    assert panel.ngram_max.value() == 4
    panel.ngram_max.setValue(1)
    assert panel.ngram_min.value() == 1


# -- 2. a lookup run loads no draft model --------


@pytest.fixture
def window(qtbot, settings_store):
    made: list[MainWindow] = []

    def make(loader) -> MainWindow:
        w = MainWindow(loader=loader, settings=settings_store, autoload=False)
        qtbot.addWidget(w)
        w._set_preset(CUSTOM)
        w.controls.draft_edit.setText("")
        w.controls.target_edit.setText("tiny-target")
        w.controls.device.setCurrentText("cpu")
        w.controls.max_new.setValue(8)
        w.controls.temperature.setValue(0.0)
        w.controls.prompt.setPlainText("the cat the cat the cat")
        made.append(w)
        return w

    yield make
    for w in made:
        w.close()
        w.controller.decoder_thread.wait()


def run_lookup(qtbot, make, tiny_pair) -> tuple[MainWindow, list]:
    loads: list[tuple] = []

    def loader(draft, target, *args, **kwargs):
        loads.append((draft, target))
        return dataclasses.replace(tiny_pair, draft=None, draft_name=None)

    w = make(loader)
    w.controls.drafter.setCurrentText("lookup")
    w.run()
    qtbot.waitUntil(lambda: w.controller.state == "idle", timeout=30000)
    w.run_view.flush()
    return w, loads


def check_lookup_run(w: MainWindow, loads: list) -> None:
    assert loads == [(None, "tiny-target")], loads  # the target alone was loaded
    assert not w.run_view.banner.isVisibleTo(w.run_view), w.run_view.banner.text()
    rec = w.run_view.record
    assert isinstance(rec.events[-1], RunFinished)
    assert rec.started is not None and rec.started.settings.drafter == "lookup"
    assert rec.speculative
    drafted = [d for r in rec.rounds for d in r.drafted]
    assert all(d.drafter == "lookup" for d in drafted)


def test_lookup_runs_with_no_draft_model(qtbot, window, tiny_pair) -> None:
    w, loads = run_lookup(qtbot, window, tiny_pair)
    check_lookup_run(w, loads)


def test_lookup_check_catches_an_app_that_insists_on_a_draft(qtbot, window, tiny_pair,
                                                            monkeypatch) -> None:
    # The app as it was: no draft and not "Target alone" -> refuse before loading anything.
    real_run = MainWindow.run

    def old_run(self, paused: bool = False, steps: int = 0) -> None:
        if self.pair_spec().draft is None and not self.controls.baseline.isChecked():
            from specviz.core.events import RunFailed
            self.report_failure(RunFailed("Choose a draft model (q).", "input"))
            return
        real_run(self, paused, steps)

    monkeypatch.setattr(MainWindow, "run", old_run)
    w, loads = run_lookup(qtbot, window, tiny_pair)
    with pytest.raises(AssertionError):
        check_lookup_run(w, loads)


def test_a_loaded_pair_serves_a_lookup_run_without_reloading(qtbot, window, tiny_pair) -> None:
    loads: list[tuple] = []

    def loader(draft, target, *args, **kwargs):
        loads.append((draft, target))
        return tiny_pair

    w = window(loader)
    w.controls.draft_edit.setText("tiny-draft")
    w.run()
    qtbot.waitUntil(lambda: w.controller.state == "idle", timeout=30000)
    w.controls.drafter.setCurrentText("lookup")
    w.run()
    qtbot.waitUntil(lambda: w.controller.state == "idle", timeout=30000)
    w.run_view.flush()
    assert loads == [("tiny-draft", "tiny-target")]
    assert w.run_view.record.started.settings.drafter == "lookup"
    assert isinstance(w.run_view.record.events[-1], RunFinished)


# -- 3. each drafted token shows its drafter --------


def check_marks(view: TokenStreamView) -> None:
    drafted = [s for s in view.spans if s.kind in ("accepted", "rejected")]
    assert drafted
    for span in drafted:
        fmt = view.format_at(span.start)
        lookup = span.draft.drafter == "lookup"
        dotted = fmt.underlineStyle() == QTextCharFormat.UnderlineStyle.DotLine
        assert dotted == lookup, (span.text, span.draft.drafter)
        tip = view.describe(span)
        assert ("prompt lookup" in tip) == lookup and ("draft model q" in tip) != lookup, tip
        assert f"K = {span.round.k}: {REASONS[span.round_index]}" in tip
    for span in view.spans:  # tokens from p are never marked as drafted
        if span.kind in ("resampled", "bonus"):
            fmt = view.format_at(span.start)
            assert fmt.underlineStyle() != QTextCharFormat.UnderlineStyle.DotLine


def test_each_drafted_token_shows_its_drafter(qtbot) -> None:
    check_marks(fill_stream(qtbot, hybrid_events()))


def test_marks_check_catches_unmarked_tokens(qtbot, monkeypatch) -> None:
    monkeypatch.setattr(stream_module, "drafter_marked", lambda fmt, drafter: fmt)
    with pytest.raises(AssertionError):
        check_marks(fill_stream(qtbot, hybrid_events()))


def test_marks_check_catches_marks_lost_at_the_strike(qtbot, monkeypatch) -> None:
    real = stream_module.drafter_marked
    def insert_only(fmt, drafter):  # marks on insertion, not when a rejection is struck
        return real(fmt, drafter) if fmt.fontStrikeOut() is False else fmt

    monkeypatch.setattr(stream_module, "drafter_marked", insert_only)
    with pytest.raises(AssertionError):
        check_marks(fill_stream(qtbot, hybrid_events()))


# -- 4. α by drafter and K per round --------


def fill_acceptance(qtbot, events: list) -> tuple[AcceptanceView, RunRecord]:
    record = RunRecord()
    for event in events:
        record.add(event)
    view = AcceptanceView()
    qtbot.addWidget(view)
    view.update_from(record)
    return view, record


def check_split(view: AcceptanceView, record: RunRecord) -> None:
    split = record.alpha_by_drafter()
    assert list(split) == ["model", "lookup"]
    for name, (alpha, tested) in EXPECTED_SPLIT.items():
        assert split[name][0] == pytest.approx(alpha) and split[name][1] == tested
    opts = view.drafter_bars.opts
    assert list(opts["height"]) == pytest.approx([0.5, 0.8])
    ticks = view.drafter_plot.getAxis("bottom")._tickLevels[0]
    assert [t for _, t in ticks] == ["q", "lookup"]
    tip = view.drafter_plot.toolTip()
    assert "model 0.50 (n = 4 tested)" in tip and "lookup 0.80 (n = 5 tested)" in tip, tip
    xs, ks = view.k_line.getData()
    assert list(xs) == [1, 2, 3, 4] and list(ks) == EXPECTED_K
    assert record.k_per_round == EXPECTED_K
    # The old views' figures, now from the tally: 10 of 11 drafted, 6 kept of 9 tested.
    assert record.drafted == 11 and record.accepted == 6
    assert record.alpha == pytest.approx(6 / 9)
    assert record.reached == [4, 3, 2] and record.kept == [3, 2, 1]


def test_acceptance_splits_by_drafter_and_plots_k(qtbot) -> None:
    check_split(*fill_acceptance(qtbot, hybrid_events()))


def test_split_check_catches_alpha_per_drafted_not_per_tested(qtbot, monkeypatch) -> None:
    def per_drafted(self):  # counts discarded drafts as failures: model 2/6 instead of 2/4
        by = self.tally.by_drafter
        return {n: (by[n].accepted / by[n].drafted, by[n].tested)
                for n in sorted(by, key=lambda n: (n != "model", n))}

    monkeypatch.setattr(record_module.RunRecord, "alpha_by_drafter", per_drafted)
    with pytest.raises(AssertionError):
        check_split(*fill_acceptance(qtbot, hybrid_events()))


def test_split_check_catches_k_from_the_settings(qtbot, monkeypatch) -> None:
    real = record_module.RunRecord._add_round

    def announced_k(self, rnd):  # K per round read from the settings, not from the round
        real(self, rnd)
        self.k_per_round[-1] = self.started.settings.k

    monkeypatch.setattr(record_module.RunRecord, "_add_round", announced_k)
    with pytest.raises(AssertionError):
        check_split(*fill_acceptance(qtbot, hybrid_events()))


def test_a_model_run_shows_one_drafter(qtbot) -> None:
    view, record = fill_acceptance(qtbot, speculative_events())
    assert list(record.alpha_by_drafter()) == ["model"]
    assert list(view.drafter_bars.opts["height"]) == pytest.approx([6 / 9])


# -- 5. lenience < 1 says the output is not the target's --------


def check_warning(qtbot, events: list, warned: bool) -> None:
    view = RunView(frame_ms=10_000)
    qtbot.addWidget(view)
    view.resize(1200, 800)
    view.show()
    qtbot.waitExposed(view)
    for event in events:
        view.apply(event)
    view.flush(now=0.0)
    # On screen, in the view (a label made elsewhere and never laid out shows nothing).
    assert view.inexact.parentWidget() is view
    assert view.inexact.isVisible() == warned
    if warned:
        text = view.inexact.text()
        assert "NO LONGER follows the target's distribution" in text and "0.7" in text


def test_lenience_below_one_shows_the_warning(qtbot) -> None:
    check_warning(qtbot, hybrid_events(lenience=0.7), warned=True)
    check_warning(qtbot, hybrid_events(), warned=False)
    # The announcement alone is enough (before any round, or a recording whose rounds lack it).
    check_warning(qtbot, hybrid_events(lenience=0.7)[:1], warned=True)


def test_warning_check_catches_a_view_that_trusts_the_rounds_only(qtbot, monkeypatch) -> None:
    monkeypatch.setattr(record_module.RunRecord, "exact",
                        property(lambda self: self.tally.exact))
    with pytest.raises(AssertionError):
        check_warning(qtbot, hybrid_events(lenience=0.7)[:1], warned=True)


def test_warning_check_catches_a_label_replaced_at_each_run(qtbot, monkeypatch) -> None:
    from PySide6.QtWidgets import QLabel

    real = RunView.clear_error

    def clear_and_replace(self) -> None:  # the bug this file once had: a fresh, orphan label
        real(self)
        self.inexact = QLabel()

    monkeypatch.setattr(RunView, "clear_error", clear_and_replace)
    with pytest.raises(AssertionError):
        check_warning(qtbot, hybrid_events(lenience=0.7), warned=True)


def test_settings_default_is_exact() -> None:
    assert Settings().lenience == 1.0 and RunRecord().exact


# -- 6. the round's headline names its K, its drafter and the policy's reason --------


def check_headline(headline) -> None:
    rounds = [e for e in hybrid_events() if isinstance(e, Round)]
    text = headline(rounds[3], 0, False)
    assert "drafted 2 by lookup" in text and REASONS[3] in text, text
    text = headline(rounds[0], 0, False)
    assert "drafted 3 <span" in text and REASONS[0] in text and "lookup" not in text, text


def test_round_headline_names_k_drafter_and_reason() -> None:
    from specviz.gui.views.bars import RoundBarsView

    check_headline(RoundBarsView._headline)


def test_headline_check_catches_a_headline_without_the_reason() -> None:
    def old(rnd, discarded, selected):
        return f"<b>Round {rnd.index + 1}</b>: drafted {rnd.k}, {rnd.n_accepted} accepted"

    with pytest.raises(AssertionError):
        check_headline(old)


# -- 7. the mark is drawn thick enough to see (pixels) ------------------------------------------


def dark_pixels_below(view: TokenStreamView, span) -> tuple[int, int]:
    """Near-black pixels in a band at the bottom of a token's line, and the token's width."""
    from PySide6.QtGui import QTextCursor

    image = view.viewport().grab().toImage()
    cursor = QTextCursor(view.document())
    cursor.setPosition(span.start)
    a = view.cursorRect(cursor)
    cursor.setPosition(span.end)
    b = view.cursorRect(cursor)
    dark = 0
    for x in range(a.left(), b.left()):
        for y in range(a.bottom() - 4, a.bottom() + 3):
            c = image.pixelColor(x, y)
            dark += max(c.red(), c.green(), c.blue()) < 70  # ink; no fate's text is this dark
    return dark, b.left() - a.left()


def check_mark_pixels(qtbot) -> None:
    view = fill_stream(qtbot, hybrid_events())
    view.resize(900, 200)
    view.show()
    qtbot.waitExposed(view)
    one_line = [s for s in view.spans if s.kind in ("accepted", "rejected") and "\n" not in s.text]
    assert {s.draft.drafter for s in one_line} == {"model", "lookup"}
    for span in one_line:
        dark, width = dark_pixels_below(view, span)
        if span.draft.drafter == "lookup":
            assert dark >= width / 2, (span.text, dark, width)  # 3 px dots: about one per px
        else:
            assert dark <= width / 10, (span.text, dark, width)


def test_lookup_tokens_carry_a_visible_mark(qtbot) -> None:
    check_mark_pixels(qtbot)


def test_pixel_check_catches_the_hairline_alone(qtbot, monkeypatch) -> None:
    monkeypatch.setattr(TokenStreamView, "_paint_marks", lambda self: None)
    with pytest.raises(AssertionError):
        check_mark_pixels(qtbot)

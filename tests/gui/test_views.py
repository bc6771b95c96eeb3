"""Each view, driven by a scripted event sequence: what is drawn, token by token and bar by bar."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QColor, QHelpEvent
from PySide6.QtWidgets import QApplication, QToolTip

from specviz.core.events import Round, RunFailed, from_json, to_json
from specviz.gui.look.style import (
    FATES,
    P_COLOR,
    Q_COLOR,
    RESIDUAL_COLOR,
    STREAM_POINT_SIZE,
    token_label,
)
from specviz.gui.views.bars import candidates
from specviz.gui.views.run_view import RunView
from specviz.gui.views.stats import AcceptanceView
from tests.gui.scripted import EXPECTED_TOKENS, PROMPT, baseline_events, speculative_events

# The offscreen platform says so when a window with size limits, or a tooltip, is shown.
pytestmark = pytest.mark.qt_log_ignore("This plugin does not support propagateSizeHints",
                                       "This plugin does not support raise")


@pytest.fixture
def view(qtbot) -> RunView:
    v = RunView(frame_ms=10_000)  # frames are driven by hand with flush()
    qtbot.addWidget(v)
    v.resize(1600, 900)
    return v


def play(view: RunView, events: list, strike: bool = True) -> None:
    for e in events:
        view.apply(e)
    view.flush(now=0.0)
    if strike:
        view.stream.apply_strikes(now=10.0)


def test_stream_text_and_fates(view: RunView) -> None:
    play(view, speculative_events())
    stream = view.stream
    text = stream.toPlainText()
    # QTextDocument shows "\n" as a paragraph break; the text is prompt + every token in order.
    assert text == PROMPT + "".join(t for t, _ in EXPECTED_TOKENS)
    assert [(s.text, s.kind) for s in stream.spans] == EXPECTED_TOKENS
    for span in stream.spans:
        fmt = stream.format_at(span.start)
        fate = FATES[span.kind]
        assert fmt.background().color() == QColor(fate.background), span
        assert fmt.foreground().color() == QColor(fate.foreground), span
        assert fmt.fontStrikeOut() == (span.kind == "rejected"), span
        assert fmt.fontUnderline() == (span.kind == "resampled"), span
        assert fmt.fontOverline() == (span.kind == "bonus"), span
    assert "猫" in text and "⟨</s>⟩" in text  # Chinese kept; EOS made visible


def test_rejected_draft_is_shown_before_it_is_struck(view: RunView) -> None:
    play(view, speculative_events()[:2], strike=False)
    rejected = next(s for s in view.stream.spans if s.kind == "rejected")
    fmt = view.stream.format_at(rejected.start)
    assert not fmt.fontStrikeOut()
    assert fmt.foreground().color() == QColor(FATES["rejected"].foreground)
    full = fmt.fontPointSize()
    assert full == STREAM_POINT_SIZE  # the guess first shows at the size of the text
    assert view.stream.apply_strikes(now=view.stream.strike_delay_s + 1.0) == 1
    struck = view.stream.format_at(rejected.start)
    assert struck.fontStrikeOut()
    assert struck.fontPointSize() < 0.8 * full  # then shrinks, so the kept text reads on


def test_the_stream_only_ever_appends(view: RunView) -> None:
    changes: list[tuple[int, int, int]] = []
    doc = view.stream.document()
    doc.contentsChange.connect(lambda *a: changes.append(a))
    events = speculative_events()
    view.apply(events[0])
    view.flush(now=0.0)
    restyled = 0
    for i, e in enumerate(events[1:]):
        before = view.stream.toPlainText()
        # The earliest place this frame may touch: the end, or a rejected draft due a strike.
        floor = min([doc.characterCount() - 1] + [s.start for _, s in
                                                   view.stream._pending_strikes])
        changes.clear()
        view.apply(e)
        view.flush(now=10.0 * (i + 1))
        assert view.stream.toPlainText().startswith(before)  # text is only ever added
        assert changes and all(pos >= floor for pos, _, _ in changes), (floor, changes)
        restyled += sum(removed for _, removed, _ in changes)
    assert restyled > 0  # the strikes restyle rejected drafts in place


def test_tooltip_explains_the_decision(view: RunView) -> None:
    play(view, speculative_events())
    spans = view.stream.spans
    first = view.stream.describe(spans[0])
    for part in ("round 1", "draft position 1", "p(x) = 0.500", "q(x) = 0.400",
                 "min(1, p/q) = 1.000", "r = 0.200", "accept"):
        assert part in first
    rejected = view.stream.describe(spans[2])
    for part in ("rejected draft", "p(x) = 0.100", "q(x) = 0.500", "min(1, p/q) = 0.200",
                 "r = 0.900", "reject"):
        assert part in rejected
    assert "norm(max(0, p − q))" in view.stream.describe(spans[3])
    bonus = view.stream.describe(spans[7])
    assert "bonus" in bonus and "p(x) = 0.350" in bonus


def test_hover_and_click_find_the_token(qtbot, view: RunView) -> None:
    view.show()
    play(view, speculative_events())
    span = next(s for s in view.stream.spans if s.text == " red")  # round 3
    cursor = view.stream.textCursor()
    cursor.setPosition(span.start + 2)
    point = view.stream.cursorRect(cursor).center()
    assert view.stream.span_at_point(point) == span
    help_event = QHelpEvent(QEvent.Type.ToolTip, point, view.stream.viewport().mapToGlobal(point))
    QApplication.sendEvent(view.stream.viewport(), help_event)
    assert "round 3" in QToolTip.text() and "rejected draft" in QToolTip.text()
    with qtbot.waitSignal(view.round_selected) as blocker:
        qtbot.mouseClick(view.stream.viewport(), Qt.MouseButton.LeftButton, pos=point)
    assert blocker.args == [2]
    assert view.bars.round.index == 2 and "Selected round 3" in view.bars.header.text()
    view.follow_button.click()
    assert view.bars.round.index == 3


def test_bars_show_p_and_q_for_each_decided_position(view: RunView) -> None:
    events = speculative_events()
    play(view, events)
    view.select_round(0)
    bars = view.bars
    r0: Round = events[1]
    panels = bars.visible_panels()
    assert len(panels) == 4  # three decided drafts and the resampled token
    for panel, d in zip(panels, r0.drafted, strict=False):
        cands = candidates(d)
        assert list(panel.p_bars.opts["width"]) == pytest.approx([c.p or 0 for c in cands])
        assert list(panel.q_bars.opts["width"]) == pytest.approx([c.q or 0 for c in cands])
        marked = [label for label in panel.labels if label.startswith("▶ ")]
        assert marked == ["▶ " + token_label(d.text, 10)]
        assert QColor(panel.p_bars.opts["brush"]) == QColor(P_COLOR)
        assert QColor(panel.q_bars.opts["brush"]) == QColor(Q_COLOR)
    assert "accepted" in panels[0].title and "rejected" in panels[2].title
    assert "r 0.900" in panels[2].title and "min(1,p/q) 0.200" in panels[2].title
    extra = panels[3]
    assert "resampled" in extra.title and "norm(max(0, p − q))" in extra.title
    assert list(extra.p_bars.opts["width"]) == pytest.approx([0.6, 0.1, 0.05])
    assert QColor(extra.p_bars.opts["brush"]) == QColor(RESIDUAL_COLOR)
    assert extra.labels[0] == "▶ ␣dog"
    assert list(extra.mark.opts["y"]) == [0]


def test_bars_full_acceptance_shows_bonus_and_readable_labels(view: RunView) -> None:
    play(view, speculative_events())
    view.select_round(1)
    panels = view.bars.visible_panels()
    assert len(panels) == 4
    assert "▶ ↵" in panels[2].labels  # a newline token, made visible
    assert "bonus" in panels[3].title and "p 0.350" in panels[3].title
    assert panels[3].labels[0] == "▶ 猫"
    view.select_round(2)  # rejected at the first position: later drafts are discarded
    assert len(view.bars.visible_panels()) == 2
    assert "2 later drafts discarded" in view.bars.header.text()


def test_acceptance_plots_follow_the_rounds(view: RunView) -> None:
    play(view, speculative_events())
    acc = view.acceptance
    xs, ys = acc.cumulative_line.getData()
    assert list(xs) == [1, 2, 3, 4]
    assert list(ys) == pytest.approx([2 / 3, 5 / 6, 5 / 9, 6 / 11])
    assert list(acc.round_points.getData()[1]) == pytest.approx([2 / 3, 1.0, 0.0, 0.5])
    assert list(acc.hist_bars.opts["x"]) == [0, 1, 2, 3]  # K + 1 possible values
    assert list(acc.hist_bars.opts["height"]) == [1, 1, 1, 1]
    assert list(acc.pos_bars.opts["height"]) == pytest.approx([3 / 4, 2 / 3, 1 / 2])
    expected = AcceptanceView.expected_histogram(0.5, 2, 4)
    assert expected == pytest.approx([2.0, 1.0, 1.0])


def test_speed_numbers(view: RunView) -> None:
    play(view, speculative_events())
    values = {k: label.text() for k, label in view.speed.values.items()}
    assert values["tokens_per_s"] == "20.0"  # 10 tokens in 0.5 s of wall time
    assert values["target_calls_per_token"] == "0.40"  # 4 passes for 10 tokens
    assert values["alpha"] == "0.67"  # 6 kept of 9 tested (not 6 of 11 drafted)
    # No reference measured yet: no speedup at all, neither measured nor expected.
    assert values["expected_speedup"] == "—"
    assert values["measured_speedup"] == "—"
    assert "nothing measured" in view.speed.names["measured_speedup"].text()
    # The target's one-token step, timed at load: 40 ms. c = (0.11 s / 11) / 40 ms = 0.25,
    # v = (0.2 s / 4) / 40 ms = 1.25; E = (1 − α^4) / (1 − α) = 195/81 with α = 2/3:
    # expected = 2.407 / (3 · 0.25 + 1.25) = 1.20; measured = 10 × 40 ms / 0.5 s = 0.80.
    view.set_target_step("tiny-target", "cpu", 0.04)
    view.flush(now=1.0)
    values = {k: label.text() for k, label in view.speed.values.items()}
    assert values["cost_ratio"] == "0.25"
    assert values["expected_speedup"] == "1.20×"
    assert "1.38×" in view.speed.values["expected_speedup"].toolTip()  # the paper's form, v = 1
    assert values["measured_speedup"] == "0.80×"
    assert "one-token step\nmeasured at load: 40.0 ms" in \
        view.speed.names["measured_speedup"].text()
    # A step kept from an earlier launch (calibration.json) never reads "measured at load".
    view.set_target_step("tiny-target", "cpu", 0.04, kept=True)
    view.flush(now=1.0)
    caption = view.speed.names["measured_speedup"].text()
    assert "kept from an earlier launch: 40.0 ms" in caption and "at load" not in caption
    view.set_target_step("tiny-target", "cpu", 0.04)
    view.flush(now=1.0)
    play(view, baseline_events())
    play(view, speculative_events())  # a baseline run of the same target is now known
    assert view.speed.values["measured_speedup"].text() == "2.00×"  # 20 tok/s vs 10 tok/s
    assert "baseline run" in view.speed.names["measured_speedup"].text()


def test_baseline_tokens_are_grey(view: RunView) -> None:
    play(view, baseline_events())
    assert [s.kind for s in view.stream.spans] == ["target"] * 3
    fmt = view.stream.format_at(view.stream.spans[0].start)
    assert fmt.background().color() == QColor(FATES["target"].background)
    assert fmt.fontItalic()
    assert list(view.acceptance.cumulative_line.getData()[1] or []) == []
    assert "alone" in view.info.text()


def test_failure_keeps_the_text_and_shows_a_message(view: RunView) -> None:
    events = speculative_events()[:3]
    play(view, [*events, RunFailed("Out of memory while decoding.", "oom")])
    assert "Out of memory" in view.banner.text()
    assert len(view.stream.spans) == 8  # the two rounds are still there
    play(view, speculative_events())  # the next run clears the message
    assert view.banner.text() == ""


def test_a_replay_draws_the_same_as_a_live_run(qtbot, view: RunView) -> None:
    replayed = RunView(frame_ms=10_000)
    qtbot.addWidget(replayed)
    events = speculative_events()
    play(view, events)
    play(replayed, [from_json(to_json(e)) for e in events])
    assert replayed.stream.toPlainText() == view.stream.toPlainText()
    assert [(s.kind, s.start) for s in replayed.stream.spans] == \
        [(s.kind, s.start) for s in view.stream.spans]
    assert list(replayed.acceptance.cumulative_line.getData()[1]) == \
        list(view.acceptance.cumulative_line.getData()[1])


def test_a_thousand_rounds_append_without_rebuilding(view: RunView) -> None:
    r1 = speculative_events()[2]  # a full-acceptance round: four tokens
    events = speculative_events()[:1]
    for i in range(1000):
        events.append(
            Round(**{**r1.__dict__, "index": i, "n_generated": 4 * (i + 1), "elapsed_s": i + 1.0}))
    for i in range(0, 1000, 50):  # fifty rounds a frame, like a fast GPU run
        for e in events[i: i + 50]:
            view.apply(e)
        view.flush(now=float(i))
    view.apply(events[-1])
    view.flush()
    assert len(view.stream.spans) == 4000
    assert len(view.acceptance.cumulative_line.getData()[0]) == 1000
    # The bar panels are made once and reused, not one per round.
    assert len(view.bars.panels) == 4


def test_expected_speedup_uses_the_k_the_rounds_used() -> None:
    """Under an adaptive K policy the setting is only where K starts.

    Broken variant this catches: the expected figure computed with ``settings.k`` (here 8)
    while the rounds drafted about 3 each; it then reads 0.90× instead of 1.20×.
    """
    import dataclasses

    from specviz.core.record import RunRecord

    started, *rest = speculative_events()
    adaptive = dataclasses.replace(
        started, settings=dataclasses.replace(started.settings, k=8, k_policy="heuristic"))
    fixed_record, adaptive_record = RunRecord(), RunRecord()
    for event in speculative_events():
        fixed_record.add(event)
    for event in [adaptive, *rest]:
        adaptive_record.add(event)
    fixed = fixed_record.speed(target_step_s=0.04).expected_speedup
    assert fixed == pytest.approx(1.20, abs=0.005)  # the hand-computed figure above
    assert adaptive_record.speed(target_step_s=0.04).expected_speedup == pytest.approx(fixed)


# -- paused and stepped time is not decoding time (rehearsal: two rounds stepped, then Stop,
# showed 0.2 tokens/s and "measured speedup 0.16×") ---------------------------------------


def stepped_events() -> list:
    """The scripted run as if stepped: 10 s waiting for Step before rounds 2-4, stopped 20 s
    after its last round (the rounds' own passes 0.08 s each, 0.1 s apart when running)."""
    import dataclasses

    started, *rounds, finished = speculative_events()
    shifted = [dataclasses.replace(r, elapsed_s=r.elapsed_s + 10.0 * i)
               for i, r in enumerate(rounds)]
    wall = shifted[-1].elapsed_s + 20.0
    finished = dataclasses.replace(
        finished, stop_reason="stopped",
        summary=dataclasses.replace(finished.summary, wall_time_s=wall,
                                    tokens_per_s=10 / wall))
    return [started, *shifted, finished]


def test_paused_and_stepped_time_is_not_decoding_time(record_cls: type | None = None) -> None:
    from specviz.core import record as record_module

    rec = (record_cls or record_module.RunRecord)()
    for event in stepped_events():
        rec.add(event)
    # Running: 0.1 s, then each stepped round's passes alone (the wait left out): K 3 drafts
    # 0.03 s + a verify pass 0.05 s; the last round drafted K 2, 0.02 s.
    decoding = 0.1 + 0.08 + 0.08 + 0.07
    stats = rec.speed(target_step_s=0.05)
    assert stats.tokens_per_s == pytest.approx(10 / decoding)
    assert stats.measured_speedup == pytest.approx(10 / decoding * 0.05)
    # Unpaused, nothing changes: 10 tokens in the run's 0.5 s of wall time.
    plain = record_module.RunRecord()
    for event in speculative_events():
        plain.add(event)
    assert plain.speed().tokens_per_s == pytest.approx(20.0)


def test_a_paused_baseline_is_no_slower(view: RunView) -> None:
    import dataclasses

    started, *rounds, finished = baseline_events()  # unpaused: 3 tokens in 0.3 s, 10 / s
    rounds = [dataclasses.replace(r, elapsed_s=r.elapsed_s + 30.0 * i)
              for i, r in enumerate(rounds)]
    finished = dataclasses.replace(finished, summary=dataclasses.replace(
        finished.summary, wall_time_s=rounds[-1].elapsed_s + 0.01))
    play(view, [started, *rounds, finished])
    (measured,) = view.baseline_tokens_per_s.values()
    assert 10.0 <= measured <= 20.0  # paused rounds count their passes only (0.05 s each)


def test_the_old_elapsed_time_is_rejected() -> None:
    """The broken variant: tokens/s over the wall time, pauses included."""
    from specviz.core import record as record_module
    from tests.mutation import mutant

    broken = mutant(record_module.RunRecord,
                    ("        elapsed = self.decoding_s()  # pauses and Step's waits are not "
                     "decoding time\n",
                     "        elapsed = self.finished.summary.wall_time_s if self.finished "
                     "else last.elapsed_s\n"))
    with pytest.raises(AssertionError):
        test_paused_and_stepped_time_is_not_decoding_time(broken)


# -- a long prompt: the stream follows the output (rehearsal: "summarise a paragraph" stayed on
# the grey prompt all run) -------------------------------------------------------------------


def test_the_stream_follows_the_output_under_a_long_prompt(qtbot, stream_cls: type | None = None
                                                           ) -> None:
    import dataclasses

    from specviz.gui.views import stream as stream_module
    from specviz.gui.windows.demo import PARAGRAPH

    view = stream_module.TokenStreamView() if stream_cls is None else stream_cls()
    qtbot.addWidget(view)
    view.resize(500, 300)
    view.show()
    started, *rounds, _ = speculative_events()
    view.begin(dataclasses.replace(started, prompt=PARAGRAPH * 3), PARAGRAPH * 3)
    bar = view.verticalScrollBar()
    for rnd in rounds[:2]:
        view.add_rounds([rnd], now=0.0)
        QApplication.processEvents()
    assert bar.maximum() > 0 and bar.value() == bar.maximum()  # the newest text in view
    bar.setValue(0)  # the user scrolls up to read the prompt: the view stays there
    view.add_rounds([rounds[2]], now=0.0)
    assert bar.value() == 0
    bar.setValue(bar.maximum())  # back at the bottom: following again
    view.add_rounds([rounds[3]], now=0.0)
    assert bar.value() == bar.maximum()


def test_the_old_follow_rule_is_rejected(qtbot) -> None:
    """The broken variant: follow only when already at the bottom (a long prompt never is)."""
    from specviz.gui.views import stream as stream_module
    from tests.mutation import mutant

    broken = mutant(stream_module.TokenStreamView,
                    ("        if self.following:\n            self._scrolling = True\n",
                     "        bar = self.verticalScrollBar()\n"
                     "        if bar.value() >= bar.maximum() - 4:\n"
                     "            self._scrolling = True\n"))
    with pytest.raises(AssertionError):
        test_the_stream_follows_the_output_under_a_long_prompt(qtbot, broken)

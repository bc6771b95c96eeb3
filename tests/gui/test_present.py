"""Presentation: zoom scales every view, presentation mode is big, clicker keys and Esc work.

Broken variants each test catches (tried by hand, see the report):
- zoom that skips the stream (Zoom.set_factor without stream.set_scale): test_zoom_scales_every_view
- bars that keep PLOT_POINT_SIZE in titles / ticks (BarPanel.set_font ignoring scale): same test
- acceptance ticks unscaled (AcceptanceView.set_scale not setting tickFont): same test
- bases read while setting (a child inherits its parent's new font, zoom compounds): same test
- presentation_factor returning 1.0: test_presentation_mode_is_readable_from_the_back
- test_space_in_prompt_types guards typing (an editor keeps Space/arrows via ShortcutOverride,
  even for application-wide shortcuts); no variant of ours breaks it today.
- find_user always None (template shown): test_chat_template_hidden_by_default
- candidates / top_candidates without the p = q = 0 filter: test_bars_leave_out_zero_ids
- no createMimeDataFromSelection override (copy keeps " sat" and ↵): test_copy_gives_generated...
- Stager.back not redrawing / phases not restored: test_staged_round_forward_then_back
- presentation without Esc (leave action unbound / not unchecking F11): test_presentation_mode...
- presentation without set_presenting (the 1920×1080 defect: the bars' lower rows scrolled
  out): test_presentation_without_fitting_is_caught; the acceptance title rows at pyqtgraph's
  fixed 30 px (zoomed titles cut): test_old_acceptance_titles_are_caught
- the right-click menu on the viewport instead of the view (QAbstractScrollArea hands a
  viewport's context-menu event to the view: no menu), or no menu installed:
  test_right_click_exports (no menu shown)
- a staged round in presentation sized as before (RunView.stage giving the text its minimum,
  the step caption's row not counted): test_staged_round_in_presentation_keeps_every_panel...
  ("482 px of rows in a 418 px view" at K = 8)
"""

from __future__ import annotations

import dataclasses

import pytest
from PySide6.QtCore import QPoint, QPointF, QSize, Qt
from PySide6.QtGui import QFontInfo, QWheelEvent
from PySide6.QtWidgets import QApplication

from specviz.core.events import DraftPosition, TopN
from specviz.gui.look.style import RESIDUAL_COLOR
from specviz.gui.views.bars import candidates, top_candidates
from specviz.gui.views.prompt_text import find_user
from specviz.gui.views.run_view import RunView
from specviz.gui.views.staging import GREYED, phases
from specviz.gui.views.zoom import Zoom, px_per_pt, room_px
from specviz.gui.windows.app import MainWindow
from specviz.gui.windows.demo import DEMOS, PARAGRAPH
from tests.gui.scripted import EXPECTED_TOKENS, speculative_events
from tests.gui.windows import tiny_window

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support propagateSizeHints",
                                       "This plugin does not support raise")


@pytest.fixture
def view(qtbot) -> RunView:
    v = RunView(frame_ms=10_000)
    qtbot.addWidget(v)
    v.resize(1600, 900)
    for e in speculative_events():
        v.apply(e)
    v.flush(now=0.0)
    v.stream.apply_strikes(now=10.0)
    return v


def sizes(view: RunView) -> dict[str, float]:
    """Point sizes of one text of each view."""
    stream = view.stream
    accepted = next(s for s in stream.spans if s.kind == "accepted")
    panel = view.bars.visible_panels()[0]
    return {
        "stream token": stream.format_at(accepted.start).fontPointSize(),
        "stream prompt": stream.format_at(0).fontPointSize(),
        "bars header": view.bars.header.font().pointSizeF(),
        "bars title": float(panel.plot.titleLabel.opts["size"].rstrip("pt")),
        "bars ticks": panel.plot.getAxis("left").style["tickFont"].pointSizeF(),
        "bars x ticks": panel.plot.getAxis("bottom").style["tickFont"].pointSizeF(),
        "acceptance title": float(view.acceptance.rate_plot.titleLabel.opts["size"]
                                  .rstrip("pt")),
        "acceptance ticks": view.acceptance.hist_plot.getAxis("left")
        .style["tickFont"].pointSizeF(),
        "K plot ticks": view.acceptance.k_plot.getAxis("left").style["tickFont"].pointSizeF(),
        "drafter plot axis height": float(view.acceptance.drafter_plot.getAxis("bottom")
                                          .fixedHeight),
        "speed value": next(iter(view.speed.values.values())).font().pointSizeF(),
        "info": view.info.font().pointSizeF(),
        "legend": view.legend.font().pointSizeF(),
        "stream widget (inherited font)": stream.font().pointSizeF(),
    }


def test_zoom_scales_every_view(view: RunView) -> None:
    zoom = Zoom(view)
    before = sizes(view)
    zoom.set_factor(2.0)
    after = sizes(view)
    for name, size in before.items():
        assert after[name] == pytest.approx(2 * size, rel=0.02), name
    # Later rounds and panels come at the zoomed size too.
    assert view.bars.panels[-1].plot.getAxis("left").style["tickFont"].pointSizeF() == \
        pytest.approx(2 * before["bars ticks"])
    zoom.reset()
    assert sizes(view) == pytest.approx(before)


def test_ctrl_wheel_zooms(view: RunView) -> None:
    zoom = Zoom(view)
    target = view.stream.viewport()
    event = QWheelEvent(QPointF(10, 10), QPointF(10, 10), QPoint(0, 0), QPoint(0, 120),
                        Qt.MouseButton.NoButton, Qt.KeyboardModifier.ControlModifier,
                        Qt.ScrollPhase.NoScrollPhase, False)
    QApplication.sendEvent(target, event)
    assert zoom.factor > 1.0
    token = next(s for s in view.stream.spans if s.kind == "accepted")
    assert view.stream.format_at(token.start).fontPointSize() > 20


@pytest.fixture
def window(qtbot, settings_store, tiny_pair):
    w = tiny_window(qtbot, settings_store, tiny_pair)
    w.controls.prompt.setPlainText("the cat")
    yield w
    w.close()
    w.controller.decoder_thread.wait()


@pytest.mark.parametrize("screen", [(1920, 1080), (1366, 768)], ids=["1920", "1366"])
def test_presentation_mode_is_readable_from_the_back(window: MainWindow, monkeypatch,
                                                     screen: tuple[int, int]) -> None:
    """Tokens 40 px and labels 24 px on a 1080-line projector; on a 768-line screen the same
    height on the wall (28 and 17 px), so a laptop's full screen keeps room for the bars."""
    view = window.run_view
    for e in speculative_events():
        view.apply(e)
    view.flush(now=0.0)
    window.show()
    monkeypatch.setattr(window.presentation, "screen_size", lambda: QSize(*screen))
    window.present_action.setChecked(True)
    ppt = px_per_pt(view)
    token_px, label_px = room_px(40, screen[1]), room_px(24, screen[1])
    wanted = (40, 24) if screen[1] == 1080 else (28.44, 17.07)
    assert (token_px, label_px) == pytest.approx(wanted, abs=0.01)
    token = next(s for s in view.stream.spans if s.kind == "accepted")
    assert view.stream.format_at(token.start).fontPointSize() * ppt >= token_px
    for label in (view.info, view.bars.header, view.legend):
        assert QFontInfo(label.font()).pixelSize() >= label_px or \
            label.font().pointSizeF() * ppt >= label_px
    panel = view.bars.visible_panels()[0]
    assert panel.plot.getAxis("left").style["tickFont"].pointSizeF() * ppt >= label_px
    # Esc leaves presentation mode and gives the size back.
    window.stage_actions["leave"].trigger()
    assert not window.presentation.active and not window.present_action.isChecked()
    assert window.zoom.factor == 1.0


def test_clicker_keys(window: MainWindow, qtbot) -> None:
    view = window.run_view
    for e in speculative_events():
        view.apply(e)
    view.flush(now=0.0)
    window.show()
    window.present_action.setChecked(True)
    back = window.stage_actions["back"]
    assert {k.toString() for k in back.shortcuts()} == {"PgUp", "Left"}
    assert {k.toString() for k in window.stage_actions["forward"].shortcuts()} == \
        {"PgDown", "Right", "Space"}
    back.trigger()
    assert view.selected == 2  # the round before the newest
    back.trigger()
    assert view.selected == 1
    window.stage_actions["forward"].trigger()
    assert view.selected == 2
    stepped = []
    window.step = lambda: stepped.append(1)  # type: ignore[method-assign]
    window.stage_actions["forward"].trigger()  # at the newest: follow, then Step
    window.stage_actions["forward"].trigger()
    assert stepped == [1] and view.selected is None
    # Through the keys themselves (the shortcut map): PgUp and Left select earlier rounds.
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=2000)
    view.setFocus()
    qtbot.keyClick(view, Qt.Key.Key_PageUp)
    assert view.selected == 2
    qtbot.keyClick(view, Qt.Key.Key_Left)
    assert view.selected == 1
    qtbot.keyClick(view, Qt.Key.Key_Space)
    assert view.selected == 2


def test_space_in_prompt_types(window: MainWindow, qtbot) -> None:
    window.show()
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=2000)
    window.controls.prompt.setFocus()
    window.controls.prompt.moveCursor(window.controls.prompt.textCursor().MoveOperation.End)
    qtbot.keyClick(window.controls.prompt, Qt.Key.Key_Space)
    assert window.controls.prompt.toPlainText() == "the cat "


# -- noise: the chat template, p = q = 0 ids, copy ------------------------------------------

CHATML = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
          "Face<|im_end|>\n<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n")


def templated(user: str) -> list:
    events = speculative_events()
    events[0] = dataclasses.replace(events[0], prompt=CHATML.format(user))
    return events


def play(view: RunView, events: list) -> None:
    for e in events:
        view.apply(e)
    view.flush(now=0.0)
    view.stream.apply_strikes(now=10.0)


@pytest.mark.parametrize("known", [True, False])  # live run / replayed recording
def test_chat_template_hidden_by_default(qtbot, known: bool) -> None:
    v = RunView(frame_ms=10_000)
    qtbot.addWidget(v)
    v.user_prompt = "Once upon" if known else None
    play(v, templated("Once upon"))
    shown = "".join(t for t, _ in EXPECTED_TOKENS)
    assert v.stream.toPlainText() == "Once upon\n" + shown
    kinds = [(s.text, s.kind) for s in v.stream.spans]
    v.set_show_template(True)
    assert v.stream.toPlainText() == CHATML.format("Once upon") + shown
    assert [(s.text, s.kind) for s in v.stream.spans] == kinds  # every token drawn again
    assert all(v.stream.format_at(s.start).fontStrikeOut() == (s.kind == "rejected")
               for s in v.stream.spans)
    v.set_show_template(False)
    assert v.stream.toPlainText() == "Once upon\n" + shown


def test_find_user() -> None:
    full = CHATML.format("  Summarise:\nthe cat sat. ")
    start, end = find_user(full, "  Summarise:\nthe cat sat. ")
    assert full[start:end] == "Summarise:\nthe cat sat."
    assert find_user("plain prompt", "plain prompt") == (0, 12)
    assert find_user("no template here", None) is None


def test_bars_leave_out_zero_ids() -> None:
    d = DraftPosition(index=0, token_id=1, text=" cat", q=0.6, p=0.3, ratio=0.5, r=0.2,
                      status="accepted",
                      q_top=TopN(ids=(1, 2, 50), texts=(" cat", " dog", "<|im_end|>"),
                                 probs=(0.6, 0.4, 0.0)),
                      p_top=TopN(ids=(1, 3, 50, 51), texts=(" cat", " sat", "<|im_end|>", "<s>"),
                                 probs=(0.3, 0.7, 0.0, 0.0)))
    assert [c.token_id for c in candidates(d)] == [3, 1, 2]  # by p, then q; no 50, no 51
    dist = TopN(ids=(4, 50, 5), texts=(" a", "<s>", " b"), probs=(0.9, 0.0, 0.1))
    assert [r[0] for r in top_candidates(dist, 4)] == [4, 5]


def test_copy_gives_generated_text_alone(view: RunView, qtbot) -> None:
    generated = " the cat dog on a\n猫 big mat"  # " sat", " red", " x" were rejected
    assert view.output_text() == generated
    view.stream.selectAll()
    assert view.stream.createMimeDataFromSelection().text() == "Once upon" + generated
    view.stream.copy()
    assert QApplication.clipboard().text() == "Once upon" + generated


def test_copy_output_action(window: MainWindow) -> None:
    play(window.run_view, speculative_events())
    window.copy_output_action.trigger()
    assert QApplication.clipboard().text() == " the cat dog on a\n猫 big mat"


# -- staged rounds -------------------------------------------------------------------------

@pytest.mark.parametrize("index", [0, 1, 2, 3])  # resample, bonus, reject-first, EOS
def test_staged_round_forward_then_back(view: RunView, index: int) -> None:
    rnd = view.record.rounds[index]
    stager = view.stager
    stager.start(rnd)
    names = [p.name for p in phases(rnd)]
    seen = [stager.snapshot()]
    while stager.forward():
        seen.append(stager.snapshot())
    assert len(seen) == len(names) and len(set(map(repr, seen))) == len(seen)  # each differs
    tested = [d for d in rnd.drafted if d.status != "discarded"]
    assert names.count("test") == len(tested)
    assert ("discard" in names) == (len(tested) < len(rnd.drafted))
    back = [stager.snapshot()]
    while stager.back():
        back.append(stager.snapshot())
    assert back == seen[::-1]


def test_staged_phases_show_what_they_say(view: RunView) -> None:
    rnd = view.record.rounds[2]  # " red" rejected first, " big" " sun" discarded, resampled
    stager = view.stager
    stager.start(rnd)
    panels = view.bars.visible_panels()
    assert len(panels) == 3 and not any(panels[0].p_bars.opts["width"])  # q only
    stager.forward()  # score: p appears
    assert any(panels[0].p_bars.opts["width"])
    stager.forward()  # test x1: r against min(1, p/q) on the line
    assert (view.stage_panel.rline.ratio, view.stage_panel.rline.r) == (0.1, 0.7)
    assert "rejected" in view.stage_panel.caption.text()
    stager.forward()  # discard: x2, x3 greyed
    assert "discarded" in panels[1].title and panels[1].p_bars.opts["brush"] == GREYED
    stager.forward()  # the residual forms beside the rejected draft; nothing drawn yet
    assert len(view.bars.visible_panels()) == 2 and "drawing" in view.bars.panels[1].title
    assert view.bars.panels[1].p_bars.opts["brush"] == RESIDUAL_COLOR
    stager.forward()
    assert "resampled" in view.bars.panels[1].title and not stager.forward()


def test_step_stages_the_new_round(view: RunView) -> None:
    view.stage_next = True
    view.apply(dataclasses.replace(view.record.rounds[0], index=4))
    view.flush(now=0.0)
    assert view.stager.active and view.stager.index == 0
    view.select_round(1)  # clicking a round leaves the staging
    assert not view.stager.active and not view.stage_panel.isVisibleTo(view)


def test_demo_prompts_menu(window: MainWindow) -> None:
    titles = [a.text() for a in window.demo_actions]
    assert len(titles) == 4 and any("Chinese" in t for t in titles)
    window.demo_actions[2].trigger()
    assert window.controls.prompt.toPlainText() == DEMOS[2].prompt and "水" in DEMOS[2].prompt
    window.demo_actions[3].trigger()
    assert PARAGRAPH in window.controls.prompt.toPlainText()
    menus = [a.text() for a in window.menuBar().actions()]
    assert "&Demo prompts" in menus


# -- presentation mode at 1920 × 1080: nothing cut, every panel in view ---------------------

SCREEN = (1920, 1080)


def presentation_problems(window: MainWindow, screen: tuple[int, int] = SCREEN) -> list[str]:
    """What the layout checks miss in presentation mode: panels scrolled out of view, type
    too small for the back row (tokens < 40 px, labels < 24 px on a 1080-line screen; as
    tall on the wall on a smaller one: gui/views/zoom.py room_px)."""
    from PySide6.QtWidgets import QLabel

    view = window.run_view
    problems = []
    bars = view.bars
    if bars.graphics.minimumHeight() > bars.scroll.viewport().height() + 1 \
            or bars.scroll.verticalScrollBar().isVisible():
        problems.append(f"bar panels: {bars.graphics.minimumHeight()} px of rows in a "
                        f"{bars.scroll.viewport().height()} px view (rows scrolled out)")
    ppt = px_per_pt(view)
    token_px, label_px = room_px(40, screen[1]), room_px(24, screen[1])
    token = next(s for s in view.stream.spans if s.kind == "accepted")
    if view.stream.format_at(token.start).fontPointSize() * ppt < token_px - 0.5:
        problems.append(f"token text under {token_px:.0f} px")
    for label in view.findChildren(QLabel):
        if label.isVisible() and label.text() and \
                label.font().pointSizeF() * ppt < label_px - 0.5:
            problems.append(f"label {label.text()[:30]!r} under {label_px:.0f} px")
    for panel in bars.visible_panels():
        if panel.plot.getAxis("left").style["tickFont"].pointSizeF() * ppt < label_px - 0.5:
            problems.append(f"bar labels under {label_px:.0f} px")
    return problems


@pytest.fixture
def presenting(qtbot, settings_store, monkeypatch):
    """A window in presentation mode on a ``screen`` (default 1920 × 1080), fed
    ``k_events(k)``; returns it and what the layout and presentation checks find."""
    from tests.gui.layout_check import window_problems
    from tests.gui.test_layout import k_events

    made = []

    def make(k: int, screen: tuple[int, int] = SCREEN) -> tuple[MainWindow, list[str]]:
        w = MainWindow(loader=None, settings=settings_store, autoload=False)
        qtbot.addWidget(w)
        made.append(w)
        w.showNormal()
        w.resize(screen[0], screen[1] - 60)  # a window on that screen, below its panel
        w.run_view.timer.stop()
        # The offscreen screen is 800 × 800: "full screen" here is the screen asked for.
        monkeypatch.setattr(w, "showFullScreen", lambda: (w.showNormal(), w.resize(*screen)))
        monkeypatch.setattr(w.presentation, "screen_size", lambda: QSize(*screen))
        w.present_action.setChecked(True)
        events = k_events(k)
        pair = events[0].pair  # the step timed at load: a measured speedup with its reference
        w.run_view.set_target_step(pair.target, pair.device, 0.05)
        for e in events:
            w.run_view.apply(e)
        for _ in range(4):
            w.run_view.flush(now=0.0)
            QApplication.processEvents()
        assert w.size().toTuple() == screen
        return w, window_problems(w, screen) + presentation_problems(w, screen)

    yield make
    for w in made:
        w.close()


SCREENS = [(1920, 1080), (1366, 768)]


@pytest.mark.parametrize("screen", SCREENS, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("k", [4, 8])
def test_presentation_shows_everything(presenting, k: int, screen: tuple[int, int]) -> None:
    """Stream, every bar panel and the plots, nothing cut, type for the back row, at 1920 ×
    1080 and at 1366 × 768 (which hid the bars: only their titles showed, the stream 3.5
    lines, the plots squashed; the window's minimum was 973 × 856 on a 768-line screen).

    With a measured speedup on screen: its caption's two reference lines, kept while
    presenting, left "306 px of rows in a 272 px view" at K = 8 on 1366 × 768 (seen in a
    real window, then here with set_target_step)."""
    window, problems = presenting(k, screen)
    assert not problems, "\n".join(problems)
    view = window.run_view
    assert len(view.bars.visible_panels()) == k + 1
    # The bars visible, not just their titles: rows of candidates (tick labels that neither
    # overlap nor go missing: window_problems), and lines of text in the stream.
    assert all(len(p.labels) >= 2 for p in view.bars.visible_panels())
    assert view.stream.viewport().height() >= 3 * view.stream.fontMetrics().lineSpacing()
    window.present_action.setChecked(False)  # leaving: the normal panels again
    assert window.run_view.bars.n_show == 6 and not window.run_view.bars.fit


@pytest.mark.parametrize("k", [4, 8])
def test_presentation_without_fitting_is_caught(presenting, monkeypatch, k: int) -> None:
    """The broken variant: presentation without set_presenting (the layout before this fix:
    the acceptance plots' right column cut, the bars' lower rows scrolled out)."""
    monkeypatch.setattr(RunView, "set_presenting", lambda self, on: None)
    _, problems = presenting(k)
    assert any("scrolled out" in p for p in problems), problems


def test_old_acceptance_titles_are_caught(presenting) -> None:
    """The broken variant: the acceptance plots' title rows at pyqtgraph's fixed 30 px (as
    before this fix): zoomed titles 41 px tall were cut."""
    from tests.gui.layout_check import window_problems

    window, _ = presenting(4)
    acc = window.run_view.acceptance
    for plot in (acc.k_plot, acc.drafter_plot):
        plot.titleLabel.setMaximumHeight(30)
        plot.layout.setRowFixedHeight(0, 30)
    QApplication.processEvents()
    problems = window_problems(window, SCREEN)
    assert any("K / round" in p and "title" in p for p in problems), problems


# -- right-click export on the p/q panels and the acceptance plots ---------------------------

@pytest.mark.parametrize("kind", ["pq-panel", "acceptance"])
@pytest.mark.parametrize("suffix", ["png", "svg"])
def test_right_click_exports(window: MainWindow, monkeypatch, tmp_path, kind: str,
                             suffix: str) -> None:
    import xml.etree.ElementTree as ET

    from PySide6.QtGui import QContextMenuEvent, QImage
    from PySide6.QtWidgets import QFileDialog, QMenu

    from specviz.gui.stage import stage

    play(window.run_view, speculative_events())
    window.show()
    asked, shown = [], []
    out = tmp_path / f"{kind}.{suffix}"
    monkeypatch.setattr(QFileDialog, "getSaveFileName",
                        lambda *a, **k: (asked.append(a[1:]) or (str(out), "")))

    def pick(menu: QMenu, where) -> None:  # the user picks the entry for this format
        shown.append([a.text() for a in menu.actions()])
        next(a for a in menu.actions() if suffix.upper() in a.text()).trigger()

    monkeypatch.setattr(stage, "popup", pick)
    target = window.stage.plot_menu_targets[kind]
    # A real right click: the context-menu event lands on the view's viewport.
    QApplication.sendEvent(target.viewport(),
                           QContextMenuEvent(QContextMenuEvent.Reason.Mouse, QPoint(40, 40)))
    assert shown == [["Export as PNG…", "Export as SVG…"]]
    assert asked and asked[0][1] == f"{kind}.{suffix}"
    assert out.exists()
    if suffix == "png":
        image = QImage(str(out))
        assert (image.width(), image.height()) == (1920, 1080)
    else:
        assert ET.parse(out).getroot().tag.endswith("svg")


def test_right_click_cancelled_writes_nothing(window: MainWindow, monkeypatch, tmp_path) -> None:
    from PySide6.QtWidgets import QFileDialog

    from specviz.gui.stage.stage import export_plot

    play(window.run_view, speculative_events())
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: ("", ""))
    assert export_plot(window, "pq-panel", "png") == ""
    assert list(tmp_path.iterdir()) == []


def test_staged_round_in_presentation_keeps_every_panel_in_view(presenting) -> None:
    from tests.gui.layout_check import window_problems

    window, _ = presenting(8)
    view = window.run_view
    view.stage(view.record.rounds[1])
    for _ in range(4):  # the step's caption grows to two lines on the way
        view.stager.forward()
        QApplication.processEvents()
    problems = window_problems(window, SCREEN) + presentation_problems(window)
    assert not problems, "\n".join(problems)
    assert len(view.bars.visible_panels()) == 8


def test_zooming_while_presenting_keeps_every_panel_in_view(presenting) -> None:
    """Smaller type: still all in view; larger (beyond presentation's) may scroll; back to
    the presentation size: all in view again (the panes are fitted on every zoom).

    A guard, not a catcher: with Zoom.set_factor not refitting, this still passes here (the
    test's window is resized, not full screen); at 1920 × 1080 on a real 1920 × 1080 screen
    the same steps left 482 px of rows in a 467 px view (see the session report).
    """
    window, _ = presenting(8)
    bars = window.run_view.bars

    def in_view() -> bool:
        QApplication.processEvents()
        return bars.graphics.minimumHeight() <= bars.scroll.viewport().height() + 1

    window.zoom.zoom_out()
    assert in_view()
    window.zoom.zoom_in()
    window.zoom.zoom_in()
    window.zoom.zoom_out()
    assert in_view() and not presentation_problems(window)


# -- staged rounds hide the future; F10 walks phases (rehearsal: phase 1 showed the round's kept
# and bonus tokens in the stream and plots; a second F10 skipped seven phases) ---------------


def staged(qtbot, cls: type = RunView) -> RunView:
    """Round 1 shown, then round 2 (" on", " a", "↵" kept, bonus "猫") staged as F10 does."""
    v = cls(frame_ms=10_000)
    qtbot.addWidget(v)
    v.resize(1600, 900)
    started, r0, r1, *_ = speculative_events()
    for e in (started, r0):
        v.apply(e)
    v.flush(now=0.0)
    v.stage_next = True
    v.apply(r1)
    v.flush(now=0.0)
    return v


def generated(v: RunView) -> str:
    """The generated text the stream shows (no prompt, no struck drafts)."""
    return "".join(span.output for span in v.stream.spans)


def test_a_staged_round_shows_only_what_its_phase_revealed(qtbot, cls: type = RunView) -> None:
    v = staged(qtbot, cls)
    before = " the cat dog"  # round 1's output
    assert v.stager.active and v.stager.index == 0
    # phase by phase: draft, score, test x1, x2, x3, p at position 4, the bonus drawn
    expected = [before, before, before + " on", before + " on a", before + " on a\n",
                before + " on a\n", before + " on a\n猫"]
    shown = [generated(v)]
    rounds_said = [v.info.text()]
    while v.stager.forward():
        v.flush(now=0.0)
        shown.append(generated(v))
        rounds_said.append(v.info.text())
    assert shown == expected
    # The plots and numbers take the round in at its last phase only.
    assert all("1 rounds" in t for t in rounds_said[:-1]) and "2 rounds" in rounds_said[-1]
    v.stager.back()  # back a phase: the bonus and the round's figures go again
    v.flush(now=0.0)
    assert generated(v) == before + " on a\n" and "1 rounds" in v.info.text()


def test_leaving_a_staged_round_shows_it_whole(qtbot) -> None:
    v = staged(qtbot)
    v.select_round(0)  # a click on a token leaves the staging
    v.flush(now=0.0)
    assert generated(v) == " the cat dog on a\n猫" and "2 rounds" in v.info.text()


def test_f10_walks_the_phases_then_steps(window: MainWindow, monkeypatch,
                                        cls: type | None = None) -> None:
    w = window
    steps: list[int] = []
    monkeypatch.setattr(w.controller, "step", lambda: steps.append(1) or True)
    started, r0, r1, *_ = speculative_events()
    view = w.run_view
    for e in (started, r0):
        view.apply(e)
    view.flush(now=0.0)
    view.stage_next = True
    view.apply(r1)
    view.flush(now=0.0)
    n = len(view.stager.phases)
    for i in range(1, n):
        w.step()  # F10's slot
        assert (view.stager.index, steps) == (i, [])
    w.step()  # at the round's last phase: the next round
    assert steps == [1]


STAGING_MUTANTS = {
    "the stream shows the whole round at phase 1": (
        "stream", [("        tested, extra = self.stager.revealed()\n",
                    "        tested, extra = len(rnd.drafted), True\n")]),
    "the plots and numbers count the staged round at once": (
        "stats", [("        if self._before is not None and not self.stager.at_end:",
                   "        if False:")]),
    "F10 steps a round from any phase": (
        "f10", [("        if self.run_view.stager.forward():\n            return\n", "")]),
}


@pytest.mark.parametrize("name", list(STAGING_MUTANTS))
def test_staging_tests_reject_their_broken_variants(name: str, qtbot, settings_store,
                                                    tiny_pair, monkeypatch) -> None:
    from tests.mutation import mutant

    which, edits = STAGING_MUTANTS[name]
    with pytest.raises(AssertionError):
        if which == "f10":
            w = tiny_window(qtbot, settings_store, tiny_pair, cls=mutant(MainWindow, *edits))
            try:
                test_f10_walks_the_phases_then_steps(w, monkeypatch)
            finally:
                w.close()
        else:
            test_a_staged_round_shows_only_what_its_phase_revealed(
                qtbot, mutant(RunView, *edits))


# -- stale and missing text (rehearsal items 11 and 12) ------------------------------------


def test_a_demo_prompt_during_a_run_is_for_the_next_run(window: MainWindow,
                                                         monkeypatch) -> None:
    monkeypatch.setattr(window.controller, "state", "running")
    window.demo_actions[3].trigger()
    assert PARAGRAPH in window.controls.prompt.toPlainText()
    said = window.status_label.text()
    assert "next run" in said and DEMOS[3].title in said


def test_a_live_run_clears_a_stale_replay_note(window: MainWindow) -> None:
    window.status_label.setText("Replaying the race race.jsonl in the race window (Space: "
                                "pause, Home: again)")
    window.controller.started.emit(7)
    assert "Replaying" not in window.status_label.text()
    window.status_label.setText("Saved 12 events to run.jsonl")
    window.controller.started.emit(8)  # anything else stays
    assert window.status_label.text() == "Saved 12 events to run.jsonl"


def test_help_has_a_glossary_of_the_words_on_screen(window: MainWindow) -> None:
    from specviz.gui.look.style import FATES, STREAM_KINDS

    menus = {a.text(): a.menu() for a in window.menuBar().actions()}
    assert "&Help" in menus
    action = menus["&Help"].actions()[0]
    assert action.shortcut().toString() == "F1"
    action.trigger()
    dialog = window.glossary
    text = dialog.browser.toPlainText()
    for kind in STREAM_KINDS:
        assert FATES[kind].label in text
    for term in ("α", "c", "v", "K", "Conditional on reaching the position"):
        assert term in text
    font = dialog.browser.font().pointSizeF()
    assert font >= window.run_view.info.font().pointSizeF()  # read from the back, as the rest
    dialog.close()


def test_kept_by_position_says_it_is_conditional(view: RunView) -> None:
    plot = view.acceptance.pos_plot
    assert "reached" in plot.titleLabel.text
    tip = plot.toolTip()
    assert "given the position was reached" in tip and "1: 3/4" in tip  # kept / tested there


HELP_MUTANTS = {
    "no Help menu": ("test_help_has_a_glossary_of_the_words_on_screen",
                     [("        install_help(self)", "        pass  #")]),
    "the demo only changes the status line": (
        "test_a_demo_prompt_during_a_run_is_for_the_next_run",
        [("        demo.choose(self, chosen)\n",
          "        self.controls.prompt.setPlainText(chosen.prompt)\n"
          "        self.statusBar().showMessage(f'Demo prompt: {chosen.note}', 15_000)\n")]),
}


@pytest.mark.parametrize("name", list(HELP_MUTANTS))
def test_help_and_demo_tests_reject_their_broken_variants(name: str, qtbot, settings_store,
                                                          tiny_pair, monkeypatch) -> None:
    from tests.mutation import mutant

    test_name, edits = HELP_MUTANTS[name]
    w = tiny_window(qtbot, settings_store, tiny_pair, cls=mutant(MainWindow, *edits))
    try:
        with pytest.raises((AssertionError, KeyError)):
            test = globals()[test_name]
            test(w, monkeypatch) if "demo" in test_name else test(w)
    finally:
        w.close()


def test_the_stale_replay_note_test_rejects_the_old_window(qtbot, settings_store, tiny_pair,
                                                           monkeypatch) -> None:
    """The broken variant: a Stage that does not clear the note when a live run starts."""
    from specviz.gui.stage import stage
    from specviz.gui.windows import app
    from tests.mutation import mutant

    broken = mutant(stage.Stage,
                    ("        window.controller.started.connect(lambda _job: "
                     "clear_replay_note(window))\n", ""))
    monkeypatch.setattr(app, "Stage", broken)
    w = tiny_window(qtbot, settings_store, tiny_pair)
    try:
        with pytest.raises(AssertionError):
            test_a_live_run_clears_a_stale_replay_note(w)
    finally:
        w.close()


def test_a_new_run_leaves_the_staged_round_of_the_last(qtbot) -> None:
    v = staged(qtbot)
    started, *_ = speculative_events()
    v.apply(started)  # Run (F5) while a round is staged: the new run's first event
    v.flush(now=0.0)
    assert not v.stager.active and "0 rounds" in v.info.text() and generated(v) == ""


def test_the_new_run_test_rejects_a_stager_left_running(qtbot) -> None:
    """The broken variant: a new run that leaves the last run's staged round (and its
    figures) on screen until its own first round."""
    from tests.mutation import mutant

    broken = mutant(RunView, ("        self.stager.stop()  # a round staged in the run before",
                              "        pass  # a round staged in the run before"))
    with pytest.raises(AssertionError):
        v = staged(qtbot, broken)
        started, *_ = speculative_events()
        v.apply(started)
        v.flush(now=0.0)
        assert not v.stager.active and "0 rounds" in v.info.text() and generated(v) == ""


def capped_round_after(events: list):
    """The run's second round again with K capped at 6 (the tokens left): three kept, the
    fourth rejected, two discarded, and the run ends at the third (no extra token)."""
    rnd = [e for e in events if type(e).__name__ == "Round"][1]
    statuses = ["accepted"] * 3 + ["rejected", "discarded", "discarded"]
    drafted = tuple(dataclasses.replace(d, status=s)  # type: ignore[arg-type]
                    for d, s in zip(rnd.drafted[:6], statuses, strict=True))
    return dataclasses.replace(rnd, k=6, drafted=drafted, n_accepted=3, extra=None)


@pytest.mark.parametrize("broken", [False, True], ids=["fixed", "old"])
def test_no_stale_panel_after_a_capped_round(presenting, monkeypatch, broken: bool) -> None:
    """A K = 8 round, then one capped at 6 drafts: only its own panels show. Before, the
    panels past the new round's cells stayed visible where the layout had left them (a
    stale "#8" over the second row; seen offscreen at 1366 × 768)."""
    from specviz.gui.views import bars
    from tests.gui.test_layout import k_events
    from tests.mutation import mutant

    if broken:
        monkeypatch.setattr(bars.RoundBarsView, "_place", mutant(
            bars.RoundBarsView, ("for i, panel in enumerate(self.panels):",
                                 "for i, panel in enumerate(self.panels[:count]):"))._place)
    window, _ = presenting(8, (1366, 768))
    view = window.run_view
    view.apply(capped_round_after(k_events(8)))
    for _ in range(4):
        view.flush(now=0.0)
        QApplication.processEvents()
    shown = [p for p in view.bars.panels if p.plot.isVisible()]
    assert (shown == view.bars.visible_panels()) is not broken
    assert len(view.bars.visible_panels()) == 4


@pytest.mark.parametrize("k", [4, 8])
def test_old_presentation_at_1366_is_caught(presenting, monkeypatch, k: int) -> None:
    """The broken variant: the 1080-line type on a 768-line screen (room_px ignoring the
    screen's height, as presentation_factor did): the window's minimum exceeded the screen
    and the bars' rows were scrolled out (only their titles showed)."""
    from specviz.gui.views import zoom

    monkeypatch.setattr(zoom, "room_px", lambda px, screen_height: px)
    _, problems = presenting(k, (1366, 768))
    assert any("scrolled out" in p or "exceeds" in p or "overlap" in p for p in problems), \
        problems

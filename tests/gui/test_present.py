"""Presentation: zoom scales every view, presentation mode is big, clicker keys and Esc work.

Broken variants each test catches (tried by hand, see the report):
- zoom that skips the stream (Zoom.set_factor without stream.set_scale): test_zoom_scales_every_view
- bars that keep PLOT_POINT_SIZE in titles / ticks (BarPanel.set_font ignoring scale): same test
- acceptance ticks unscaled (AcceptanceView.set_scale not setting tickFont): same test
- presentation_factor returning 1.0: test_presentation_mode_is_readable_from_the_back
- test_space_in_prompt_types guards typing (an editor keeps Space/arrows via ShortcutOverride,
  even for application-wide shortcuts); no variant of ours breaks it today.
- presentation without Esc (leave action unbound / not unchecking F11): test_presentation_mode...
"""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QFontInfo, QWheelEvent
from PySide6.QtWidgets import QApplication

from specviz.gui.app import CUSTOM, MainWindow
from specviz.gui.run_view import RunView
from specviz.gui.zoom import Zoom, px_per_pt
from tests.gui.scripted import speculative_events

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
        "speed value": next(iter(view.speed.values.values())).font().pointSizeF(),
        "info": view.info.font().pointSizeF(),
        "legend": view.legend.font().pointSizeF(),
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
    w = MainWindow(loader=lambda *a, **k: tiny_pair, settings=settings_store, autoload=False)
    qtbot.addWidget(w)
    w._set_preset(CUSTOM)
    w.draft_edit.setText("tiny-draft")
    w.target_edit.setText("tiny-target")
    w.device.setCurrentText("cpu")
    w.prompt.setPlainText("the cat")
    yield w
    w.close()
    w.controller.decoder_thread.wait()


def test_presentation_mode_is_readable_from_the_back(window: MainWindow) -> None:
    view = window.run_view
    for e in speculative_events():
        view.apply(e)
    view.flush(now=0.0)
    window.show()
    window.present_action.setChecked(True)
    ppt = px_per_pt(view)
    token = next(s for s in view.stream.spans if s.kind == "accepted")
    assert view.stream.format_at(token.start).fontPointSize() * ppt >= 40
    for label in (view.info, view.bars.header, view.legend):
        assert QFontInfo(label.font()).pixelSize() >= 24 or label.font().pointSizeF() * ppt >= 24
    panel = view.bars.visible_panels()[0]
    assert panel.plot.getAxis("left").style["tickFont"].pointSizeF() * ppt >= 24
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
    window.prompt.setFocus()
    window.prompt.moveCursor(window.prompt.textCursor().MoveOperation.End)
    qtbot.keyClick(window.prompt, Qt.Key.Key_Space)
    assert window.prompt.toPlainText() == "the cat "

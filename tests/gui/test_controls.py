"""The controls panel: one table (FIELDS) gives defaults, Settings, restore and save."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QSettings

from specviz.core.events import Settings
from specviz.core.models import DEFAULT_PAIR, PRESETS
from specviz.gui.windows.controls import CUSTOM, FIELDS, ControlsPanel, parse


@pytest.fixture
def panel(qtbot) -> ControlsPanel:
    p = ControlsPanel()
    qtbot.addWidget(p)
    return p


def test_every_field_has_its_widget_and_default(panel: ControlsPanel) -> None:
    for f in FIELDS:
        assert f.default == panel.values()[f.key] or f.key in ("pair/draft", "pair/target"), f
    assert panel.preset.currentText() == DEFAULT_PAIR
    assert (panel.draft_edit.text(), panel.target_edit.text()) == PRESETS[DEFAULT_PAIR]


def test_settings_come_from_the_table(panel: ControlsPanel) -> None:
    panel.k.setValue(9)
    panel.temperature.setValue(0.0)
    panel.seed.setValue(-1)
    s = panel.settings()
    assert isinstance(s, Settings)
    assert (s.k, s.temperature, s.seed, s.max_new_tokens) == (9, 0.0, None, 128)


def test_save_then_restore_round_trips(qtbot, panel: ControlsPanel, settings_store) -> None:
    panel.set_pair("my-draft", "my-target")
    panel.k.setValue(16)
    panel.top_p.setValue(0.85)
    panel.baseline.setChecked(True)
    panel.chat.setChecked(False)
    panel.prompt.setPlainText("第一行\nline two")
    panel.save(settings_store)
    again = ControlsPanel()
    qtbot.addWidget(again)
    again.restore(settings_store)
    assert again.values() == panel.values()
    assert again.preset.currentText() == CUSTOM


def test_garbled_or_missing_values_fall_back(qtbot, settings_store: QSettings) -> None:
    settings_store.setValue("sampling/k", "lots")
    settings_store.setValue("mode/chat", "perhaps")
    settings_store.setValue("pair/preset", "a preset that no longer exists")
    panel = ControlsPanel()
    qtbot.addWidget(panel)
    panel.restore(settings_store)
    assert panel.k.value() == 4 and panel.chat.isChecked()
    assert panel.preset.currentText() == DEFAULT_PAIR
    assert parse("7.0", int, 1) == 7 and parse(None, float, 0.5) == 0.5
    assert parse("false", bool, True) is False


def test_a_preset_wins_over_stale_stored_models(qtbot, settings_store: QSettings) -> None:
    settings_store.setValue("pair/preset", DEFAULT_PAIR)
    settings_store.setValue("pair/draft", "an-old-draft")
    panel = ControlsPanel()
    qtbot.addWidget(panel)
    panel.restore(settings_store)
    assert panel.draft_edit.text() == PRESETS[DEFAULT_PAIR][0]


# -- the options table (specviz.core.options) is the controls' only source ------------------

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support propagateSizeHints")


def test_controls_defaults_and_ranges_are_the_options_tables(panel: ControlsPanel) -> None:
    """Seen failing on: the app's own copies (n-gram spin boxes to 16 where the engine
    refuses more than 8; T 0.7 and 128 tokens written in the FIELDS rows)."""
    from specviz.core import options, registry
    from specviz.gui.windows.controls import APP_DEFAULTS

    assert APP_DEFAULTS == options.profile(options.APP_PROFILE)
    by_setting = {f.setting: f for f in FIELDS if f.setting is not None}
    assert set(by_setting) == set(options.DEFAULTS) - {"top_n"}  # top-N: the events, not a knob
    for name, field in by_setting.items():
        assert field.default == APP_DEFAULTS[name], name
        widget = panel.widget(field)
        opt = options.BY_NAME[name]
        if hasattr(widget, "maximum"):
            low, high = opt.spin_range()
            assert widget.minimum() == low and widget.maximum() == min(high, 2**31 - 1), name
            if opt.high is not None:
                assert widget.maximum() <= opt.high, name
        else:
            assert tuple(widget.itemText(i) for i in range(widget.count())) == opt.names()
    assert panel.ngram_max.maximum() == options.NGRAM_LIMIT
    assert tuple(panel.drafter.itemText(i) for i in range(panel.drafter.count())) == \
        registry.drafter_names()
    options.validate(panel.settings())  # what the app opens on is a valid run


def _wheel_over(qtbot, widget, steps: int = 3) -> None:
    from PySide6.QtCore import QPoint, QPointF, Qt
    from PySide6.QtGui import QWheelEvent
    from PySide6.QtWidgets import QApplication

    centre = QPointF(widget.rect().center())
    for _ in range(steps):
        event = QWheelEvent(centre, QPointF(widget.mapToGlobal(centre.toPoint())), QPoint(0, 0),
                            QPoint(0, -120), Qt.MouseButton.NoButton,
                            Qt.KeyboardModifier.NoModifier, Qt.ScrollPhase.NoScrollPhase, False)
        QApplication.sendEvent(widget, event)


@pytest.mark.parametrize("name", ["ngram_min", "k", "temperature", "k_policy"])
def test_the_wheel_over_an_unfocused_control_leaves_its_value(qtbot, panel: ControlsPanel,
                                                              name: str) -> None:
    """Rehearsal: scrolling the panel changed n-gram min from 10 to 5 unnoticed. Seen failing
    on plain QSpinBox / QComboBox widgets (the wheel changed the value without focus)."""
    from PySide6.QtWidgets import QComboBox

    panel.resize(380, 700)
    panel.show()
    qtbot.waitExposed(panel)
    widget = getattr(panel, name)
    if name == "ngram_min":
        panel.ngram_max.setValue(8)
        widget.setValue(5)
    elif name == "k_policy":
        widget.setCurrentIndex(1)
    else:
        widget.setValue(widget.minimum() + (widget.maximum() - widget.minimum()) / 2)

    def value():
        return widget.currentIndex() if isinstance(widget, QComboBox) else widget.value()

    before = value()
    panel.prompt.setFocus()
    _wheel_over(qtbot, widget)
    assert value() == before
    # Focused (clicked or tabbed into), the wheel changes it as usual.
    widget.setFocus()
    qtbot.waitUntil(widget.hasFocus)
    _wheel_over(qtbot, widget)
    assert value() != before


def test_a_stock_spin_box_would_fail_the_wheel_test(qtbot) -> None:
    """The broken variant the test above rejects: QSpinBox's own wheel handling."""
    from PySide6.QtWidgets import QSpinBox

    spin = QSpinBox()
    qtbot.addWidget(spin)
    spin.setRange(1, 8)
    spin.setValue(5)
    spin.show()
    qtbot.waitExposed(spin)
    spin.clearFocus()
    _wheel_over(qtbot, spin)
    assert spin.value() != 5


def test_the_prompt_is_first_and_never_scrolls_away(qtbot, panel: ControlsPanel) -> None:
    """Rehearsal: the Prompt sat below Drafting, out of view at 1366×768 without scrolling,
    so F5 ran a prompt nobody saw. Seen failing on the old layout (prompt inside the scroll
    area, last)."""
    panel.resize(360, 520)  # a short dock: the form must scroll
    panel.show()
    qtbot.waitExposed(panel)
    assert not panel.scroll.isAncestorOf(panel.prompt)
    top = panel.prompt.mapTo(panel, panel.prompt.rect().topLeft()).y()
    assert top < panel.scroll.mapTo(panel, panel.scroll.rect().topLeft()).y()
    assert panel.prompt.isVisible() and panel.prompt.height() >= 60
    panel.scroll.verticalScrollBar().setValue(panel.scroll.verticalScrollBar().maximum())
    assert panel.prompt.visibleRegion().boundingRect().height() == panel.prompt.height()

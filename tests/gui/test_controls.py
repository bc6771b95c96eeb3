"""The controls panel: one table (FIELDS) gives defaults, Settings, restore and save."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QSettings

from specviz.core.events import Settings
from specviz.core.models import DEFAULT_PAIR, PRESETS
from specviz.gui.controls import CUSTOM, FIELDS, ControlsPanel, parse


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

"""Themes: readable (WCAG contrast), fates told apart with colour-blind eyes, applied everywhere.

Broken variants each test rejects (built in the tests themselves, as dataclasses.replace):
- a dark theme whose accepted text is a mid blue on its dark tint (3:1):
  test_broken_contrast_is_caught
- a high-contrast theme at AA only (accepted text 5:1, enough for light/dark, not for 7:1):
  same test
- a red / green pair of equal lightness for rejected / accepted (fine for normal vision,
  one colour for a deuteranope): test_broken_colour_blind_pair_is_caught
- p and q bars of one lightness, violet and blue (one colour to a protanope): same test
- the light theme before this change (rejected text #A03F00: 4.49:1): test_old_light_...
- disabled text in the captions' muted grey on a raised button (dark, high contrast: Stop
  and Pause looked enabled during a replay): test_old_disabled_grey_is_caught
- high contrast with the platform's check box (no box on black): test_old_invisible_box_...
"""

from __future__ import annotations

import dataclasses

import pytest
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QApplication

from specviz.gui.look.themes import (
    DARK,
    HIGH_CONTRAST,
    LIGHT,
    THEMES,
    contrast_problems,
    contrast_ratio,
    distance,
    distinguishability_problems,
    theme_named,
)
from tests.gui.scripted import speculative_events

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support propagateSizeHints",
                                       "This plugin does not support raise")


def test_contrast_ratio_matches_wcag() -> None:
    assert contrast_ratio("#000000", "#FFFFFF") == pytest.approx(21.0)
    assert contrast_ratio("#FFFFFF", "#FFFFFF") == pytest.approx(1.0)
    assert contrast_ratio("#767676", "#FFFFFF") == pytest.approx(4.54, abs=0.01)  # WCAG's grey


@pytest.mark.parametrize("theme", list(THEMES.values()), ids=list(THEMES))
def test_fate_text_is_readable_on_its_background(theme) -> None:
    need = 7.0 if theme is HIGH_CONTRAST else 4.5
    for kind, (fg, bg) in theme.fates.items():
        assert contrast_ratio(fg, bg) >= need, (theme.key, kind)
    assert contrast_problems(theme) == []


@pytest.mark.parametrize("theme", list(THEMES.values()), ids=list(THEMES))
def test_fates_bars_and_lines_stay_apart_for_colour_blind_eyes(theme) -> None:
    assert distinguishability_problems(theme) == []
    # The four fates of a speculative run, pairwise, as a deuteranope and a protanope see them.
    kinds = ("accepted", "rejected", "resampled", "bonus")
    for vision in ("deuteranopia", "protanopia"):
        for i, a in enumerate(kinds):
            for b in kinds[i + 1:]:
                assert distance(theme.bg(a), theme.bg(b), vision) >= 12, (vision, a, b)


def test_broken_contrast_is_caught() -> None:
    dim = dataclasses.replace(DARK, fates={**DARK.fates, "accepted": ("#3D7FB8", "#0B3553")})
    assert contrast_ratio("#3D7FB8", "#0B3553") < 4.5
    assert any("accepted text" in p for p in contrast_problems(dim))
    aa_only = dataclasses.replace(HIGH_CONTRAST, fates={**HIGH_CONTRAST.fates,
                                                        "accepted": ("#000000", "#2F8FD0")})
    assert 4.5 <= contrast_ratio("#000000", "#2F8FD0") < 7
    assert any("accepted text" in p for p in contrast_problems(aa_only))


def test_broken_colour_blind_pair_is_caught() -> None:
    # Red and green tints of the same lightness: far apart to most eyes, not to these.
    red_green = dataclasses.replace(LIGHT, fates={**LIGHT.fates,
                                                  "accepted": ("#1F4D00", "#C8E6B4"),
                                                  "rejected": ("#6B1010", "#F2C4B8")})
    assert distance("#C8E6B4", "#F2C4B8") > 12  # normal vision: fine
    problems = distinguishability_problems(red_green)
    assert any("accepted / rejected" in p and "deuteranopia" in p for p in problems), problems
    assert not any("accepted / rejected" in p and "normal" in p for p in problems)
    same_bars = dataclasses.replace(DARK, p="#9A6BE0", q="#4A86E8")
    assert distance("#9A6BE0", "#4A86E8") > 30  # normal vision: violet and blue
    problems = distinguishability_problems(same_bars)
    assert any("p / q" in p and "protanopia" in p for p in problems), problems


def test_old_light_rejected_text_was_just_short() -> None:
    old = dataclasses.replace(LIGHT, fates={**LIGHT.fates,
                                            "rejected": ("#A03F00", LIGHT.bg("rejected"))})
    assert any("rejected text" in p for p in contrast_problems(old))


def test_unknown_saved_theme_is_light() -> None:
    assert theme_named("dark") is DARK
    assert theme_named(None) is LIGHT and theme_named("sepia") is LIGHT


# -- applied to every view, remembered, selectable while presenting ---------------------------

@pytest.fixture
def window(qtbot, settings_store):
    from specviz.gui.windows.app import MainWindow

    w = MainWindow(loader=None, settings=settings_store, autoload=False)
    qtbot.addWidget(w)
    w.run_view.timer.stop()
    for e in speculative_events():
        w.run_view.apply(e)
    w.run_view.flush(now=0.0)
    w.run_view.stream.apply_strikes(now=10.0)
    yield w
    w.close()


def colours_shown(w) -> dict[str, str]:
    """One colour from each view, as drawn now."""
    view = w.run_view
    stream = view.stream
    spans = {s.kind: s for s in stream.spans}
    panel = view.bars.visible_panels()[0]
    acc = view.acceptance
    race = w.race_window.view
    return {
        "accepted token": stream.format_at(spans["accepted"].start).background().color().name(),
        "rejected text": stream.format_at(spans["rejected"].start).foreground().color().name(),
        "prompt text": stream.format_at(0).foreground().color().name(),
        "stream ground": stream.viewport().palette().color(stream.viewport().backgroundRole())
        .name(),
        "window": w.palette().color(w.backgroundRole()).name(),
        "bars ground": view.bars.graphics.backgroundBrush().color().name(),
        "p bars": QColor(panel.p_bars.opts["brush"]).name(),
        "q bars": QColor(panel.q_bars.opts["brush"]).name(),
        "bar ticks": panel.plot.getAxis("left").textPen().color().name(),
        "bar title": str(panel.plot.titleLabel.opts.get("color")),
        "plots ground": acc.backgroundBrush().color().name(),
        "total line": acc.cumulative_line.opts["pen"].color().name(),
        "plot ticks": acc.hist_plot.getAxis("left").textPen().color().name(),
        "legend": view.legend.text(),
        "speed caption": next(iter(view.speed.names.values())).styleSheet(),
        "race legend": race.legend.text(),
        "race pane": race.panes["speculative"].styleSheet(),
    }


def test_a_theme_reaches_every_view(window, settings_store) -> None:
    light = colours_shown(window)
    assert light["accepted token"] == LIGHT.bg("accepted").lower()
    window.set_theme("dark")
    dark = colours_shown(window)
    expected = {"accepted token": DARK.bg("accepted"), "rejected text": DARK.fg("rejected"),
                "prompt text": DARK.fg("prompt"), "stream ground": DARK.base,
                "window": DARK.window, "bars ground": DARK.plot_bg, "p bars": DARK.p,
                "q bars": DARK.q, "bar ticks": DARK.plot_text, "plots ground": DARK.plot_bg,
                "total line": DARK.line, "plot ticks": DARK.plot_text}
    for what, colour in expected.items():
        assert dark[what] == colour.lower(), what
    assert dark["bar title"].lower() in (DARK.plot_text.lower(), str(QColor(DARK.plot_text)))
    for what in ("legend", "race legend"):
        assert DARK.bg("bonus") in dark[what] and LIGHT.bg("bonus") not in dark[what], what
    assert DARK.muted in dark["speed caption"]
    assert DARK.ink("accepted") in dark["race pane"]
    # The race panes' text as drawn (a style sheet on the pane once kept it white).
    stream = window.race_window.view.panes["baseline"].stream
    stream.resize(400, 300)
    image = stream.viewport().grab().toImage()
    assert image.pixelColor(image.width() - 5, image.height() - 5).name() == DARK.base.lower()
    # Every value changed (nothing left in the light theme's colours).
    assert all(dark[k] != light[k] for k in light), [k for k in light if dark[k] == light[k]]
    window.set_theme("light")
    assert colours_shown(window)["accepted token"] == light["accepted token"]


def test_theme_is_remembered_and_cycles_while_presenting(window, settings_store, qtbot) -> None:
    from specviz.gui.windows.app import MainWindow

    window.theme_actions["contrast"].trigger()
    assert settings_store.value("view/theme") == "contrast"
    again = MainWindow(loader=None, settings=settings_store, autoload=False)
    qtbot.addWidget(again)
    assert again.theme is HIGH_CONTRAST and again.theme_actions["contrast"].isChecked()
    assert again.run_view.bars.graphics.backgroundBrush().color().name() == "#000000"
    again.close()
    window.show()
    window.present_action.setChecked(True)
    assert not window.menuBar().isVisible()
    next_theme = window.theme_actions["next"]
    assert next_theme in window.actions()  # a window shortcut: no menu needed
    next_theme.trigger()  # contrast -> light
    assert window.theme is LIGHT and window.theme_actions["light"].isChecked()
    next_theme.trigger()
    assert window.theme is DARK and settings_store.value("view/theme") == "dark"
    window.present_action.setChecked(False)


def test_a_view_left_out_is_caught(window, monkeypatch) -> None:
    """The broken variant: RunView.set_theme forgetting the stream."""
    monkeypatch.setattr(window.run_view.stream, "set_theme", lambda theme: None)
    window.set_theme("dark")
    with pytest.raises(AssertionError):
        assert colours_shown(window)["accepted token"] == DARK.bg("accepted").lower()


# -- the disabled state and the check box's box (issue 26, item 10) -------------------------
#
# Before: in dark and high contrast, Stop, Pause and "Follow live round" looked enabled
# during a replay (disabled text #B4B4B4 / #E0E0E0, the muted captions' grey, on the same
# raised button), and an unchecked check box had no visible box on black.

def _ink(image, background: str) -> float:
    """The highest contrast of any pixel of ``image`` against ``background``."""
    best = 1.0
    for y in range(0, image.height(), 1):
        for x in range(0, image.width(), 1):
            best = max(best, contrast_ratio(image.pixelColor(x, y).name(), background))
    return best


def _button_inks(qtbot, theme) -> tuple[float, float]:
    """(enabled, disabled): how strongly a push button's text stands out, as drawn."""
    from PySide6.QtWidgets import QHBoxLayout, QPushButton, QWidget

    from specviz.gui.look.themes import apply_palette

    holder = QWidget()
    qtbot.addWidget(holder)
    apply_palette(holder, theme)
    row = QHBoxLayout(holder)
    on, off = QPushButton("❚❚ Pause"), QPushButton("❚❚ Pause")
    off.setEnabled(False)
    row.addWidget(on)
    row.addWidget(off)
    holder.show()
    QApplication.processEvents()
    inks = []
    for button in (on, off):
        image = button.grab().toImage()
        ground = image.pixelColor(image.width() // 2, 4).name()  # inside the frame, above text
        inks.append(_ink(image.copy(6, 6, image.width() - 12, image.height() - 12), ground))
    return inks[0], inks[1]


def disabled_problems(enabled: float, disabled: float, theme_key: str) -> list[str]:
    """A disabled control must read as such: its text at most half as contrasted."""
    if enabled < 2 * disabled:
        return [f"{theme_key}: disabled text {disabled:.1f}:1 vs enabled {enabled:.1f}:1 — "
                "the disabled state does not show"]
    return []


@pytest.mark.parametrize("theme", list(THEMES.values()), ids=list(THEMES))
def test_disabled_buttons_look_disabled(qtbot, theme) -> None:
    enabled, disabled = _button_inks(qtbot, theme)
    assert not disabled_problems(enabled, disabled, theme.key)
    assert enabled >= (7.0 if theme is HIGH_CONTRAST else 4.5)  # and enabled ones readable
    dim = contrast_ratio(theme.disabled, theme.window)
    assert dim < contrast_ratio(theme.text, theme.window) / 2


@pytest.mark.parametrize("theme", [DARK, HIGH_CONTRAST], ids=["dark", "contrast"])
def test_old_disabled_grey_is_caught(qtbot, monkeypatch, theme) -> None:
    """The broken variant: disabled text in the captions' muted grey (as before)."""
    from specviz.gui.look import themes
    from tests.mutation import mutant

    monkeypatch.setattr(themes, "palette", mutant(
        themes.palette, ("QColor(theme.disabled)", "QColor(theme.muted)"),
        ("    pal.setColor(group.Disabled, role.Button, QColor(theme.window))\n", "")))
    enabled, disabled = _button_inks(qtbot, theme)
    assert disabled_problems(enabled, disabled, theme.key)


def _box_pixels(qtbot, theme, marked: bool = True) -> int:
    """Pixels of an unchecked check box's indicator that stand out from the window (≥ 3:1)."""
    from PySide6.QtWidgets import QCheckBox, QStyle, QStyleOptionButton, QVBoxLayout, QWidget

    from specviz.gui.look.themes import apply_palette, mark_check_boxes

    holder = QWidget()
    qtbot.addWidget(holder)
    apply_palette(holder, theme)
    box = QCheckBox("Target alone (baseline)")
    QVBoxLayout(holder).addWidget(box)
    if marked:
        mark_check_boxes(holder, theme)
    holder.show()
    QApplication.processEvents()
    option = QStyleOptionButton()
    box.initStyleOption(option)
    rect = box.style().subElementRect(QStyle.SubElement.SE_CheckBoxIndicator, option, box)
    image = box.grab().toImage()
    ground = theme.window if theme is not LIGHT else \
        holder.palette().color(holder.backgroundRole()).name()
    return sum(contrast_ratio(image.pixelColor(x, y).name(), ground) >= 3.0
               for y in range(rect.top(), rect.bottom() + 1)
               for x in range(rect.left(), rect.right() + 1))


@pytest.mark.parametrize("theme", list(THEMES.values()), ids=list(THEMES))
def test_unchecked_checkbox_shows_its_box(qtbot, theme) -> None:
    """At least a box's outline (4 sides of the ~13 px indicator) stands out at 3:1."""
    assert _box_pixels(qtbot, theme) >= 30


def test_old_invisible_box_is_caught(qtbot) -> None:
    """The broken variant: high contrast with the platform's box (its outline is the window
    colour darkened: black on black)."""
    assert _box_pixels(qtbot, HIGH_CONTRAST, marked=False) < 30


def test_the_prompt_box_has_a_visible_edge_in_every_theme(window) -> None:
    """The controls' prompt box is framed in the text colour: ≥ 3:1 against the window (WCAG's
    non-text minimum) in every theme. Seen failing on the platform frame in high contrast
    (black box on a black window: no edge)."""
    import re

    from specviz.gui.look.themes import THEMES, contrast_ratio, prompt_style

    for theme in THEMES.values():
        border = re.search(r"border: 2px solid (#[0-9A-Fa-f]{6})", prompt_style(theme))
        assert border is not None, theme.key
        assert contrast_ratio(border.group(1), theme.window) >= 3.0, theme.key
        assert contrast_ratio(border.group(1), theme.base) >= 3.0, theme.key
        window.themes.apply(theme)
        assert window.controls.prompt.styleSheet() == prompt_style(theme), theme.key

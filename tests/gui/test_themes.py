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
"""

from __future__ import annotations

import dataclasses

import pytest

from specviz.gui.themes import (
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

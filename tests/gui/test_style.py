"""Token labels and the palette: readable, and told apart by more than hue."""

from __future__ import annotations

import pytest

from specviz.core.record import RunRecord, expected_speedup, expected_tokens_per_round
from specviz.gui.look.style import FATES, STREAM_KINDS, special_marker, token_label
from tests.gui.scripted import speculative_events


def test_token_labels_show_whitespace_and_keep_chinese() -> None:
    assert token_label(" the") == "␣the"
    assert token_label("\n\n") == "↵↵"
    assert token_label("\t") == "⇥"
    assert token_label("推测") == "推测"
    assert token_label("") == "∅"
    assert token_label("⟨E4⟩⟨BD⟩") == "⟨E4 BD⟩"
    assert token_label("x" * 40) == "x" * 11 + "…"


def test_eos_is_made_visible_but_split_characters_are_not() -> None:
    assert special_marker("", "</s>") == "⟨</s>⟩"
    assert special_marker("", "⟨E4⟩") == ""  # half a character: it shows with the next token
    assert special_marker(" cat", " cat") == " cat"


def test_every_fate_differs_by_more_than_colour() -> None:
    decorations = {(f.strike, f.underline, f.bold, f.overline, f.italic)
                   for f in (FATES[k] for k in STREAM_KINDS)}
    assert len(decorations) == len(STREAM_KINDS)
    assert len({FATES[k].background for k in STREAM_KINDS}) == len(STREAM_KINDS)


def test_expected_speedup_formula() -> None:
    assert expected_tokens_per_round(0.0, 4) == 1.0
    assert expected_tokens_per_round(1.0, 4) == 5.0
    assert expected_tokens_per_round(0.5, 2) == 1.75  # 1 + 0.5 + 0.25
    assert expected_speedup(0.5, 2, 0.25) == 1.75 / 1.5


def test_speedup_formula_gets_alpha_of_tested_drafts_not_accepted_over_drafted() -> None:
    record = RunRecord()
    for event in speculative_events():
        record.add(event)
    # Scripted rounds keep 2 of 3, 3 of 3, 0 of 1 (2 discarded), 1 of 2 tested drafts.
    assert record.acceptance_rate == pytest.approx(6 / 11)
    assert record.alpha == pytest.approx(6 / 9)
    stats = record.speed(target_step_s=0.05)
    assert stats.alpha == pytest.approx(6 / 9)
    assert stats.cost_ratio > 0
    assert stats.expected_speedup == pytest.approx(
        expected_speedup(6 / 9, 3, stats.cost_ratio, stats.verify_cost))
    # The i.i.d. model with this α reproduces the mean of kept drafts per tested round.
    assert expected_tokens_per_round(6 / 9, 3) > expected_tokens_per_round(6 / 11, 3)

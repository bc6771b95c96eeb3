"""Where the draft goes wrong: counts from Round events, checked against counts by hand."""

from __future__ import annotations

import sys
from dataclasses import replace

import pytest

from specviz.core.diagnose import diagnose, to_markdown
from specviz.core.events import Round
from tests.gui.scripted import baseline_events, speculative_events
from tests.mutation import mutant, with_globals


def two_runs() -> list:
    """The scripted run twice (the second's round 3 drafted by lookup), a target-alone run
    between them (it drafts nothing)."""
    second = [replace(e, drafted=tuple(replace(d, drafter="lookup") for d in e.drafted))
              if isinstance(e, Round) and e.index == 3 else e for e in speculative_events()]
    return [*speculative_events(), *baseline_events(), *second]


# The scripted run's drafts, by hand (round: token status p q):
#   0: the kept .5 .4 | cat kept .3 .6 | sat REJECTED .1 .5
#   1: on kept .7 .7 | a kept .8 .6 | ↵ kept .4 .5
#   2: red REJECTED .05 .5 | big, sun discarded (never tested)
#   3: mat kept .9 .8 | x REJECTED .0 .4
def test_the_rejection_table_matches_counts_by_hand() -> None:
    d = diagnose(two_runs())
    assert d.tested == 2 * 9  # discarded drafts left out
    rows = {t.text: t for t in d.tokens}
    assert set(rows) == {" sat", " red", " x"}
    assert [(rows[t].rejected, rows[t].tested) for t in (" sat", " red", " x")] == \
        [(2, 2), (2, 2), (2, 2)]
    assert (rows[" red"].mean_p, rows[" red"].mean_q) == pytest.approx((0.05, 0.5))
    assert rows[" sat"].rounds == ((0, 0), (2, 0))  # run 1 is the target alone
    assert rows[" x"].rounds == ((0, 3), (2, 3))


def test_calibration_positions_and_drafters_match_counts_by_hand() -> None:
    d = diagnose(two_runs())
    bins = {round(b.low, 1): (b.tested, b.kept) for b in d.calibration if b.tested}
    # q .4 .4 | .5 .5 .5 | .6 .6 | .7 | .8, once per run
    assert bins == {0.4: (4, 2), 0.5: (6, 2), 0.6: (4, 4), 0.7: (2, 2), 0.8: (2, 2)}
    assert d.positions == ((8, 6), (6, 4), (4, 2))  # reached, kept per position
    assert d.drafters == (("lookup", 2, 1), ("model", 16, 11))  # 6 + 5 kept
    text = to_markdown(d)
    assert "| ` sat` | 2 | 2 | 0.100 | 0.500 | 0:0 2:0 |" in text
    assert "| 2 | 6 | 4 | 0.67 |" in text


DIAGNOSE = sys.modules["specviz.core.diagnose"]
MUTANTS = {
    "discarded drafts counted as rejections": (
        test_the_rejection_table_matches_counts_by_hand, "tested_drafts",
        [('if d.status == "discarded":\n                    continue', 'if False:\n'
          '                    continue')]),
    "binned by p, not q": (
        test_calibration_positions_and_drafters_match_counts_by_hand, "calibration",
        [("max(0, int(d.q * bins)))", "max(0, int(d.p * bins)))")]),
    "runs counted from 1": (
        test_the_rejection_table_matches_counts_by_hand, "tested_drafts",
        [("run = -1", "run = 0")]),
}


@pytest.mark.parametrize("name", list(MUTANTS))
def test_each_test_rejects_its_broken_variant(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    test, attr, edits = MUTANTS[name]
    # The tests call diagnose: a copy of it that reads the broken part, here only.
    broken = with_globals(diagnose, **{attr: mutant(getattr(DIAGNOSE, attr), *edits)})
    monkeypatch.setitem(globals(), "diagnose", broken)
    with pytest.raises(AssertionError):
        test()

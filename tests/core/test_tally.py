"""One Tally: folding Round events gives the engine's Summary, and summaries add up."""

from __future__ import annotations

import pytest

from specviz.core.engine import SpeculativeDecoder
from specviz.core.events import Round, RunFinished, Summary
from specviz.core.models import ModelPair
from specviz.core.tally import Tally, expected_speedup, expected_tokens_per_round
from tests.plain import plain
from tests.tiny import tiny_pair, word_tokenizer

COUNTS = ("tokens", "rounds", "drafted", "accepted", "tested", "siblings", "siblings_kept",
          "trees", "reached_by_position", "kept_by_position", "by_drafter", "rounds_by_k",
          "exact")


def run(pair: ModelPair, seed: int, **kw: object) -> tuple[list[Round], RunFinished]:
    events = list(SpeculativeDecoder(pair, plain(max_new_tokens=40, seed=seed, **kw))  # type: ignore[arg-type]
                  .run("the cat sat on the mat the cat"))
    last = events[-1]
    assert isinstance(last, RunFinished)
    return [e for e in events if isinstance(e, Round)], last


@pytest.fixture(scope="module")
def pair() -> ModelPair:
    return tiny_pair(word_tokenizer(eos=False), sharpness=3.0)


def counts(s: Summary) -> dict[str, object]:
    return {name: getattr(s, name) for name in COUNTS}


def test_folding_rounds_gives_the_engine_summary(pair: ModelPair) -> None:
    rounds, done = run(pair, 0, drafter="hybrid", k_policy="heuristic", temperature=1.0)
    tally = Tally()
    tally.reached, tally.kept = [0] * 4, [0] * 4  # the engine sizes positions by K
    for r in rounds:
        tally.add_round(r)
    assert counts(tally.summary()) == counts(done.summary)
    assert {d.drafter for d in done.summary.by_drafter} == {"model", "lookup"}
    by = {d.drafter: d for d in done.summary.by_drafter}
    assert sum(d.accepted for d in by.values()) == done.summary.accepted
    assert sum(d.tested for d in by.values()) == done.summary.tested
    assert sum(done.summary.rounds_by_k) == done.summary.rounds


def test_summaries_add_up(pair: ModelPair) -> None:
    runs = [run(pair, seed, temperature=1.0, drafter="hybrid") for seed in (1, 2, 3)]
    total = Tally.of([done.summary for _, done in runs])
    folded = Tally()
    for rounds, _ in runs:
        for r in rounds:
            folded.add_round(r)
    assert counts(total.summary()) == counts(folded.summary())
    assert total.alpha == pytest.approx(sum(d.summary.accepted for _, d in runs)
                                        / sum(d.summary.tested for _, d in runs))
    # α of the sum is not the mean of the αs (runs differ in how much they tested).
    assert total.wall_time_s == pytest.approx(sum(d.summary.wall_time_s for _, d in runs))


class AcceptedOverDrafted(Tally):
    """Broken: α from accepted ÷ drafted, which counts drafts after a rejection as misses."""

    @property
    def alpha(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0


@pytest.mark.parametrize(("cls", "correct"), [(Tally, True), (AcceptedOverDrafted, False)])
def test_alpha_is_kept_over_tested(pair: ModelPair, cls: type[Tally], correct: bool) -> None:
    rounds, _ = run(pair, 5, temperature=1.0)
    tally = cls()
    for r in rounds:
        tally.add_round(r)
    tested = sum(d.status != "discarded" for r in rounds for d in r.drafted)
    kept = sum(d.status == "accepted" for r in rounds for d in r.drafted)
    assert any(d.status == "discarded" for r in rounds for d in r.drafted)
    assert (tally.alpha == pytest.approx(kept / tested)) == correct


def test_old_summary_without_counts_still_adds() -> None:
    old = Summary(tokens=10, rounds=4, drafted=16, accepted=6, acceptance_rate=0.375,
                  mean_tokens_per_round=2.5, acceptance_by_position=(0.5, 0.5, 0.5, 0.5),
                  target_calls=4, draft_calls=16, draft_time_s=0.1, verify_time_s=0.4,
                  wall_time_s=0.6, tokens_per_s=16.7)
    tally = Tally.of([old, old])
    assert tally.tokens == 20 and tally.rounds == 8 and tally.accepted == 12
    assert tally.exact


def test_formulas() -> None:
    assert expected_tokens_per_round(0.0, 4) == 1.0
    assert expected_tokens_per_round(1.0, 4) == 5.0
    assert expected_tokens_per_round(0.5, 2) == pytest.approx(1.75)
    assert expected_speedup(0.5, 2, 0.25) == pytest.approx(1.75 / 1.5)

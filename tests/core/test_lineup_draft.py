"""A lineup lane with a draft model of its own (``draft=SPEC``): loaded once beside the pair,
its drafts the other model's, the output still the target's; another tokenizer is one error."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from specviz.core.engine import SpeculativeDecoder
from specviz.core.errors import TokenizerMismatchError
from specviz.core.events import Round, Settings
from specviz.core.lineup import LaneSpec, as_lineup, pair_with_draft, run_lineup, with_drafts
from specviz.core.models import LoadedModel, ModelPair
from tests.mutation import mutant, with_globals
from tests.tiny import WORDS, tiny_llama, word_tokenizer

GREEDY = Settings(k=3, temperature=0.0, max_new_tokens=10, seed=3, drafter="model",
                  k_policy="fixed")


def loader(models: dict[str, LoadedModel], calls: list[str]) -> Callable[..., LoadedModel]:
    """A stand-in for models.load_model: the models by name, each call noted."""
    def load(spec: str, device: str, dtype: str) -> LoadedModel:
        calls.append(spec)
        return models[spec]
    return load


def drafted(rounds: Any) -> list[list[int]]:
    return [[d.token_id for d in r.drafted] for r in rounds]


def test_a_lane_drafts_with_its_own_model(tiny_pair: ModelPair) -> None:
    other = tiny_llama(len(tiny_pair.tokenizer), seed=5, sharpness=8.0)
    calls: list[str] = []
    load = loader({"other": LoadedModel(other, tiny_pair.tokenizer, "tiny-other")}, calls)
    lanes = [LaneSpec(GREEDY), LaneSpec(GREEDY, draft="other"),
             LaneSpec(replace(GREEDY, k=5), draft="other"), LaneSpec(GREEDY, mode="baseline")]
    loaded: dict[str, Any] = {}
    lineup = as_lineup(list(run_lineup(tiny_pair, lanes, "the cat", loaded=loaded, load=load)))
    assert lineup is not None and lineup.complete
    assert [lane.started.pair.draft for lane in lineup.lanes] == [
        "tiny-draft", "tiny-other", "tiny-other", None]
    assert calls == ["other"]  # loaded once for its two lanes
    # The lane drafts with the other model: the run of a pair built by hand with it.
    by_hand = SpeculativeDecoder(replace(tiny_pair, draft=other, draft_name="tiny-other"), GREEDY)
    rounds = [e for e in by_hand.run("the cat") if isinstance(e, Round)]
    assert drafted(lineup.lanes[1].rounds) == drafted(rounds)
    assert drafted(lineup.lanes[1].rounds) != drafted(lineup.lanes[0].rounds)  # another draft
    # T = 0: whatever drafts, every lane gives the target alone's ids.
    assert [lineup.identical(lane) for lane in lineup.lanes] == [True, True, True, None]
    assert [lineup.label(lane) for lane in lineup.lanes] == [
        "model, K 3, greedy, draft tiny-draft", "model, K 3, greedy, draft tiny-other",
        "model, K 5, greedy, draft tiny-other", "target alone"]
    # The next lineup with the same draft reuses what was loaded.
    assert len(with_drafts(tiny_pair, lanes, loaded, load)) == 4 and calls == ["other"]


def check_another_tokenizer_is_one_error(pair: ModelPair,
                                         pair_with: Callable[..., Any] = pair_with_draft) -> None:
    odd = word_tokenizer([w + "s" for w in WORDS])  # as many tokens, other words
    bad = LoadedModel(tiny_llama(len(odd), seed=5), odd, "odd-draft")
    try:
        pair_with(pair, "odd", lambda *a: bad)
    except TokenizerMismatchError as exc:
        message = str(exc)
    else:
        message = ""
    assert "Draft 'odd-draft' and target 'tiny-target' use different tokenizers" in message


def test_another_tokenizer_is_one_error_before_any_lane_runs(tiny_pair: ModelPair) -> None:
    check_another_tokenizer_is_one_error(tiny_pair)
    odd = word_tokenizer([w + "s" for w in WORDS])
    events: list[Any] = []
    with pytest.raises(TokenizerMismatchError, match="different tokenizers"):
        for e in run_lineup(tiny_pair, [LaneSpec(GREEDY), LaneSpec(GREEDY, draft="odd"),
                                        LaneSpec(GREEDY, mode="baseline")], "the cat",
                            load=lambda *a: LoadedModel(tiny_llama(len(odd), seed=5), odd, "o")):
            events.append(e)
    assert events == []  # nothing ran: the first lane would have


def _tiny() -> ModelPair:
    from tests.tiny import tiny_pair

    return tiny_pair(sharpness=8.0)


LINEUP = sys.modules["specviz.core.lineup"]
MUTANTS = {
    "the lane's draft ignored": (lambda: test_a_lane_drafts_with_its_own_model(_tiny()),
                                 "run_lineup", [("lanes = with_drafts(pair, lanes, loaded, load)",
                                                 "lanes = list(lanes)")]),
    "a draft loaded per lane": (lambda: test_a_lane_drafts_with_its_own_model(_tiny()),
                                "with_drafts", [("if lane.draft not in loaded:", "if True:")]),
    "no tokenizer check": (None, "pair_with_draft",
                           [("    check_tokenizers(target, loaded)\n", "")]),
}


@pytest.mark.parametrize("name", list(MUTANTS))
def test_each_test_rejects_its_broken_variant(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    test, attr, edits = MUTANTS[name]
    broken = mutant(getattr(LINEUP, attr), *edits)
    with pytest.raises(AssertionError):
        if attr == "pair_with_draft":  # handed in
            check_another_tokenizer_is_one_error(_tiny(), broken)
            return
        if attr == "with_drafts":  # run_lineup reading the broken part, as a copy
            broken = with_globals(LINEUP.run_lineup, with_drafts=broken)
            attr = "run_lineup"
        monkeypatch.setitem(globals(), attr, broken)
        assert test is not None
        test()


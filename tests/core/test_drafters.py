"""Drafters: prompt lookup's matching rules, the hybrid's choice, the model drafter's rollback.

Each rule is checked against a brute-force reference on many random sequences, and the same
checks run on deliberately wrong lookups (transformers' oldest-match rule, shortest n first,
off-by-one copy) to show they would be caught.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest
import torch

from specviz.core.drafters import HybridDrafter, LookupDrafter, ModelDrafter, Plan
from specviz.core.policy import FixedPolicy, HeuristicPolicy
from specviz.core.rng import TorchRandom
from specviz.core.sampling import logits_to_probs
from tests.mutation import mutant
from tests.tiny import tiny_llama

V = 20


def reference(context: Sequence[int], n_min: int, n_max: int, k: int) -> tuple[int, list[int]]:
    """The spec, by brute force: longest n first, then the most recent earlier occurrence."""
    length = len(context)
    for n in range(min(n_max, length - 1), n_min - 1, -1):
        suffix = list(context[length - n:])
        for i in range(length - n - 1, -1, -1):  # starts whose n-gram has a token after it
            if list(context[i:i + n]) == suffix:
                return n, list(context[i + n:i + n + k])
    return 0, []


class OldestMatchLookup(LookupDrafter):
    """Broken: the first occurrence from the left (transformers' PromptLookupCandidateGenerator)."""

    def find(self, context: Sequence[int]) -> tuple[int, int]:
        length = len(context)
        for n in range(min(self.ngram_max, length - 1), self.ngram_min - 1, -1):
            suffix = list(context[length - n:])
            for i in range(0, length - n):
                if list(context[i:i + n]) == suffix:
                    return n, i + n
        return 0, -1


class ShortestFirstLookup(LookupDrafter):
    """Broken: tries n from ngram_min up, so a 1-token match hides a longer one."""

    def find(self, context: Sequence[int]) -> tuple[int, int]:
        length = len(context)
        for n in range(self.ngram_min, min(self.ngram_max, length - 1) + 1):
            suffix = list(context[length - n:])
            for i in range(length - n - 1, -1, -1):
                if list(context[i:i + n]) == suffix:
                    return n, i + n
        return 0, -1


class OffByOneLookup(LookupDrafter):
    """Broken: copies from the last token of the match, not from what follows it."""

    def find(self, context: Sequence[int]) -> tuple[int, int]:
        n, start = super().find(context)
        return (n, start - 1) if n else (n, start)


def lookup_errors(cls: type[LookupDrafter], trials: int = 300) -> list[str]:
    """Differences from the reference over growing random contexts (small alphabet: repeats)."""
    rng = random.Random(0)
    errors: list[str] = []
    for trial in range(trials):
        n_min = rng.randint(1, 2)
        n_max = rng.randint(n_min, 4)
        k = rng.randint(1, 6)
        drafter = cls(V, n_min, n_max)
        context = [rng.randrange(4) for _ in range(rng.randint(2, 8))]
        for _ in range(6):  # the index grows with the context, as in a run
            n_ref, ref = reference(context, n_min, n_max, k)
            plan = drafter.plan(context)
            got = list(drafter.propose(context, k, TorchRandom(0)).tokens)
            if (plan.match, got) != (n_ref, ref):
                errors.append(f"trial {trial}: {context} n {n_min}-{n_max} k {k}: "
                              f"got {plan.match} {got}, want {n_ref} {ref}")
            drafter.update(len(got))
            context += [rng.randrange(4) for _ in range(rng.randint(1, 3))]
    return errors


@pytest.mark.parametrize(("cls", "correct"), [
    (LookupDrafter, True),
    (OldestMatchLookup, False),
    (ShortestFirstLookup, False),
    (OffByOneLookup, False),
])
def test_lookup_matches_brute_force_reference(cls: type[LookupDrafter], correct: bool) -> None:
    errors = lookup_errors(cls)
    assert (not errors) == correct, errors[:3] or f"{cls.__name__} was not caught"


def test_longest_match_wins() -> None:
    # "1 2" occurs at 0 (then 7); "2" alone occurs later at 4 (then 9). n = 2 wins.
    context = [1, 2, 7, 3, 2, 9, 5, 1, 2]
    d = LookupDrafter(V, 1, 3)
    plan = d.plan(context)
    assert plan == Plan("lookup", "lookup:2", 7, 2, budget=10, prior=0.5, spans=True)
    assert d.propose(context, 2, TorchRandom(0)).tokens == (7, 3)


def _extent_key(cls: type[LookupDrafter], run: int) -> str:
    """The key of a lookup plan whose match really runs back ``run`` ids (ngram_max 4)."""
    passage = list(range(100, 140))  # ids that occur once each
    # The passage, other text, then its last ``run`` ids again after an id that differs
    # from the one before them in the passage: the match runs back exactly ``run`` ids.
    cut = len(passage) - 8 - run  # the copy ends 8 ids before the passage's end
    context = passage + [7, 8, 9, 1] + passage[cut:cut + run]
    return cls(V, 1, 4).plan(context).key


# A passage being copied keeps its own α̂: broken variants that get how far it runs wrong.
NoMismatchStop = mutant(LookupDrafter, ("context[start - 1 - m] == context[end - 1 - m]",
                                        "True"))
ForwardExtent = mutant(LookupDrafter, ("context[start - 1 - m] == context[end - 1 - m]",
                                       "context[min(start + m, end - 1)] == context[end - 1 - m]"))


@pytest.mark.parametrize(("cls", "correct"), [
    (LookupDrafter, True), (NoMismatchStop, False), (ForwardExtent, False)])
def test_long_matches_are_keyed_by_how_far_they_run_back(cls: type[LookupDrafter],
                                                         correct: bool) -> None:
    keys = {run: _extent_key(cls, run) for run in (3, 4, 7, 8, 15, 16, 20)}
    want = {3: "lookup:3", 4: "lookup:4", 7: "lookup:4", 8: "lookup:8", 15: "lookup:8",
            16: "lookup:16", 20: "lookup:16"}
    assert (keys == want) == correct, keys


def test_extent_keys_carry_their_priors_and_the_match() -> None:
    passage = list(range(100, 140))
    context = passage + [7] + passage[10:30]  # a 20-id copy under way
    plan = LookupDrafter(V, 1, 4).plan(context)
    assert plan == Plan("lookup", "lookup:16", 10, 4, budget=10,
                        prior=LookupDrafter.EXTENT_PRIORS[16], spans=True)
    assert LookupDrafter(200, 1, 4).propose(context, 3, TorchRandom(0)).tokens == (130, 131, 132)


def test_most_recent_match_wins() -> None:
    context = [4, 5, 1, 4, 6, 2, 4]  # "4" is followed by 5, then by 6: copy the later one
    d = LookupDrafter(V, 1, 2)
    assert d.propose(context, 3, TorchRandom(0)).tokens == (6, 2, 4)


def test_no_match_proposes_nothing() -> None:
    d = LookupDrafter(V, 2, 3)
    context = [1, 2, 3, 4, 1]  # "4 1" never occurred before; 1-grams are below ngram_min
    plan = d.plan(context)
    assert plan.available == 0 and plan.match == 0
    proposal = d.propose(context, 4, TorchRandom(0))
    assert proposal.tokens == () and proposal.q_rows.shape == (0, V)


def test_budget_and_end_of_context_bound_the_proposal() -> None:
    context = [1, 2, 3, 4, 5, 6, 1, 2]
    d = LookupDrafter(V, 1, 2)
    assert d.plan(context).available == 6  # 3 4 5 6 1 2 follow the earlier "1 2"
    assert d.propose(context, 3, TorchRandom(0)).tokens == (3, 4, 5)  # k = 3 of 6
    # A match near the end: only what exists after it can be copied.
    short = [7, 8, 9, 7]
    assert d.propose(short, 10, TorchRandom(0)).tokens == (8, 9, 7)


# Broken: the copy is bounded only by the end of the context, not by lookup_k.
UnboundedLookup = mutant(LookupDrafter, ("min(len(context) - start, self.lookup_k) if n",
                                         "len(context) - start if n"))
# Broken: the fixed policy drafts its own K on a lookup match (the budget before lookup_k).
FixedKOnLookup = mutant(FixedPolicy, ("want = _wanted(plan, self.k)", "want = self.k"))


def budget_errors(drafter_cls: type[LookupDrafter], policy_cls: type[FixedPolicy]) -> list[str]:
    """A match whose copy runs L tokens to the end of the context drafts min(L, lookup_k)
    tokens under the fixed (and heuristic) policy, whatever the model drafter's K."""
    errors = []
    for lookup_k in (1, 3, 10):
        for length in (1, 2, 5, 12, 20):
            # "0 .. L-1, 99, 0": the suffix "0" matched at the start, L tokens follow it.
            context = list(range(length)) + [99, 0]
            d = drafter_cls(100, 1, 2, lookup_k=lookup_k)
            want = min(length + 1, lookup_k)  # the copy: 1 .. L-1, 99, 0
            for policy in (policy_cls(4), HeuristicPolicy(4)):
                plan, choice = policy.pick(d.options(context), cap=100)
                d.follow(plan)
                got = d.propose(context, choice.k, TorchRandom(0)).tokens
                expect = tuple((list(range(1, length)) + [99, 0])[:want])
                if got != expect or plan.available != want:
                    errors.append(f"lookup_k {lookup_k}, L {length + 1}, "
                                  f"{type(policy).__name__}: got {got}, want {expect}")
    return errors


@pytest.mark.parametrize(("drafter_cls", "policy_cls", "correct"), [
    (LookupDrafter, FixedPolicy, True),
    (UnboundedLookup, FixedPolicy, False),
    (LookupDrafter, FixedKOnLookup, False),
])
def test_a_lookup_match_drafts_up_to_lookup_k(drafter_cls: type[LookupDrafter],
                                              policy_cls: type[FixedPolicy],
                                              correct: bool) -> None:
    errors = budget_errors(drafter_cls, policy_cls)
    assert (not errors) == correct, errors[:3] or "the broken variant was not caught"


def test_lookup_k_must_be_positive() -> None:
    with pytest.raises(ValueError, match="lookup_k"):
        LookupDrafter(V, 1, 2, lookup_k=0)


def test_lookup_q_is_one_hot_on_the_proposal() -> None:
    d = LookupDrafter(V, 1, 2)
    proposal = d.propose([1, 2, 3, 1], 2, TorchRandom(0))
    assert proposal.tokens == (2, 3)
    assert proposal.q_rows.shape == (2, V)
    assert proposal.q_rows.sum(-1).tolist() == [1.0, 1.0]
    assert proposal.q_rows[0, 2] == 1.0 and proposal.q_rows[1, 3] == 1.0


def test_a_new_run_rebuilds_the_index() -> None:
    d = LookupDrafter(V, 1, 1)
    assert d.propose([1, 2, 1], 1, TorchRandom(0)).tokens == (2,)
    assert d.propose([5, 3, 1, 9, 1], 1, TorchRandom(0)).tokens == (9,)  # not 2 from before


def _model_drafter(greedy: bool = True) -> ModelDrafter:
    model = tiny_llama(V, seed=3, sharpness=3.0)
    return ModelDrafter(model, V, lambda logits: logits_to_probs(logits, 0.0 if greedy else 1.0),
                        greedy)


def test_model_drafter_rolls_back_to_the_kept_prefix() -> None:
    d = _model_drafter()
    context = [0, 3, 4]
    proposal = d.propose(context, 4, TorchRandom(0))
    assert len(proposal.tokens) == 4 and proposal.q_rows.shape == (4, V)
    assert d.lm.ids == context + list(proposal.tokens[:3])  # x_K is never fed
    d.update(1)
    assert d.lm.ids == context + list(proposal.tokens[:1])
    # Greedy q rows are one-hot on the argmax, which is the drafted token.
    assert all(int(row.argmax()) == x for row, x in zip(proposal.q_rows, proposal.tokens,
                                                        strict=True))


@pytest.mark.parametrize(("min_match", "expect"), [(2, "lookup"), (3, "model")])
def test_hybrid_uses_lookup_only_on_a_long_enough_match(min_match: int, expect: str) -> None:
    d = HybridDrafter(_model_drafter(), LookupDrafter(V, 1, 3), min_match=min_match)
    context = [5, 6, 7, 1, 5, 6]  # "5 6" matched over 2 tokens
    plan = d.plan(context)
    assert plan.source == expect
    proposal = d.propose(context, 2, TorchRandom(0))
    assert proposal.source == expect
    if expect == "lookup":
        assert proposal.tokens == (7, 1) and d.model.lm.ids == []  # the model did not run
    d.update(1)


def test_hybrid_model_cache_catches_up_after_lookup_rounds() -> None:
    d = HybridDrafter(_model_drafter(), LookupDrafter(V, 1, 3), min_match=2)
    context = [9, 8]
    d.plan(context)
    first = d.propose(context, 2, TorchRandom(0))
    assert first.source == "model"
    d.update(0)
    context = [9, 8, 3, 9, 8]  # now "9 8" repeats: lookup drafts, the model idles
    assert d.plan(context).source == "lookup"
    d.propose(context, 2, TorchRandom(0))
    d.update(2)
    context = context + [3, 1, 2, 4]  # nothing matches "2 4": the model drafts again
    assert d.plan(context).source == "model"
    calls = d.model.calls
    again = d.propose(context, 2, TorchRandom(0))
    # Catching up over the 6 ids the cache lacks is one batched pass, not one per id: K = 2
    # drafts cost 2 passes in all (the first also feeds the backlog).
    assert d.model.calls - calls == 2
    assert d.model.lm.ids == context + [again.tokens[0]]
    with torch.no_grad():
        full = d.model.lm.model(torch.tensor([context])).logits[0, -1]
    assert int(full.argmax()) == again.tokens[0]


# ---------------------------------------------------------------------------------------------
# A reduced-vocabulary draft samples over its own ids (an increasing map keeps the target's id
# order, so the distributions, ties and inverse-CDF draws are those over the widened row).

MAP = torch.tensor([0, 1, 4, 5, 9, 12, 17, 20, 26, 31, 33, 39])  # 12 draft ids among 40
FULL_V = 40


def _mapped_drafter(cls: type[ModelDrafter], temperature: float, top_k: int, top_p: float,
                    vocab_map: torch.Tensor = MAP) -> ModelDrafter:
    model = tiny_llama(len(vocab_map), seed=4, sharpness=2.0)
    return cls(model, FULL_V, lambda logits: logits_to_probs(logits, temperature, top_k, top_p),
               temperature == 0, vocab_map, oov_id=0)


# Broken: the draft's own id is proposed as if it were the target's.
UnmappedDraws = mutant(ModelDrafter, ("x = self.lm.global_id(j)", "x = j"))


@pytest.mark.parametrize(("cls", "correct"), [(ModelDrafter, True), (UnmappedDraws, False)])
@pytest.mark.parametrize(("temperature", "top_k", "top_p"), [(1.0, 0, 0.8), (0.7, 3, 1.0),
                                                            (0.0, 0, 1.0)])
def test_drafting_over_the_drafts_own_ids_changes_nothing(
        cls: type[ModelDrafter], correct: bool, temperature: float, top_k: int,
        top_p: float) -> None:
    """Same tokens as widening every row first (the old path), and the same q rows and
    confidences up to float32 rounding (a softmax summed over 12 ids or over 40 with zeros)."""
    same = []
    for seed in range(4):
        local = _mapped_drafter(cls, temperature, top_k, top_p)
        widened = _mapped_drafter(ModelDrafter, temperature, top_k, top_p)
        assert local.lm.local
        widened.lm.local = False  # every logits row widened to the target's 40 ids first
        context = [int(MAP[i]) for i in (2, 5, 1, 7)]
        with torch.inference_mode():
            a = local.propose(context, 5, TorchRandom(seed))
            b = widened.propose(context, 5, TorchRandom(seed))
        assert a.q_rows.shape == b.q_rows.shape == (5, FULL_V)
        same.append(a.tokens == b.tokens and torch.allclose(a.q_rows, b.q_rows, atol=1e-6)
                    and all(abs(x - y) < 1e-6 for x, y in zip(a.confidence, b.confidence,
                                                                strict=True)))
        assert set(b.tokens) <= set(MAP.tolist())
    assert all(same) == correct


def test_an_unordered_map_widens_every_row() -> None:
    shuffled = MAP[torch.tensor([3, 0, 1, 2, 4, 5, 6, 7, 8, 9, 10, 11])]
    d = _mapped_drafter(ModelDrafter, 1.0, 0, 1.0, shuffled)
    assert not d.lm.local
    with torch.inference_mode():
        proposal = d.propose([int(shuffled[2]), int(shuffled[5])], 3, TorchRandom(0))
    assert set(proposal.tokens) <= set(MAP.tolist()) and proposal.q_rows.shape == (3, FULL_V)

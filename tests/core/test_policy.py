"""K policies on synthetic acceptance and costs (no model, no clock)."""

from __future__ import annotations

import random

import pytest

from specviz.core.drafters import Plan
from specviz.core.policy import (
    K_LIMIT,
    CostModel,
    CostPolicy,
    FixedPolicy,
    HeuristicPolicy,
    Outcome,
    _Alpha,
    _Mean,
    make_policy,
)
from specviz.core.tally import expected_tokens_per_round

MODEL = Plan("model", "model")


def outcome(k: int, n_acc: int, plan: Plan = MODEL, draft_s: float = 0.0,
            verify_s: float = 1.0, fed: int | None = None) -> Outcome:
    return Outcome(plan, k, n_acc, draft_s, verify_s, fed if fed is not None else k + 1,
                   draft_s + verify_s)


def test_fixed_is_fixed_but_respects_budget_and_reach() -> None:
    p = FixedPolicy(4)
    assert p.choose(MODEL, cap=10).k == 4
    assert p.choose(MODEL, cap=2).k == 2
    assert p.choose(MODEL, cap=0).k == 0  # the last token: a plain step
    assert p.choose(Plan("lookup", "lookup:2", 3, 2), cap=10).k == 3
    choice = p.choose(Plan("lookup", "lookup:0", 0), cap=10)
    assert choice.k == 0 and "no n-gram match" in choice.reason


class PlusOneHeuristic(HeuristicPolicy):
    """Broken: +1 after a fully kept round (transformers adds 2)."""

    def observe(self, outcome: Outcome) -> None:
        super().observe(outcome)
        if outcome.k and outcome.n_accepted == outcome.k:
            self.k -= 1


class NoFloorHeuristic(HeuristicPolicy):
    """Broken: can fall to K = 0 and never draft again."""

    def observe(self, outcome: Outcome) -> None:
        if outcome.k and outcome.n_accepted < outcome.k:
            self.k -= 1
        else:
            super().observe(outcome)


def heuristic_trace(cls: type[HeuristicPolicy]) -> list[int]:
    p = cls(4)
    ks = []
    for n_acc in [4, 6, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 14]:  # fully kept, kept, then misses
        k = p.choose(MODEL, cap=100).k
        ks.append(k)
        p.observe(outcome(k, min(n_acc, k)))
    ks.append(p.choose(MODEL, cap=100).k)
    return ks


@pytest.mark.parametrize(("cls", "correct"), [
    (HeuristicPolicy, True), (PlusOneHeuristic, False), (NoFloorHeuristic, False)])
def test_heuristic_is_transformers_schedule(cls: type[HeuristicPolicy], correct: bool) -> None:
    # 4 -all kept-> 6 -all kept-> 8, eight misses -> 7 6 5 4 3 2 1 1 (never below 1),
    # 1 of 1 kept -> 3, 2 of 3 -> 2, 2 of 2 -> 4.
    expected = [4, 6, 8, 7, 6, 5, 4, 3, 2, 1, 1, 3, 2, 4]
    assert (heuristic_trace(cls) == expected) == correct


def test_heuristic_is_capped_and_explains() -> None:
    p = HeuristicPolicy(15)
    p.observe(outcome(15, 15))
    assert p.k == K_LIMIT
    choice = p.choose(MODEL, cap=100)
    assert choice.reason == f"all 15 kept → K {K_LIMIT}"


def synthetic_costs(v1: float, slope: float, draft: float, overhead: float = 0.0) -> CostModel:
    """A cost model as if measured: v(n) = v1 (1 + slope (n − 1)), c per drafted token."""
    costs = CostModel()
    for n in (1, 3, 6):
        costs.verify.setdefault(n, _Mean()).add(v1 * (1 + slope * (n - 1)))
    costs.draft.setdefault("model", _Mean()).add(draft)
    costs.draft.setdefault("lookup", _Mean()).add(0.0)
    costs.overhead.add(overhead)
    return costs


def best_k(alpha: float, v1: float, slope: float, c: float, o: float, k_max: int) -> int:
    rates = [expected_tokens_per_round(alpha, k) / (o + k * c + v1 * (1 + slope * k))
             for k in range(k_max + 1)]
    return max(range(k_max + 1), key=lambda k: (rates[k], -k))


def trained_policy(cls: type[CostPolicy], alpha: float, costs: CostModel,
                   plan: Plan = MODEL) -> CostPolicy:
    """A cost policy whose α̂ has seen many rounds of i.i.d. acceptance at ``alpha``."""
    p = cls(4, costs=costs)
    p._first = False
    est = p.alphas.setdefault(plan.key, _Alpha())
    rng = random.Random(1)
    for _ in range(400):
        n = 0
        while n < 6 and rng.random() < alpha:
            n += 1
        for i in range(min(6, n + 1)):
            est.kept = est.kept * p.DECAY + (i < n)
            est.tested = est.tested * p.DECAY + 1.0
    return p


class NeverPlainStep(CostPolicy):
    """Broken: searches K from 1, so it drafts even when drafting loses."""

    def rates(self, plan: Plan, cap: int) -> list[float]:
        rates = super().rates(plan, cap)
        return [0.0] + rates[1:]


class IgnoresVerifyWidth(CostPolicy):
    """Broken: takes a target pass over K + 1 tokens to cost the same as over 1."""

    def rates(self, plan: Plan, cap: int) -> list[float]:
        saved = self.costs.verify_cost
        self.costs.verify_cost = lambda n: saved(1)  # type: ignore[method-assign]
        try:
            return super().rates(plan, cap)
        finally:
            del self.costs.verify_cost


CASES = [  # (α, v1, slope, c, overhead)
    (0.9, 1.0, 0.02, 0.01, 0.0),   # cheap draft, good α: long drafts
    (0.6, 1.0, 0.10, 0.10, 0.05),  # the bundled pair on a CPU, roughly
    (0.15, 1.0, 0.10, 0.20, 0.0),  # drafting loses: K = 0
    (0.35, 1.0, 0.25, 0.15, 0.0),  # wide verify passes are dear: K = 0
    (0.75, 1.0, 0.30, 0.0, 0.0),   # lookup-like: free drafts, dear verify width
]


@pytest.mark.parametrize(("cls", "correct"), [
    (CostPolicy, True), (NeverPlainStep, False), (IgnoresVerifyWidth, False)])
def test_cost_policy_picks_the_best_k(cls: type[CostPolicy], correct: bool) -> None:
    got, want = [], []
    for alpha, v1, slope, c, o in CASES:
        p = trained_policy(cls, alpha, synthetic_costs(v1, slope, c, o))
        est = p.alpha(MODEL)
        assert abs(est - alpha) < 0.1, (alpha, est)  # α̂ tracks the synthetic α
        got.append(p.choose(MODEL, cap=100).k)
        want.append(best_k(est, v1, slope, c, o, K_LIMIT))
    assert want[2] == 0 and want[3] == 0 and want[0] >= 8  # the cases mean what they say
    assert (got == want) == correct, (got, want)


def test_cost_policy_reason_and_start() -> None:
    p = CostPolicy(4)
    first = p.choose(MODEL, cap=100)
    assert first.k == 4 and first.reason == "no costs measured yet → K 4"
    p = trained_policy(CostPolicy, 0.6, synthetic_costs(1.0, 0.1, 0.1, 0.0))
    choice = p.choose(MODEL, cap=100)
    assert choice.reason.startswith("α̂ 0.6") and f"→ K {choice.k}" in choice.reason
    assert ", c 0.10, v " in choice.reason
    assert p.choose(MODEL, cap=2).k <= 2  # the budget bounds it


def test_cost_policy_first_round_is_not_a_cost_sample() -> None:
    p = CostPolicy(4)
    p.observe(outcome(4, 2, verify_s=50.0, fed=300))  # prompt prefill + drafts
    assert not p.costs.verify
    p.observe(outcome(4, 2, verify_s=1.0))
    assert set(p.costs.verify) == {5}


def test_cost_policy_retries_a_skipped_drafter() -> None:
    """α̂ drifts back to its prior while K = 0, so drafting gets tried again."""
    costs = synthetic_costs(1.0, 0.1, 0.1)
    p = trained_policy(CostPolicy, 0.1, costs)
    assert p.choose(MODEL, cap=100).k == 0
    for _ in range(200):
        k = p.choose(MODEL, cap=100).k
        if k:
            break
        p.observe(outcome(0, 0))
    assert k > 0


def test_make_policy_names() -> None:
    assert make_policy("fixed", 3).choose(MODEL, 10).k == 3
    with pytest.raises(ValueError, match="unknown K policy"):
        make_policy("greedy", 3)


class LineThroughAllWidths(CostModel):
    """Broken: one least-squares line through every width, the one-token pass included."""

    def verify_cost(self, n: int) -> float:
        points = [(w, m.value) for w, m in self.verify.items() if m.known]
        mw = sum(w for w, _ in points) / len(points)
        mt = sum(t for _, t in points) / len(points)
        var = sum((w - mw) ** 2 for w, _ in points)
        slope = max(0.0, sum((w - mw) * (t - mt) for w, t in points) / var)
        return mt + slope * (n - mw)


@pytest.mark.parametrize(("cls", "correct"), [(CostModel, True), (LineThroughAllWidths, False)])
def test_cpu_one_token_pass_is_measured_not_fitted(cls: type[CostModel], correct: bool) -> None:
    """Measured on this CPU: 1 token 85 ms, 3 tokens 190 ms, 5 tokens 205 ms, 17 tokens 315 ms.
    At α̂ 0.3 for a free lookup draft, a plain step (1 token / 85 ms) beats any K."""
    costs = cls()
    for width, seconds in ((1, 0.085), (3, 0.19), (5, 0.205), (17, 0.315)):
        costs.verify.setdefault(width, _Mean()).add(seconds)
    costs.draft.setdefault("lookup", _Mean()).add(0.0)
    lookup = Plan("lookup", "lookup:1", 20, 1)
    p = trained_policy(CostPolicy, 0.3, costs, plan=lookup)
    assert (p.choose(lookup, cap=100).k == 0) == correct


def test_cost_policy_measures_a_plain_step_early() -> None:
    p = CostPolicy(4)
    p.observe(outcome(4, 2, verify_s=5.0, fed=40))  # the prefill round: not a sample
    p.observe(outcome(4, 4, verify_s=0.2))
    choice = p.choose(MODEL, cap=100)
    assert choice.k == 0 and "measuring a plain target step" in choice.reason
    p.observe(outcome(0, 0, verify_s=0.09))
    assert p.choose(MODEL, cap=100).k > 0  # α̂ is high: drafting wins again

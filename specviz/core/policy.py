"""How many tokens to draft each round: fixed K, transformers' heuristic, or measured cost.

A policy sees the drafter's plan for the round (its source, how far it can reach, and the
drafter's own priors and costs), picks K with a one-line reason for the events, and is told
afterwards what happened. K never depends on the round's own random draws, so every policy
leaves the output law exact. The policies are registered by name in ``registry.py``.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from .calibration import plausible
from .options import K_LIMIT  # the largest K any policy drafts
from .plans import Choice, Outcome, Plan
from .tally import expected_tokens_per_round


class KPolicy(Protocol):
    name: str
    # Whether the policy sizes K on the target's pass costs: the engine then times the passes
    # (``engine.calibrate``, once per pair) before the run's clock starts and hands them over
    # through ``calibrate``.
    wants_verify_costs: bool

    def calibrate(self, verify_s: dict[int, float]) -> None:
        """Target passes timed once per pair (width -> seconds)."""
        ...

    def choose(self, plan: Plan, cap: int) -> Choice:
        """K for this round, at most ``cap`` (the budget) and the plan's reach."""
        ...

    def pick(self, plans: Sequence[Plan], cap: int) -> tuple[Plan, Choice]:
        """Which of the drafter's plans to follow (its own rule's is first), and its K."""
        ...

    def observe(self, outcome: Outcome) -> None:
        ...

    def stop_rule(self, plan: Plan, k: int) -> StopRule | None:
        """For a choice with a ``stop_cap``: the rule that ends its drafting by ``k``."""
        ...


class StopRule(Protocol):
    def __call__(self, drafted: int, confidence: float) -> bool:
        """Whether to draft another token (see :data:`drafters.GoOn`)."""
        ...

    def reason(self, k: int) -> str:
        """The round's reason once ``k`` tokens were drafted."""
        ...

    def branch(self, spine: Sequence[float],
               siblings: Sequence[float | None]) -> tuple[int, ...]:
        """Where a plan that ``branches`` puts a sibling beside its chain (plans.Branching)."""
        ...


def _wanted(plan: Plan, k: int) -> int:
    """The K a fixed or scheduled policy drafts: the drafter's own budget where it has one."""
    return k if plan.budget is None else plan.budget


def _reach(plan: Plan, cap: int) -> int:
    return cap if plan.available is None else min(cap, plan.available)


def _no_draft_reason(plan: Plan, cap: int) -> str | None:
    if cap <= 0:
        return "last token: plain target step"
    if plan.available == 0:
        return "no n-gram match: plain target step"
    return None


class FixedPolicy:
    name = "fixed"
    wants_verify_costs = False

    def __init__(self, k: int) -> None:
        self.k = k

    def calibrate(self, verify_s: dict[int, float]) -> None:
        pass

    def choose(self, plan: Plan, cap: int) -> Choice:
        want = _wanted(plan, self.k)
        k = min(want, _reach(plan, cap))
        why = _no_draft_reason(plan, cap)
        if why is None:
            who = "fixed K" if plan.budget is None else f"{plan.source} K"
            why = f"{who} {want}" + (f", {k} available" if k < want else "")
        return Choice(k, why)

    def pick(self, plans: Sequence[Plan], cap: int) -> tuple[Plan, Choice]:
        return plans[0], self.choose(plans[0], cap)

    def observe(self, outcome: Outcome) -> None:
        pass

    def stop_rule(self, plan: Plan, k: int) -> StopRule | None:
        return None


class HeuristicPolicy:
    """transformers' ``num_assistant_tokens_schedule="heuristic"``: +2 after a fully kept
    round, −1 otherwise (never below 1), here also capped at ``k_max``."""

    name = "heuristic"
    wants_verify_costs = False

    def __init__(self, k: int, k_max: int = K_LIMIT) -> None:
        self.k = k
        self.k_max = k_max
        self.last = f"start K {k}"

    def calibrate(self, verify_s: dict[int, float]) -> None:
        pass

    def choose(self, plan: Plan, cap: int) -> Choice:
        want = _wanted(plan, self.k)
        k = min(want, _reach(plan, cap))
        why = _no_draft_reason(plan, cap)
        if why is None:
            why = (f"{self.last} → K {self.k}" if plan.budget is None
                   else f"{plan.source} K {want}") + (f", {k} available" if k < want else "")
        return Choice(k, why)

    def pick(self, plans: Sequence[Plan], cap: int) -> tuple[Plan, Choice]:
        return plans[0], self.choose(plans[0], cap)

    def observe(self, outcome: Outcome) -> None:
        # The schedule follows the rounds it sized; a drafter with its own budget (lookup)
        # drafts what its match offers and leaves the schedule alone.
        if outcome.k == 0 or outcome.plan.budget is not None:
            return
        if outcome.n_accepted == outcome.k:
            self.k = min(self.k_max, self.k + 2)
            self.last = f"all {outcome.k} kept"
        else:
            self.k = max(1, self.k - 1)
            self.last = f"{outcome.n_accepted} of {outcome.k} kept"

    def stop_rule(self, plan: Plan, k: int) -> StopRule | None:
        return None


@dataclass
class _Mean:
    """An exponentially weighted mean (recent rounds count more; the machine's load drifts)."""

    value: float = 0.0
    weight: float = 0.0

    def add(self, x: float, decay: float = 0.9) -> None:
        self.weight = self.weight * decay + 1.0
        self.value += (x - self.value) / self.weight

    @property
    def known(self) -> bool:
        return self.weight > 0


@dataclass
class _Alpha:
    """A decayed Beta estimate of P(draft kept | tested) for one kind of proposal."""

    kept: float = 0.0
    tested: float = 0.0

    def estimate(self, prior: float, strength: float) -> float:
        return (self.kept + prior * strength) / (self.tested + strength)


def _isotonic(points: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """The non-decreasing fit of (width, seconds) points sorted by width (pool adjacent
    violators, equal weights): a dip measured under load is averaged with its neighbours."""
    blocks: list[tuple[float, int]] = []  # (mean, count)
    for _, t in points:
        blocks.append((t, 1))
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (m1, c1), (m2, c2) = blocks[-2], blocks[-1]
            blocks[-2:] = [((m1 * c1 + m2 * c2) / (c1 + c2), c1 + c2)]
    values = [m for m, c in blocks for _ in range(c)]
    return [(w, v) for (w, _), v in zip(points, values, strict=True)]


class _VerifyFit:
    """v(n) from measured (width, seconds): see :meth:`CostModel.verify_cost`."""

    def __init__(self, measured: dict[int, float], prior_slope: float) -> None:
        self.one = measured.get(1)
        wide = _isotonic(sorted((w, t) for w, t in measured.items() if w >= 2))
        if not wide:
            wide = sorted(measured.items())
        self.fitted = dict(wide)
        self.widths = sorted(self.fitted)
        self.line: tuple[float, float, float] | None = None  # (mean width, mean t, slope)
        self.base = 0.0  # one measured width: the prior slope through it
        if len(wide) == 1:
            (w0, t0), = wide
            self.base = t0 / (1 + prior_slope * (w0 - 1))
        elif wide:
            mw = sum(w for w, _ in wide) / len(wide)
            mt = sum(t for _, t in wide) / len(wide)
            var = sum((w - mw) ** 2 for w, _ in wide)
            self.line = (mw, mt, max(0.0, sum((w - mw) * (t - mt) for w, t in wide) / var))
        self.prior_slope = prior_slope

    def __call__(self, n: int) -> float:
        if n == 1 and self.one is not None:
            return self.one
        fitted = self.fitted
        if not fitted:
            return 0.0
        if n in fitted:
            return fitted[n]
        i = bisect.bisect_left(self.widths, n)
        if 0 < i < len(self.widths):
            lo, hi = self.widths[i - 1], self.widths[i]
            return fitted[lo] + (fitted[hi] - fitted[lo]) * (n - lo) / (hi - lo)
        if self.line is None:
            return self.base * (1 + self.prior_slope * (n - 1))
        mw, mt, slope = self.line
        return max(1e-9, mt + slope * (n - mw))


class _PriorBeyond:
    """A fit of timed widths alone, continued past the widest by the prior slope (a share of
    v(1) per token), not by its own line: through two or three timed widths that line follows
    the step between the fast linear path's width groups (2 tokens 43 ms, 4 tokens 86 ms) and
    priced 11 tokens at 6 one-token passes (timed: 2.3), so a copy kept 98% of the time was
    drafted one token a round. Once a wider pass is timed, the fit has it."""

    def __init__(self, fit: Callable[[int], float], widest: int, prior_slope: float) -> None:
        self.fit = fit
        self.widest = widest
        self.step = prior_slope * fit(1)

    def __call__(self, n: int) -> float:
        if n <= self.widest:
            return self.fit(n)
        return self.fit(self.widest) + self.step * (n - self.widest)


@dataclass
class CostModel:
    """Measured costs of this machine: draft step per source, target pass per width, overhead.

    v(n) comes from two kinds of measurement: the passes this run timed (per width), and a
    calibration timed once per pair at load (every width, ``calibrate``). The calibration is
    remembered for the pair's lifetime, so the load of the machine at that moment would stay
    in it: a width this run never uses would keep a calibration timed while something else
    was busy, and a run on a quiet machine would size K on passes twice too dear (measured
    here: 1.14x instead of 1.52x the target alone; inflated one-token steps look so bad that
    they are never taken, so never re-timed). So the calibration gives v(n) its *shape* and
    ``load``, the running ratio of this run's timed passes to the shape at their widths, its
    scale: a width this run measured counts as measured, any other as calibrated × load.
    """

    draft: dict[str, _Mean] = field(default_factory=dict)  # seconds per drafted token
    verify: dict[int, _Mean] = field(default_factory=dict)  # seconds per pass of n tokens
    overhead: _Mean = field(default_factory=_Mean)  # seconds of bookkeeping per round
    calibrated: dict[int, float] = field(default_factory=dict)  # width -> seconds, at load
    load: _Mean = field(default_factory=_Mean)  # this run's passes / the calibrated shape
    # The same ratio per width: where they differ by more than SHAPE_SPREAD, the shape itself
    # is off (timed while something else was busy) and calibrated × load is a guess.
    ratios: dict[int, _Mean] = field(default_factory=dict)
    # The fit of v(n) to the measured widths, redone when they change (the cost policy asks
    # for v(n) ~25 times a round; refitting each time was ~1% of a run's wall time).
    _fitted_on: tuple[tuple[int, float], ...] | None = field(default=None, repr=False,
                                                              compare=False)
    _fit: Callable[[int], float] = field(default=lambda n: 0.0, repr=False, compare=False)
    _shape: Callable[[int], float] | None = field(default=None, repr=False, compare=False)

    # A target pass over n tokens after a warm cache costs v(1)·(1 + slope·(n − 1)) until two
    # widths have been measured; on this 2-core CPU SmolLM2-135M measured ~0.1 per token.
    PRIOR_SLOPE = 0.1
    FIT = _VerifyFit
    # This run's passes over the calibration's shape, per width: quiet passes of the bundled
    # target (2 threads) against a quiet calibration within ~1.4x of each other (width 4 sits
    # between calibrated widths 3 and 5 but costs what 5 does); against a busy one 0.023 at
    # width 2 and 0.066 at width 5.
    SHAPE_SPREAD = 2.0

    def calibrate(self, verify_s: dict[int, float]) -> None:
        """Take target passes timed once per pair (width -> seconds) as v(n)'s shape."""
        self.calibrated.update(verify_s)
        self._shape = self.FIT(dict(self.calibrated), self.PRIOR_SLOPE)

    def knows(self, width: int | None = None) -> bool:
        """Whether any pass (or one of ``width`` tokens) has been timed or calibrated."""
        if width is None:
            return bool(self.verify or self.calibrated)
        return width in self.verify or width in self.calibrated

    def measured(self, width: int) -> bool:
        """Whether this run has timed a pass of ``width`` tokens itself."""
        mean = self.verify.get(width)
        return mean is not None and mean.known

    def shape_doubtful(self) -> bool:
        """Whether the calibration's shape is in doubt: no machine left alone times it
        (:func:`calibration.plausible`), or this run's passes scale it unevenly (their ratios to
        it, per width, differ by more than SHAPE_SPREAD). v(n) at widths the run has not timed
        is then no estimate, and v(1), the plain step every K is weighed against, least of all."""
        if self.calibrated and not plausible(self.calibrated):
            return True
        known = [m.value for m in self.ratios.values() if m.known]
        return len(known) >= 2 and max(known) > self.SHAPE_SPREAD * min(known)

    def _unshaped(self) -> bool:
        """Whether v(n) goes by this run's timed passes alone: the calibration's shape is in
        doubt and the run has timed a pass."""
        return any(m.known for m in self.verify.values()) and self.shape_doubtful()

    def _points(self, unshaped: bool) -> tuple[tuple[int, float], ...]:
        scale = self.load.value if self.load.known else 1.0
        # A shape in doubt gives nothing once the run has timed a pass: scaled, it would price
        # the widths this run has not timed by a guess (measured: v(2) read 2x too dear beside
        # a timed v(1), and the run kept to plain steps); the timed widths and the prior slope
        # price them instead.
        calibrated = {} if unshaped else self.calibrated
        points = {w: t * scale for w, t in calibrated.items()}
        points.update((w, m.value) for w, m in self.verify.items() if m.known)
        return tuple(sorted(points.items()))

    def _fitted(self) -> Callable[[int], float]:
        unshaped = self._unshaped()
        measured = self._points(unshaped)
        if measured != self._fitted_on:  # refit only when a measurement changed
            fit = self.FIT(dict(measured), self.PRIOR_SLOPE)
            self._fit = _PriorBeyond(fit, measured[-1][0], self.PRIOR_SLOPE) if unshaped \
                else fit
            self._fitted_on = measured
        return self._fit

    def verify_curve(self, n_max: int) -> list[float]:
        """[v(0), v(1), …, v(n_max)] (v(0) = 0): one fit check for a whole round's questions."""
        fit = self._fitted()
        return [0.0] + [fit(n) for n in range(1, n_max + 1)]

    def verify_cost(self, n: int) -> float:
        """Seconds for one target pass over n tokens.

        The one-token pass is used as measured: on a CPU with ``F.linear`` one token is a
        matrix-vector product and two or more a matrix-matrix one, so v(2)/v(1) can be ~2 while
        v(5)/v(2) is ~1.1, which no line through all widths fits (with specviz's fast CPU
        linear path, ``cpu_linear.py``, one token is padded to two and v(2)/v(1) is ~1.1).
        Widths of 2 or more are made non-decreasing (pool-adjacent-violators: a pass over more
        tokens never costs less, whatever a busy machine measured), interpolated between
        measured widths and, outside them, continued by a least-squares line through them.
        """
        return self._fitted()(n) if n > 0 else 0.0

    def draft_cost(self, plan: Plan) -> float:
        """Seconds per drafted token of ``plan``'s source: as measured, else the drafter's own
        prior share of a one-token target pass (``Plan.step_cost``)."""
        mean = self.draft.get(plan.source)
        if mean is not None and mean.known:
            return mean.value
        return plan.step_cost * self.verify_cost(1)

    def add(self, outcome: Outcome) -> None:
        if outcome.k > 0:
            self.draft.setdefault(outcome.plan.source, _Mean()).add(outcome.draft_s / outcome.k)
        self.verify.setdefault(outcome.fed, _Mean()).add(outcome.verify_s)
        shape = self._shape(outcome.fed) if self._shape is not None else 0.0
        if shape > 0:
            self.load.add(outcome.verify_s / shape)
            self.ratios.setdefault(outcome.fed, _Mean()).add(outcome.verify_s / shape)
        self.overhead.add(max(0.0, outcome.round_s - outcome.draft_s - outcome.verify_s))


class CostPolicy:
    """Each round, the drafter and K with the most expected tokens per second.

    rate(K) = E[tokens | α̂, K] / (o + K·c + v(K + 1)), with E = (1 − α̂^(K+1)) / (1 − α̂),
    α̂ the running acceptance of this kind of proposal (per drafter, and per match length for
    lookup), c the measured seconds per drafted token of that drafter (≈ 0 for lookup),
    v(n) the seconds of a target pass over n tokens (measured once per pair by ``calibrate``,
    then refined by every round) and o the round's own bookkeeping. K runs over 0..k_max for
    the model drafter and over 0..what the match offers (≤ lookup_k) for lookup; K = 0 is a
    plain target step (1 token for o + v(1)), chosen when drafting loses. Where the drafter
    offers several plans (hybrid: lookup and the model), the best rate of each is compared.
    α̂ decays back towards its prior while a kind is not drafted. Where drafting must beat
    the prior to pay (on a 2-core CPU a 5-token verify pass costs ~1.7 one-token passes, so
    the break-even α̂ is ~0.62 against a prior of 0.6), the prior alone never tries again:
    after PROBE_AFTER plain steps in a row the policy drafts one probe round at the start K
    (if drafting could pay at all, with every draft kept), and each probe that keeps fewer
    drafts than α̂ expected doubles the wait (up to PROBE_MAX).

    Confidence stop (model drafts, CONFIDENCE_STOP): once the rates say draft at all, the
    model drafts up to k_max and, after each token, stops where one more no longer pays. The
    draft's confidence in a token (q(x); at T = 0 the argmax's softmax probability) predicts
    whether it is kept (bundled pair, T = 0: 0.20 below 0.2, 0.98 above 0.9), so each drafted
    token gets the α̂ of its confidence bucket (learned per bucket, prior its midpoint); with
    P_n the chance that all n drafts so far are kept and S their sum, stopping at n gives
    (1 + S) / (o + n·c + v(n + 1)) tokens per second and drafting m more gives
    (1 + S + P_n·(β + … + β^m)) / (o + (n + m)·c + v(n + m + 1)), β the α̂ of a draft that
    follows a kept one of the last one's confidence; it drafts on while some m beats
    stopping. The rule reads only the draft's side, so K is a stopping time of the draft's own
    draws and the output law stays exactly p.

    Tree or chain (a plan that ``branches``: model-tree): the chain is drafted by the same
    rule, so it goes as deep as the chain drafter's; then each of its contexts may get one
    sibling (a leaf). With a_i the α̂ of spine draft i's confidence, R_i = a_1 ⋯ a_i the
    chance that context i is reached (R_0 = 1) and s_i the α̂ of a sibling there (learned
    per bucket of the draft's expected confidence in it, prior its midpoint), a sibling at
    context i adds R_i (1 − a_(i+1)) s_i tokens to the chain's 1 + R_1 + … + R_n and one
    position to the verify pass. The m best siblings give (E_chain + their gains) /
    (o + n·c + v(n + 1 + m) + x) tokens per second, x what tree rounds took beyond a chain
    round of their width (measured; fading while only chains are drafted); the policy takes
    the m with the most, and a chain (m = 0) unless a tree is faster by TREE_MARGIN. α̂ and
    the buckets learn from a tree round's spine as from a chain (its siblings apart), so the
    chain is the chain drafter's.
    """

    name = "cost"
    wants_verify_costs = True
    PRIOR_STRENGTH = 2.0  # pseudo-drafts behind the prior α (the drafter's, Plan.prior)
    DECAY = 0.97  # per tested draft: the estimate follows the text as it changes
    PROBE_AFTER = 4  # plain steps in a row before a probe round drafts again
    PROBE_MAX = 64  # the longest wait between probes while they keep failing
    CONFIDENCE_STOP = True  # model drafts stop by confidence (benchmarks switch it off)
    BUCKETS = 10  # confidence buckets of width 0.1
    BUCKET_DECAY = 0.99  # per draft in the bucket: calibration drifts slower than α
    # A model tree is drafted only where its predicted tokens/s is this much above the chain's:
    # a sibling's α̂ rests on few tests, and a tree that wins by less than its error margin
    # loses as often as it wins (template prompts on this CPU's v: trees by < 1% were 0.99x).
    TREE_MARGIN = 1.02

    def __init__(self, k: int, k_max: int = K_LIMIT, costs: CostModel | None = None) -> None:
        self.k_start = k  # used until the costs of this machine have been measured
        self.k_max = k_max
        self.costs = costs or CostModel()
        self.alphas: dict[str, _Alpha] = {}  # every tested draft, per key
        # Lookup only: the first draft of a round, and the drafts after a kept one. A copied
        # span is mostly kept whole or lost at once, so its first token is the gamble.
        self.first: dict[str, _Alpha] = {}
        self.rest: dict[str, _Alpha] = {}
        self._first = True  # the first verify pass also prefills the prompt: not a sample
        self.plain = 0  # plain steps (K = 0) in a row
        self.probe_after = self.PROBE_AFTER  # plain steps before the next probe
        self._probing = False  # this round's K is a probe
        self._chosen_alpha = 0.0  # α̂ when this round's K was chosen
        # Per key (model drafts): P(kept | the draft's confidence in its bucket), and
        # P(kept | the previous draft, kept, had a confidence in this bucket): sure drafts
        # come in runs (bundled pair, T = 0: 0.77 after a kept draft above 0.8, 0.6 below 0.6).
        self.by_confidence: dict[str, list[_Alpha]] = {}
        self.after: dict[str, list[_Alpha]] = {}
        # Per key (model trees): P(a sibling kept | tested, the draft's expected confidence in
        # it in this bucket).
        self.siblings: dict[str, list[_Alpha]] = {}
        self._whole = False  # this round's chain is drafted whole (a probe; K at its reach)
        # Seconds a tree round took beyond a chain round of the same width (≥ 0 when used).
        self.tree_extra = _Mean()
        self._why = ""  # the last choice's reason

    def prior(self, plan: Plan) -> float:
        """α before any draft of this kind was tested: the drafter's own (per match length for
        lookup)."""
        return plan.prior

    def alpha(self, plan: Plan) -> float:
        est = self.alphas.get(plan.key, _Alpha())
        return est.estimate(self.prior(plan), self.PRIOR_STRENGTH)

    def _bucket(self, confidence: float) -> int:
        return min(self.BUCKETS - 1, max(0, int(confidence * self.BUCKETS)))

    def confident_alpha(self, key: str, confidence: float) -> float:
        """α̂ of a draft made with this confidence (its bucket's estimate)."""
        b = self._bucket(confidence)
        est = self.by_confidence.get(key, [])
        prior = (b + 0.5) / self.BUCKETS
        return (est[b] if est else _Alpha()).estimate(prior, self.PRIOR_STRENGTH)

    def sibling_alpha(self, key: str, confidence: float) -> float:
        """α̂ of a sibling the draft expected this confidence of (its bucket's estimate)."""
        b = self._bucket(confidence)
        est = self.siblings.get(key, [])
        return (est[b] if est else _Alpha()).estimate((b + 0.5) / self.BUCKETS,
                                                      self.PRIOR_STRENGTH)

    def next_alpha(self, plan: Plan, confidence: float) -> float:
        """α̂ of the next draft after a kept one made with this confidence."""
        b = self._bucket(confidence)
        est = self.after.get(plan.key, [])
        return (est[b] if est else _Alpha()).estimate(self.alpha(plan), self.PRIOR_STRENGTH)

    def expected_tokens(self, plan: Plan, k: int) -> float:
        """E[tokens of a round drafting k]: 1 + α̂ + … + α̂^k for the model; for copied spans
        (lookup) 1 + α̂₁ (1 + α̂ᵣ + … + α̂ᵣ^(k−1)), α̂₁ of a round's first draft, α̂ᵣ of those
        after a kept one (the same sum when the two are equal)."""
        if not plan.spans or k == 0:
            return expected_tokens_per_round(self.alpha(plan), k)
        prior = self.prior(plan)
        a1 = self.first.get(plan.key, _Alpha()).estimate(prior, self.PRIOR_STRENGTH)
        ar = self.rest.get(plan.key, _Alpha()).estimate(prior, self.PRIOR_STRENGTH)
        return 1.0 + a1 * sum(ar ** j for j in range(k))

    def calibrate(self, verify_s: dict[int, float]) -> None:
        """Seed v(n) with target passes timed once per pair (width -> seconds)."""
        self.costs.calibrate(verify_s)

    def rates(self, plan: Plan, cap: int) -> list[float]:
        """Expected tokens per second for K = 0..reach."""
        c = self.costs.draft_cost(plan)
        o = self.costs.overhead.value
        reach = _reach(plan, min(cap, self.k_max))
        v = self.costs.verify_curve(reach + 1)
        out = []
        for k in range(reach + 1):
            seconds = o + k * c + v[k + 1]
            out.append(self.expected_tokens(plan, k) / seconds if seconds > 0 else 0.0)
        return out

    def _best(self, plan: Plan, cap: int) -> tuple[float, int]:
        rates = self.rates(plan, cap)
        k = max(range(len(rates)), key=lambda i: (rates[i], -i))  # ties: the smaller K
        return rates[k], k

    def _could_pay(self, plan: Plan, cap: int) -> bool:
        """Whether drafting beats a plain step if every draft were kept (else no probe)."""
        c = self.costs.draft_cost(plan)
        o = self.costs.overhead.value
        reach = _reach(plan, min(cap, self.k_max))
        v = self.costs.verify_curve(reach + 1)
        plain = 1.0 / max(o + v[1], 1e-12)
        return any((k + 1) / max(o + k * c + v[k + 1], 1e-12) > plain
                   for k in range(1, reach + 1))

    def choose(self, plan: Plan, cap: int) -> Choice:
        why = _no_draft_reason(plan, cap)
        if why is not None:
            return Choice(0, why)
        self._chosen_alpha = self.alpha(plan)  # what the round's drafts are expected to keep
        if not self.costs.knows():
            k = min(_wanted(plan, self.k_start), _reach(plan, cap))
            self._whole, self._why = plan.branches and k > 0, f"no costs measured yet → K {k}"
            return Choice(k, self._why, k if self._whole else 0)
        if not self.costs.knows(1):
            # The alternative to drafting is a plain step: measure its cost once, early.
            return Choice(0, "measuring a plain target step → K 0")
        if not self.costs.measured(1) and self.costs.shape_doubtful():
            # The calibration's v(1) is off by an unknown factor: a stale, too dear plain step
            # makes every K look better than the target alone (none was ever taken, so none
            # re-timed), a too cheap one the reverse. One plain step times it.
            return Choice(0, "the calibration's shape is in doubt: measuring a plain target "
                          "step → K 0")
        rates = self.rates(plan, cap)
        k = max(range(len(rates)), key=lambda i: (rates[i], -i))  # ties: the smaller K
        probe = ""
        self._probing = False
        stop_cap = 0
        if k > 0 and self.CONFIDENCE_STOP and plan.confident:
            # Draft on while the confidence of each draft says it pays (see stop_rule).
            stop_cap = _reach(plan, min(cap, self.k_max))
        elif k == 0 and self.plain >= self.probe_after and self._could_pay(plan, cap):
            k = min(_wanted(plan, self.k_start), _reach(plan, cap))
            self._probing = k > 0
            probe = f"probe after {self.plain} plain steps: " if k else ""
        v1 = self.costs.verify_cost(1)
        c = self.costs.draft_cost(plan) / v1
        who = "" if plan.key == plan.source else f"{plan.key}, "
        head = f"{probe}{who}α̂ {self.alpha(plan):.2f}, c {c:.2f}"
        why = f"{head}; {self._compared(rates, k)} → K {k}"
        # A plan that branches drafts K whole through a rule too, which weighs the tree.
        self._whole = plan.branches and k > 0 and stop_cap <= k
        self._why = why
        return Choice(k, why, k if self._whole else stop_cap if stop_cap > k else 0)

    def _compared(self, rates: list[float], k: int) -> str:
        """The figures behind K: its expected tokens/s and v (a pass of K + 1 tokens, in
        one-token passes) against the best other K's, e.g. "K 0 9.8 tok/s at v 1.0 > K 1 7.1
        tok/s at v 2.1" (a probe may draft against the rates: then "<")."""
        v1 = self.costs.verify_cost(1)

        def figures(j: int) -> str:
            return f"K {j} {_rate(rates[j])} tok/s at v {self.costs.verify_cost(j + 1) / v1:.1f}"

        others = [j for j in range(len(rates)) if j != k]
        if k >= len(rates) or not others:
            return f"v {self.costs.verify_cost(k + 1) / v1:.1f}"
        other = max(others, key=lambda j: (rates[j], -j))
        sign = ">" if rates[k] > rates[other] else "=" if rates[k] == rates[other] else "<"
        return f"{figures(k)} {sign} {figures(other)}"

    def pick(self, plans: Sequence[Plan], cap: int) -> tuple[Plan, Choice]:
        if len(plans) == 1 or not self.costs.knows(1) or cap <= 0:
            return plans[0], self.choose(plans[0], cap)
        usable = [p for p in plans if p.available != 0]
        if not usable:
            return plans[0], self.choose(plans[0], cap)
        best = max(usable, key=lambda p: self._best(p, cap)[0])  # ties: the drafter's own rule
        return best, self.choose(best, cap)

    def stop_rule(self, plan: Plan, k: int) -> StopRule | None:
        if plan.branches and k >= 1:
            whole = self._whole or not self.CONFIDENCE_STOP
            return _ConfidenceStop(self, plan, k, self._why if whole else None)
        if not self.CONFIDENCE_STOP or not plan.confident or k < 2:
            return None
        return _ConfidenceStop(self, plan, k)

    def observe(self, outcome: Outcome) -> None:
        tree = outcome.parents is not None
        if tree:  # a tree: its spine is learned as a chain
            outcome = self._learn_siblings(outcome)
        if self._first:
            self._first = False
        else:
            if tree:
                # What the tree round cost beyond a chain round of its width (the tree mask,
                # the walk over siblings, the path kept) prices the next trees; o, c and v
                # stay the chains' (a tree round adds its draft steps only).
                o, c = self.costs.overhead.value, self.costs.draft_cost(outcome.plan)
                if outcome.k:
                    self.costs.draft.setdefault(outcome.plan.source, _Mean()).add(
                        outcome.draft_s / outcome.k)
                if self.costs.knows(1):
                    self.tree_extra.add(outcome.round_s - (
                        o + outcome.k * c + self.costs.verify_cost(outcome.fed)))
            else:
                if outcome.plan.branches and outcome.k:  # a chain where a tree was weighed:
                    self.tree_extra.value *= self.DECAY  # the price fades: trees are retried
                self.costs.add(outcome)
        self.learn(outcome.plan, outcome.k, outcome.n_accepted, outcome.confidence)
        if outcome.k == 0:
            self.plain += 1
            return
        # A probe that kept fewer of its drafts than α̂ expected: the next waits twice as
        # long. A round that did better (the text changed): the wait starts over. A round the
        # rates chose that did no better leaves the wait as it was: after plain steps α̂
        # drifts back towards its prior until the rates draft one token, and such a round
        # failing says nothing new (measured: it restarted the wait at 4 after every such
        # round, and probes of 4 drafts, each ~2 passes' time on this CPU, made the model
        # drafter 0.87x the target alone on Spec-Bench's long prompts, modeled clock).
        tested = min(outcome.k, outcome.n_accepted + 1)
        worse = outcome.n_accepted / tested <= self._chosen_alpha
        if not worse:
            self.probe_after = self.PROBE_AFTER
        elif self._probing:
            self.probe_after = min(self.PROBE_MAX, 2 * self.probe_after)
        self._probing = False
        self.plain = 0

    def _learn_siblings(self, outcome: Outcome) -> Outcome:
        """Fold a tree round's tested siblings into their buckets; return the round as its
        spine's chain (the first child at each context from the root): its drafts, the kept
        ones, their confidences, the pass it took (``fed`` counts every node)."""
        parents = outcome.parents or ()
        first: dict[int, int] = {}
        for node, parent in enumerate(parents):
            first.setdefault(parent, node)
        spine: list[int] = []
        at = -1
        while at in first:
            at = first[at]
            spine.append(at)
        statuses, conf = outcome.statuses, outcome.confidence
        kept = 0
        while kept < len(spine) and statuses[spine[kept]] == "accepted":
            kept += 1
        known = len(conf) == len(parents)
        if known:
            table = self.siblings.setdefault(outcome.plan.key,
                                             [_Alpha() for _ in range(self.BUCKETS)])
            on_spine = set(spine)
            for node, status in enumerate(statuses):
                if node in on_spine or status == "discarded":
                    continue
                est = table[self._bucket(conf[node])]
                est.kept = est.kept * self.BUCKET_DECAY + (status == "accepted")
                est.tested = est.tested * self.BUCKET_DECAY + 1.0
        return replace(outcome, k=len(spine), n_accepted=kept,
                       confidence=tuple(conf[i] for i in spine) if known else (),
                       parents=None, statuses=())

    def learn(self, plan: Plan, k: int, n_accepted: int,
              confidence: Sequence[float] = ()) -> None:
        """Fold one round's drafts into the α̂ of the plan's key (K = 0: decay towards the
        prior), and, where their confidences are known, into the α̂ of each one's bucket."""
        key = plan.key
        ests = [self.alphas.setdefault(key, _Alpha())]
        if plan.spans:
            ests += [self.first.setdefault(key, _Alpha()), self.rest.setdefault(key, _Alpha())]
        if k == 0:
            # Not drafted: forget a little, so the prior pulls α̂ back and it gets retried.
            for est in ests:
                est.kept *= self.DECAY
                est.tested *= self.DECAY
            return
        tested = min(k, n_accepted + 1)
        if confidence:
            buckets = self.by_confidence.setdefault(
                key, [_Alpha() for _ in range(self.BUCKETS)])
            after = self.after.setdefault(key, [_Alpha() for _ in range(self.BUCKETS)])
            for i, conf in enumerate(confidence[:tested]):
                kept_now = i < n_accepted
                for table, c in ((buckets, conf), (after, confidence[i - 1] if i else None)):
                    if c is None:
                        continue
                    est = table[self._bucket(c)]
                    est.kept = est.kept * self.BUCKET_DECAY + kept_now
                    est.tested = est.tested * self.BUCKET_DECAY + 1.0
        for i in range(tested):
            kept = i < n_accepted
            targets = ests[:1] + (ests[1:2] if i == 0 else ests[2:3])
            for est in targets:
                est.kept = est.kept * self.DECAY + kept
                est.tested = est.tested * self.DECAY + 1.0


def _rate(tokens_per_s: float) -> str:
    """Three significant figures (two rates a reason compares rarely agree to more)."""
    return f"{tokens_per_s:.0f}" if tokens_per_s >= 1000 else f"{tokens_per_s:.3g}"


@dataclass(frozen=True)
class Branched:
    """What ``_ConfidenceStop.branch`` compared: the chain of ``spine`` drafts against the
    best tree, the chain with ``siblings`` more (0: no sibling to weigh, or nothing measured).

    Expected tokens per round, tokens per second, and the verify pass (seconds) of each.
    """

    spine: int  # n, the chain's drafts
    siblings: int  # m, the tree's siblings beside them
    chain_tokens: float = 0.0  # E[tokens / round], chain
    tree_tokens: float = 0.0  # E[tokens / round], tree
    chain_rate: float = 0.0  # tokens / s, chain
    tree_rate: float = 0.0  # tokens / s, tree
    chain_verify_s: float = 0.0  # v(n + 1); 0: nothing measured
    tree_verify_s: float = 0.0  # v(n + 1 + m)


class _ConfidenceStop:
    """The cost policy's rule for one round of model drafts: draft on while it pays."""

    def __init__(self, policy: CostPolicy, plan: Plan, cap: int,
                 whole: str | None = None) -> None:
        self.policy = policy
        self.plan = plan
        self.cap = cap
        # Not None: draft to the cap whatever the confidences (then weigh a tree); the reason
        # the policy gave for that K.
        self.whole = whole
        # What ``branch`` compared, the chain against the best tree; None: not asked.
        self.branched: Branched | None = None
        self.chosen = 0  # siblings taken
        self.extra = 0.0  # seconds a tree round costs beyond its width's pass (measured)
        costs = policy.costs
        self.o = costs.overhead.value
        self.c = costs.draft_cost(plan)
        self.alpha = policy.alpha(plan)
        # v(n) for every width this round can reach, looked up once (asked ~K²/2 times).
        self.v = costs.verify_curve(cap + 1)
        self.all_kept = 1.0  # P_n: every draft so far kept
        self.sum = 0.0  # S = P_1 + … + P_n
        self.last = (0.0, 0.0)  # (confidence, its α̂) of the last draft asked about
        # What the last question compared: (n, tokens/s stopping at n, the best n + m,
        # tokens/s drafting on to it)
        self.compared = (0, 0.0, 0, 0.0)
        self.stopped = False

    def __call__(self, drafted: int, confidence: float) -> bool:
        if self.whole is not None:
            return True
        a = self.policy.confident_alpha(self.plan.key, confidence)
        self.last = (confidence, a)
        self.all_kept *= a
        self.sum += self.all_kept
        n, o, c, v = drafted, self.o, self.c, self.v
        now = (1.0 + self.sum) / max(o + n * c + v[n + 1], 1e-12)
        more, gain, best = 0.0, 0.0, n
        nxt = self.policy.next_alpha(self.plan, confidence)  # drafts not yet made
        for m in range(1, self.cap - n + 1):
            gain = gain * nxt + nxt  # α̂ + … + α̂^m
            rate = (1.0 + self.sum + self.all_kept * gain) / max(o + (n + m) * c + v[n + m + 1],
                                                                 1e-12)
            if rate > more:
                more, best = rate, n + m
        self.compared = (n, now, best, more)
        self.stopped = more <= now
        return not self.stopped

    def branch(self, spine: Sequence[float],
               siblings: Sequence[float | None]) -> tuple[int, ...]:
        """The contexts of the chain ``spine`` that get a sibling: the m best-paying ones,
        m the count with the most expected tokens per second, 0 (the chain) on ties."""
        policy, key = self.policy, self.plan.key
        n = len(spine)
        if not policy.costs.knows(1):
            self.branched = Branched(n, 0)
            return ()  # nothing measured to weigh by: the chain, as the chain drafter drafts
        a = [policy.confident_alpha(key, c) for c in spine]
        reach = [1.0]  # R_i: every spine draft before context i kept
        for x in a:
            reach.append(reach[-1] * x)
        chain = sum(reach)  # 1 + R_1 + … + R_n
        gains = sorted(((reach[i] * (1.0 - a[i]) * policy.sibling_alpha(key, s), i)
                        for i, s in enumerate(siblings) if s is not None),
                       key=lambda g: (-g[0], g[1]))
        v = self.policy.costs.verify_curve(n + 1 + len(gains))
        spent = self.o + n * self.c
        self.extra = max(0.0, policy.tree_extra.value)  # a tree round's own cost, measured
        best, best_rate, tokens, rates = 0, 0.0, chain, []
        for m in range(len(gains) + 1):
            if m:
                tokens += gains[m - 1][0]
            rate = tokens / max(spent + v[n + 1 + m] + (self.extra if m else 0.0), 1e-12)
            rates.append((tokens, rate))
            # A tree must beat the chain by TREE_MARGIN (its siblings' α̂ rest on few tests);
            # among trees, the fastest.
            if m == 0 or rate > best_rate * (policy.TREE_MARGIN if best == 0 else 1.0):
                best, best_rate = m, rate
        self.chosen = best
        if len(rates) > 1:
            other = best if best else max(range(1, len(rates)), key=lambda j: (rates[j][1], -j))
            self.branched = Branched(n, other, chain, rates[other][0], rates[0][1],
                                     rates[other][1], v[n + 1], v[n + 1 + other])
        else:
            self.branched = Branched(n, 0, chain, chain, rates[0][1], rates[0][1], v[n + 1],
                                     v[n + 1])
        return tuple(sorted(i for _, i in gains[:best]))

    def _weighed(self) -> str:
        """The tree against the chain, e.g. "tree 4+2 2.91 tok/r 31.2 tok/s at v 1.9 > chain
        4 2.75 tok/r 30.4 tok/s at v 1.7 → tree" (v in one-token passes)."""
        b = self.branched
        if b is None:
            return ""
        v1 = self.v[1]
        if not b.siblings:
            return ("; no sibling to weigh → chain" if b.chain_verify_s
                    else "; nothing measured → chain")
        chain = (f"chain {b.spine} {b.chain_tokens:.2f} tok/r {_rate(b.chain_rate)} tok/s at v "
                 f"{b.chain_verify_s / v1:.1f}")
        extra = f" + {self.extra / v1:.2f}" if self.extra > 0 else ""
        tree = (f"tree {b.spine}+{b.siblings} {b.tree_tokens:.2f} tok/r {_rate(b.tree_rate)} "
                f"tok/s at v {b.tree_verify_s / v1:.1f}{extra}")
        if self.chosen:
            return f"; {tree} > {chain} → tree"
        sign = "≥" if b.chain_rate >= b.tree_rate else "≈"  # ≈: ahead by < TREE_MARGIN
        return f"; {chain} {sign} {tree} → chain"

    def reason(self, k: int) -> str:
        tree = self._weighed()
        if self.whole is not None:
            return f"{self.whole}{tree}"
        v1 = self.v[1]
        head = f"α̂ {self.alpha:.2f}, c {self.c / v1:.2f}"
        conf, a = self.last
        if self.branched is not None:
            k = self.branched.spine  # the chain's drafts (the siblings come after, in ``tree``)
        if not self.stopped:
            return (f"{head}, v {self.v[k + 1] / v1:.1f}; sure up to the cap {self.cap} → K {k}"
                    f"{tree}")
        n, now, more_k, more = self.compared
        return (f"{head}; stopped at q {conf:.2f} (keeps {a:.2f}): K {n} {_rate(now)} tok/s at "
                f"v {self.v[n + 1] / v1:.1f} ≥ K {more_k} {_rate(more)} tok/s at v "
                f"{self.v[more_k + 1] / v1:.1f} → K {k}{tree}")


def make_policy(name: str, k: int) -> KPolicy:
    """The registered K policy ``name`` starting at ``k`` (registry.py)."""
    from .registry import K_POLICIES

    if name not in K_POLICIES:
        raise ValueError(f"unknown K policy {name!r}: use one of {', '.join(K_POLICIES)}")
    policy: KPolicy = K_POLICIES[name].load()(k)
    return policy


__all__ = ["K_LIMIT", "Branched", "Choice", "CostModel", "CostPolicy", "FixedPolicy",
           "HeuristicPolicy", "KPolicy", "Outcome", "StopRule", "make_policy"]

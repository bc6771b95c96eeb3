"""Who proposes the drafts: the draft model, prompt lookup, or a hybrid of the two.

A Drafter sees only the committed context (prompt + generated ids). Each round the engine
asks it for a ``plan`` (which source it would use, how far it could go, and its own prior α
and cost per draft, which the K policy reads), lets the K policy pick K, asks for a
``proposal`` of up to K tokens, each with the q row it was drawn from, and afterwards tells it
how many were kept (``update``; for a tree, ``kept_path`` first names the nodes kept) so it
can roll its own state back; a drafter that set a ``target_request`` also gets the target's
outputs of the verify pass (``see_target``). Each
drafter is registered by name in ``registry.py`` with a ``build_*_drafter`` factory below.
p = target, q = draft.

Lookup proposals are exact too: their q is one-hot on x, so x is kept with probability
min(1, p(x)/1) = p(x) and a rejection resamples from norm(max(0, p − onehot(x))), which is p
with x removed. Under that law the round still outputs exactly p (Leviathan et al., thm 3.5
holds for any q, including a point mass).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import torch

from .cached_model import CachedModel as CachedModel  # re-exported: it lived here
from .cached_model import Clock, ModelRunner
from .plans import GoOn, Plan, Proposal, TargetOutputs, TargetRequest
from .rng import Random

if TYPE_CHECKING:
    from .events import Settings
    from .models import ModelPair

Probs = Callable[[torch.Tensor], torch.Tensor]  # logits (..., V) -> probabilities (..., V)
# logits, temperature, top-k, top-p -> probabilities (sampling.logits_to_probs)
Warp = Callable[[torch.Tensor, float, int, float], torch.Tensor]

# HybridDrafter drafts by lookup when the context's suffix matches earlier text over at least
# this many tokens, and with the model otherwise. Measured without a clock (benchmarks/
# drafters.py --lookup-alpha, T = 0, bundled pair, 4 grounded + 4 hand-written + 4 template
# prompts, 64 tokens): the model draft keeps α 0.44; lookup keeps 0.27 after a 1-token
# match, 0.51 after 2, 0.64 after 3 and 0.89 after 4. From 2 tokens on lookup keeps more than
# the model and costs nothing to draft (the model costs c ≈ 0.1-0.2 target passes per token),
# so it wins; a 1-token match keeps too little. The cost policy tracks α per match length.
HYBRID_MIN_MATCH = 2
# A lookup round drafts up to this many tokens (transformers' prompt_lookup_num_tokens = 10):
# its drafts cost no forward pass, so a long copy is worth verifying in one wider pass.
LOOKUP_K = 10


class Drafter(Protocol):
    """Proposes drafts from the committed context; rolls back when told what was kept."""

    name: str
    # What the drafter wants of the target's verify pass (None: nothing, and the pass costs
    # nothing extra); the engine hands it over through ``see_target`` after verification.
    target_request: TargetRequest | None

    @property
    def calls(self) -> int:
        """Draft-model forward passes so far (0 for lookup)."""
        ...

    @property
    def forward_time_s(self) -> float:
        ...

    def plan(self, context: Sequence[int]) -> Plan:
        ...

    def options(self, context: Sequence[int]) -> list[Plan]:
        """Every plan the drafter could follow now, its own rule's first (hybrid: two)."""
        ...

    def follow(self, plan: Plan) -> None:
        """Propose next by ``plan`` (one of the last ``options``)."""
        ...

    def propose(self, context: Sequence[int], k: int, rng: Random,
                go_on: GoOn | None = None) -> Proposal:
        """Up to ``k`` tokens following ``context`` (the ids of prompt + generated text); a
        model drafter stops early where ``go_on`` says so (lookup's drafts are free: ignored)."""
        ...

    def kept_path(self, path: Sequence[int]) -> None:
        """The last proposal was a tree and the verifier kept ``path`` (node indices, root's
        child first); ``update`` follows with ``len(path)``. Chain drafters ignore it."""
        ...

    def update(self, n_kept: int) -> None:
        """The verifier kept the first ``n_kept`` drafts of the last proposal."""
        ...

    def see_target(self, outputs: TargetOutputs) -> None:
        """The target's outputs of this round's verify pass (only with a ``target_request``)."""
        ...


class DrafterBase:
    """Defaults for a drafter without a model of its own: no forward passes, one plan, nothing
    to roll back, no use for the target's outputs. Subclasses define ``plan`` and ``propose``."""

    name: str = "base"
    target_request: TargetRequest | None = None

    @property
    def calls(self) -> int:
        return 0

    @property
    def forward_time_s(self) -> float:
        return 0.0

    def plan(self, context: Sequence[int]) -> Plan:
        raise NotImplementedError

    def options(self, context: Sequence[int]) -> list[Plan]:
        return [self.plan(context)]

    def follow(self, plan: Plan) -> None:
        pass

    def kept_path(self, path: Sequence[int]) -> None:
        pass

    def update(self, n_kept: int) -> None:
        pass

    def see_target(self, outputs: TargetOutputs) -> None:
        pass


@dataclass(frozen=True)
class DraftTools:
    """What a drafter is built with besides the pair and the settings: passed in (by the
    engine's factory), so a test can hand in its own warper, model runner or clock."""

    warp: Warp  # logits -> probabilities (sampling.logits_to_probs)
    # (model, vocab_size, vocab_map, oov_id, fast=...) -> a model with its KV cache
    # (CachedModel, with the factory's model call and clock)
    runner: ModelRunner
    clock: Clock  # time.perf_counter


def _one_hot(tokens: Sequence[int], vocab_size: int) -> torch.Tensor:
    rows = torch.zeros(len(tokens), vocab_size)  # (n, V)
    if tokens:
        rows[torch.arange(len(tokens)), torch.tensor(list(tokens))] = 1.0
    return rows


class ModelBackedDrafter(DrafterBase):
    """A drafter with a draft model of its own (``lm``, a :class:`CachedModel`): its passes
    and their time are the model's (the chain, the model tree, the cross-tokenizer draft)."""

    lm: CachedModel

    @property
    def calls(self) -> int:
        return self.lm.calls

    @property
    def forward_time_s(self) -> float:
        return self.lm.forward_time_s


class ModelDrafter(ModelBackedDrafter):
    """Today's draft model q with its KV cache (reduced-vocabulary drafts mapped back)."""

    name = "model"
    # Before a draft step is timed: ~0.15 of a one-token target pass (the bundled pair measured
    # 0.1-0.2); α before any draft was tested.
    PRIOR = 0.6
    STEP_COST = 0.15

    def __init__(self, model: Any, vocab_size: int, probs: Probs, greedy: bool,
                 vocab_map: torch.Tensor | None = None, oov_id: int = 0, *,
                 runner: ModelRunner = CachedModel) -> None:
        self.lm = runner(model, vocab_size, vocab_map, oov_id, fast=True)
        self.probs = probs
        self.greedy = greedy
        self._start = 0  # context length when the last proposal was made

    def plan(self, context: Sequence[int]) -> Plan:
        return self.plan_for()

    @classmethod
    def plan_for(cls) -> Plan:
        """Every plan of the draft model: its priors, and confidences to stop by."""
        return Plan("model", "model", prior=cls.PRIOR, step_cost=cls.STEP_COST, confident=True)

    def propose(self, context: Sequence[int], k: int, rng: Random,
                go_on: GoOn | None = None) -> Proposal:
        """Up to K tokens one by one from q, fewer where ``go_on`` stops after one; the cache
        gets every drafted token but the last (which is never fed)."""
        self._start = len(context)
        feed = list(context[self.lm.length:])
        rows: list[torch.Tensor] = []
        tokens: list[int] = []
        confidence: list[float] = []
        for i in range(k):
            # Over the draft's own ids where its map allows (CachedModel.local): the same q,
            # the same draws, a third of the work; widened to the target's ids once, below.
            logits = self.lm.feed(feed, keep=1, local=True)[0]  # (V,) or (V_draft,)
            q, sure = self._to_host(logits)
            j = int(q.argmax()) if self.greedy else rng.draw(q)
            x = self.lm.global_id(j)
            rows.append(q)
            tokens.append(x)
            confidence.append(sure if sure is not None else float(q[j]))
            if go_on is not None and i + 1 < k and not go_on(i + 1, confidence[-1]):
                break
            feed = [x]
        q_rows = (self.lm.widen(torch.stack(rows)) if rows
                  else torch.zeros(0, self.lm.vocab_size))
        return Proposal(tuple(tokens), q_rows, "model", tuple(confidence))

    def _to_host(self, logits: torch.Tensor) -> tuple[torch.Tensor, float | None]:
        """q on the host and, greedy, how sure the draft was (q is one-hot there: the softmax
        of the logits says it), in one copy from the device (one sync per draft on a GPU)."""
        q = self.probs(logits)  # (V,)
        if not self.greedy:
            return q.cpu(), None
        sure = torch.softmax(logits.detach().float(), -1).max()  # ()
        if sure.dtype != q.dtype:
            return q.cpu(), float(sure)
        both = torch.cat((q, sure[None])).cpu()  # (V + 1,)
        return both[:-1], float(both[-1])

    def update(self, n_kept: int) -> None:
        # Keep the committed prefix; the extra token is fed with the next proposal.
        self.lm.crop(min(self.lm.length, self._start + n_kept))


class LookupDrafter(DrafterBase):
    """Prompt lookup: copy what followed the most recent earlier occurrence of the suffix.

    Tries suffix lengths n = ngram_max down to ngram_min over prompt + generated ids and,
    for the first n that occurs earlier, proposes the tokens that followed its most recent
    occurrence. An n-gram index grows with the context, so a plan costs O(ngram_max).
    """

    name = "lookup"
    # α before any draft was tested, by match length, as measured at T = 0 on the bundled
    # pair (benchmarks/drafters.py --lookup-alpha: 0.27 / 0.51 / 0.64 / 0.89); no match 0.5.
    PRIORS: ClassVar[dict[int, float]] = {0: 0.5, 1: 0.3, 2: 0.5, 3: 0.65}
    LONG_MATCH_PRIOR = 0.85  # matches of 4 tokens and more
    # A match of ngram_max ids may be the tail of a much longer one: a passage being copied.
    # How far back it really runs (counted up to EXTENT_CAP ids) splits the long matches
    # into keys of their own, each with its own α̂: "lookup:8" for 8 to 15 ids, "lookup:16"
    # for 16 and more (a copy under way is kept far more often than a fresh 4-id match).
    # α at T = 0 on the bundled pair, every position proposing up to 10, by key 4 / 8 / 16:
    # 0.88 / 0.96 / 0.96 on the project's three sets (18 prompts), 0.83 / 0.89 / 0.96 on
    # Spec-Bench's summarization, extraction and RAG (15), 128 tokens each; the first of these
    # is what LONG_MATCH_PRIOR stood for (`benchmarks/drafters.py --lookup-alpha` prints it).
    EXTENT_KEYS: ClassVar[tuple[int, ...]] = (8, 16)
    EXTENT_PRIORS: ClassVar[dict[int, float]] = {8: 0.92, 16: 0.96}
    EXTENT_CAP = 16

    def __init__(self, vocab_size: int, ngram_min: int = 1, ngram_max: int = 4,
                 lookup_k: int = LOOKUP_K) -> None:
        if not 1 <= ngram_min <= ngram_max:
            raise ValueError(f"need 1 <= ngram_min <= ngram_max, got {ngram_min}, {ngram_max}")
        if lookup_k < 1:
            raise ValueError(f"need lookup_k >= 1, got {lookup_k}")
        self.vocab_size = vocab_size
        self.lookup_k = lookup_k
        self.ngram_min = ngram_min
        self.ngram_max = ngram_max
        # n -> n-gram -> latest start i with a token after it (i + n < indexed length).
        self._index: dict[int, dict[tuple[int, ...], int]] = {
            n: {} for n in range(ngram_min, ngram_max + 1)}
        self._indexed: list[int] = []  # the context the index covers
        self._match: tuple[int, int, int] | None = None  # (context length, n, start of copy)

    def _extend_index(self, context: Sequence[int]) -> None:
        old = len(self._indexed)
        if context[:old] != self._indexed:  # not an extension (a new run): start over
            for table in self._index.values():
                table.clear()
            old = 0
            self._indexed = []
        new_len = len(context)
        self._indexed.extend(context[old:])
        for n, table in self._index.items():
            # Starts i whose n-gram is followed by a token: i + n <= new_len - 1.
            for i in range(max(0, old - n), new_len - n):
                table[tuple(self._indexed[i:i + n])] = i

    def find(self, context: Sequence[int]) -> tuple[int, int]:
        """(n, start of the copy) of the longest, most recent earlier match; (0, -1) if none."""
        self._extend_index(context)
        length = len(context)
        for n in range(min(self.ngram_max, length - 1), self.ngram_min - 1, -1):
            start = self._index[n].get(tuple(context[length - n:]))
            if start is not None and start + n < length:
                return n, start + n
        return 0, -1

    def extent(self, context: Sequence[int], n: int, start: int) -> int:
        """How many ids the match of ``n`` ids before ``start`` really runs back (at most
        EXTENT_CAP; ``n`` when it is shorter than ngram_max or none)."""
        if n < self.ngram_max:
            return n
        end = len(context)
        m = n
        while m < self.EXTENT_CAP and start - 1 - m >= 0 and \
                context[start - 1 - m] == context[end - 1 - m]:
            m += 1
        return m

    def plan(self, context: Sequence[int]) -> Plan:
        n, start = self.find(context)
        self._match = (len(context), n, start)
        # The copy runs from ``start`` to the end of the context, at most lookup_k tokens.
        available = min(len(context) - start, self.lookup_k) if n else 0
        return self.plan_for(n, available, self.lookup_k,
                             extent=self.extent(context, n, start) if n else 0)

    @classmethod
    def plan_for(cls, match: int, available: int, budget: int | None = LOOKUP_K,
                 extent: int = 0) -> Plan:
        """The plan of a ``match``-token match with ``available`` tokens to copy; ``extent``:
        how far the match really runs back (see EXTENT_KEYS)."""
        long = [e for e in cls.EXTENT_KEYS if extent >= e]
        if long:
            return Plan("lookup", f"lookup:{long[-1]}", available, match, budget,
                        prior=cls.EXTENT_PRIORS[long[-1]], spans=True)
        prior = cls.PRIORS.get(match, cls.LONG_MATCH_PRIOR)
        return Plan("lookup", f"lookup:{match}", available, match, budget, prior=prior,
                    spans=True)

    def propose(self, context: Sequence[int], k: int, rng: Random,
                go_on: GoOn | None = None) -> Proposal:
        """What followed the match, up to ``k`` tokens; q is one-hot (no randomness drawn)."""
        if self._match is None or self._match[0] != len(context):
            self.plan(context)
        assert self._match is not None
        _, n, start = self._match
        tokens = tuple(context[start:start + k]) if n else ()
        return Proposal(tokens, _one_hot(tokens, self.vocab_size), "lookup")

    def update(self, n_kept: int) -> None:
        self._match = None  # nothing to roll back: the index only ever holds committed ids


class HybridDrafter(DrafterBase):
    """Lookup where the suffix matches earlier text over ``min_match`` tokens, the model else."""

    name = "hybrid"

    def __init__(self, model: ModelDrafter, lookup: LookupDrafter,
                 min_match: int = HYBRID_MIN_MATCH) -> None:
        self.model = model
        self.lookup = lookup
        self.min_match = min_match
        self._last: Drafter = model

    @property
    def calls(self) -> int:
        return self.model.calls

    @property
    def forward_time_s(self) -> float:
        return self.model.forward_time_s

    def _choose(self, context: Sequence[int]) -> tuple[Drafter, Plan]:
        plan = self.lookup.plan(context)
        if plan.available and plan.match >= self.min_match:
            return self.lookup, plan
        return self.model, self.model.plan(context)

    def plan(self, context: Sequence[int]) -> Plan:
        self._last, plan = self._choose(context)
        return plan

    def options(self, context: Sequence[int]) -> list[Plan]:
        """The rule's plan, then the other source's (lookup only where it matched at all)."""
        plan = self.plan(context)
        if self._last is self.lookup:
            return [plan, self.model.plan(context)]
        other = self.lookup.plan(context)
        return [plan, other] if other.available else [plan]

    def follow(self, plan: Plan) -> None:
        self._last = self.lookup if plan.source == "lookup" else self.model

    def propose(self, context: Sequence[int], k: int, rng: Random,
                go_on: GoOn | None = None) -> Proposal:
        # The model's cache lags while lookup drafts; its next proposal catches up over the
        # lookup tokens in one batched forward pass (one feed of every id the cache lacks).
        return self._last.propose(context, k, rng, go_on)

    def update(self, n_kept: int) -> None:
        self._last.update(n_kept)


class NoDrafter(DrafterBase):
    """The target alone: nothing is ever proposed, every round is a plain target step."""

    name = "none"

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size

    def plan(self, context: Sequence[int]) -> Plan:
        return Plan("none", "none", 0)

    def propose(self, context: Sequence[int], k: int, rng: Random,
                go_on: GoOn | None = None) -> Proposal:
        return Proposal((), torch.zeros(0, self.vocab_size), "none")


# Factories, one per registered drafter (registry.py): (pair, settings, tools) -> the drafter
# and the name the events give it (RunStarted.pair.draft).


def _model_drafter(pair: ModelPair, s: Settings, tools: DraftTools,
                   cls: type[ModelDrafter]) -> ModelDrafter:
    # The draft may be calibrated to draw at T × scale (models.TEMPERATURE_SCALE_KEY): q is
    # whatever it draws from, and verify tests against that same q, so exactness holds for
    # any scale; T = 0 stays greedy.
    t_draft = s.temperature * pair.draft_temperature_scale

    def probs(logits: torch.Tensor) -> torch.Tensor:
        return tools.warp(logits, t_draft, s.top_k, s.top_p)

    return cls(pair.draft, pair.vocab_size, probs, s.temperature == 0, pair.draft_vocab_map,
               pair.draft_oov_id, runner=tools.runner)


def build_model_drafter(pair: ModelPair, s: Settings, tools: DraftTools,
                cls: type[ModelDrafter] = ModelDrafter) -> tuple[Drafter, str]:
    """The draft model q at the run's sampling settings (``cls``: a variant, for tests)."""
    return _model_drafter(pair, s, tools, cls), pair.draft_name or "draft"


def build_lookup_drafter(pair: ModelPair, s: Settings, tools: DraftTools) -> tuple[Drafter, str]:
    """Prompt lookup over the run's own text: no draft model."""
    return LookupDrafter(pair.vocab_size, s.ngram_min, s.ngram_max, s.lookup_k), "prompt lookup"


def build_hybrid_drafter(pair: ModelPair, s: Settings, tools: DraftTools,
                 cls: type[ModelDrafter] = ModelDrafter) -> tuple[Drafter, str]:
    """Lookup on a long enough match, the draft model otherwise."""
    model = _model_drafter(pair, s, tools, cls)
    lookup = LookupDrafter(pair.vocab_size, s.ngram_min, s.ngram_max, s.lookup_k)
    return HybridDrafter(model, lookup), f"{pair.draft_name or 'draft'} + prompt lookup"

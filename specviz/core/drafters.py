"""Who proposes the drafts: the draft model, prompt lookup, or a hybrid of the two.

A Drafter sees only the committed context (prompt + generated ids). Each round the engine
asks it for a ``plan`` (which source it would use and how far it could go), lets the K
policy pick K, asks for a ``proposal`` of up to K tokens, each with the q row it was drawn
from, and afterwards tells it how many were kept (``update``) so it can roll its own state
back. p = target, q = draft.

Lookup proposals are exact too: their q is one-hot on x, so x is kept with probability
min(1, p(x)/1) = p(x) and a rejection resamples from norm(max(0, p − onehot(x))), which is p
with x removed. Under that law the round still outputs exactly p (Leviathan et al., thm 3.5
holds for any q, including a point mass).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from .fast_llama import FastLlama, unsupported
from .models import cached_forward, draft_id_table, model_device
from .rng import Random

Probs = Callable[[torch.Tensor], torch.Tensor]  # logits (..., V) -> probabilities (..., V)
# Asked after each drafted token: (tokens drafted so far, the draft's confidence in the last
# one) -> whether to draft another. It may read only the draft's side (its tokens and q):
# then K is a stopping time of the draft's own draws and the output law stays exactly p.
GoOn = Callable[[int, float], bool]

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


class CachedModel:
    """One causal LM with its own KV cache; ``feed`` runs only the ids the cache lacks."""

    def __init__(self, model: Any, vocab_size: int, vocab_map: torch.Tensor | None = None,
                 oov_id: int = 0, fast: bool = False) -> None:
        from transformers import DynamicCache

        self.model = model
        # fast: a plain Llama runs through FastLlama (the draft: its per-token cost is mostly
        # framework); anything FastLlama cannot reproduce keeps transformers' forward.
        self.fast = FastLlama(model) if fast and unsupported(model) is None else None
        self.device = model_device(model)  # parameters may span devices (device_map)
        self.vocab_size = vocab_size
        self.cache = DynamicCache(config=model.config)
        # Sliding-window (and linear-attention) layers drop old states as they go, and a
        # later rollback can then no longer crop. Recording the past keeps them until the next
        # crop, as transformers' own assisted generation does; crop() then trims to the window.
        self.cache.activate_past_recording()  # type: ignore[no-untyped-call]
        self.ids: list[int] = []  # what the cache holds, for checks and debugging
        self.calls = 0
        self.forward_time_s = 0.0
        # Reduced-vocabulary draft: target id -> draft id on the way in, scatter on the way out.
        self.vocab_map = vocab_map.to(self.device) if vocab_map is not None else None
        self.to_local: torch.Tensor | None = None
        if vocab_map is not None:
            self.to_local = draft_id_table(vocab_map, vocab_size, oov_id).to(self.device)
        # An increasing map keeps the target's id order among the model's own ids, so a
        # distribution computed over those ids and widened afterwards (``widen``) is the one
        # computed over the widened logits, ties included (they resolve by id either way); a
        # draw by inverse CDF picks the same id. The draft then samples over its 16,384 ids,
        # not the target's 49,152 (~0.05 ms a token instead of ~0.29 ms here).
        self.local = vocab_map is not None and bool((vocab_map[1:] > vocab_map[:-1]).all())

    @property
    def length(self) -> int:
        return len(self.ids)

    def feed(self, ids: list[int], keep: int, local: bool = False) -> torch.Tensor:
        """Run ``ids`` after the cached prefix; logits of the last ``keep`` positions, (keep, V)
        (with ``local`` and an increasing map: over the model's own ids, (keep, len(map)))."""
        inp = torch.tensor([ids], dtype=torch.long, device=self.device)  # (1, T)
        if self.to_local is not None:
            inp = self.to_local[inp]
        t0 = time.perf_counter()
        if self.fast is not None:
            logits = self.fast.feed(inp[0], keep)  # (keep, V_model)
        else:
            out, self.cache = cached_forward(self.model, self.cache, input_ids=inp,
                                             logits_to_keep=keep)
            logits = out.logits[0, -keep:].to(self.device)  # (keep, V_model)
        self.forward_time_s += time.perf_counter() - t0
        self.ids.extend(ids)
        self.calls += 1
        if self.vocab_map is not None:
            if local and self.local:
                return logits
            full: torch.Tensor = logits.new_full((keep, self.vocab_size), float("-inf"))
            full[:, self.vocab_map] = logits
            return full
        shared: torch.Tensor = logits[:, : self.vocab_size]
        return shared

    def widen(self, rows: torch.Tensor) -> torch.Tensor:
        """Probability rows over the model's own ids (``feed(local=True)``) -> (n, V)."""
        if not self.local:
            return rows
        assert self.vocab_map is not None
        full = rows.new_zeros((rows.shape[0], self.vocab_size))
        full[:, self.vocab_map] = rows
        return full

    def global_id(self, i: int) -> int:
        """The target's id of row position ``i`` of ``feed(local=True)``."""
        return int(self.vocab_map[i]) if self.local and self.vocab_map is not None else i

    def time_pass(self, n: int, token: int) -> float:
        """Seconds of one pass over ``n`` copies of ``token`` after the cached prefix, which is
        left as it was (a calibration: not counted in ``calls`` or ``forward_time_s``)."""
        inp = torch.full((1, n), token, dtype=torch.long, device=self.device)  # (1, n)
        if self.to_local is not None:
            inp = self.to_local[inp]
        t0 = time.perf_counter()
        if self.fast is not None:
            self.fast.feed(inp[0], n)
            seconds = time.perf_counter() - t0
            self.fast.crop(self.length)
            return seconds
        _, self.cache = cached_forward(self.model, self.cache, input_ids=inp, logits_to_keep=n)
        seconds = time.perf_counter() - t0
        self.cache.crop(-n)
        return seconds

    def crop(self, length: int) -> None:
        """Forget everything after the first ``length`` cached tokens (and trim window layers)."""
        extra = max(0, self.length - length)
        if self.fast is not None:
            self.fast.crop(self.length - extra)
        else:  # transformers 5: a negative count to remove; crop(0) trims sliding layers
            self.cache.crop(-extra)
        del self.ids[len(self.ids) - extra:]


@dataclass(frozen=True)
class Plan:
    """What a drafter would do now: its source, the key its α is tracked under, its reach."""

    source: str  # "model" or "lookup": named on every drafted position
    key: str  # finer than source for α estimates, e.g. "lookup:3" for a 3-token match
    available: int | None = None  # most tokens it can propose (None = any number)
    match: int = 0  # lookup: length of the matched suffix (0 = no match)
    # The drafter's own K (lookup: ``lookup_k``), drafted by the fixed and heuristic policies
    # in place of theirs; None = the policy's K (the model drafter).
    budget: int | None = None


@dataclass(frozen=True)
class Proposal:
    tokens: tuple[int, ...]
    q_rows: torch.Tensor  # (len(tokens), V): the distribution each token was drawn from
    source: str
    # The draft's confidence in each token: q(x), or at T = 0 (q one-hot on the argmax) the
    # argmax's softmax probability. Empty for lookup (its q is one-hot by construction).
    confidence: tuple[float, ...] = ()


class Drafter(Protocol):
    """Proposes drafts from the committed context; rolls back when told what was kept."""

    name: str

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

    def update(self, n_kept: int) -> None:
        """The verifier kept the first ``n_kept`` drafts of the last proposal."""
        ...


def _one_hot(tokens: Sequence[int], vocab_size: int) -> torch.Tensor:
    rows = torch.zeros(len(tokens), vocab_size)  # (n, V)
    if tokens:
        rows[torch.arange(len(tokens)), torch.tensor(list(tokens))] = 1.0
    return rows


class ModelDrafter:
    """Today's draft model q with its KV cache (reduced-vocabulary drafts mapped back)."""

    name = "model"

    def __init__(self, model: Any, vocab_size: int, probs: Probs, greedy: bool,
                 vocab_map: torch.Tensor | None = None, oov_id: int = 0) -> None:
        self.lm = CachedModel(model, vocab_size, vocab_map, oov_id, fast=True)
        self.probs = probs
        self.greedy = greedy
        self._start = 0  # context length when the last proposal was made

    @property
    def calls(self) -> int:
        return self.lm.calls

    @property
    def forward_time_s(self) -> float:
        return self.lm.forward_time_s

    def plan(self, context: Sequence[int]) -> Plan:
        return Plan("model", "model")

    def options(self, context: Sequence[int]) -> list[Plan]:
        return [self.plan(context)]

    def follow(self, plan: Plan) -> None:
        pass

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
            q = self.probs(logits).cpu()
            j = int(q.argmax()) if self.greedy else rng.draw(q)
            x = self.lm.global_id(j)
            rows.append(q)
            tokens.append(x)
            # Greedy q is one-hot: the softmax of the logits says how sure the draft was.
            confidence.append(float(torch.softmax(logits.detach().float(), -1).max())
                              if self.greedy else float(q[j]))
            if go_on is not None and i + 1 < k and not go_on(i + 1, confidence[-1]):
                break
            feed = [x]
        q_rows = (self.lm.widen(torch.stack(rows)) if rows
                  else torch.zeros(0, self.lm.vocab_size))
        return Proposal(tuple(tokens), q_rows, "model", tuple(confidence))

    def update(self, n_kept: int) -> None:
        # Keep the committed prefix; the extra token is fed with the next proposal.
        self.lm.crop(min(self.lm.length, self._start + n_kept))


class LookupDrafter:
    """Prompt lookup: copy what followed the most recent earlier occurrence of the suffix.

    Tries suffix lengths n = ngram_max down to ngram_min over prompt + generated ids and,
    for the first n that occurs earlier, proposes the tokens that followed its most recent
    occurrence. An n-gram index grows with the context, so a plan costs O(ngram_max).
    """

    name = "lookup"
    calls = 0
    forward_time_s = 0.0

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

    def plan(self, context: Sequence[int]) -> Plan:
        n, start = self.find(context)
        self._match = (len(context), n, start)
        # The copy runs from ``start`` to the end of the context, at most lookup_k tokens.
        available = min(len(context) - start, self.lookup_k) if n else 0
        return Plan("lookup", f"lookup:{n}", available, n, self.lookup_k)

    def options(self, context: Sequence[int]) -> list[Plan]:
        return [self.plan(context)]

    def follow(self, plan: Plan) -> None:
        pass

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


class HybridDrafter:
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


class NoDrafter:
    """The target alone: nothing is ever proposed, every round is a plain target step."""

    name = "none"
    calls = 0
    forward_time_s = 0.0

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size

    def plan(self, context: Sequence[int]) -> Plan:
        return Plan("none", "none", 0)

    def options(self, context: Sequence[int]) -> list[Plan]:
        return [self.plan(context)]

    def follow(self, plan: Plan) -> None:
        pass

    def propose(self, context: Sequence[int], k: int, rng: Random,
                go_on: GoOn | None = None) -> Proposal:
        return Proposal((), torch.zeros(0, self.vocab_size), "none")

    def update(self, n_kept: int) -> None:
        pass


DRAFTERS = ("model", "lookup", "hybrid")

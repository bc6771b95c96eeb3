"""What the engine, the drafters and the K policies hand each other in a round.

A drafter offers :class:`Plan` s (what it would draft, with its own priors and costs), the
policy answers with a :class:`Choice`, the drafter makes a :class:`Proposal` and the policy
hears the :class:`Outcome`. A drafter that wants the target's outputs of the verify pass asks
with a :class:`TargetRequest` and gets :class:`TargetOutputs`. p = target, q = draft.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import torch

if TYPE_CHECKING:
    from .tree_verify import DraftTree

# Asked after each drafted token: (tokens drafted so far, the draft's confidence in the last
# one) -> whether to draft another. It may read only the draft's side (its tokens and q):
# then K is a stopping time of the draft's own draws and the output law stays exactly p.
GoOn = Callable[[int, float], bool]


@runtime_checkable
class Branching(Protocol):
    """A GoOn that also says where a drafted chain gets a sibling (the cost policy's rule for a
    plan that ``branches``: a model tree weighed against its own chain).

    Asked as a GoOn while the chain (the tree's spine) is drafted, then once with the draft's
    confidence in each spine draft and, per spine context (0: the committed text, i: after
    spine draft i), the draft's expected confidence in a sibling there (None: q has no other
    id). It answers with the contexts that get one. Both read only the draft's side and come
    before any sibling is drawn, so the tree stays exact.
    """

    def __call__(self, drafted: int, confidence: float) -> bool:
        ...

    def branch(self, spine: Sequence[float],
               siblings: Sequence[float | None]) -> tuple[int, ...]:
        ...


@dataclass(frozen=True)
class Plan:
    """What a drafter would do now: its source, the key its α is tracked under, its reach,
    and what the drafter knows of itself before any round is measured (the policy reads these
    instead of knowing drafters by name)."""

    source: str  # who drafts, e.g. "model" or "lookup": named on every drafted position
    key: str  # finer than source for α estimates, e.g. "lookup:3" for a 3-token match
    available: int | None = None  # most tokens it can propose (None = any number)
    match: int = 0  # lookup: length of the matched suffix (0 = no match)
    # The drafter's own K (lookup: ``lookup_k``), drafted by the fixed and heuristic policies
    # in place of theirs; None = the policy's K (the model drafter).
    budget: int | None = None
    prior: float = 0.5  # α before any draft of this key was tested
    # Seconds per drafted token before any was timed, as a share of a one-token target pass
    # (a draft model ~0.15; a copy 0).
    step_cost: float = 0.0
    # Copied spans are mostly kept whole or lost at once: α̂ of a round's first draft and of
    # the drafts after a kept one are learned apart.
    spans: bool = False
    # Each draft comes with the draft's confidence in it (Proposal.confidence), so a policy
    # may stop drafting by it (a stopping time of the draft's own draws).
    confident: bool = False
    # The drafter drafts a chain by confidence and may put a sibling beside it where the draft
    # is unsure (model-tree): a policy's stop rule may then be ``Branching``.
    branches: bool = False


@dataclass(frozen=True)
class Proposal:
    tokens: tuple[int, ...]
    q_rows: torch.Tensor  # (len(tokens), V): the distribution each token was drawn from
    source: str
    # The draft's confidence in each token: q(x), or at T = 0 (q one-hot on the argmax) the
    # argmax's softmax probability. Empty for lookup (its q is one-hot by construction).
    confidence: tuple[float, ...] = ()
    # A token tree (tree_verify.DraftTree; tokens in node order, q_rows per node: its parent
    # context's q); None: the tokens are a chain.
    tree: DraftTree | None = None


@dataclass(frozen=True)
class Choice:
    k: int
    reason: str
    # > 0: draft up to this many instead, each token asked of the policy's stop_rule.
    stop_cap: int = 0


@dataclass(frozen=True)
class Outcome:
    """What one round did, as a policy needs it."""

    plan: Plan
    k: int  # drafts proposed
    n_accepted: int
    draft_s: float  # time spent drafting
    verify_s: float  # the target's pass (fed = 1 + k tokens, the previous extra token first)
    fed: int  # tokens the target's verify pass ran
    round_s: float  # the whole round, bookkeeping included
    confidence: tuple[float, ...] = ()  # the draft's confidence in each draft (model only)
    # A tree round: each node's parent (-1: the committed text) and what verification did with
    # it ("accepted", "rejected", "discarded": never tested); None / () for a chain.
    parents: tuple[int, ...] | None = None
    statuses: tuple[str, ...] = ()


@dataclass(frozen=True)
class TargetRequest:
    """What a drafter wants of the target's verify pass (transformers' candidate generators
    declare ``requires_model_outputs``; vLLM's EAGLE proposer takes ``target_hidden_states``)."""

    logits: bool = False  # the raw logits of the rows verify reads (K + 1 of them)
    hidden_layers: tuple[int, ...] = ()  # hidden states after these layers (0 = embeddings)


@dataclass(frozen=True)
class TargetOutputs:
    """The target's outputs of one verify pass, handed to the drafter after verification.

    The pass ran ``ids`` at positions ``start`` … ``start + len(ids) − 1`` (the uncached tail
    of the committed text, then the K drafts); the first ``committed`` of them stay in the
    text (the drafts after a rejection do not), and the round's extra token comes after them.
    """

    start: int
    ids: tuple[int, ...]
    committed: int
    logits: torch.Tensor | None = None  # (K + 1, V): the rows after the last K + 1 ids
    hidden: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> (len(ids), H)

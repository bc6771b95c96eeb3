"""Verification of a token tree: several candidates per position, kept exactly (no model, no Qt).

p = target, q = draft. A tree holds draft tokens as nodes; the children of one context (the
root, or a node) are that context's candidates for the next token. Verification walks from
the root: at each context it tests the children in their drawing order with the rule that
matches how they were drawn, descends into the child it keeps, and ends with one extra token
drawn from what the target still owes there (at a leaf: p after the leaf, the bonus).

The three rules (each keeps the emitted token's law exactly p):

- ``independent``: children x_1..x_k drawn i.i.d. from q (SpecInfer's multi-step speculative
  sampling). Keep x_i iff r_i < min(1, p_i(x_i) / q(x_i)); after a rejection
  p_{i+1} = norm(max(0, p_i - q)). None kept: draw from the last p.
- ``without_replacement``: x_i drawn from q_i = q with x_1..x_{i-1} removed and renormalised
  (recursive rejection sampling, Jeon et al. 2024; Sequoia). As above, tested against q_i,
  and after a rejection also q_{i+1} = norm(q_i without x_i).
- ``deterministic``: the draft's top-k, no randomness (EAGLE-2 style): each child is tested as
  drawn from a one-hot q, so x_i is kept with p_i(x_i) = p(x_i) / (1 - Σ p(rejected siblings))
  and the residual after a rejection is p with x_i removed and renormalised.

Contexts are numbered as the target's tree pass returns its rows: context 0 is the root (p
after the committed text), context i + 1 is the text after node i. Randomness comes from
``rng`` in a fixed order (one ``uniform()`` per tested child, one ``draw`` for the extra
token; ``draw_children`` draws the children), so a test can force every branch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, get_args

import torch

from .events import Status
from .rng import Random
from .sampling import acceptance_ratio, residual
from .verify import Verdict

Rule = Literal["independent", "without_replacement", "deterministic"]
RULES: tuple[Rule, ...] = get_args(Rule)
ROOT = -1  # the parent of the root's children
TreeExtraKind = Literal["resampled", "bonus"]


@dataclass(frozen=True)
class DraftTree:
    """Draft tokens as a tree, nodes in drawing order (a parent before its children)."""

    tokens: tuple[int, ...]  # node i's token id
    parents: tuple[int, ...]  # node i's parent node; ROOT for the root's children
    rules: tuple[Rule, ...]  # per context (0 = root, i + 1 = node i): how its children were drawn

    def __post_init__(self) -> None:
        n = len(self.tokens)
        if len(self.parents) != n or len(self.rules) != n + 1:
            raise ValueError(f"a tree of {n} nodes needs {n} parents and {n + 1} rules, got "
                             f"{len(self.parents)} and {len(self.rules)}")
        for i, parent in enumerate(self.parents):
            if not ROOT <= parent < i:
                raise ValueError(f"node {i}'s parent {parent} must come before it")
        for rule in self.rules:
            if rule not in RULES:
                raise ValueError(f"unknown rule {rule!r}; the rules are {', '.join(RULES)}")

    def __len__(self) -> int:
        return len(self.tokens)

    def children(self, context: int) -> list[int]:
        """The nodes whose parent is ``context`` (0 = root, i + 1 = node i), in drawing order."""
        return [i for i, parent in enumerate(self.parents) if parent + 1 == context]

    def depth(self, node: int) -> int:
        """1 for the root's children, 2 for theirs, ..."""
        d = 0
        while node != ROOT:
            node, d = self.parents[node], d + 1
        return d

    def path(self, node: int) -> list[int]:
        """The nodes from the root's child down to ``node`` (inclusive)."""
        out: list[int] = []
        while node != ROOT:
            out.append(node)
            node = self.parents[node]
        return out[::-1]


def chain(tokens: Sequence[int], rule: Rule = "independent") -> DraftTree:
    """A tree of one branch: the plain chain of drafts."""
    n = len(tokens)
    return DraftTree(tuple(tokens), tuple(range(-1, n - 1)), (rule,) * (n + 1))


def draw_children(q: torch.Tensor, k: int, rule: Rule, rng: Random) -> list[int]:
    """Up to ``k`` candidates from q, drawn as ``rule`` says (fewer where q's support ends).

    ``deterministic`` takes q's k most probable ids with q > 0 (ties: lower id first).
    """
    if rule == "deterministic":
        order = torch.sort(q, descending=True, stable=True).indices[:k]
        return [int(i) for i in order if float(q[i]) > 0.0]
    if rule == "independent":
        return [rng.draw(q) for _ in range(k)]
    drawn: list[int] = []
    left = q.clone()
    for _ in range(k):
        if float(left.sum()) <= 0.0:
            break
        x = rng.draw(left)  # draw normalises: q without the ids already drawn, renormalised
        drawn.append(x)
        left[x] = 0.0
    return drawn


@dataclass(frozen=True)
class ChildTest:
    """One child's test: what it was tested against and what happened."""

    node: int
    token: int
    p: torch.Tensor  # (V,) the p it was tested against (after the earlier siblings' residuals)
    q: torch.Tensor  # (V,) the q it was tested against (one-hot for a deterministic child)
    ratio: float  # min(1, p(x) / q(x))
    r: float  # the scaled uniform; kept iff r < ratio
    status: Status  # "accepted" | "rejected"
    residual: torch.Tensor | None  # (V,) the p the next sibling meets, after a rejection


@dataclass(frozen=True)
class NodeDecision:
    """The rule applied over one context's children."""

    context: int  # 0 = root, i + 1 = node i
    rule: Rule
    tests: tuple[ChildTest, ...]  # the children tested, in order; those after a kept one untested
    kept: int | None  # the node kept, None when every child was rejected
    remaining: torch.Tensor  # (V,) the p after the last rejection (the extra's law if none kept)


@dataclass(frozen=True)
class TreeVerdict:
    """What verification decided for one tree."""

    path: tuple[int, ...]  # the nodes kept, root's child first
    accepted_ids: tuple[int, ...]  # their tokens
    statuses: tuple[Status, ...]  # per node: accepted, rejected, or discarded (never tested)
    decisions: tuple[NodeDecision, ...]  # one per context visited that has children
    extra_kind: TreeExtraKind  # "resampled": no child kept; "bonus": the path reached a leaf
    extra_context: int  # the context the extra token follows
    extra_dist: torch.Tensor  # (V,)
    extra_id: int


def verify_children(p: torch.Tensor, q: torch.Tensor, children: Sequence[tuple[int, int]],
                    rule: Rule, rng: Random, *, context: int = 0,
                    lenience: float = 1.0) -> NodeDecision:
    """Test ``children`` ((node, token) in drawing order) at one context by ``rule``."""
    p_i, q_i = p, q
    tests: list[ChildTest] = []
    kept: int | None = None
    for node, x in children:
        q_test = _one_hot(x, p) if rule == "deterministic" else q_i
        ratio = acceptance_ratio(float(p_i[x]), float(q_test[x]))
        u = rng.uniform()  # a fresh uniform per tested child
        r = u if lenience == 1.0 else lenience * u
        if r < ratio:
            tests.append(ChildTest(node, x, p_i, q_test, ratio, float(r), "accepted", None))
            kept = node
            break
        nxt = residual(p_i, q_test)  # norm(max(0, p_i - q_i)): what the target still owes
        tests.append(ChildTest(node, x, p_i, q_test, ratio, float(r), "rejected", nxt))
        p_i = nxt
        if rule == "without_replacement":
            q_i = _without(q_i, x)
    return NodeDecision(context, rule, tuple(tests), kept, p_i)


def verify_tree(tree: DraftTree, p_rows: torch.Tensor, q_rows: torch.Tensor, rng: Random, *,
                greedy: bool = False, lenience: float = 1.0) -> TreeVerdict:
    """Walk the tree from the root, keeping at most one child per context; draw the extra.

    ``p_rows`` is (N+1, V): p at each context (row 0 = root, row i + 1 = after node i);
    ``q_rows`` is (N+1, V): the q each context's children were drawn from (rows of leaves and
    of deterministic contexts are not used by the tests). ``greedy`` takes the extra's
    argmax; ``lenience`` b < 1 tests r = b * u and is no longer exact, as in ``verify``.
    """
    n = len(tree)
    if p_rows.dim() != 2 or p_rows.shape[0] != n + 1:
        raise ValueError(f"p_rows must be ({n + 1}, V) for {n} nodes, got {tuple(p_rows.shape)}")
    if q_rows.shape != p_rows.shape:
        raise ValueError(f"q_rows must be {tuple(p_rows.shape)}, got {tuple(q_rows.shape)}")
    if not 0.0 < lenience <= 1.0:
        raise ValueError(f"lenience must be in (0, 1], got {lenience}")
    statuses: list[Status] = ["discarded"] * n
    decisions: list[NodeDecision] = []
    path: list[int] = []
    context = 0
    extra_kind: TreeExtraKind = "bonus"
    while True:
        children = tree.children(context)
        if not children:  # a leaf: every draft on the path kept, p after it comes free
            dist = p_rows[context]
            break
        decision = verify_children(p_rows[context], q_rows[context],
                                   [(i, tree.tokens[i]) for i in children], tree.rules[context],
                                   rng, context=context, lenience=lenience)
        decisions.append(decision)
        for test in decision.tests:
            statuses[test.node] = test.status
        if decision.kept is None:
            dist, extra_kind = decision.remaining, "resampled"
            break
        path.append(decision.kept)
        context = decision.kept + 1
    extra_id = int(dist.argmax()) if greedy else rng.draw(dist)
    return TreeVerdict(tuple(path), tuple(tree.tokens[i] for i in path), tuple(statuses),
                       tuple(decisions), extra_kind, context, dist, extra_id)


def _one_hot(x: int, like: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(like)
    out[x] = 1.0
    return out


def _without(q: torch.Tensor, x: int) -> torch.Tensor:
    """q with x removed, renormalised (all zero once q's support is spent)."""
    out = q.clone()
    out[x] = 0.0
    mass = float(out.sum())
    return out / mass if mass > 0.0 else out


def context_rows(tree: DraftTree, node_rows: torch.Tensor) -> torch.Tensor:
    """Per node q rows (N, V) (the q each node was drawn from: its parent context's) -> per
    context rows (N+1, V) for ``verify_tree`` (zeros where a context has no children)."""
    out = node_rows.new_zeros((len(tree) + 1, node_rows.shape[-1]))
    for i, parent in enumerate(tree.parents):
        out[parent + 1] = node_rows[i]
    return out


def as_verdict(verdict: TreeVerdict, tree: DraftTree, p_rows: torch.Tensor,
               q_rows: torch.Tensor) -> Verdict:
    """The chain-shaped ``Verdict`` of a tree (per node, in node order), for the events: the
    tested nodes' ratios and r's, and the untested ones' min(1, p(x) / q(x)) at their parent
    context (q one-hot for a deterministic child); each rejected node's residual."""
    ratios: list[float] = []
    rs: list[float | None] = []
    tested = {t.node: t for d in verdict.decisions for t in d.tests}
    residuals = tuple(tested[i].residual if i in tested else None for i in range(len(tree)))
    for i, x in enumerate(tree.tokens):
        test = tested.get(i)
        if test is not None:
            ratios.append(test.ratio)
            rs.append(test.r)
            continue
        c = tree.parents[i] + 1
        q_x = 1.0 if tree.rules[c] == "deterministic" else float(q_rows[c, x])
        ratios.append(acceptance_ratio(float(p_rows[c, x]), q_x))
        rs.append(None)
    return Verdict(n_accepted=len(verdict.path), statuses=verdict.statuses,
                   ratios=tuple(ratios), rs=tuple(rs), extra_kind=verdict.extra_kind,
                   extra_dist=verdict.extra_dist, extra_id=verdict.extra_id,
                   residuals=residuals)

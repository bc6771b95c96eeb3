"""Drafting token trees: a lookup tree from the context's repeats, a model tree that branches
where the draft is unsure (no model, no Qt here: the model is reached through a callback).

- ``lookup_tree``: where the context's last n-gram occurred several times before, the text that
  followed each occurrence (longest matches first, then the most recent) is a branch;
  branches sharing a start share nodes. Nothing is drawn, so every context's children are
  ``deterministic``; each context's q is the share of the occurrences through it that go on
  with each child (what the view shows; verification tests the children as one-hot drafts).
- ``grow_tree``: level by level, each context gets one child where the draft is confident (its
  top q at least ``confident``) and ``width`` where it is not, drawn from q by ``rule``; one
  ``score_level`` call per level gives q after each new node. The shape is a function of the
  draft's own q, which keeps verification exact (as the confidence stop keeps a chain exact).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from .drafters import DrafterBase, DraftTools
from .plans import GoOn, Plan, Proposal
from .rng import Random
from .tree_verify import ROOT, DraftTree, Rule, draw_children

if TYPE_CHECKING:
    from .events import Settings
    from .models import ModelPair

# score_level(tokens, parents, fed) -> (N - fed, V) q after each node from ``fed`` on.
ScoreLevel = Callable[[Sequence[int], Sequence[int], int], torch.Tensor]


@dataclass(frozen=True)
class TreeProposal:
    """A drafted tree and the q of each of its contexts."""

    tree: DraftTree
    q_rows: torch.Tensor  # (N+1, V): q at the root and after each node (zeros where not scored)
    source: str  # "lookup" | "model"
    match: int = 0  # lookup: the longest suffix length that occurred earlier


def lookup_tree(context: Sequence[int], vocab_size: int, *, ngram_min: int = 1,
                ngram_max: int = 4, depth: int = 4, width: int = 3,
                max_nodes: int = 16) -> TreeProposal | None:
    """Branches from the earlier occurrences of the context's suffixes.

    Occurrences of the ngram_max-id suffix come first (most recent first), then those of
    shorter suffixes down to ngram_min not already counted; up to ``width`` of them give a
    branch each, the ids that followed, up to ``depth`` (or to the end of the context),
    merged into a trie of at most ``max_nodes`` nodes. None when no suffix occurred earlier.
    """
    if not 1 <= ngram_min <= ngram_max:
        raise ValueError(f"need 1 <= ngram_min <= ngram_max, got {ngram_min}, {ngram_max}")
    length = len(context)
    starts: list[int] = []  # where each continuation starts: longer matches first, then recency
    match = 0
    for n in range(min(ngram_max, length - 1), ngram_min - 1, -1):
        suffix = list(context[length - n:])
        # Occurrences ending before the last id (so something follows), most recent first.
        for i in range(length - n - 1, -1, -1):
            if i + n not in starts and list(context[i:i + n]) == suffix:
                starts.append(i + n)
                match = max(match, n)
    if not starts:
        return None
    tokens: list[int] = []
    parents: list[int] = []
    counts: list[dict[int, int]] = [{}]  # per context: next id -> occurrences through it
    child: dict[tuple[int, int], int] = {}  # (context, id) -> node
    used = 0
    for start in starts:
        if used == width:
            break
        copy = context[start:start + depth]
        at = 0  # context index: 0 = root, i + 1 = node i
        added = False
        for x in copy:
            counts[at][x] = counts[at].get(x, 0) + 1
            node = child.get((at, x))
            if node is None:
                node = child[(at, x)] = len(tokens)
                tokens.append(x)
                parents.append(at - 1)
                counts.append({})
                added = True
            at = node + 1
        used += added  # a continuation already in the tree adds weight, not a branch
    # Breadth-first node order (siblings in insertion order), cut at max_nodes: the top
    # levels of every branch stay, and any first k nodes form a tree (a budget of k cuts it).
    order: list[int] = []
    level = [i for i, parent in enumerate(parents) if parent == ROOT]
    while level:
        order.extend(level)
        level = [i for i, parent in enumerate(parents) if parent in set(level)]
    order = order[:max_nodes]
    new = {old: n for n, old in enumerate(order)}
    q_rows = torch.zeros(len(order) + 1, vocab_size)
    for c, seen in enumerate(counts):
        if c and c - 1 not in new:
            continue
        total = sum(seen.values())
        for x, count in seen.items():
            q_rows[0 if c == 0 else new[c - 1] + 1, x] = count / total
    kind: Rule = "deterministic"  # nothing was drawn
    tree = DraftTree(tuple(tokens[i] for i in order),
                     tuple(ROOT if parents[i] == ROOT else new[parents[i]] for i in order),
                     (kind,) * (len(order) + 1))
    return TreeProposal(tree, q_rows, "lookup", match)


def grow_tree(root_q: torch.Tensor, score_level: ScoreLevel, rng: Random, *, depth: int,
              width: int, confident: float, rule: Rule, max_nodes: int = 16) -> TreeProposal:
    """A model tree: one child per confident context, ``width`` elsewhere, ``depth`` levels.

    ``root_q`` is q after the committed text; ``score_level`` is asked once per level but the
    last for q after the level's new nodes. Children are drawn (or taken, ``deterministic``)
    from each context's q by ``rule``; at most ``max_nodes`` nodes in all.
    """
    tokens: list[int] = []
    parents: list[int] = []
    q_rows: list[torch.Tensor] = [root_q]
    frontier = [ROOT]
    for level in range(depth):
        fed = len(tokens)
        for parent in frontier:
            q = q_rows[parent + 1]
            k = 1 if float(q.max()) >= confident else width
            for x in draw_children(q, min(k, max_nodes - len(tokens)), rule, rng):
                tokens.append(x)
                parents.append(parent)
        frontier = list(range(fed, len(tokens)))
        if not frontier:
            break
        if level < depth - 1:
            q_rows.extend(score_level(tokens, parents, fed))  # (new, V): q after each new node
        else:
            q_rows.extend(torch.zeros(len(frontier), root_q.shape[-1], dtype=root_q.dtype))
    tree = DraftTree(tuple(tokens), tuple(parents), (rule,) * (len(tokens) + 1))
    return TreeProposal(tree, torch.stack(q_rows), "model")


class LookupTreeDrafter(DrafterBase):
    """The lookup tree as the engine's drafter: up to K nodes (the policy's, or ``lookup_k``)
    of ``lookup_tree``, each node's q one-hot on its token (nothing is drawn; the tree's
    ``deterministic`` rule verifies it)."""

    name = "lookup-tree"

    def __init__(self, vocab_size: int, ngram_min: int = 1, ngram_max: int = 4,
                 lookup_k: int = 10, width: int = 3, depth: int = 8) -> None:
        if not 1 <= ngram_min <= ngram_max:
            raise ValueError(f"need 1 <= ngram_min <= ngram_max, got {ngram_min}, {ngram_max}")
        self.vocab_size = vocab_size
        self.ngram_min, self.ngram_max = ngram_min, ngram_max
        self.lookup_k, self.width, self.depth = lookup_k, width, depth
        self._last: tuple[int, TreeProposal | None] | None = None  # (context length, tree)

    def _tree(self, context: Sequence[int]) -> TreeProposal | None:
        if self._last is None or self._last[0] != len(context):
            self._last = (len(context), lookup_tree(
                context, self.vocab_size, ngram_min=self.ngram_min, ngram_max=self.ngram_max,
                depth=self.depth, width=self.width, max_nodes=self.lookup_k))
        return self._last[1]

    def plan(self, context: Sequence[int]) -> Plan:
        found = self._tree(context)
        n = len(found.tree) if found is not None else 0
        match = found.match if found is not None else 0
        return Plan("lookup", f"lookup:{match}", n, match, self.lookup_k, spans=True)

    def propose(self, context: Sequence[int], k: int, rng: Random,
                go_on: GoOn | None = None) -> Proposal:
        """The first ``k`` nodes (parents come first, so they form a tree)."""
        found = self._tree(context)
        if found is None or k < 1:
            return Proposal((), torch.zeros(0, self.vocab_size), "lookup")
        full = found.tree
        tree = DraftTree(full.tokens[:k], full.parents[:k], full.rules[:k + 1])
        rows = torch.zeros(len(tree), self.vocab_size)  # (N, V): one-hot on each node's id
        rows[torch.arange(len(tree)), torch.tensor(tree.tokens)] = 1.0
        return Proposal(tree.tokens, rows, "lookup", tree=tree)

    def update(self, n_kept: int) -> None:
        self._last = None


def build_lookup_tree_drafter(pair: ModelPair, s: Settings,
                              tools: DraftTools) -> tuple[LookupTreeDrafter, str]:
    """The lookup tree over the run's own text: no draft model."""
    return LookupTreeDrafter(pair.vocab_size, s.ngram_min, s.ngram_max, s.lookup_k), \
        "lookup tree"

"""Drafting token trees: a lookup tree from the context's repeats, a model tree that branches
where the draft is unsure (no Qt; ``grow_tree`` reaches the model through a callback, the
``ModelTreeDrafter`` runs it on its own cache through ``tree_attention``).

- ``lookup_tree``: where the context's last n-gram occurred several times before, the text that
  followed each occurrence (longest matches first, then the most recent) is a branch;
  branches sharing a start share nodes. The first branch is the ``lookup`` chain's copy,
  whole, and comes first in node order, so any budget keeps the chain before adding other
  branches (a tree of K nodes holds the chain of K drafts). Nothing is drawn, so every
  context's children are ``deterministic``; each context's q is the share of the occurrences
  through it that go on with each child (what the view shows; verification tests the
  children as one-hot drafts).
- ``grow_tree``: level by level, each context gets one child where the draft is confident (its
  top q at least ``confident``) and ``width`` where it is not, drawn from q by ``rule``; one
  ``score_level`` call per level gives q after each new node. The shape is a function of the
  draft's own q, which keeps verification exact (as the confidence stop keeps a chain exact).
  A node budget ranks a level's slots by path score (``grow_tree``).
- ``ModelTreeDrafter`` (registered as ``model-tree``): ``grow_tree`` on the draft model, one
  draft pass per level through the tree mask, K = the node budget; after verification its
  cache keeps only the accepted path (``kept_path``), as the target's does. Under the cost
  policy (a ``Branching`` rule) it drafts the chain drafter's chain instead and puts a leaf
  sibling beside it where the policy finds the tree faster at the measured v(width).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import torch

from . import tree_attention
from .cached_model import CachedModel, ModelRunner
from .drafters import (
    DrafterBase,
    DraftTools,
    LookupDrafter,
    ModelBackedDrafter,
    ModelDrafter,
    Probs,
)
from .plans import Branching, GoOn, Plan, Proposal
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
                max_nodes: int = 16, q_rows: bool = True) -> TreeProposal | None:
    """Branches from the earlier occurrences of the context's suffixes.

    Occurrences of the ngram_max-id suffix come first (most recent first), then those of
    shorter suffixes down to ngram_min not already counted; up to ``width`` of them give a
    branch each, the ids that followed, up to ``depth`` (or to the end of the context),
    merged into a trie of at most ``max_nodes`` nodes. None when no suffix occurred earlier.

    Nodes come branch by branch: first the whole first branch, which is the chain's own copy
    (``LookupDrafter``'s longest, most recent match, to the same depth), then each later
    branch's nodes that the branches before it do not share. A cut (``max_nodes``, or a
    proposal's first k nodes) keeps a prefix of that order: it is always a tree, and it never
    shortens the first branch to make room for others, so a tree of k nodes holds the chain
    of k drafts (up to the copy's length) and can only add to what that chain keeps.
    ``q_rows`` False: the proposal's q rows are left empty, (0, V) (the engine's drafter reads
    the tree alone; (N + 1, V) zeros are ~3 MB a round at a 49k vocabulary).
    """
    if not 1 <= ngram_min <= ngram_max:
        raise ValueError(f"need 1 <= ngram_min <= ngram_max, got {ngram_min}, {ngram_max}")
    ids = tuple(context)
    length = len(ids)
    # Where the last id occurred before, most recent first (something follows each): every
    # earlier occurrence of a suffix ends at one of them (one pass, not one per length).
    ends = [j for j in range(length - 2, -1, -1) if ids[j] == ids[-1]]
    starts: list[int] = []  # where each continuation starts: longer matches first, then recency
    seen: set[int] = set()
    match = 0
    for n in range(min(ngram_max, length - 1), ngram_min - 1, -1):
        suffix = ids[length - n:]
        for j in ends:  # the occurrence ids[j - n + 1 .. j]
            if j + 1 not in seen and j >= n - 1 and ids[j - n + 1:j + 1] == suffix:
                starts.append(j + 1)
                seen.add(j + 1)
                match = max(match, n)
    if not starts:
        return None
    tokens: list[int] = []  # node order: branch by branch, each branch's new nodes root-first
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
                if len(tokens) == max_nodes:
                    break  # the budget is spent: the branches before keep their depth
                node = child[(at, x)] = len(tokens)
                tokens.append(x)
                parents.append(at - 1)
                counts.append({})
                added = True
            at = node + 1
        used += added  # a continuation already in the tree adds weight, not a branch
    q = torch.zeros(len(tokens) + 1 if q_rows else 0, vocab_size)
    for c, after in enumerate(counts if q_rows else ()):
        total = sum(after.values())
        for x, count in after.items():
            q[c, x] = count / total
    kind: Rule = "deterministic"  # nothing was drawn
    tree = DraftTree(tuple(tokens), tuple(parents), (kind,) * (len(tokens) + 1))
    return TreeProposal(tree, q, "lookup", match)


def grow_tree(root_q: torch.Tensor, score_level: ScoreLevel, rng: Random, *, depth: int,
              width: int, confident: float, rule: Rule, max_nodes: int = 16) -> TreeProposal:
    """A model tree: one child per confident context, ``width`` elsewhere, ``depth`` levels.

    ``root_q`` is q after the committed text; ``score_level`` is asked once per level that
    gets children after it (never for the last level) for q after the level's new nodes.
    Children are drawn (or taken, ``deterministic``) from each context's q by ``rule``; at most
    ``max_nodes`` nodes in all. Where a level wants more than the budget left, its slots are
    ranked by path score (the product of q along the path): a context's i-th slot scores its
    own path score times q's i-th largest probability there, so each context keeps a prefix
    of its slots, and how many is decided from q alone, before any child is drawn (a count that
    depended on the drawn children would bias them; ties: the earlier context, then slot).
    """
    tokens: list[int] = []
    parents: list[int] = []
    q_rows: list[torch.Tensor] = [root_q]
    scores: list[float] = [1.0]  # per context: the product of q along its path
    frontier = [ROOT]
    for level in range(depth):
        fed = len(tokens)
        slots: list[tuple[float, int, int, int]] = []  # (-score, frontier index, slot, parent)
        for f, parent in enumerate(frontier):
            q = q_rows[parent + 1]
            k = 1 if float(q.max()) >= confident else width
            top = torch.sort(q, descending=True, stable=True).values[:k]
            slots.extend((-scores[parent + 1] * float(t), f, i, parent)
                         for i, t in enumerate(top) if float(t) > 0.0)
        room = max_nodes - fed
        counts = dict.fromkeys(frontier, 0)
        for _, _, _, parent in sorted(slots)[:room]:
            counts[parent] += 1
        for parent in frontier:
            q = q_rows[parent + 1]
            for x in draw_children(q, counts[parent], rule, rng):
                tokens.append(x)
                parents.append(parent)
                scores.append(scores[parent + 1] * float(q[x]))
        frontier = list(range(fed, len(tokens)))
        if not frontier:
            break
        if level < depth - 1 and len(tokens) < max_nodes:
            q_rows.extend(score_level(tokens, parents, fed))  # (new, V): q after each new node
        else:  # the last level: nothing is drawn after it
            q_rows.extend(torch.zeros(len(frontier), root_q.shape[-1], dtype=root_q.dtype))
            break
    tree = DraftTree(tuple(tokens), tuple(parents), (rule,) * (len(tokens) + 1))
    return TreeProposal(tree, torch.stack(q_rows), "model")


class LookupTreeDrafter(DrafterBase):
    """The lookup tree as the engine's drafter: up to K nodes (the policy's, or ``lookup_k``)
    of ``lookup_tree``, each node's q one-hot on its token (nothing is drawn; the tree's
    ``deterministic`` rule verifies it).

    Its first branch is the ``lookup`` chain's copy to the chain's depth (``lookup_k`` unless
    ``depth`` says less) and its plan is the chain's (the same match, prior and budget), so a
    round of K nodes verifies the chain's K drafts first and other branches only with nodes
    the chain's copy leaves spare."""

    name = "lookup-tree"

    def __init__(self, vocab_size: int, ngram_min: int = 1, ngram_max: int = 4,
                 lookup_k: int = 10, width: int = 3, depth: int | None = None) -> None:
        if not 1 <= ngram_min <= ngram_max:
            raise ValueError(f"need 1 <= ngram_min <= ngram_max, got {ngram_min}, {ngram_max}")
        self.vocab_size = vocab_size
        self.ngram_min, self.ngram_max = ngram_min, ngram_max
        self.lookup_k, self.width = lookup_k, width
        self.depth = lookup_k if depth is None else depth
        self._last: tuple[int, TreeProposal | None] | None = None  # (context length, tree)
        # The chain's own lookup, for the plan's key: its match is the tree's first branch.
        self._chain = LookupDrafter(vocab_size, ngram_min, ngram_max, lookup_k)

    def _tree(self, context: Sequence[int]) -> TreeProposal | None:
        if self._last is None or self._last[0] != len(context):
            self._last = (len(context), lookup_tree(
                context, self.vocab_size, ngram_min=self.ngram_min, ngram_max=self.ngram_max,
                depth=self.depth, width=self.width, max_nodes=self.lookup_k, q_rows=False))
        return self._last[1]

    def plan(self, context: Sequence[int]) -> Plan:
        """The chain's plan (its match, key and prior), reaching the tree's nodes."""
        found = self._tree(context)
        n = len(found.tree) if found is not None else 0
        chain = self._chain.plan(context)
        return replace(chain, available=n)

    def propose(self, context: Sequence[int], k: int, rng: Random,
                go_on: GoOn | None = None) -> Proposal:
        """The first ``k`` nodes (parents come first, so they form a tree). Where they are
        the first branch alone, they go as a plain chain, the ``lookup`` chain's drafts: the
        same verification (q one-hot), through the chain's pass rather than the tree mask's."""
        found = self._tree(context)
        if found is None or k < 1:
            return Proposal((), torch.zeros(0, self.vocab_size), "lookup")
        full = found.tree
        tree = DraftTree(full.tokens[:k], full.parents[:k], full.rules[:k + 1])
        rows = torch.zeros(len(tree), self.vocab_size)  # (N, V): one-hot on each node's id
        rows[torch.arange(len(tree)), torch.tensor(tree.tokens)] = 1.0
        if tree.parents == tuple(range(-1, len(tree) - 1)):
            return Proposal(tree.tokens, rows, "lookup")
        return Proposal(tree.tokens, rows, "lookup", tree=tree)

    def update(self, n_kept: int) -> None:
        self._last = None


class ModelTreeDrafter(ModelBackedDrafter):
    """The draft model grows a tree of up to K nodes (``grow_tree``): ``width`` children where
    its top q is below ``confident``, one where it is at least that (a chain where it is sure
    throughout), at most ``depth`` levels (default K), one draft pass per level through the
    tree mask. Children are drawn without replacement at T > 0 (verified by that rule) and are
    the draft's top-k at T = 0 (``deterministic``: ranked by the draft's softmax, q one-hot);
    ``rule`` picks another. After verification ``kept_path`` keeps the accepted path in the
    draft's cache (a crop would keep the first nodes, whatever branch they are on)."""

    name = "model-tree"
    PRIOR = ModelDrafter.PRIOR
    STEP_COST = ModelDrafter.STEP_COST

    def __init__(self, model: object, vocab_size: int, probs: Probs, greedy: bool,
                 vocab_map: torch.Tensor | None = None, oov_id: int = 0, *,
                 runner: ModelRunner = CachedModel, width: int = 2, confident: float = 0.6,
                 depth: int | None = None, rule: Rule | None = None, fast: bool = True,
                 tree_pass: tree_attention.TreePass | None = None) -> None:
        if width < 1:
            raise ValueError(f"need width >= 1, got {width}")
        self.lm = runner(model, vocab_size, vocab_map, oov_id, fast=fast)
        self.vocab_size = vocab_size
        self.probs = probs
        self.greedy = greedy
        self.width, self.confident, self.depth = width, confident, depth
        self.rule: Rule = rule or ("deterministic" if greedy else "without_replacement")
        # The layout of the level passes and the path-keeping cache step (the target's kind).
        self.tree_pass = tree_pass or tree_attention.TreePass()
        self._start = 0  # context length when the last proposal was made
        self._fed = 0  # nodes of the last tree in the cache (every level but the last)
        self._spine: int | None = None  # the last proposal's spine drafts (a chain and siblings)
        self._kept: int | None = None  # of them, those on the kept path (``kept_path``)

    def plan(self, context: Sequence[int]) -> Plan:
        return self.plan_for()

    @classmethod
    def plan_for(cls) -> Plan:
        """A model tree's plan: the chain's (confidences to stop by, α tracked under its own
        key "model-tree") that ``branches``. A policy that hands ``propose`` a ``Branching``
        rule (the cost policy) gets its chain, drafted as the chain drafter would, with a
        sibling beside it wherever the rule finds that the tree beats the chain; one that
        hands none (fixed, heuristic) gets ``grow_tree``'s tree of K nodes."""
        return Plan("model", "model-tree", prior=cls.PRIOR, step_cost=cls.STEP_COST,
                    confident=True, branches=True)

    def _dist(self, logits: torch.Tensor) -> torch.Tensor:
        """What children are drawn from or ranked by: q, or at T = 0 the draft's softmax."""
        if self.greedy:
            return torch.softmax(logits.detach().float(), -1).cpu()
        return self.probs(logits).cpu()

    def propose(self, context: Sequence[int], k: int, rng: Random,
                go_on: GoOn | None = None) -> Proposal:
        """A tree of up to ``k`` nodes (``grow_tree``) or, given a ``go_on``, a chain of up to
        ``k`` drafts that a ``Branching`` one may give siblings (``_spine_and_siblings``)."""
        self._start = len(context)
        self._fed = 0
        self._spine = None
        if k < 1:
            return Proposal((), torch.zeros(0, self.vocab_size), "model")
        if go_on is not None:
            return self._spine_and_siblings(context, k, rng, go_on)
        root = self._dist(self.lm.feed(list(context[self.lm.length:]), keep=1)[0])  # (V,)

        def score_level(tokens: Sequence[int], parents: Sequence[int],
                        fed: int) -> torch.Tensor:
            self._fed = len(tokens)
            return self._dist(tree_attention.runner_score_level(
                self.lm, tokens, parents, fed, self.tree_pass.layout))

        grown = grow_tree(root, score_level, rng, depth=self.depth or k, width=self.width,
                          confident=self.confident, rule=self.rule, max_nodes=k)
        tree = grown.tree
        # Per node: the q it was drawn from (its parent context's); one-hot where taken.
        at = [parent + 1 for parent in tree.parents]
        if self.rule == "deterministic":
            rows = torch.zeros(len(tree), self.vocab_size)  # (N, V)
            rows[torch.arange(len(tree)), torch.tensor(tree.tokens)] = 1.0
        else:
            rows = grown.q_rows[at]  # (N, V)
        # No confidences: the cost policy reads them per position of a chain.
        return Proposal(tree.tokens, rows, "model", tree=tree)

    def _spine_and_siblings(self, context: Sequence[int], k: int, rng: Random,
                            go_on: GoOn) -> Proposal:
        """The chain drafter's chain (one draft pass per draft, stopped by ``go_on``), then,
        if ``go_on`` is ``Branching``, one sibling at each spine context it names: the
        draft's second choice at T = 0 (``deterministic``), else drawn from q without the
        spine's draft there (``without_replacement``). A sibling is a leaf (never fed to the
        draft): kept, it brings one token where the chain's draft there was rejected.

        Each context's sibling candidate is described to the rule before it is drawn, by what
        the draft expects of it: at T = 0 q₂ / (1 − q₁) of the draft's softmax (its second id
        after the first's rejection), else Σ q′(y)² with q′ = q without the spine's draft,
        renormalised (a drawn sibling's expected q′): the siblings' count depends on q and on
        the spine's draws only, never on a sibling's own draw."""
        feed = list(context[self.lm.length:])
        # Over the draft's own ids where its map allows (as the chain drafter drafts: the same
        # q, the same draws); widened to the target's ids for the rows.
        dists: list[torch.Tensor] = []  # per spine context: what children are drawn / ranked by
        local: list[int] = []  # per spine draft: its id in ``dists``
        tokens: list[int] = []
        confidence: list[float] = []
        for i in range(k):
            logits = self.lm.feed(feed, keep=1, local=True)[0]  # (V,) or (V_draft,)
            dist = self._dist(logits)
            j = int(dist.argmax()) if self.greedy else rng.draw(dist)
            x = self.lm.global_id(j)
            dists.append(dist)
            local.append(j)
            tokens.append(x)
            confidence.append(float(dist[j]))
            if i + 1 < k and not go_on(i + 1, confidence[-1]):
                break
            feed = [x]
        spine = len(tokens)
        self._spine = spine
        rows = (torch.zeros(spine, self.vocab_size) if self.greedy  # (n, V): one-hot at T = 0
                else self.lm.widen(torch.stack(dists)))
        if self.greedy:
            rows[torch.arange(spine), torch.tensor(tokens)] = 1.0
        chain = Proposal(tuple(tokens), rows, "model", tuple(confidence))
        if not isinstance(go_on, Branching) or self.width < 2:
            return chain
        expected = [self._sibling_confidence(d, x) for d, x in zip(dists, local, strict=True)]
        at = go_on.branch(tuple(confidence), expected)
        if not at:
            return chain
        parents = list(range(-1, spine - 1))
        extra: list[torch.Tensor] = []
        rule: Rule = "deterministic" if self.greedy else "without_replacement"
        for c in sorted(at):
            y = self._sibling(dists[c], local[c], rng)
            if y is None:
                continue
            tokens.append(self.lm.global_id(y))
            parents.append(c - 1)
            # Its context's q (the verifier removes the rejected draft), one-hot at T = 0.
            extra.append(rows[c] if not self.greedy else
                         torch.nn.functional.one_hot(torch.tensor(tokens[-1]),
                                                     self.vocab_size).to(rows.dtype))
            confidence.append(float(expected[c] or 0.0))
        rows = torch.cat([rows, torch.stack(extra)]) if extra else rows
        tree = DraftTree(tuple(tokens), tuple(parents), (rule,) * (len(tokens) + 1))
        return Proposal(tree.tokens, rows, "model", tuple(confidence), tree=tree)

    def _sibling(self, dist: torch.Tensor, main: int, rng: Random) -> int | None:
        """A sibling beside ``main``: the draft's second choice at T = 0, else drawn from q
        without ``main`` (None where q has no other id)."""
        if self.greedy:
            order = torch.sort(dist, descending=True, stable=True).indices
            y = int(order[1]) if int(order[0]) == main else int(order[0])
            return y if float(dist[y]) > 0.0 else None
        left = dist.clone()
        left[main] = 0.0
        if float(left.sum()) <= 0.0:
            return None
        return rng.draw(left)  # draw normalises: q without the spine's draft

    def _sibling_confidence(self, dist: torch.Tensor, main: int) -> float | None:
        """What the draft expects of a sibling beside ``main`` (see ``_spine_and_siblings``);
        None where q has no other id."""
        rest = 1.0 - float(dist[main])
        if rest <= 1e-12:
            return None
        if self.greedy:
            second = float(torch.topk(dist, 2).values[1])
            return min(1.0, second / rest) if second > 0.0 else None
        left = dist.clone()
        left[main] = 0.0
        left = left / left.sum()
        return float((left * left).sum())

    def kept_path(self, path: Sequence[int]) -> None:
        """Keep the committed prefix and the accepted nodes the cache holds (a last-level node
        was never fed: it and the extra token are fed with the next proposal). A spine with
        siblings: the kept spine drafts, a prefix of the cache (a sibling was never fed)."""
        if self._spine is not None:
            self._kept = sum(1 for node in path if node < self._spine)
            return
        cached = [node for node in path if node < self._fed]
        if self.lm.length > self._start:
            self.tree_pass.keep_path(self.lm, self._start, cached)

    def update(self, n_kept: int) -> None:
        if self._spine is not None and self._kept is not None:
            n_kept = self._kept  # a kept sibling is not in the cache
        self._kept = None
        self.lm.crop(min(self.lm.length, self._start + n_kept))


def build_model_tree_drafter(pair: ModelPair, s: Settings, tools: DraftTools,
                             cls: type[ModelTreeDrafter] = ModelTreeDrafter,
                             **options: Any) -> tuple[ModelTreeDrafter, str]:
    """The draft model growing a tree of up to K nodes at the run's sampling settings
    (``cls`` and ``options``: a variant or other widths, for tests and benchmarks)."""
    t_draft = s.temperature * pair.draft_temperature_scale

    def probs(logits: torch.Tensor) -> torch.Tensor:
        return tools.warp(logits, t_draft, s.top_k, s.top_p)

    drafter = cls(pair.draft, pair.vocab_size, probs, s.temperature == 0, pair.draft_vocab_map,
                  pair.draft_oov_id, runner=tools.runner, **options)
    return drafter, f"{pair.draft_name or 'draft'} tree"


def build_lookup_tree_drafter(pair: ModelPair, s: Settings,
                              tools: DraftTools) -> tuple[LookupTreeDrafter, str]:
    """The lookup tree over the run's own text: no draft model."""
    return LookupTreeDrafter(pair.vocab_size, s.ngram_min, s.ngram_max, s.lookup_k), \
        "lookup tree"

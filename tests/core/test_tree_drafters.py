"""Tree drafters: the lookup tree's shape, and whole tree rounds with real tiny Llamas, exact.

A round here is what the engine would do with a tree: the draft grows its tree level by level
through ``score_tree`` passes on its own cache (or the lookup tree reads the context), the
target scores the whole tree in one ``score_tree`` pass on its cache, ``verify_tree`` walks it.
Every random choice is forced (``test_enumeration``'s Forcing: child draws, symbolic r's, the
extra's draw), and the round's sequential conditionals must be the target's p (plain forwards
of the target on each emitted prefix) within total variation 1e-6. Broken variants: a tree
labelled with a rule other than the one its children were drawn by.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from transformers import DynamicCache

from specviz.core import tree_drafters as td
from specviz.core.drafters import LookupDrafter
from specviz.core.models import cached_forward
from specviz.core.rng import Random, TorchRandom
from specviz.core.sampling import logits_to_probs
from specviz.core.tree_attention import score_tree
from specviz.core.tree_verify import ROOT, Rule, verify_tree
from tests.core.test_enumeration import TV_BOUND, enumerate_function
from tests.core.test_tree_verify import Law, Seq, total_variation
from tests.mutation import mutant
from tests.tiny import tiny_llama

V = 6


@dataclass(frozen=True)
class Sampling:
    temperature: float
    top_k: int = 0
    top_p: float = 1.0

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        return logits_to_probs(logits, self.temperature, self.top_k, self.top_p)


class Pair:
    """Tiny fp64 Llamas (target seed 2, draft seed 1) with prefilled caches per prompt."""

    def __init__(self) -> None:
        self.target = tiny_llama(V, seed=2, hidden=16, layers=1, sharpness=3.0)
        self.draft = tiny_llama(V, seed=1, hidden=16, layers=1, sharpness=3.0)
        self.prefilled: dict[tuple[int, Seq], tuple[Any, torch.Tensor]] = {}
        self.plain: dict[Seq, torch.Tensor] = {}
        # Memos of the tree passes, keyed by everything they read (sampling fixed per Pair).
        self.levels: dict[Any, torch.Tensor] = {}
        self.scored: dict[Any, torch.Tensor] = {}

    def cache(self, model: Any, ids: Seq) -> tuple[Any, torch.Tensor]:
        """A fresh copy of ``model``'s cache after ``ids``, and its last logits."""
        key = (id(model), ids)
        if key not in self.prefilled:
            cache = DynamicCache(config=model.config)
            with torch.no_grad():
                out, cache = cached_forward(model, cache, input_ids=torch.tensor([list(ids)]))
            self.prefilled[key] = (cache, out.logits[0, -1])
        cache, last = self.prefilled[key]
        return copy.deepcopy(cache), last

    def target_logits(self, ids: Seq) -> torch.Tensor:
        if ids not in self.plain:
            with torch.no_grad():
                self.plain[ids] = self.target(torch.tensor([list(ids)])).logits[0, -1]
        return self.plain[ids]


PAIR: list[Pair] = []


def pair() -> Pair:
    if not PAIR:
        PAIR.append(Pair())
    return PAIR[0]


def model_proposal(pr: Pair, s: Sampling, prompt: Seq, rng: Random, rule: Rule, width: int,
                   depth: int, confident: float, grow: Callable[..., td.TreeProposal] = td.grow_tree
                   ) -> td.TreeProposal:
    """The draft grows a tree after ``prompt``: one ``score_tree`` pass per level, each after
    the levels before it in the draft's cache (memoised: the first path to reach a tree so far
    runs its pass, on a fresh cache that the earlier levels are replayed into in one pass)."""
    _, last = pr.cache(pr.draft, prompt)

    def score_level(tokens: Sequence[int], parents: Sequence[int], fed: int) -> torch.Tensor:
        key = (s, prompt, tuple(tokens), tuple(parents), fed)
        if key not in pr.levels:
            cache, _ = pr.cache(pr.draft, prompt)
            with torch.no_grad():
                if fed:
                    _, cache = score_tree(pr.draft, cache, [], tokens[:fed], parents[:fed])
                logits, _ = score_tree(pr.draft, cache, [], tokens, parents, fed)
            pr.levels[key] = s.probs(logits)
        return pr.levels[key]

    return grow(s.probs(last), score_level, rng, depth=depth, width=width, confident=confident,
                rule=rule)


def target_round(pr: Pair, s: Sampling, prompt: Seq, proposal: td.TreeProposal,
                 rng: Random) -> Seq:
    tree = proposal.tree
    key = (s, prompt, tree.tokens, tree.parents)
    if key not in pr.scored:
        cache, _ = pr.cache(pr.target, prompt[:-1])
        with torch.no_grad():
            logits, _ = score_tree(pr.target, cache, prompt[-1:], tree.tokens, tree.parents)
        pr.scored[key] = s.probs(logits)
    verdict = verify_tree(tree, pr.scored[key], proposal.q_rows, rng,
                          greedy=s.temperature == 0)
    return verdict.accepted_ids + (verdict.extra_id,)


def conditional_distance(law: Law, p_after: Callable[[Seq], torch.Tensor]) -> float:
    """max over emitted prefixes s (the round going on) of TV(next emitted id, p after s)."""
    mass: dict[Seq, dict[Seq, float]] = {}
    for out, pr in law.items():
        for j in range(len(out)):
            nxt = mass.setdefault(out[:j], {})
            nxt[(out[j],)] = nxt.get((out[j],), 0.0) + pr
    worst = 0.0
    for s, nxt in mass.items():
        total = sum(nxt.values())
        p = {(x,): px for x, px in enumerate(p_after(s).tolist()) if px > 0}
        worst = max(worst, total_variation({k: v / total for k, v in nxt.items()}, p))
    return worst


PROMPT: Seq = (0, 3, 4)
REPEATS: Seq = (0, 3, 4, 5, 3, 4, 3, 3, 4, 5, 5, 3, 4)  # "3 4" was followed by 5, 3, 5


@dataclass(frozen=True)
class RoundCase:
    s: Sampling
    drafter: str  # "model" | "lookup"
    rule: Rule = "without_replacement"
    width: int = 2
    depth: int = 2
    confident: float = 0.8
    prompt: Seq = PROMPT


def round_fn(case: RoundCase, drafter: Callable[..., Any] | None = None
             ) -> Callable[[Random], Seq]:
    """One round of ``case``; ``drafter`` in place of td.lookup_tree or td.grow_tree (the
    case's) where given (a broken copy: core stays as it is)."""
    pr = pair()

    def fn(rng: Random) -> Seq:
        if case.drafter == "lookup":
            proposal = (drafter or td.lookup_tree)(case.prompt, V, depth=case.depth,
                                                   width=case.width)
            assert proposal is not None
        else:
            proposal = model_proposal(pr, case.s, case.prompt, rng, case.rule, case.width,
                                      case.depth, case.confident, drafter or td.grow_tree)
        return target_round(pr, case.s, case.prompt, proposal, rng)

    return fn


def round_distance(case: RoundCase, drafter: Callable[..., Any] | None = None) -> float:
    pr = pair()
    law = enumerate_function(round_fn(case, drafter))  # type: ignore[arg-type]
    return conditional_distance(law, lambda s: case.s.probs(pr.target_logits(case.prompt + s)))


ROUNDS: dict[str, RoundCase] = {
    # confident 0.39: the draft's top q is ~0.34 at the root, ~0.40 after two of its children
    # and ~0.34 after the third, so the trees take several shapes.
    "model tree, without replacement, T 1, top-k 3": RoundCase(Sampling(1.0, top_k=3),
                                                                "model", confident=0.39),
    "model tree, independent, T 0.8, top-k 2": RoundCase(Sampling(0.8, top_k=2), "model",
                                                         rule="independent"),
    "model tree, top-k children, T 1, top-p 0.9": RoundCase(Sampling(1.0, top_p=0.9), "model",
                                                            rule="deterministic", width=3),
    "model tree, T 0": RoundCase(Sampling(0.0), "model", rule="deterministic"),
    "lookup tree, T 1, top-k 4": RoundCase(Sampling(1.0, top_k=4), "lookup", width=3,
                                           depth=3, prompt=REPEATS),
    "lookup tree, T 0": RoundCase(Sampling(0.0), "lookup", width=3, depth=3, prompt=REPEATS),
}


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


@pytest.mark.parametrize("name", list(ROUNDS))
def test_tree_rounds_are_exact(name: str) -> None:
    tv = round_distance(ROUNDS[name])
    assert tv < TV_BOUND, f"{name}: total variation {tv:.2e}"


@pytest.mark.parametrize("name", ["model tree, without replacement, T 1, top-k 3",
                                  "lookup tree, T 1, top-k 4"])
def test_a_rule_other_than_the_draw_is_caught(name: str) -> None:
    """Broken: the tree says its children were drawn independently from q (without
    replacement, and the lookup's frequencies, were not)."""
    fn = td.lookup_tree if "lookup" in name else td.grow_tree
    site = "(kind,) * (len(tokens) + 1)" if "lookup" in name else "(rule,) * (len(tokens) + 1)"
    tv = round_distance(ROUNDS[name], mutant(fn, (site, '("independent",) ' + site[8:])))
    assert tv > 1e3 * TV_BOUND, f"a mislabelled rule went unnoticed: total variation {tv:.2e}"


def test_model_trees_branch_where_the_draft_is_unsure() -> None:
    """The model cases' trees take more than one shape, and rounds end both ways."""
    shapes: set[int] = set()
    case = ROUNDS["model tree, without replacement, T 1, top-k 3"]
    pr = pair()

    def fn(rng: Random) -> int:
        proposal = model_proposal(pr, case.s, case.prompt, rng, case.rule, case.width,
                                  case.depth, case.confident)
        shapes.add(len(proposal.tree))
        return len(target_round(pr, case.s, case.prompt, proposal, rng))

    lengths = enumerate_function(fn)  # type: ignore[arg-type]
    assert len(shapes) > 1, shapes
    assert {1, 3} <= set(lengths), lengths  # rejected at the root; kept to a leaf (bonus)


def test_lookup_tree_shape() -> None:
    proposal = td.lookup_tree(REPEATS, V, depth=3, width=3)
    assert proposal is not None
    tree = proposal.tree
    # "5 3 4" occurred once before (then 3 3 4); "3 4" also at 7 (then 5 5 3) and at 1 (then
    # 5 3 4); its occurrence at 4 continues where "5 3 4"'s did and counts once.
    paths = [[tree.tokens[i] for i in tree.path(leaf)] for leaf in range(len(tree))
             if not tree.children(leaf + 1)]
    assert paths == [[3, 3, 4], [5, 5, 3], [5, 3, 4]]
    assert [tree.tokens[i] for i in tree.children(0)] == [3, 5]  # 5 shared by two branches
    assert proposal.q_rows[0].tolist() == pytest.approx([0, 0, 0, 1 / 3, 0, 2 / 3])
    assert set(tree.rules) == {"deterministic"}
    assert td.lookup_tree((0, 1, 2), V) is None  # no repeat
    # Branch by branch: the first (the chain's copy) whole, then each later one's new nodes.
    assert tree.tokens == (3, 3, 4, 5, 5, 3, 3, 4)
    assert tree.parents == (ROOT, 0, 1, ROOT, 3, 4, 3, 6)
    cut = td.lookup_tree(REPEATS, V, depth=3, width=3, max_nodes=4)
    assert cut is not None and cut.tree.parents == (ROOT, 0, 1, ROOT)  # a prefix of that
    assert [cut.tree.tokens[i] for i in cut.tree.children(0)] == [3, 5]
    # The drafter: K nodes that are the first branch alone go as the chain (no tree pass).
    drafter = td.LookupTreeDrafter(V, lookup_k=4, depth=3)
    chain = drafter.propose(REPEATS, 3, TorchRandom(0))
    assert chain.tokens == (3, 3, 4) and chain.tree is None
    branched = drafter.propose(REPEATS, 4, TorchRandom(0))
    assert branched.tree is not None and branched.tree.parents == (ROOT, 0, 1, ROOT)


def test_grow_tree_respects_its_budget() -> None:
    q = torch.tensor([0.2, 0.3, 0.5, 0.0])

    def level(tokens: Sequence[int], parents: Sequence[int], fed: int) -> torch.Tensor:
        return q.expand(len(tokens) - fed, 4)

    p = td.grow_tree(q, level, TorchRandom(0), depth=3, width=2, confident=0.9,
                     rule="deterministic", max_nodes=5)
    assert p.tree.tokens == (2, 1, 2, 1, 2) and p.tree.parents == (ROOT, ROOT, 0, 0, 1)
    assert p.q_rows.shape == (6, 4)
    sure = td.grow_tree(q, level, TorchRandom(0), depth=3, width=2, confident=0.4,
                        rule="deterministic")
    assert sure.tree.tokens == (2, 2, 2)  # confident everywhere: a chain


# The lookup tree holds the chain: its first branch is what the ``lookup`` chain would draft,
# whole, before any other branch gets a node. Broken builders, each caught below: the old
# breadth-first cut (shallow levels of every branch kept, the chain's copy cut short), the
# oldest occurrence first (not the chain's most recent), a depth below the chain's lookup_k.
BREADTH_FIRST = (
    ("if len(tokens) == max_nodes:", "if False:"),
    ('    kind: Rule = "deterministic"  # nothing was drawn\n',
     "    level = []\n"
     "    for parent in parents:\n"
     "        level.append(0 if parent == ROOT else level[parent] + 1)\n"
     "    order = sorted(range(len(tokens)), key=lambda i: (level[i], i))[:max_nodes]\n"
     "    new = {old: n for n, old in enumerate(order)}\n"
     "    parents = [ROOT if parents[i] == ROOT else new[parents[i]] for i in order]\n"
     "    tokens = [tokens[i] for i in order]\n"
     '    kind: Rule = "deterministic"\n'),
)
OLDEST_FIRST = (("for j in ends:", "for j in reversed(ends):"),)


def repetitive_contexts(count: int = 80) -> list[Seq]:
    """Random texts over 4 ids, 6 to 40 long (seeded): their suffixes recur, often several
    times, with continuations that agree for a while and then part."""
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(6, 41, (count,), generator=g).tolist()
    return [tuple(torch.randint(0, 4, (n,), generator=g).tolist()) for n in lengths]


def chain_faults(propose: Callable[[Seq, int], tuple[Seq, Seq]], lookup_k: int) -> list[str]:
    """Where a tree of k nodes (``propose``: context, k -> its tokens and parents) does not
    start with the ``lookup`` chain's k drafts as one branch, for every k up to ``lookup_k``."""
    faults = []
    for context in repetitive_contexts():
        chain = LookupDrafter(V, lookup_k=lookup_k)
        for k in range(1, lookup_k + 1):
            want = chain.propose(context, k, TorchRandom(0)).tokens
            tokens, parents = propose(context, k)
            if tokens[:len(want)] != want or parents[:len(want)] != tuple(range(-1, len(want) - 1)):
                faults.append(f"{context} k {k}: chain {want}, tree {tokens} / {parents}")
    return faults


def built(fn: Callable[..., td.TreeProposal | None], lookup_k: int
          ) -> Callable[[Seq, int], tuple[Seq, Seq]]:
    """``fn`` (lookup_tree or a broken copy) at the chain's depth, cut at k nodes."""

    def propose(context: Seq, k: int) -> tuple[Seq, Seq]:
        found = fn(context, V, depth=lookup_k, width=3, max_nodes=k)
        return ((), ()) if found is None else (found.tree.tokens, found.tree.parents)

    return propose


def drafted(drafter: td.LookupTreeDrafter) -> Callable[[Seq, int], tuple[Seq, Seq]]:
    """What the engine's drafter proposes for K = k (after its plan, as the engine asks)."""

    def propose(context: Seq, k: int) -> tuple[Seq, Seq]:
        drafter.plan(context)
        proposal = drafter.propose(context, k, TorchRandom(0))
        drafter.update(0)
        tree = proposal.tree  # None: a chain (the first branch alone)
        return ((proposal.tokens, tuple(range(-1, len(proposal.tokens) - 1))) if tree is None
                else (tree.tokens, tree.parents))

    return propose


def test_the_lookup_trees_first_branch_is_the_chains_copy_whole() -> None:
    assert chain_faults(built(td.lookup_tree, 8), 8) == []
    assert chain_faults(drafted(td.LookupTreeDrafter(V, lookup_k=8)), 8) == []
    # The contexts branch: most trees hold more than the chain.
    trees = [td.lookup_tree(c, V, depth=8, width=3) for c in repetitive_contexts()]
    assert sum(t is not None and len(set(t.tree.parents)) < len(t.tree) for t in trees) > 40


@pytest.mark.parametrize("broken", ["breadth-first cut", "oldest occurrence first",
                                    "depth below lookup_k"])
def test_a_tree_that_cuts_or_replaces_the_chain_is_caught(broken: str) -> None:
    if broken == "depth below lookup_k":  # the drafter's old default: depth 8 under K 16
        propose = drafted(td.LookupTreeDrafter(V, lookup_k=12, depth=8))
        faults = chain_faults(propose, 12)
    else:
        edits = BREADTH_FIRST if broken == "breadth-first cut" else OLDEST_FIRST
        faults = chain_faults(built(mutant(td.lookup_tree, *edits), 8), 8)
    assert faults, f"{broken}: went unnoticed"


def test_the_lookup_trees_plan_is_the_chains() -> None:
    """The same match, key, prior and budget (the policy sizes both alike); its reach counts
    every node."""
    for context in repetitive_contexts(40):
        chain, tree = LookupDrafter(V, lookup_k=8), td.LookupTreeDrafter(V, lookup_k=8)
        a, b = chain.plan(context), tree.plan(context)
        assert (b.key, b.match, b.prior, b.budget, b.spans) == (a.key, a.match, a.prior,
                                                                a.budget, a.spans)
        assert (b.available or 0) >= (a.available or 0)

"""Exact enumeration of token-tree verification: the emitted tokens follow the target's law.

p and q are explicit tables per context (a seeded random row per prefix over V = 3 or 4 ids,
some ids cut to zero so q misses ids p has and p misses ids q proposes); no model is needed.
One round drafts a tree with ``draw_children`` (its rule per context), has ``verify_tree``
walk it, and emits the accepted path's tokens and the extra token. The forcing Random of
``test_enumeration`` takes every branch of every choice: each child draw, each r (a symbolic
interval split by each comparison), each residual or bonus draw, so each round's law is exact.

Two laws are compared with the target's, each within total variation 1e-6:
- the first N = depth + 1 tokens of rounds run one after another (the round's law at every
  context the earlier rounds can reach), against p's own N-token law;
- the round's sequential conditionals: given the tokens emitted before and that the round
  goes on, the next emitted token is distributed as p there (the worst context's TV).

Each rule's broken variant is run through the same check and must be caught.
"""

from __future__ import annotations

import functools
import zlib
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch

from specviz.core.rng import Random, TorchRandom
from specviz.core.tree_verify import (
    ROOT,
    DraftTree,
    Rule,
    TreeVerdict,
    chain,
    draw_children,
    verify_children,
    verify_tree,
)
from tests.core.test_enumeration import TV_BOUND, enumerate_function
from tests.mutation import mutant, with_globals

Seq = tuple[int, ...]
Law = dict[Seq, float]
Table = Callable[[Seq], torch.Tensor]

# A tree's shape: a tuple of the children's shapes (() is a leaf), or a function of the
# context's q giving that (a shape that depends on the draft's confidence).
Shape = tuple["Shape", ...] | Callable[[torch.Tensor], tuple["Shape", ...]]


def table(seed: int, vocab: int, sharpness: float, cut: bool = True) -> Table:
    """A seeded random distribution per prefix; ``cut``: one id zeroed in about half of them."""

    @functools.cache
    def row(prefix: Seq) -> torch.Tensor:
        g = torch.Generator().manual_seed(zlib.crc32(repr((seed, prefix)).encode()))
        logits = torch.randn(vocab, generator=g, dtype=torch.float64) * sharpness
        hole = int(torch.randint(0, 2 * vocab, (), generator=g))
        if cut and hole < vocab:
            logits[hole] = float("-inf")
        return logits.softmax(-1)

    return row


def greedy(t: Table) -> Table:
    """T = 0: all mass on the argmax (first id on ties), as ``logits_to_probs`` does."""

    @functools.cache
    def row(prefix: Seq) -> torch.Tensor:
        r = t(prefix)
        return torch.zeros_like(r).scatter_(0, r.argmax().reshape(1), 1.0)

    return row


@dataclass(frozen=True)
class TreeCase:
    vocab: int
    shape: Shape
    rules: Callable[[int], Rule]  # depth of the context (0 = root) -> how its children are drawn
    p: Table
    q: Table
    greedy: bool = False


def draft_tree(case: TreeCase, prefix: Seq, rng: Random) -> tuple[DraftTree, list[Seq]]:
    """Draw the tree breadth-first; returns it with each context's prefix (0 = root)."""
    tokens: list[int] = []
    parents: list[int] = []
    rules: list[Rule] = []
    contexts: list[Seq] = [prefix]
    queue: list[tuple[int, Shape]] = [(ROOT, case.shape)]
    while queue:
        parent, shape = queue.pop(0)
        ctx = contexts[parent + 1]
        q = case.q(ctx)
        kids = shape(q) if callable(shape) else shape
        rule = case.rules(len(ctx) - len(prefix))
        rules.append(rule)
        for x, kid in zip(draw_children(q, len(kids), rule, rng), kids, strict=False):
            tokens.append(x)
            parents.append(parent)
            contexts.append(ctx + (x,))
            queue.append((len(tokens) - 1, kid))
    # Contexts leave the queue in index order (root, node 0, node 1, ...): rules line up.
    return DraftTree(tuple(tokens), tuple(parents), tuple(rules)), contexts


# verify_tree, or a broken copy of it (the tests below pass one in; core stays as it is)
VerifyTree = Callable[..., TreeVerdict]


def one_round(case: TreeCase, prefix: Seq, rng: Random, verify: VerifyTree = verify_tree) -> Seq:
    """Draft a tree after ``prefix``, verify it with ``verify``; the emitted tokens."""
    tree, contexts = draft_tree(case, prefix, rng)
    p_rows = torch.stack([case.p(c) for c in contexts])  # (N+1, V)
    q_rows = torch.stack([case.q(c) for c in contexts])
    verdict = verify(tree, p_rows, q_rows, rng, greedy=case.greedy)
    return verdict.accepted_ids + (verdict.extra_id,)


def round_law(case: TreeCase, prefix: Seq, verify: VerifyTree = verify_tree) -> Law:
    return enumerate_function(lambda rng: one_round(case, prefix, rng,  # type: ignore[arg-type]
                                                    verify))


def emitted_law(case: TreeCase, n: int, memo: dict[Seq, Law],
                verify: VerifyTree = verify_tree) -> Law:
    """The law of the first n tokens of rounds run one after another (round laws in memo)."""

    def rest(prefix: Seq, left: int) -> Law:
        law: Law = defaultdict(float)
        if prefix not in memo:
            memo[prefix] = round_law(case, prefix, verify)
        for out, pr in memo[prefix].items():
            if len(out) >= left:
                law[out[:left]] += pr
            else:
                for tail, pt in rest(prefix + out, left - len(out)).items():
                    law[out + tail] += pr * pt
        return law

    return dict(rest((), n))


def target_law(p: Table, n: int) -> Law:
    law: Law = {}

    def walk(prefix: Seq, weight: float) -> None:
        if len(prefix) == n:
            law[prefix] = weight
            return
        for x, px in enumerate(p(prefix).tolist()):
            if px > 0:
                walk(prefix + (x,), weight * px)

    walk((), 1.0)
    return law


def total_variation(a: dict[Seq, float], b: dict[Seq, float]) -> float:
    return 0.5 * sum(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in set(a) | set(b))


def conditional_distance(case: TreeCase, law: Law) -> float:
    """max over (emitted s, round goes on) of TV(law of the next emitted token, p after s)."""
    mass: dict[Seq, dict[Seq, float]] = defaultdict(lambda: defaultdict(float))
    for out, pr in law.items():
        for j in range(len(out)):
            mass[out[:j]][(out[j],)] += pr
    worst = 0.0
    for s, nxt in mass.items():
        total = sum(nxt.values())
        p = {(x,): px for x, px in enumerate(case.p(s).tolist()) if px > 0}
        worst = max(worst, total_variation({k: v / total for k, v in nxt.items()}, p))
    return worst


def depth(shape: Shape) -> int:
    assert not callable(shape)
    return 1 + max((depth(kid) for kid in shape), default=0)


def distances(case: TreeCase, n_tokens: bool = True, verify: VerifyTree = verify_tree
              ) -> tuple[float, float]:
    """(TV of the N-token law, N = the tree's depth + 1; worst conditional TV of one round
    at the root). ``n_tokens`` False skips the first (0.0): one round's law is enough to
    catch a broken rule."""
    memo = {(): round_law(case, (), verify)}
    tv_cond = conditional_distance(case, memo[()])
    if not n_tokens:
        return 0.0, tv_cond
    n = depth(case.shape) if not callable(case.shape) else 3  # unsure(2): depth 2
    return total_variation(emitted_law(case, n, memo, verify), target_law(case.p, n)), tv_cond


def every(rule: Rule) -> Callable[[int], Rule]:
    return lambda d: rule


LEAF: Shape = ()
BINARY: Shape = ((LEAF, LEAF), (LEAF, LEAF))  # depth 2, branching 2: 6 nodes
RAGGED: Shape = ((LEAF, LEAF, LEAF), ((LEAF,),))  # depth 3: 3 + 1 under the 2nd child


def unsure(levels: int) -> Shape:
    """Two children where the draft is unsure (its top q below 0.75), one where it is sure,
    for ``levels`` levels: the tree's shape is a function of the draft's own draws."""

    def shape(q: torch.Tensor) -> tuple[Shape, ...]:
        kid = unsure(levels - 1) if levels > 1 else LEAF
        return (kid, kid) if float(q.max()) < 0.75 else (kid,)

    return shape


P3, Q3 = table(seed=1, vocab=3, sharpness=1.5), table(seed=2, vocab=3, sharpness=1.5)
P4, Q4 = table(seed=3, vocab=4, sharpness=1.0), table(seed=4, vocab=4, sharpness=2.0)
CASES: dict[str, TreeCase] = {
    "independent, V 3, binary": TreeCase(3, BINARY, every("independent"), P3, Q3),
    "without replacement, V 3, binary": TreeCase(3, BINARY, every("without_replacement"), P3, Q3),
    "deterministic, V 4, binary": TreeCase(4, BINARY, every("deterministic"), P4, Q4),
    "deterministic, V 4, ragged, depth 3": TreeCase(4, RAGGED, every("deterministic"), P4, Q4),
    "without replacement, V 3, ragged": TreeCase(3, ((LEAF, LEAF, LEAF), (LEAF,)),
                                                 every("without_replacement"), P3, Q3),
    "mixed: sampled root, top-k below, V 4": TreeCase(
        4, BINARY, lambda d: "independent" if d == 0 else "deterministic", P4, Q4),
    "shape from the draft's confidence, V 3": TreeCase(3, unsure(2), every("without_replacement"),
                                                       P3, Q3),
    "T 0, deterministic, V 4": TreeCase(4, BINARY, every("deterministic"), greedy(P4), Q4,
                                        greedy=True),
    "T 0 target, independent draft, V 3": TreeCase(3, BINARY, every("independent"), greedy(P3),
                                                   Q3, greedy=True),
}


@pytest.mark.parametrize("name", list(CASES))
def test_tree_output_law_is_the_targets(name: str) -> None:
    tv_n, tv_cond = distances(CASES[name])
    assert tv_n < TV_BOUND, f"{name}: N-token total variation {tv_n:.2e}"
    assert tv_cond < TV_BOUND, f"{name}: conditional total variation {tv_cond:.2e}"


def test_cases_branch_and_reject() -> None:
    """The cases exercise what they are named for: q far from p, siblings rejected before one
    is kept, rounds ending at a leaf and by a residual, shapes that change with q."""
    seen: set[str] = set()

    def spy(case: TreeCase) -> Callable[[Random], Seq]:
        def fn(rng: Random) -> Seq:
            tree, contexts = draft_tree(case, (), rng)
            seen.add(f"{len(tree)} nodes")
            p_rows = torch.stack([case.p(c) for c in contexts])
            q_rows = torch.stack([case.q(c) for c in contexts])
            v = verify_tree(tree, p_rows, q_rows, rng, greedy=case.greedy)
            seen.add(v.extra_kind)
            for d in v.decisions:
                if d.kept is not None and d.tests[0].status == "rejected":
                    seen.add("kept after a rejected sibling")
            return v.accepted_ids + (v.extra_id,)
        return fn

    for name in ("independent, V 3, binary", "deterministic, V 4, binary",
                 "shape from the draft's confidence, V 3"):
        enumerate_function(spy(CASES[name]))  # type: ignore[arg-type]
    assert {"bonus", "resampled", "kept after a rejected sibling"} <= seen, seen
    assert len({x for x in seen if x.endswith(" nodes")}) >= 3, seen  # shapes vary with q
    for p, q in ((P3, Q3), (P4, Q4)):
        assert total_variation({(x,): v for x, v in enumerate(p(()).tolist())},
                               {(x,): v for x, v in enumerate(q(()).tolist())}) > 0.2


# ---------------------------------------------------------------------------------------------
# Broken rules: each must be caught by the same check.


BROKEN: dict[str, tuple[list[tuple[str, str]], str]] = {
    "a sibling tested against p without the residual update": (
        [("acceptance_ratio(float(p_i[x])", "acceptance_ratio(float(p[x])")],
        "independent, V 3, binary"),
    "a without-replacement child tested against q with the rejected one still in": (
        [("        if rule == \"without_replacement\":\n            q_i = _without(q_i, x)\n", "")],
        "without replacement, V 3, binary"),
    "a one-hot rule without renormalisation (kept with p(x), not p(x) / (1 - rejected))": (
        [("        p_i = nxt\n",
          "        p_i = p_i * (1 - q_test) if rule == 'deterministic' else nxt\n")],
        "deterministic, V 4, binary"),
    "the residual taken against q with the rejected child already removed": (
        [("nxt = residual(p_i, q_test)", "nxt = residual(p_i, _without(q_test, x) "
          "if rule == 'without_replacement' else q_test)")],
        "without replacement, V 3, ragged"),
}


def broken_verify(edits: list[tuple[str, str]]) -> VerifyTree:
    """verify_tree reading a broken copy of verify_children."""
    return with_globals(verify_tree, verify_children=mutant(verify_children, *edits))


@pytest.mark.parametrize("name", list(BROKEN))
def test_broken_rules_are_caught(name: str) -> None:
    edits, case = BROKEN[name]
    _, tv_cond = distances(CASES[case], n_tokens=False, verify=broken_verify(edits))
    assert tv_cond > 1e3 * TV_BOUND, f"{name} went unnoticed on {case!r}: TV {tv_cond:.2e}"


def test_the_broken_rules_pass_where_they_are_harmless() -> None:
    """A chain (one child per context) has no siblings: the first three mutants are exact
    there, so the catches above come from the sibling rules themselves."""
    rules: list[Rule] = ["independent", "without_replacement", "deterministic"]
    for name, rule in zip(list(BROKEN)[:3], rules, strict=True):
        chain_case = TreeCase(3, ((LEAF,),), every(rule), P3, Q3)
        assert max(distances(chain_case, verify=broken_verify(BROKEN[name][0]))) < TV_BOUND, name


# ---------------------------------------------------------------------------------------------
# Plain checks of the data and the drawing.


def test_a_chain_verifies_as_verify_does() -> None:
    """A one-branch tree is the chain: same decisions and extra as ``verify`` on one stream."""
    from specviz.core.verify import verify

    for seed in range(20):
        g = torch.Generator().manual_seed(seed)
        p = torch.softmax(torch.randn(4, 6, generator=g) * 2, -1)
        q = torch.softmax(torch.randn(4, 6, generator=g) * 2, -1)
        drafts = [int(torch.multinomial(q[i], 1, generator=g)) for i in range(3)]
        a = verify(p, q[:3], drafts, TorchRandom(seed))
        b = verify_tree(chain(drafts), p, q, TorchRandom(seed))
        assert a.n_accepted == len(b.path) and a.statuses == b.statuses
        assert a.extra_id == b.extra_id and torch.allclose(a.extra_dist, b.extra_dist)


def test_draw_children_by_rule() -> None:
    q = torch.tensor([0.1, 0.0, 0.6, 0.3])
    assert draw_children(q, 3, "deterministic", TorchRandom(0)) == [2, 3, 0]
    assert draw_children(q, 9, "deterministic", TorchRandom(0)) == [2, 3, 0]  # q > 0 only
    for seed in range(10):
        kids = draw_children(q, 9, "without_replacement", TorchRandom(seed))
        assert sorted(kids) == [0, 2, 3]  # the support, each once
        assert 1 not in draw_children(q, 5, "independent", TorchRandom(seed))


def test_bad_trees_are_refused() -> None:
    with pytest.raises(ValueError, match="parent"):
        DraftTree((1, 2), (ROOT, 1), ("independent",) * 3)
    with pytest.raises(ValueError, match="rules"):
        DraftTree((1,), (ROOT,), ("independent",))
    with pytest.raises(ValueError, match="unknown rule"):
        DraftTree((1,), (ROOT,), ("independent", "greedy"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="p_rows"):
        verify_tree(chain([1]), torch.ones(3, 4) / 4, torch.ones(3, 4) / 4, TorchRandom(0))


def test_tree_helpers() -> None:
    tree = DraftTree((5, 6, 7, 8), (ROOT, ROOT, 0, 2), ("independent",) * 5)
    assert tree.children(0) == [0, 1] and tree.children(1) == [2] and tree.children(3) == [3]
    assert [tree.depth(i) for i in range(4)] == [1, 1, 2, 3]
    assert tree.path(3) == [0, 2, 3]

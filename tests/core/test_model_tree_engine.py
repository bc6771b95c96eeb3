"""The model tree through the engine: exact by enumeration, its draft cache on the kept path.

``test_enumeration``'s machinery runs the real decoder (drafter "model-tree", registered in
``registry.py``) on its real-cache pair (tiny Llamas with real KV caches: the draft grows its
tree through the tree mask on its own cache, the target scores it in one pass) while every
random choice is forced (the children drawn, the symbolic r's, the extra's draw); the output
law must be the target's. The trees reach depth 2 with two children at the root, and some
round keeps the second root child and goes on below it.

Broken variants (subclasses of the drafter, passed in through ``parts.Factory``), each
caught: children drawn without replacement verified by the independent rule, and a node
budget that keeps the best-scored children after drawing them (both move the output law; the
real budget ranks slots by q before any child is drawn); a draft cache cropped to the first
nodes instead of the kept path, or left to ``update``'s crop as if the engine never named the
path (the law stays exact, as it does for any q, but the draft's next q is no longer its q
after the committed text: checked against plain forwards of the draft). And the cost policy
drafts a tree only where its node count pays at the measured v(K + 1).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any

import pytest
import torch

from specviz.core import tree_drafters as td
from specviz.core.engine import CALIBRATION_WIDTHS, SpeculativeDecoder
from specviz.core.events import Event, Round
from specviz.core.parts import Factory
from specviz.core.plans import GoOn, Outcome, Proposal
from specviz.core.policy import CostPolicy
from specviz.core.registry import Entry
from specviz.core.rng import Random, TorchRandom
from specviz.core.tree_verify import DraftTree
from tests.core.test_enumeration import (
    TV_BOUND,
    Case,
    Forcing,
    distance,
    enumerate_law,
    pair_for,
    settings,
)
from tests.mutation import mutant, with_globals


def tree_factory(cls: type[td.ModelTreeDrafter] = td.ModelTreeDrafter, **options: Any) -> Factory:
    """The real parts with "model-tree" built as ``cls`` with ``options``."""
    build = functools.partial(td.build_model_tree_drafter, cls=cls, **options)
    return Factory().with_drafters(Entry("model-tree", "test", build, needs_draft_model=True))


# 3 nodes, 4 tokens: round 1 may draft 3 nodes (2 at the root where the draft is unsure, the
# better-scored child's child below), so the trees reach depth 2 with branching 2. After
# "b c" some rounds reject the first root child and keep the second and its child.
SAMPLED = Case("real caches", settings(3, 1.0, top_k=3, n=4, drafter="model-tree"), "b c")
CASES: dict[str, tuple[Case, dict[str, Any]]] = {
    "without replacement (the default), T 1, top-k 3, 3 nodes": (SAMPLED, {}),
    "without replacement, always 2 children, T 0.7, top-k 3, 3 nodes": (
        Case("real caches", settings(3, 0.7, top_k=3, n=4, drafter="model-tree")),
        {"confident": 1.01}),
    "top-k children, T 1.2, top-k 3, 3 nodes": (
        Case("real caches", settings(3, 1.2, top_k=3, n=4, drafter="model-tree")),
        {"rule": "deterministic", "confident": 1.01}),
    "independent children, T 0.8, top-k 2, 3 nodes": (
        Case("real caches", settings(3, 0.8, top_k=2, n=4, drafter="model-tree")),
        {"rule": "independent", "confident": 1.01}),
    "draft on transformers' forward, T 1, top-k 3, 3 nodes": (SAMPLED, {"fast": False}),
    "T 0 (top-k children), 3 nodes": (
        Case("real caches", settings(3, 0.0, n=4, drafter="model-tree")), {"confident": 1.01}),
}


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


@pytest.mark.parametrize("name", list(CASES))
def test_model_tree_runs_are_exact(name: str) -> None:
    case, options = CASES[name]
    tv = distance(case, tree_factory(**options))
    assert tv < TV_BOUND, f"{name}: total variation {tv:.2e}"


def rounds_of(case: Case, factory: Factory, merge: bool = True) -> list[Round]:
    """Every Round of every path of ``case`` (on the real clock: shapes only); ``merge``: a
    path stops where it reaches a committed text another path went on from."""
    pair = pair_for(case.pair)
    rounds: list[Round] = []

    def start(rng: Forcing) -> Iterator[Event]:
        decoder = SpeculativeDecoder(pair, case.s, factory=factory)
        for event in decoder.run(case.prompt, rng=rng):  # type: ignore[arg-type]
            if isinstance(event, Round):
                rounds.append(event)
            yield event

    enumerate_law(start, merge)
    return rounds


def test_model_trees_branch_and_go_deep() -> None:
    rounds = rounds_of(SAMPLED, tree_factory())
    shapes = {tuple(d.parent for d in r.drafted) for r in rounds}
    assert (-1, -1, 0) in shapes and (-1, -1, 1) in shapes, shapes  # depth 2, branching 2
    assert (-1, 0, 1) in shapes or (-1,) in shapes, shapes  # the draft sure: a chain
    # The second root child kept, and its own child too: a path no chain takes.
    assert any(r.drafted and r.drafted[0].status == "rejected" and r.n_accepted == 2
               for r in rounds)
    for r in rounds:  # the kept nodes form a path from the root
        kept = [i for i, d in enumerate(r.drafted) if d.status == "accepted"]
        for a, b in zip([-1, *kept], kept, strict=False):
            assert r.drafted[b].parent == a


class Checked(td.ModelTreeDrafter):
    """Checks each proposal's distribution at the root (what its children were drawn from or
    ranked by) against the draft's plain forward of the context (what its cache must give),
    and records the contexts it checked."""

    checked: list[int] = []  # noqa: RUF012 - one list per test run, reset by the test

    def _dist(self, logits: torch.Tensor) -> torch.Tensor:
        out = super()._dist(logits)
        self.dists.append(out)
        return out

    def propose(self, context: Sequence[int], k: int, rng: Random,
                go_on: GoOn | None = None) -> Proposal:
        self.dists: list[torch.Tensor] = []
        proposal = super().propose(context, k, rng, go_on)
        if k > 0:
            with torch.no_grad():
                logits = self.lm.model(torch.tensor([list(context)])).logits[0, -1]
            want = td.ModelTreeDrafter._dist(self, logits)  # (V,)
            assert torch.allclose(self.dists[0].double(), want.double(), atol=1e-9), \
                f"the draft's q after {list(context)} is not its plain forward's"
            self.checked.append(len(context))
        return proposal


# Top-k children (none drawn: fewer paths), 2 at every context, 3 nodes: the second root child
# is kept after the first is rejected on some paths, and its node sits in the draft's cache.
CHECKED = Case("real caches", settings(3, 1.0, top_k=2, n=4, drafter="model-tree"), "b c")


def checked_run(case: Case = CHECKED, cls: type[Checked] = Checked) -> list[int]:
    Checked.checked = []
    # Every path to its end: a text reached by two paths (the second root child kept after
    # the first was rejected, or the first kept) is checked after both.
    rounds_of(case, tree_factory(cls=cls, confident=1.01, rule="deterministic"),
              merge=False)
    return Checked.checked


def test_the_draft_cache_keeps_the_accepted_path() -> None:
    checked = checked_run()
    prompt = len(pair_for(CHECKED.pair).tokenizer(CHECKED.prompt)["input_ids"])
    assert any(n > prompt for n in checked)  # rounds after a tree round were checked


class Cropping(Checked):
    """Broken: the draft keeps the first nodes in its cache (a crop), whatever was kept."""

    kept_path = mutant(td.ModelTreeDrafter, (
        "cached = [node for node in path if node < self._fed]",
        "cached = list(range(min(len(path), self._fed)))")).kept_path


class Deaf(Checked):
    """Broken: the drafter ignores the kept path (as if the engine never named it), so
    ``update`` crops its cache to the first nodes."""

    def kept_path(self, path: Sequence[int]) -> None:
        pass


@pytest.mark.parametrize("broken", [Cropping, Deaf])
def test_a_draft_cache_off_the_kept_path_is_caught(broken: type[Checked]) -> None:
    with pytest.raises(AssertionError, match="plain forward"):
        checked_run(cls=broken)


class Mislabelled(td.ModelTreeDrafter):
    """Broken: children drawn without replacement, the tree labelled ``independent`` (each
    sibling tested against the full q, not q without the rejected ones)."""

    def propose(self, context: Sequence[int], k: int, rng: Random,
                go_on: GoOn | None = None) -> Proposal:
        proposal = super().propose(context, k, rng, go_on)
        tree = proposal.tree
        assert tree is not None and set(tree.rules) <= {"without_replacement"}
        wrong = DraftTree(tree.tokens, tree.parents, ("independent",) * (len(tree) + 1))
        return replace(proposal, tree=wrong)


def test_without_replacement_verified_as_independent_is_caught() -> None:
    case, options = CASES["without replacement, always 2 children, T 0.7, top-k 3, 3 nodes"]
    tv = distance(case, tree_factory(cls=Mislabelled, **options))
    assert tv > 1e3 * TV_BOUND, f"a mislabelled rule went unnoticed: total variation {tv:.2e}"


def test_a_tight_budget_keeps_the_best_scored_slots() -> None:
    """Ranked by path score: the sure branch goes deeper, the unsure one stops."""
    sure = torch.tensor([0.0, 0.9, 0.1])  # after node 0 (token 1)
    unsure = torch.tensor([0.5, 0.0, 0.5])
    root = torch.tensor([0.0, 0.6, 0.4])

    def level(tokens: Sequence[int], parents: Sequence[int], fed: int) -> torch.Tensor:
        return torch.stack([sure if tokens[i] == 1 else unsure for i in range(fed, len(tokens))])

    grown = td.grow_tree(root, level, TorchRandom(0), depth=3, width=2, confident=0.8,
                         rule="deterministic", max_nodes=4)
    # Root: 1 (0.6), 2 (0.4). Level 2 slots: under 1 one child (sure) scoring 0.54; under 2
    # two (0.2, 0.2); room for 2: 0.54 and the first 0.2.
    assert grown.tree == DraftTree((1, 2, 1, 0), (-1, -1, 0, 1), ("deterministic",) * 5)



def tree_policy(v: Callable[[int], float], kept: Sequence[int], k: int = 4) -> CostPolicy:
    """The cost policy after tree rounds of ``k`` nodes keeping ``kept`` drafts in turn, on a
    machine whose target pass over n tokens takes v(n) (calibrated and measured alike) and
    whose draft takes 0.05 of a one-token pass per node."""
    policy = CostPolicy(k)
    policy.calibrate({n: v(n) for n in CALIBRATION_WIDTHS})
    plan = td.ModelTreeDrafter.plan_for()
    for _ in range(6):
        for n_acc in kept:
            d, t = 0.05 * v(1) * k, v(k + 1)
            policy.observe(Outcome(plan, k, n_acc, d, t, k + 1, d + t))
    policy.observe(Outcome(plan, 0, 0, 0.0, v(1), 1, v(1)))  # a plain step timed too
    return policy


def cpu(n: int) -> float:
    return 0.08 * (1 + 0.3 * (n - 1))  # each token more costs 0.3 of a one-token pass


def gpu(n: int) -> float:
    return 0.01 * (1 + 0.01 * (n - 1))  # almost flat


def test_the_cost_policy_drafts_a_tree_only_where_it_pays() -> None:
    """K of a tree plan is its node cap, sized on the measured v(K + 1): none where tree
    rounds keep too little for the wider pass (this CPU's steep v), several where the pass
    is almost free (a GPU's); the fixed policy drafts its K whatever it costs."""
    plan = td.ModelTreeDrafter.plan_for()
    poor = [0, 1, 0, 0, 1, 0]  # 1.33 tokens a round
    assert tree_policy(cpu, poor).choose(plan, 64).k == 0
    assert tree_policy(gpu, poor).choose(plan, 64).k >= 1
    good = [2, 3, 1, 2, 3, 2]  # 3.2 tokens a round
    on_cpu, on_gpu = (tree_policy(v, good).choose(plan, 64).k for v in (cpu, gpu))
    assert 1 <= on_cpu < on_gpu, (on_cpu, on_gpu)


# Broken: every wanted slot drawn, then the level's best-scored drawn children kept within
# the budget (how many children a context keeps, and which, now depends on what was drawn).
DRAWN_THEN_RANKED = mutant(td.grow_tree, (
    "for _, _, _, parent in sorted(slots)[:room]:", "for _, _, _, parent in slots:"), (
    "        frontier = list(range(fed, len(tokens)))\n",
    "        keep = sorted(sorted(range(fed, len(tokens)), key=lambda i: -scores[i + 1])[:room])\n"
    "        tokens[fed:] = [tokens[i] for i in keep]\n"
    "        parents[fed:] = [parents[i] for i in keep]\n"
    "        scores[fed + 1:] = [scores[i + 1] for i in keep]\n"
    "        frontier = list(range(fed, len(tokens)))\n"))


class RankedAfterDrawing(td.ModelTreeDrafter):
    propose = with_globals(td.ModelTreeDrafter.propose, grow_tree=DRAWN_THEN_RANKED)


def test_a_budget_ranked_on_the_drawn_children_is_caught() -> None:
    case, options = CASES["without replacement, always 2 children, T 0.7, top-k 3, 3 nodes"]
    tv = distance(case, tree_factory(cls=RankedAfterDrawing, **options))
    assert tv > 1e3 * TV_BOUND, f"a budget chosen after drawing went unnoticed: {tv:.2e}"

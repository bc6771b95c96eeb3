"""The lookup tree through the engine: exact by enumeration, events carry parent links.

``test_enumeration``'s machinery runs the real decoder (drafter "lookup-tree", registered in
``registry.py``) on its real-cache pair (tiny Llamas with real KV caches: the tree pass needs
real attention) while every random choice is forced; the output law must be the target's.
Broken variants, each caught: a target cache that keeps the first nodes instead of the
accepted path (a crop where a gather is needed), and a target pass that reads the tree as a
chain (a causal mask).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest
import torch

from specviz.core import tree_attention
from specviz.core.engine import SpeculativeDecoder
from specviz.core.events import Event, Round, from_json, to_json
from specviz.core.parts import Factory
from specviz.core.tree_attention import TreePass
from tests.core.test_enumeration import (
    TV_BOUND,
    Case,
    Forcing,
    distance,
    enumerate_law,
    pair_for,
    settings,
)
from tests.mutation import mutant

# "a" occurred twice before: the later one was followed by "b a" (the chain's copy: the first
# branch, whole), the first by "c b c a b a" (a second branch at the root, "c", after the
# first's two nodes); both root branches are tested and kept often.
BRANCHES = "a c b c a b a"
CASES = {
    "lookup tree, 4 nodes, T 1, top-k 3, 4 tokens": Case(
        "real caches", settings(2, 1.0, top_k=3, n=4, drafter="lookup-tree", lookup_k=4),
        BRANCHES),
    "lookup tree, 3 nodes, T 0.6, 3 tokens": Case(
        "real caches", settings(2, 0.6, n=3, drafter="lookup-tree", lookup_k=3), BRANCHES),
    "lookup tree, 4 nodes, T 0, 4 tokens": Case(
        "real caches", settings(2, 0.0, n=4, drafter="lookup-tree", lookup_k=4), BRANCHES),
}


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


@pytest.mark.parametrize("name", list(CASES))
def test_lookup_tree_runs_are_exact(name: str) -> None:
    tv = distance(CASES[name])
    assert tv < TV_BOUND, f"{name}: total variation {tv:.2e}"


def test_lookup_tree_runs_are_exact_on_transformers_forward(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The target on transformers' forward (4D mask, DynamicCache) instead of FastLlama."""
    monkeypatch.setenv("SPECVIZ_STOCK_TARGET", "1")
    tv = distance(CASES["lookup tree, 4 nodes, T 1, top-k 3, 4 tokens"])
    assert tv < TV_BOUND, f"total variation {tv:.2e}"


def tree_rounds(case: Case) -> list[Round]:
    """Every Round of every path of ``case``."""
    pair = pair_for(case.pair)
    rounds: list[Round] = []

    def start(rng: Forcing) -> Iterator[Event]:
        for event in SpeculativeDecoder(pair, case.s).run(case.prompt, rng=rng):  # type: ignore[arg-type]
            if isinstance(event, Round):
                rounds.append(event)
            yield event

    enumerate_law(start)
    return rounds


def test_rounds_are_trees_with_parent_links() -> None:
    rounds = tree_rounds(CASES["lookup tree, 4 nodes, T 1, top-k 3, 4 tokens"])
    first = rounds[0]
    parents = [d.parent for d in first.drafted]
    assert parents.count(-1) == 2, parents  # two branches at the root
    assert [d.token_id for d in first.drafted if d.parent == -1] == [4, 5]  # "b", then "c"
    assert parents == [-1, 0, -1]  # the chain's copy whole, then the other branch
    # Somewhere a root branch was rejected and its sibling kept: a path that no chain takes.
    assert any(r.drafted and r.drafted[0].status == "rejected" and r.n_accepted > 0
               for r in rounds)
    back = from_json(to_json(first))
    assert isinstance(back, Round) and [d.parent for d in back.drafted] == parents
    for r in rounds:  # the kept nodes form a path from the root (a chain round: no links)
        kept = [i for i, d in enumerate(r.drafted) if d.status == "accepted"]
        for a, b in zip([-1, *kept], kept, strict=False):
            parent = r.drafted[b].parent
            assert (b - 1 if parent is None else parent) == a


def test_a_crop_where_a_gather_is_needed_is_caught() -> None:
    # Both forms of the target's cache (transformers' and FastLlama's, whichever serves it).
    crop = mutant(tree_attention.keep_path, ("first + torch.tensor(list(path), dtype=torch.long)",
                                             "first + torch.arange(len(path))"))
    fast_crop = mutant(tree_attention.fast_keep_path, (
        "src = (first + torch.tensor(list(path), dtype=torch.long))",
        "src = (first + torch.arange(len(path)))"))
    broken = Factory(tree=TreePass(keep=crop, fast_keep=fast_crop))
    tv = distance(CASES["lookup tree, 4 nodes, T 1, top-k 3, 4 tokens"], broken)
    assert tv > 1e3 * TV_BOUND, f"the cropped cache went unnoticed: total variation {tv:.2e}"


def test_a_tree_scored_as_a_chain_is_caught() -> None:
    """Broken: the target's pass reads the nodes causally, each after all nodes before it
    (a plain mask and plain positions), not each after its own path."""
    layout = tree_attention.tree_layout

    def causal(parents: Sequence[int], n_tail: int, past: int, fed: int = 0) -> Any:
        positions, allowed = layout(parents, n_tail, past, fed)
        t = len(positions)
        return (torch.arange(past, past + t),
                torch.ones(t, past + t, dtype=torch.bool).tril(diagonal=past))

    tv = distance(CASES["lookup tree, 4 nodes, T 1, top-k 3, 4 tokens"],
                  Factory(tree=TreePass(layout=causal)))
    assert tv > 1e3 * TV_BOUND, f"a causal tree pass went unnoticed: total variation {tv:.2e}"

"""One tree pass gives each node the logits of a plain forward over its own root-to-node path.

A tiny random fp32 Llama: a prompt is cached, then one pass scores a tail and a tree (depth 3,
branching up to 3) through the 4D tree mask. Each row must equal the last row of an uncached
forward over prompt + tail + the node's path (1e-5). The cache then keeps one path only; the
next tree pass, fed the next tail, must match plain forwards over the accepted text too, and
the cache must equal the one a plain pass over that text leaves. The same for FastLlama's
static buffers. Broken variants (sequential positions, a causal mask, a crop where a gather is
needed) are caught by the same checks.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch
from transformers import DynamicCache

from specviz.core import tree_attention as ta
from specviz.core.fast_llama import FastLlama
from specviz.core.tree_verify import ROOT
from tests.mutation import mutant
from tests.tiny import tiny_llama

V = 30
ATOL = 1e-5
PROMPT = [0, 5, 9, 12, 7, 3]
# A tree of 8 nodes: the root has 3 children, node 1 has 2, node 4 has 2, node 2 has 1.
TOKENS = [11, 4, 20, 8, 13, 17, 6, 25]
PARENTS = [ROOT, ROOT, ROOT, 1, 1, 2, 4, 4]
PATH = [1, 4, 7]  # not the first nodes: keeping it needs a gather, not a crop
TAIL = [14]  # the round's uncached id (the previous extra token)
NEXT_TAIL = [19]  # the extra token after PATH
NEXT_TOKENS, NEXT_PARENTS = [2, 22, 9, 16], [ROOT, ROOT, 0, 0]


@pytest.fixture(scope="module")
def model() -> Any:
    return tiny_llama(V, seed=5, layers=2, dtype=torch.float32, sharpness=2.0)


def path_of(parents: Sequence[int], tokens: Sequence[int], node: int) -> list[int]:
    out: list[int] = []
    while node != ROOT:
        out.append(tokens[node])
        node = parents[node]
    return out[::-1]


def plain_rows(model: Any, prefix: list[int], tokens: Sequence[int],
               parents: Sequence[int]) -> torch.Tensor:
    """(N+1, V): the last logits of an uncached forward over prefix (+ each node's path)."""
    rows = []
    with torch.no_grad():
        for node in [ROOT, *range(len(tokens))]:
            ids = prefix + path_of(parents, tokens, node)
            rows.append(model(torch.tensor([ids])).logits[0, -1])
    return torch.stack(rows)


def max_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).abs().max())


def check_transformers(model: Any, score: Callable[..., Any] = ta.score_tree,
                       keep: Callable[..., None] = ta.keep_path) -> None:
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        _, cache = ta.cached_forward(model, cache, input_ids=torch.tensor([PROMPT]))
        got, cache = score(model, cache, TAIL, TOKENS, PARENTS)
    want = plain_rows(model, PROMPT + TAIL, TOKENS, PARENTS)
    assert max_error(got, want) < ATOL, f"tree pass: {max_error(got, want):.2e}"
    assert cache.get_seq_length() == len(PROMPT + TAIL + TOKENS)

    keep(cache, len(PROMPT + TAIL), PATH)
    accepted = PROMPT + TAIL + [TOKENS[i] for i in PATH]
    assert cache.get_seq_length() == len(accepted)
    plain = DynamicCache(config=model.config)
    with torch.no_grad():
        _, plain = ta.cached_forward(model, plain, input_ids=torch.tensor([accepted]))
    for mine, theirs in zip(cache.layers, plain.layers, strict=True):
        assert max_error(mine.keys, theirs.keys) < ATOL and max_error(mine.values,
                                                                      theirs.values) < ATOL

    with torch.no_grad():
        got, cache = score(model, cache, NEXT_TAIL, NEXT_TOKENS, NEXT_PARENTS)
    want = plain_rows(model, accepted + NEXT_TAIL, NEXT_TOKENS, NEXT_PARENTS)
    assert max_error(got, want) < ATOL, f"after keep_path: {max_error(got, want):.2e}"


def check_fast(model: Any, score: Callable[..., Any] = ta.fast_score_tree,
               keep: Callable[..., None] = ta.fast_keep_path) -> None:
    fast = FastLlama(model, capacity=8)  # small: the tree pass grows the buffers
    with torch.no_grad():
        fast.feed(torch.tensor(PROMPT), 1)
        got = score(fast, torch.tensor(TAIL + TOKENS), PARENTS)
    want = plain_rows(model, PROMPT + TAIL, TOKENS, PARENTS)
    assert max_error(got, want) < ATOL, f"fast tree pass: {max_error(got, want):.2e}"
    keep(fast, len(PROMPT + TAIL), PATH)
    accepted = PROMPT + TAIL + [TOKENS[i] for i in PATH]
    assert fast.length == len(accepted)
    with torch.no_grad():
        got = score(fast, torch.tensor(NEXT_TAIL + NEXT_TOKENS), NEXT_PARENTS)
    want = plain_rows(model, accepted + NEXT_TAIL, NEXT_TOKENS, NEXT_PARENTS)
    assert max_error(got, want) < ATOL, f"fast, after keep_path: {max_error(got, want):.2e}"
    # Keep node 0 and its second child, then a plain feed: it sees exactly the accepted text.
    keep(fast, len(accepted + NEXT_TAIL), [0, 3])
    accepted += NEXT_TAIL + [NEXT_TOKENS[0], NEXT_TOKENS[3]]
    with torch.no_grad():
        got = fast.feed(torch.tensor([8]), 1)
        want = model(torch.tensor([accepted + [8]])).logits[0, -1:]
    assert max_error(got, want) < ATOL, f"fast, a plain feed after: {max_error(got, want):.2e}"


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_tree_pass_matches_plain_forwards(model: Any, attn: str) -> None:
    model.config._attn_implementation = attn
    try:
        check_transformers(model)
    finally:
        model.config._attn_implementation = "sdpa"


def test_fast_tree_pass_matches_plain_forwards(model: Any) -> None:
    check_fast(model)


def _sequential(layout: Callable[..., Any]) -> Callable[..., Any]:
    def broken(parents: Sequence[int], n_tail: int, past: int, fed: int = 0) -> Any:
        positions, allowed = layout(parents, n_tail, past, fed)
        return torch.arange(past, past + len(positions)), allowed
    return broken


def _causal(layout: Callable[..., Any]) -> Callable[..., Any]:
    def broken(parents: Sequence[int], n_tail: int, past: int, fed: int = 0) -> Any:
        positions, allowed = layout(parents, n_tail, past, fed)
        t = len(positions)
        return positions, torch.ones(t, past + t, dtype=torch.bool).tril(diagonal=past)
    return broken


@pytest.mark.parametrize("broken", ["positions in feed order", "a causal mask"])
def test_broken_layouts_are_caught(model: Any, broken: str) -> None:
    layout = (_sequential if broken == "positions in feed order" else _causal)(ta.tree_layout)
    with pytest.raises(AssertionError, match="tree pass"):
        check_transformers(model, score=functools.partial(ta.score_tree, layout=layout))
    with pytest.raises(AssertionError, match="tree pass"):
        check_fast(model, score=functools.partial(ta.fast_score_tree, layout=layout))


def test_a_crop_instead_of_a_gather_is_caught(model: Any) -> None:
    """Broken: keep the first len(path) nodes (right for a chain, wrong for a tree)."""
    crop = mutant(ta.keep_path, ("first + torch.tensor(list(path), dtype=torch.long)",
                                 "first + torch.arange(len(path))"))
    with pytest.raises(AssertionError):
        check_transformers(model, keep=crop)
    fast_crop = mutant(ta.fast_keep_path, ("src = (first + torch.tensor(list(path), "
                                           "dtype=torch.long))",
                                           "src = (first + torch.arange(len(path)))"))
    with pytest.raises(AssertionError, match="after keep_path"):
        check_fast(model, keep=fast_crop)


LEVELS = [3, 3, 2]  # TOKENS' nodes by depth: 0-2, 3-5, 6-7


def check_levels(model: Any, fast: bool, layout: ta.Layout = ta.tree_layout) -> None:
    """A tree grown level by level (the draft's way): the tail alone, then each level's new
    nodes fed after the levels already cached; each row equals the plain forward."""
    want = plain_rows(model, PROMPT + TAIL, TOKENS, PARENTS)
    runner = FastLlama(model, capacity=8)
    cache = DynamicCache(config=model.config)
    fed = 0
    with torch.no_grad():
        if fast:
            runner.feed(torch.tensor(PROMPT + TAIL), 1)
        else:
            _, cache = ta.cached_forward(model, cache, input_ids=torch.tensor([PROMPT + TAIL]))
        for width in LEVELS:
            new = fed + width
            if fast:
                got = ta.fast_score_tree(runner, torch.tensor(TOKENS[fed:new]), PARENTS[:new],
                                         fed, layout=layout)
            else:
                got, cache = ta.score_tree(model, cache, [], TOKENS[:new], PARENTS[:new], fed,
                                           layout=layout)
            err = max_error(got, want[1 + fed:1 + new])
            assert err < ATOL, f"level pass, nodes {fed}-{new - 1}: {err:.2e}"
            fed = new


@pytest.mark.parametrize("fast", [False, True])
def test_level_by_level_passes_match(model: Any, fast: bool) -> None:
    check_levels(model, fast)


def test_level_check_catches_a_level_that_sees_its_cached_cousins(model: Any) -> None:
    """Broken: a level's nodes see every cached node (as a plain causal pass would)."""
    layout = ta.tree_layout

    def broken(parents: Sequence[int], n_tail: int, past: int, fed: int = 0) -> Any:
        positions, allowed = layout(parents, n_tail, past, fed)
        allowed[:, :past + fed] = True
        return positions, allowed

    for fast in (False, True):
        with pytest.raises(AssertionError, match="level pass"):
            check_levels(model, fast, broken)


def test_layout() -> None:
    positions, allowed = ta.tree_layout([ROOT, ROOT, 0], n_tail=2, past=3)
    assert positions.tolist() == [3, 4, 5, 5, 6]
    assert allowed.int().tolist() == [
        [1, 1, 1, 1, 0, 0, 0, 0],
        [1, 1, 1, 1, 1, 0, 0, 0],
        [1, 1, 1, 1, 1, 1, 0, 0],
        [1, 1, 1, 1, 1, 0, 1, 0],
        [1, 1, 1, 1, 1, 1, 0, 1],
    ]
    with pytest.raises(ValueError, match="before it"):
        ta.tree_layout([1, ROOT], n_tail=1, past=0)
    with pytest.raises(ValueError, match="no tail"):
        ta.tree_layout([ROOT, 0], n_tail=1, past=3, fed=1)
    positions, allowed = ta.tree_layout([ROOT, ROOT, 0], n_tail=0, past=3, fed=2)
    assert positions.tolist() == [4] and allowed.int().tolist() == [[1, 1, 1, 1, 0, 1]]

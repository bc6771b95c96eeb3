"""A run's tree rounds counted once, in core's Tally: the rounds that branch, the siblings
tested beside a position's first draft, and the siblings kept. The app's α caption reads
these (tests/gui/test_tree_alpha.py); the engine's Summary carries them, and summaries add up.

Checked on real runs (lookup-tree on a tiny pair, model-tree under the cost policy on a flat
v, both with siblings tested and kept) against a count made another way: per parent (each
context's tested children; the first is the position's test, the rest siblings) where the
Tally counts per depth, and a tree as a context with two children where the Tally asks
``Round.branches``. Broken Tallies, each rejected: chains counted as trees, every tested
sibling counted as kept, every kept draft of a tree round counted as a kept sibling (a kept
position taken for a kept sibling), siblings counted when drafted rather than tested, the
first draft at a position counted as a sibling.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Sequence

import pytest
import torch

from specviz.core import tally as tally_mod
from specviz.core.engine import SpeculativeDecoder
from specviz.core.events import Event, Round, RunFinished, Summary
from specviz.core.tally import Tally
from tests.mutation import mutant
from tests.plain import plain

PROMPT = "the cat sat on the mat the cat ran to the cat sat on a red mat the cat"


@functools.cache
def tree_runs() -> dict[str, tuple[Event, ...]]:
    """The events of a lookup-tree and a model-tree run, each with siblings tested and kept
    (built once per session: the app's test feeds the same runs to its window)."""
    from tests.core.test_engine import noisy_copy_pair
    from tests.core.test_model_tree_policy import costs_of, flat
    from tests.tiny import tiny_pair

    torch.set_num_threads(1)
    lookup = SpeculativeDecoder(tiny_pair(sharpness=8.0), plain(
        k=8, max_new_tokens=24, seed=3, temperature=1.0, drafter="lookup-tree", lookup_k=8))
    model = SpeculativeDecoder(noisy_copy_pair(noise=1.0), plain(
        k=4, temperature=0.0, max_new_tokens=40, drafter="model-tree", k_policy="cost",
        seed=3), factory=costs_of(flat))  # flat v: the cost policy drafts trees
    return {"lookup-tree": tuple(lookup.run(PROMPT)), "model-tree": tuple(model.run(PROMPT))}


def rounds_in(events: Sequence[Event]) -> list[Round]:
    return [e for e in events if isinstance(e, Round)]


def counted_per_parent(rounds: Sequence[Round]) -> tuple[int, int, int]:
    """(trees, siblings tested, siblings kept), counted per context: a tree round has a
    context with two children or more; a context's tested children after its first are
    siblings."""
    trees = siblings = kept = 0
    for rnd in rounds:
        parents = [d.index - 1 if d.parent is None else d.parent for d in rnd.drafted]
        trees += bool(parents) and max(Counter(parents).values()) >= 2
        children: dict[int, list[str]] = {}
        for d, parent in zip(rnd.drafted, parents, strict=True):
            if d.status != "discarded":
                children.setdefault(parent, []).append(d.status)
        for tested in children.values():
            siblings += len(tested) - 1
            kept += tested[1:].count("accepted")
    return trees, siblings, kept


def tree_problems(cls: type[Tally] = Tally) -> list[str]:
    """What a ``cls`` tally of each tree run gets wrong about its trees and siblings."""
    problems = []
    for name, events in tree_runs().items():
        rounds = rounds_in(events)
        want = counted_per_parent(rounds)
        assert want[0] < len(rounds) and want[2] > 0, (name, want)  # chains too; a keep
        tally = cls()
        for rnd in rounds:
            tally.add_round(rnd)
        got = (tally.trees, tally.siblings, tally.siblings_kept)
        if got != want:
            problems.append(f"{name}: (trees, siblings, kept) {got}, per parent {want}")
        if tally.tested + tally.siblings != sum(d.status != "discarded"
                                                for r in rounds for d in r.drafted):
            problems.append(f"{name}: {tally.tested} positions + {tally.siblings} siblings "
                            "are not the drafts tested")
    return problems


def test_tree_rounds_and_siblings_are_counted_once() -> None:
    assert tree_problems() == []


# Broken Tallies (edits of tally.Tally for tests/mutation.py's ``mutant``); the app's test
# shows its caption rejecting them too.
BROKEN_TALLIES: dict[str, list[tuple[str, str]]] = {
    "chains-as-trees": [("self.trees += rnd.branches", "self.trees += bool(rnd.drafted)")],
    "all-kept": [('self.siblings_kept += d.status == "accepted"', "self.siblings_kept += 1")],
    "kept-positions": [  # every kept draft of a tree round taken for a kept sibling
        ('self.siblings_kept += d.status == "accepted"', "pass"),
        ("                self.kept[at] += 1\n",
         "                self.kept[at] += 1\n"
         "                self.siblings_kept += rnd.branches\n")],
    "drafted-siblings": [  # a sibling drafted but never tested counted as tested
        ('            if d.status == "discarded":\n                continue\n',
         '            if d.status == "discarded":\n'
         "                self.siblings += at in counted\n                continue\n")],
    "first-counted": [  # the first draft at a position counted as a sibling too
        ("            if at in counted:\n", "            if True:\n")],
}


@pytest.mark.parametrize("edits", BROKEN_TALLIES.values(), ids=BROKEN_TALLIES.keys())
def test_the_tree_count_rejects_a_broken_tally(edits: list[tuple[str, str]]) -> None:
    assert tree_problems(mutant(tally_mod.Tally, *edits)) != []


def test_the_summary_carries_them_and_summaries_add_up() -> None:
    for name, events in tree_runs().items():
        done = events[-1]
        assert isinstance(done, RunFinished), name
        s = done.summary
        assert (s.trees, s.siblings, s.siblings_kept) == counted_per_parent(rounds_in(events))
        twice = Tally.of([s, s])
        assert (twice.trees, twice.siblings, twice.siblings_kept) == \
            (2 * s.trees, 2 * s.siblings, 2 * s.siblings_kept), name
        assert twice.summary().siblings_kept == 2 * s.siblings_kept


def test_a_summary_written_before_the_counts_adds_none() -> None:
    old = Summary(tokens=4, rounds=2, drafted=6, accepted=2, acceptance_rate=1 / 3,
                  mean_tokens_per_round=2.0, acceptance_by_position=(0.5,), target_calls=2,
                  draft_calls=6, draft_time_s=0.1, verify_time_s=0.2, wall_time_s=0.4,
                  tokens_per_s=10.0, siblings=3)
    tally = Tally.of([old])
    assert (tally.trees, tally.siblings, tally.siblings_kept) == (0, 3, 0)

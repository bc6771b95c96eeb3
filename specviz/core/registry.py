"""Drafters and K policies by name: the one list the options table, the CLI and the app read.

Torch-free at import (the window lists these before torch loads): an entry names its
factory as ``"module:attribute"``, imported only when a run builds it; a test or a plug-in
may register a callable directly. Adding a drafter is one new file and one line here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Entry:
    """One registered part: its name, a one-line help text and how to build it."""

    name: str
    help: str
    factory: str | Callable[..., Any]  # "module:attribute", or the callable itself
    needs_draft_model: bool = False  # drafters only: refuses a pair without a draft model
    # drafters only: drafts with a draft whose tokenizer differs from the target's (the pair
    # is loaded accepting one: models.load_pair(cross_tokenizer=True))
    cross_tokenizer: bool = False

    def load(self) -> Callable[..., Any]:
        """The factory itself (imported on first use when given as a path)."""
        if callable(self.factory):
            return self.factory
        module, _, attr = self.factory.partition(":")
        built: Callable[..., Any] = getattr(importlib.import_module(module), attr)
        return built


DRAFTERS: dict[str, Entry] = {}
K_POLICIES: dict[str, Entry] = {}


def register_drafter(entry: Entry) -> Entry:
    DRAFTERS[entry.name] = entry
    return entry


def register_policy(entry: Entry) -> Entry:
    K_POLICIES[entry.name] = entry
    return entry


def unregister(name: str) -> None:
    """Remove a drafter or policy registered by a test or plug-in."""
    DRAFTERS.pop(name, None)
    K_POLICIES.pop(name, None)


def drafter_names() -> tuple[str, ...]:
    return tuple(DRAFTERS)


def policy_names() -> tuple[str, ...]:
    return tuple(K_POLICIES)


# The built-in parts. The factories' signatures belong to the engine (core/engine.py).
register_drafter(Entry("model", "the draft model q proposes each token",
                       "specviz.core.drafters:build_model_drafter", needs_draft_model=True))
register_drafter(Entry("lookup", "copy what followed the last n tokens earlier in the text "
                       "(no draft model)", "specviz.core.drafters:build_lookup_drafter"))
register_drafter(Entry("hybrid", "lookup where the text repeats itself, the draft model "
                       "otherwise", "specviz.core.drafters:build_hybrid_drafter",
                       needs_draft_model=True))
register_drafter(Entry("lookup-tree", "lookup with a branch per earlier occurrence of the "
                       "last n tokens, verified as a tree in one pass (no draft model)",
                       "specviz.core.tree_drafters:build_lookup_tree_drafter"))
register_drafter(Entry("model-tree", "the draft model drafts a tree of up to K nodes, "
                       "branching where it is unsure, verified in one pass",
                       "specviz.core.tree_drafters:build_model_tree_drafter",
                       needs_draft_model=True))
register_drafter(Entry("cross-tokenizer", "a draft model with its own tokenizer: it reads "
                       "the text re-tokenised its way and proposes only tokens the target's "
                       "vocabulary also has (exact)",
                       "specviz.core.cross_tokenizer:build_cross_tokenizer_drafter",
                       needs_draft_model=True, cross_tokenizer=True))
register_policy(Entry("fixed", "K drafts every round", "specviz.core.policy:FixedPolicy"))
register_policy(Entry("heuristic", "start at K; +2 after a fully kept round, −1 otherwise "
                      "(transformers)", "specviz.core.policy:HeuristicPolicy"))
register_policy(Entry("cost", "each round, the K (0 included) with the most expected tokens "
                      "per second", "specviz.core.policy:CostPolicy"))

__all__ = ["DRAFTERS", "K_POLICIES", "Entry", "drafter_names", "policy_names",
           "register_drafter", "register_policy", "unregister"]

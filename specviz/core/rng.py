"""Randomness for a run: one uniform per tested draft, one draw per sampled token.

PRIVATE STAND-IN written by the engine helper against the interface fixed in PLAN.md; the
verify helper's version replaces it on merge.
"""

from __future__ import annotations

from typing import Protocol

import torch

from .sampling import sample


class Random(Protocol):
    def uniform(self) -> float:
        """One draw from U[0, 1)."""
        ...

    def draw(self, probs: torch.Tensor) -> int:
        """One id from a 1-D distribution."""
        ...


class TorchRandom:
    """A seeded torch.Generator: the same stream the engine used before rng.py existed."""

    def __init__(self, seed: int) -> None:
        self.generator = torch.Generator().manual_seed(seed)

    def uniform(self) -> float:
        return float(torch.rand((), generator=self.generator))

    def draw(self, probs: torch.Tensor) -> int:
        return sample(probs, self.generator)

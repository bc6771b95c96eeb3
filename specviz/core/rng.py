"""Where the engine's randomness comes from: one injectable source for every random choice.

The engine calls ``uniform()`` once per tested draft (in order) and ``draw(probs)`` once per
sampled token, so a test can replace the source and force every branch of a run.
"""

from __future__ import annotations

from typing import Protocol

import torch

from .sampling import sample


class Random(Protocol):
    """A source of the two kinds of random choice speculative decoding makes."""

    def uniform(self) -> float:
        """One draw from U[0, 1)."""
        ...

    def draw(self, probs: torch.Tensor) -> int:
        """One id from a 1-D probability vector."""
        ...


class TorchRandom:
    """A seeded ``torch.Generator``: every uniform and every draw comes from it, in order."""

    def __init__(self, seed: int) -> None:
        self.generator = torch.Generator().manual_seed(seed)

    def uniform(self) -> float:
        """One draw from U[0, 1)."""
        return float(torch.rand((), generator=self.generator))

    def draw(self, probs: torch.Tensor) -> int:
        """One id from a 1-D probability vector (``sampling.sample``: its inverse CDF)."""
        return sample(probs, self.generator)

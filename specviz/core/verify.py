"""Verify a round of drafts against the target: pure tensors in, a verdict out.

PRIVATE STAND-IN written by the engine helper against the interface fixed in PLAN.md; the
verify helper's version replaces it on merge. p = target, q = draft.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from .events import Status
from .rng import Random
from .sampling import acceptance_ratio, residual


@dataclass(frozen=True)
class Verdict:
    n_accepted: int
    statuses: tuple[Status, ...]  # per draft
    ratios: tuple[float, ...]  # min(1, p(x)/q(x)) per draft
    rs: tuple[float | None, ...]  # the scaled uniform r per draft; None = never tested
    extra_kind: Literal["resampled", "bonus"]
    extra_dist: torch.Tensor  # (V,) residual at the rejection, or p_{K+1}
    extra_id: int


def verify(p_rows: torch.Tensor, q_rows: torch.Tensor, drafts: Sequence[int], rng: Random, *,
           greedy: bool = False, lenience: float = 1.0) -> Verdict:
    """Keep x_i iff r_i < min(1, p(x_i)/q(x_i)) with r_i = b·U; then resample or take the bonus."""
    k = len(drafts)
    statuses: list[Status] = []
    ratios: list[float] = []
    rs: list[float | None] = []
    n_acc = 0
    rejected = False
    for i, x in enumerate(drafts):
        ratio = acceptance_ratio(float(p_rows[i, x]), float(q_rows[i, x]))
        ratios.append(ratio)
        if rejected:
            statuses.append("discarded")
            rs.append(None)
            continue
        r = lenience * rng.uniform()
        rs.append(r)
        if r < ratio:
            n_acc += 1
            statuses.append("accepted")
        else:
            rejected = True
            statuses.append("rejected")
    if rejected:
        dist = residual(p_rows[n_acc], q_rows[n_acc])  # norm(max(0, p - q))
        kind: Literal["resampled", "bonus"] = "resampled"
    else:
        dist = p_rows[k]  # all K kept: the target's next distribution is free
        kind = "bonus"
    extra = int(dist.argmax()) if greedy else rng.draw(dist)
    return Verdict(n_acc, tuple(statuses), tuple(ratios), tuple(rs), kind, dist, extra)

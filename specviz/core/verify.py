"""Verification of one round of drafts: pure, tensors in, verdict out (no model, no Qt).

p = target, q = draft (Leviathan et al.). Draft x_i, drawn from q_i, is kept iff r_i < min(1,
p_i(x_i) / q_i(x_i)) with r_i ~ U[0, 1); the first rejection ends the round and the extra token
comes from the residual norm(max(0, p_i - q_i)); when all K are kept it comes from p_{K+1}.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from .events import Status
from .rng import Random
from .sampling import acceptance_ratio, residual

ExtraKind = Literal["resampled", "bonus"]


@dataclass(frozen=True)
class Verdict:
    """What verification decided for one round."""

    n_accepted: int
    statuses: tuple[Status, ...]  # per draft: "accepted" | "rejected" | "discarded"
    ratios: tuple[float, ...]  # min(1, p(x)/q(x)) per draft
    rs: tuple[float | None, ...]  # the scaled uniform r per draft; None = discarded, never tested
    extra_kind: ExtraKind
    extra_dist: torch.Tensor  # (V,) residual at the rejection, or p_{K+1} when all were kept
    extra_id: int
    # Tree rounds: per draft, the p its next sibling is tested against once it is rejected
    # (the residual; None where it was not rejected). Empty for chains.
    residuals: tuple[torch.Tensor | None, ...] = ()


def verify(p_rows: torch.Tensor, q_rows: torch.Tensor, drafts: Sequence[int], rng: Random, *,
           greedy: bool = False, lenience: float = 1.0) -> Verdict:
    """Accept or reject each draft in order; draw the extra token (argmax when ``greedy``).

    ``p_rows`` is (K+1, V): p at each draft position and after the last; ``q_rows`` is (K, V):
    the q each draft was drawn from. ``lenience`` b in (0, 1] tests r = b * u: b < 1 keeps
    drafts more often and the output no longer follows p; b = 1 is exact.
    """
    k = len(drafts)
    if p_rows.dim() != 2 or p_rows.shape[0] != k + 1:
        raise ValueError(f"p_rows must be ({k + 1}, V) for {k} drafts, got {tuple(p_rows.shape)}")
    if q_rows.shape[0] != k or (k and q_rows.shape[-1] != p_rows.shape[-1]):
        raise ValueError(f"q_rows must be ({k}, V), got {tuple(q_rows.shape)}")
    if not 0.0 < lenience <= 1.0:
        raise ValueError(f"lenience must be in (0, 1], got {lenience}")
    statuses: list[Status] = []
    ratios: list[float] = []
    rs: list[float | None] = []
    n_accepted = 0
    rejected = False
    for i, x in enumerate(drafts):
        ratio = acceptance_ratio(float(p_rows[i, x]), float(q_rows[i, x]))
        ratios.append(ratio)
        if rejected:  # after the first rejection nothing is tested (and no uniform is used)
            statuses.append("discarded")
            rs.append(None)
            continue
        # A fresh uniform per tested draft: reusing one r across a round correlates the tests.
        u = rng.uniform()
        r = u if lenience == 1.0 else lenience * u
        if r < ratio:
            n_accepted += 1
            statuses.append("accepted")
        else:
            rejected = True
            statuses.append("rejected")
        rs.append(float(r))
    if rejected:
        dist = residual(p_rows[n_accepted], q_rows[n_accepted])  # norm(max(0, p - q))
        kind: ExtraKind = "resampled"
    else:
        dist = p_rows[k]  # all K kept: the target's next distribution comes free
        kind = "bonus"
    extra_id = int(dist.argmax()) if greedy else rng.draw(dist)
    return Verdict(n_accepted=n_accepted, statuses=tuple(statuses), ratios=tuple(ratios),
                   rs=tuple(rs), extra_kind=kind, extra_dist=dist, extra_id=extra_id)

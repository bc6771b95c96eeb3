"""Logits -> probabilities, the acceptance ratio and the residual distribution.

p = target, q = draft. All functions work on the last dimension (the vocabulary).
"""

from __future__ import annotations

import torch

# Below this residual mass, p and q are equal up to rounding: max(0, p - q) carries no
# information, and p itself is the right distribution to sample (the rejection was a
# floating-point accident, since p(x)/q(x) = 1 would always accept).
RESIDUAL_EPS = 1e-12


def logits_to_probs(
    logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0
) -> torch.Tensor:
    """Softmax with temperature, then top-k, then top-p; temperature 0 gives one-hot argmax."""
    logits = logits.float()  # (..., V)
    if temperature == 0:
        # Greedy as a distribution: all mass on the argmax (first index on ties).
        one_hot = torch.zeros_like(logits)
        return one_hot.scatter_(-1, logits.argmax(dim=-1, keepdim=True), 1.0)
    logits = logits / temperature
    if top_k and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]  # (..., 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        sorted_probs = sorted_logits.softmax(dim=-1)
        # Keep the smallest prefix whose mass reaches top_p: a token stays if the mass
        # strictly before it is still below top_p (so the most likely token always stays).
        before = sorted_probs.cumsum(dim=-1) - sorted_probs
        drop_sorted = before >= top_p
        drop = torch.zeros_like(drop_sorted).scatter_(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits.softmax(dim=-1)


def acceptance_ratio(p_x: float, q_x: float) -> float:
    """min(1, p(x)/q(x)): the probability of keeping a draft token x drawn from q."""
    if q_x <= 0.0:  # x was drawn from q, so this only happens through rounding
        return 1.0 if p_x > 0.0 else 0.0
    return min(1.0, p_x / q_x)


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)): what the target still owes after the draft's rejected guess."""
    diff = (p - q).clamp_(min=0.0)
    mass = diff.sum(dim=-1, keepdim=True)
    if float(mass.min()) <= RESIDUAL_EPS:
        # p == q after filtering: never NaN; fall back to p where the residual is empty.
        return torch.where(mass > RESIDUAL_EPS, diff / mass.clamp_min(RESIDUAL_EPS), p)
    return diff / mass


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> int:
    """Draw one token id from a 1-D probability vector."""
    return int(torch.multinomial(probs, 1, generator=generator).item())

"""Logits -> probabilities, the acceptance ratio and the residual distribution.

p = target, q = draft. All functions work on the last dimension (the vocabulary).
"""

from __future__ import annotations

import torch

# Below this residual mass, p and q are equal up to rounding: max(0, p - q) carries no
# information, and p itself is the right distribution to sample (the rejection was a
# floating-point accident, since p(x)/q(x) = 1 would always accept).
RESIDUAL_EPS = 1e-12
# Top-p: a cumulative mass within this of top_p counts as reaching it (float64 sums of equal
# probabilities land a few ulps either side of the exact value; see logits_to_probs).
TOP_P_TOLERANCE = 1e-9


def logits_to_probs(
    logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0
) -> torch.Tensor:
    """Softmax with temperature, then top-k, then top-p; temperature 0 gives one-hot argmax.

    Order and rules are transformers' (Temperature -> TopK -> TopP warpers, min_tokens_to_keep
    1). Ties: top-k keeps every logit equal to the k-th largest (so possibly more than k, as
    transformers does); top-p ranks tokens by a stable descending sort, so among tied logits
    the lower token id comes first, and keeps the smallest such prefix whose mass reaches
    ``top_p`` (a token stays iff the mass ranked before it is below top_p, the most likely
    token always stays). Masses are summed in float64 and compared with a 1e-9 tolerance, so
    a sum that is top_p up to rounding counts as reaching it: uniform logits over 10 ids keep
    exactly 6 at top-p 0.6 (ids 0-5), 8 at top-p 0.8 (ids 0-7).
    """
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
        # Stable: tied logits keep id order, so the cut among them is defined (lower ids stay).
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True, stable=True)
        sorted_probs = sorted_logits.double().softmax(dim=-1)  # (..., V)
        before = sorted_probs.cumsum(dim=-1) - sorted_probs  # mass ranked strictly before
        drop_sorted = before >= top_p - TOP_P_TOLERANCE
        drop_sorted[..., 0] = False  # the most likely token always stays
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
    """Draw one token id from a 1-D probability vector, by inverting its CDF.

    The first id whose cumulative sum (float64) exceeds u · total, u ~ U[0, 1): id i is
    drawn with probability probs[i] / total, and an id of probability 0 never (its interval
    is empty). On a 49,152-id row this takes ~0.13 ms where ``torch.multinomial`` takes ~1 ms,
    which at T = 1 was 4% of a run's wall time.
    """
    cdf = torch.cumsum(probs.reshape(-1), 0, dtype=torch.float64)
    u = float(torch.rand((), generator=generator, dtype=torch.float64)) * float(cdf[-1])
    i = int(torch.searchsorted(cdf, torch.tensor([u], dtype=torch.float64), right=True))
    if i >= cdf.numel():  # u · total rounded up to the total: the last id with mass
        i = int(torch.nonzero(probs.reshape(-1) > 0)[-1])
    return i

"""logits -> probabilities, acceptance ratio, residual."""

from __future__ import annotations

import torch

from specviz.core.sampling import acceptance_ratio, logits_to_probs, residual

LOGITS = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, -3.0])


def test_temperature_zero_is_one_hot_argmax() -> None:
    p = logits_to_probs(LOGITS, 0.0, top_k=3, top_p=0.5)
    assert p.tolist() == [1.0, 0, 0, 0, 0, 0]


def test_temperature_scales_softmax() -> None:
    p = logits_to_probs(LOGITS, 0.5)
    assert torch.allclose(p, torch.softmax(LOGITS / 0.5, -1))


def test_top_k_keeps_exactly_k() -> None:
    p = logits_to_probs(LOGITS, 1.0, top_k=2)
    assert (p > 0).sum() == 2 and torch.allclose(p[:2], torch.softmax(LOGITS[:2], -1))


def test_top_p_keeps_smallest_prefix_reaching_p() -> None:
    full = torch.softmax(LOGITS, -1)  # about 0.61, 0.22, 0.14, ...
    p = logits_to_probs(LOGITS, 1.0, top_p=0.7)
    assert (p > 0).tolist() == [True, True, False, False, False, False]
    assert torch.allclose(p[:2], full[:2] / full[:2].sum())
    # The most likely token always survives, however small top-p is.
    assert (logits_to_probs(LOGITS, 1.0, top_p=1e-6) > 0).sum() == 1


def test_acceptance_ratio() -> None:
    assert acceptance_ratio(0.2, 0.4) == 0.5
    assert acceptance_ratio(0.6, 0.3) == 1.0  # q <= p: always keep
    assert acceptance_ratio(0.0, 0.3) == 0.0


def test_residual_is_normalised_positive_part() -> None:
    p = torch.tensor([0.5, 0.3, 0.2, 0.0])
    q = torch.tensor([0.2, 0.5, 0.1, 0.2])
    assert torch.allclose(residual(p, q), torch.tensor([0.75, 0.0, 0.25, 0.0]))


def test_all_zero_residual_gives_p_not_nan() -> None:
    p = torch.tensor([0.25, 0.25, 0.5, 0.0])
    r = residual(p, p.clone())
    assert not torch.isnan(r).any() and torch.equal(r, p)
    # One-hot p == q (greedy, draft right) too.
    one = torch.tensor([0.0, 1.0, 0.0])
    assert torch.equal(residual(one, one.clone()), one)

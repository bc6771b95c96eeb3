"""logits -> probabilities, acceptance ratio, residual.

Every test is also run against a broken copy of the function it tests (MUTANTS, at the end)
and must fail there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from unittest import mock

import pytest
import torch
from transformers.generation.logits_process import (
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from specviz.core import sampling
from specviz.core.sampling import acceptance_ratio, logits_to_probs, residual, sample
from tests.mutation import mutant

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
    assert (logits_to_probs(LOGITS, 1.0, top_p=1e-12) > 0).sum() == 1


def test_top_p_ties_keep_lower_ids_first() -> None:
    """The documented tie rule: stable sort, lower id first; a mass equal to top-p reaches it."""
    uniform = torch.zeros(10)
    for tenths in range(1, 10):
        kept = (logits_to_probs(uniform, 1.0, top_p=tenths / 10) > 0).nonzero().flatten()
        assert kept.tolist() == list(range(tenths)), f"top-p {tenths / 10}"
    assert (logits_to_probs(uniform, 1.0, top_p=0.6) > 0).sum() == 6  # the case
    # Ties below a clear leader: id 3 leads, then ids 0, 2, 5 tie; the cut falls inside the tie.
    logits = torch.tensor([1.0, -5.0, 1.0, 3.0, -5.0, 1.0])
    full = torch.softmax(logits, -1)  # about 0.71, then 0.096 each for ids 0, 2, 5
    cut = float(full[3] + full[0]) + 0.01  # needs one more token after ids 3 and 0
    assert (logits_to_probs(logits, 1.0, top_p=cut) > 0).nonzero().flatten().tolist() == [0, 2, 3]


def transformers_probs(logits: torch.Tensor, temperature: float, top_k: int,
                       top_p: float) -> torch.Tensor:
    """transformers' own warpers in generate()'s order: temperature -> top-k -> top-p."""
    no_ids: Any = None  # the warpers ignore input_ids
    scores = TemperatureLogitsWarper(temperature)(no_ids, logits[None].clone())
    if top_k:
        scores = TopKLogitsWarper(top_k, min_tokens_to_keep=1)(no_ids, scores)
    if top_p < 1.0:
        scores = TopPLogitsWarper(top_p, min_tokens_to_keep=1)(no_ids, scores)
    return scores.softmax(-1)[0]


@pytest.mark.parametrize("temperature", [0.5, 0.7, 1.3])
def test_matches_transformers_warpers(temperature: float) -> None:
    gen = torch.Generator().manual_seed(0)
    for _ in range(40):
        logits = torch.randn(64, generator=gen) * 3.0  # continuous: ties have probability 0
        for top_k in (0, 1, 5, 20):
            for top_p in (1.0, 0.95, 0.8, 0.5, 0.2):
                ours = logits_to_probs(logits, temperature, top_k, top_p)
                theirs = transformers_probs(logits, temperature, top_k, top_p)
                case = f"T {temperature}, top-k {top_k}, top-p {top_p}"
                assert torch.equal(ours > 0, theirs > 0), f"supports differ at {case}"
                assert torch.allclose(ours, theirs, atol=1e-6, rtol=1e-5), case


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


def test_sample_draws_each_id_with_its_probability() -> None:
    # Unnormalised on purpose (sum 2), with ids of probability 0 inside and at the end.
    probs = torch.tensor([0.2, 0.0, 1.2, 0.6, 0.0])
    g = torch.Generator().manual_seed(3)
    n = 30_000
    counts = torch.bincount(torch.tensor([sample(probs, g) for _ in range(n)]), minlength=5)
    expected = probs / probs.sum()
    assert counts[1] == 0 and counts[4] == 0  # probability 0: never
    for i in (0, 2, 3):
        sd = (n * expected[i] * (1 - expected[i])) ** 0.5
        assert abs(counts[i] - n * expected[i]) < 5 * sd, (i, counts.tolist())


def test_sample_never_returns_an_id_of_probability_zero_at_the_top() -> None:
    # u · total rounded up to the total: searchsorted runs off the end; the last id with mass.
    with mock.patch.object(sampling.torch, "rand",
                           lambda *a, **k: torch.tensor(1.0, dtype=torch.float64)):
        assert sample(torch.tensor([0.5, 0.5, 0.0, 0.0]), None) == 1


TEST = Callable[[], None]
L2P = "logits_to_probs"
# test -> (the function it tests, [(old line, broken line), ...]): each pair must make it fail.
MUTANTS: dict[str, tuple[TEST, str, list[tuple[str, str]]]] = {
    "greedy is a softmax": (test_temperature_zero_is_one_hot_argmax, L2P,
                            [("if temperature == 0:", "if False:")]),
    "temperature multiplies": (test_temperature_scales_softmax, L2P,
                               [("logits = logits / temperature",
                                 "logits = logits * temperature")]),
    "top-k drops the k-th": (test_top_k_keeps_exactly_k, L2P,
                             [("logits < kth", "logits <= kth")]),
    "top-p counts the token itself": (test_top_p_keeps_smallest_prefix_reaching_p, L2P,
                                      [("before = sorted_probs.cumsum(dim=-1) - sorted_probs",
                                        "before = sorted_probs.cumsum(dim=-1)")]),
    "top-p may drop every token": (test_top_p_keeps_smallest_prefix_reaching_p, L2P,
                                   [("drop_sorted[..., 0] = False", "pass")]),
    "top-p ties: higher ids first": (test_top_p_ties_keep_lower_ids_first, L2P,
                                     [("torch.sort(logits, dim=-1, descending=True, stable=True)",
                                       "(lambda s: (s[0].flip(-1), s[1].flip(-1)))("
                                       "torch.sort(logits, dim=-1, stable=True))")]),
    "top-p in float32, no tolerance (the old rule)": (
        test_top_p_ties_keep_lower_ids_first, L2P,
        [("sorted_logits.double().softmax(dim=-1)", "sorted_logits.softmax(dim=-1)"),
         ("before >= top_p - TOP_P_TOLERANCE", "before >= top_p")]),
    "top-p before temperature": (lambda: test_matches_transformers_warpers(0.5), L2P,
                                 [("    logits = logits / temperature\n", ""),
                                  ("    return logits.softmax(dim=-1)",
                                   "    return (logits / temperature).softmax(dim=-1)")]),
    "ratio not capped at 1": (test_acceptance_ratio, "acceptance_ratio",
                              [("return min(1.0, p_x / q_x)", "return p_x / q_x")]),
    "residual |p - q|": (test_residual_is_normalised_positive_part, "residual",
                         [("clamp_(min=0.0)", "abs_()")]),
    "sample one id too far": (test_sample_draws_each_id_with_its_probability, "sample",
                              [("    return i", "    return min(i + 1, len(probs) - 1)")]),
    "sample ignores the total": (test_sample_draws_each_id_with_its_probability, "sample",
                                 [(" * float(cdf[-1])", "")]),
    "sample off the end takes the last id": (
        test_sample_never_returns_an_id_of_probability_zero_at_the_top, "sample",
        [("i = int(torch.nonzero(probs.reshape(-1) > 0)[-1])", "i = cdf.numel() - 1")]),
    "empty residual divides by zero": (test_all_zero_residual_gives_p_not_nan, "residual",
                                       [("if float(mass.min()) <= RESIDUAL_EPS:", "if False:")]),
}


@pytest.mark.parametrize("name", list(MUTANTS))
def test_each_test_rejects_its_broken_variant(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    test, func_name, edits = MUTANTS[name]
    # The tests call these names from this module: the broken copy replaces them here only.
    monkeypatch.setitem(globals(), func_name, mutant(getattr(sampling, func_name), *edits))
    with pytest.raises(AssertionError):
        test()


def test_every_test_has_a_mutant() -> None:
    tests = {name for name, obj in globals().items()
             if name.startswith("test_") and callable(obj) and name not in {
                 "test_each_test_rejects_its_broken_variant", "test_every_test_has_a_mutant"}}
    covered = {getattr(t, "__name__", "") for t, _, _ in MUTANTS.values()}
    covered.add("test_matches_transformers_warpers")  # through the lambdas above
    assert tests <= covered, f"tests without a broken variant: {tests - covered}"

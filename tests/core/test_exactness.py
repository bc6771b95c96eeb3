"""Speculative sampling must reproduce the target's distribution exactly (Monte-Carlo).

The joint law of the first two generated tokens is compared, by a chi-square test, with
the target's exact law computed by full forward passes. The same harness is run on two
broken samplers to show that the bound is tight enough to catch them.
"""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

from specviz.core import verify as verify_mod
from specviz.core.engine import SpeculativeDecoder, encode_prompt
from specviz.core.events import RunFinished, Settings
from specviz.core.models import ModelPair
from specviz.core.sampling import logits_to_probs
from tests.tiny import tiny_pair, word_tokenizer

RUNS = 3000
PROMPT = "a b"


@pytest.fixture(scope="module")
def pair() -> ModelPair:
    tok = word_tokenizer(["a", "b", "c"], eos=False)  # 6 ids, no EOS: always two tokens
    torch.set_num_threads(1)  # tiny models: threads only add overhead
    return tiny_pair(tok, sharpness=4.0, hidden=16, layers=1)


def exact_joint(pair: ModelPair, s: Settings) -> dict[tuple[int, int], float]:
    """P(x1, x2) under the target with the run's sampling settings, by direct forwards."""
    ids = encode_prompt(pair.tokenizer, PROMPT)
    v = pair.vocab_size

    def probs(prefix: list[int]) -> torch.Tensor:
        with torch.no_grad():
            logits = pair.target(torch.tensor([prefix])).logits[0, -1, :v]
        return logits_to_probs(logits, s.temperature, s.top_k, s.top_p).double()

    p1 = probs(ids)
    joint: dict[tuple[int, int], float] = {}
    for x1 in range(v):
        if p1[x1] > 0:
            p2 = probs(ids + [x1])
            for x2 in range(v):
                joint[(x1, x2)] = float(p1[x1] * p2[x2])
    return joint


def sample_joint(pair: ModelPair, s: Settings, runs: int = RUNS) -> Counter[tuple[int, int]]:
    counts: Counter[tuple[int, int]] = Counter()
    for seed in range(runs):
        *_, last = SpeculativeDecoder(pair, Settings(**{**s.__dict__, "seed": seed})).run(PROMPT)
        assert isinstance(last, RunFinished)
        counts[tuple(last.generated_ids[:2])] += 1  # type: ignore[index]
    return counts


def chi_square(counts: Counter[tuple[int, int]], joint: dict[tuple[int, int], float],
               runs: int) -> tuple[float, float, int]:
    """Statistic, its 1e-4 critical value, and how many outcomes had probability 0."""
    impossible = sum(n for key, n in counts.items() if joint.get(key, 0.0) <= 1e-12)
    stat, df, small_e, small_o = 0.0, -1, 0.0, 0
    for key, prob in joint.items():
        expected = prob * runs
        if expected < 5:  # pool rare cells so the chi-square approximation holds
            small_e += expected
            small_o += counts.get(key, 0)
            continue
        stat += (counts.get(key, 0) - expected) ** 2 / expected
        df += 1
    if small_e > 0:
        stat += (small_o - small_e) ** 2 / max(small_e, 1e-9)
        df += 1
    # Wilson-Hilferty approximation of the chi-square quantile at p = 1e-4 (z = 3.719).
    z = 3.719
    crit = df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3
    return stat, crit, impossible


SETTINGS = {
    "temperature 1": Settings(k=2, temperature=1.0, max_new_tokens=3, top_n=1),
    "temperature 0.6": Settings(k=2, temperature=0.6, max_new_tokens=3, top_n=1),
    "top-k 3, temperature 1.5": Settings(k=2, temperature=1.5, top_k=3, max_new_tokens=3, top_n=1),
    "top-p 0.7": Settings(k=2, temperature=1.0, top_p=0.7, max_new_tokens=3, top_n=1),
}


@pytest.mark.parametrize("name", list(SETTINGS))
def test_speculative_matches_target_distribution(pair: ModelPair, name: str) -> None:
    s = SETTINGS[name]
    joint = exact_joint(pair, s)
    counts = sample_joint(pair, s)
    stat, crit, impossible = chi_square(counts, joint, RUNS)
    assert impossible == 0, "a token outside the target's filtered support was generated"
    print(f"{name}: chi2 {stat:.1f}, bound {crit:.1f}")
    assert stat < crit, f"{name}: chi2 {stat:.1f} >= {crit:.1f}"


def test_draft_and_target_really_differ(pair: ModelPair) -> None:
    """The exactness check means something only if q is far from p (many rejections)."""
    *_, last = SpeculativeDecoder(pair, Settings(k=2, max_new_tokens=200, seed=0)).run(PROMPT)
    assert isinstance(last, RunFinished)
    assert last.summary.acceptance_rate < 0.8


@pytest.mark.parametrize("broken", ["residual is p", "always accept"])
def test_harness_catches_broken_samplers(pair: ModelPair, broken: str,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Same harness, deliberately wrong algorithm: the chi-square bound must reject it."""
    if broken == "residual is p":
        monkeypatch.setattr(verify_mod, "residual", lambda p, q: p)
    else:
        monkeypatch.setattr(verify_mod, "acceptance_ratio", lambda p, q: 1.0)
    s = SETTINGS["temperature 1"]
    stat, crit, _ = chi_square(sample_joint(pair, s, runs=1500), exact_joint(pair, s), 1500)
    print(f"{broken}: chi2 {stat:.1f}, bound {crit:.1f}")
    assert stat > crit, f"the harness did not notice {broken!r}: chi2 {stat:.1f} < {crit:.1f}"

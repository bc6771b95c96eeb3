"""verify() on tensors alone, with a scripted source of randomness.

Each check is run on the real ``verify`` and on deliberately broken copies of it (its source
with one line changed), so every check is shown to reject the bug it is written for.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
import torch

from specviz.core import rng as rng_mod
from specviz.core import verify as verify_mod
from specviz.core.rng import TorchRandom
from specviz.core.sampling import residual
from specviz.core.verify import Verdict
from tests.mutation import mutant

VerifyFn = Callable[..., Verdict]


class Scripted:
    """A Random that replays given uniforms and draws and records what it was asked."""

    def __init__(self, uniforms: Sequence[float] = (), draws: Sequence[int] = ()) -> None:
        self.uniforms = list(uniforms)
        self.draws = list(draws)
        self.dists: list[torch.Tensor] = []
        self.n_uniform = 0

    def uniform(self) -> float:
        assert self.n_uniform < len(self.uniforms), "more uniforms asked for than scripted"
        self.n_uniform += 1
        return self.uniforms[self.n_uniform - 1]

    def draw(self, probs: torch.Tensor) -> int:
        assert len(self.dists) < len(self.draws), "a draw that should not happen"
        self.dists.append(probs.clone())
        return self.draws[len(self.dists) - 1]


# Three positions over 4 ids. Ratios: x=0 at row 0: p 0.4 / q 0.5 = 0.8;
# x=1 at row 1: 0.2 / 0.5 = 0.4; x=2 at row 2: 0.3 / 0.6 = 0.5.
P = torch.tensor([[0.4, 0.3, 0.2, 0.1],
                  [0.5, 0.2, 0.2, 0.1],
                  [0.1, 0.3, 0.3, 0.3],
                  [0.7, 0.1, 0.1, 0.1]])  # (K+1, V)
Q = torch.tensor([[0.5, 0.2, 0.2, 0.1],
                  [0.2, 0.5, 0.2, 0.1],
                  [0.1, 0.1, 0.6, 0.2]])  # (K, V)
DRAFTS = [0, 1, 2]


def check_accept_reject_discard(verify: VerifyFn) -> None:
    rng = Scripted(uniforms=[0.5, 0.7], draws=[3])
    v = verify(P, Q, DRAFTS, rng)
    assert v.n_accepted == 1
    assert v.statuses == ("accepted", "rejected", "discarded")
    assert v.ratios == pytest.approx((0.8, 0.4, 0.5))
    assert v.rs[:2] == pytest.approx((0.5, 0.7)) and v.rs[2] is None
    assert rng.n_uniform == 2, "one uniform per tested draft, none for discarded ones"
    assert v.extra_kind == "resampled" and v.extra_id == 3
    expected = residual(P[1], Q[1])  # (0.3, 0, 0, 0) normalised: the first rejection's row
    assert torch.allclose(expected, torch.tensor([1.0, 0.0, 0.0, 0.0]))
    assert len(rng.dists) == 1 and torch.allclose(rng.dists[0], expected)
    assert torch.allclose(v.extra_dist, expected)


def check_first_draft_rejected(verify: VerifyFn) -> None:
    rng = Scripted(uniforms=[0.9], draws=[1])
    v = verify(P, Q, DRAFTS, rng)
    assert v.n_accepted == 0 and v.statuses == ("rejected", "discarded", "discarded")
    assert v.rs[1:] == (None, None) and rng.n_uniform == 1
    assert torch.allclose(rng.dists[0], residual(P[0], Q[0]))


def check_bonus_from_last_row(verify: VerifyFn) -> None:
    rng = Scripted(uniforms=[0.1, 0.2, 0.3], draws=[0])
    v = verify(P, Q, DRAFTS, rng)
    assert v.n_accepted == 3 and v.statuses == ("accepted",) * 3
    assert v.extra_kind == "bonus" and v.extra_id == 0
    assert torch.equal(rng.dists[0], P[3]), "the bonus comes from row K, after the last draft"
    assert torch.equal(v.extra_dist, P[3])
    # K = 0 (a plain target step): the extra token is drawn from p's only row.
    rng = Scripted(draws=[2])
    v = verify(P[1:2], Q[:0], [], rng)
    assert v.n_accepted == 0 and v.statuses == () and v.extra_kind == "bonus" and v.extra_id == 2
    assert torch.equal(rng.dists[0], P[1])


def check_fresh_uniform_per_draft(verify: VerifyFn) -> None:
    # 0.3 keeps draft 1 (ratio 0.8); 0.45 rejects draft 2 (ratio 0.4). One shared r would keep both.
    rng = Scripted(uniforms=[0.3, 0.45, 0.1], draws=[2])
    v = verify(P, Q, DRAFTS, rng)
    assert v.statuses == ("accepted", "rejected", "discarded")


def check_strict_comparison(verify: VerifyFn) -> None:
    # r == ratio rejects: keep iff r < ratio, so P(keep) = ratio exactly for r ~ U[0, 1).
    p = torch.tensor([[0.25, 0.75], [0.5, 0.5]])
    q = torch.tensor([[0.5, 0.5]])  # ratio of draft 0: exactly 0.5
    assert verify(p, q, [0], Scripted(uniforms=[0.5], draws=[1])).statuses == ("rejected",)
    # A ratio of 1 (q <= p) always keeps, whatever r in [0, 1).
    p = torch.tensor([[0.75, 0.25], [0.5, 0.5]])
    assert verify(p, q, [0], Scripted(uniforms=[0.999999], draws=[1])).n_accepted == 1


def check_greedy(verify: VerifyFn) -> None:
    one_hot = torch.eye(4)
    p = one_hot[[0, 2, 3]]  # target's argmax: 0, then 2, then 3
    q = one_hot[[0, 1]]  # drafts 0 (right) then 1 (wrong)
    rng = Scripted(uniforms=[0.0, 0.0])  # no draw scripted: greedy never draws
    v = verify(p, q, [0, 1], rng, greedy=True)
    assert v.n_accepted == 1 and v.statuses == ("accepted", "rejected")
    assert v.extra_id == 2 and v.extra_kind == "resampled"
    v = verify(p[[0, 1, 1]], q[[0, 0]], [0, 0],
               Scripted(uniforms=[0.5, 0.5]), greedy=True)
    assert v.statuses == ("accepted", "rejected")  # p at row 1 is 2, the draft said 0
    v = verify(one_hot[[1, 3]], one_hot[[1]], [1], Scripted(uniforms=[0.7]), greedy=True)
    assert v.n_accepted == 1 and v.extra_kind == "bonus" and v.extra_id == 3


def check_lenience_scales_r(verify: VerifyFn) -> None:
    # u = 0.6 rejects draft 2 (ratio 0.4) when exact; b = 0.5 tests r = 0.3 and keeps it.
    exact = verify(P, Q, DRAFTS, Scripted(uniforms=[0.1, 0.6], draws=[0]))
    assert exact.statuses == ("accepted", "rejected", "discarded")
    lenient = verify(P, Q, DRAFTS, Scripted(uniforms=[0.1, 0.6, 0.9], draws=[0]), lenience=0.5)
    # r = 0.45 < 0.5 keeps draft 3 too: with b = 0.5 any ratio >= 0.5 always keeps.
    assert lenient.statuses == ("accepted", "accepted", "accepted")
    assert lenient.rs == pytest.approx((0.05, 0.3, 0.45))



CHECKS = [check_accept_reject_discard, check_first_draft_rejected, check_bonus_from_last_row,
          check_fresh_uniform_per_draft, check_strict_comparison, check_greedy,
          check_lenience_scales_r]


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_verify(check: Callable[[VerifyFn], None]) -> None:
    check(verify_mod.verify)


# Each broken verify and the check that must reject it.
MUTANTS: dict[str, tuple[Callable[[VerifyFn], None], list[tuple[str, str]]]] = {
    "bonus from the row before": (check_bonus_from_last_row,
                                  [("dist = p_rows[k]", "dist = p_rows[k - 1]")]),
    "residual is p": (check_accept_reject_discard,
                      [("dist = residual(p_rows[n_accepted], q_rows[n_accepted])",
                        "dist = p_rows[n_accepted]")]),
    "residual from the next row": (check_first_draft_rejected,
                                   [("residual(p_rows[n_accepted], q_rows[n_accepted])",
                                     "residual(p_rows[n_accepted + 1], q_rows[n_accepted + 1])")]),
    "one r for the whole round": (check_fresh_uniform_per_draft,
                                  [("    for i, x in enumerate(drafts):",
                                    "    shared = rng.uniform() if k else 0.0\n"
                                    "    for i, x in enumerate(drafts):"),
                                   ("u = rng.uniform()", "u = shared")]),
    "discarded drafts tested too": (check_accept_reject_discard,
                                    [("        if rejected:  # after",
                                      "        if False:  # after")]),
    "keep iff r <= ratio": (check_strict_comparison, [("if r < ratio:", "if r <= ratio:")]),
    "greedy draws": (check_greedy, [("int(dist.argmax()) if greedy else rng.draw(dist)",
                                     "rng.draw(dist)")]),
    "lenience ignored": (check_lenience_scales_r,
                         [("r = u if lenience == 1.0 else lenience * u", "r = u")]),
    "lenience divides": (check_lenience_scales_r,
                         [("r = u if lenience == 1.0 else lenience * u", "r = u / lenience")]),
}


@pytest.mark.parametrize("name", list(MUTANTS))
def test_checks_reject_broken_verify(name: str) -> None:
    check, edits = MUTANTS[name]
    broken = mutant(verify_mod.verify, *edits)
    with pytest.raises(AssertionError):
        check(broken)


def test_every_check_rejects_some_mutant() -> None:
    assert {c for c, _ in MUTANTS.values()} >= set(CHECKS)


def test_verify_rejects_bad_shapes_and_lenience() -> None:
    with pytest.raises(ValueError, match="p_rows"):
        verify_mod.verify(P[:3], Q, DRAFTS, Scripted())
    with pytest.raises(ValueError, match="q_rows"):
        verify_mod.verify(P, Q[:2], DRAFTS, Scripted())
    for b in (0.0, 1.5, float("nan")):
        with pytest.raises(ValueError, match="lenience"):
            verify_mod.verify(P, Q, DRAFTS, Scripted(), lenience=b)


def check_torch_random_stream(make: Callable[[int], TorchRandom]) -> None:
    # Every uniform and every draw from one seeded generator, in order; a draw inverts the
    # CDF at one float64 uniform (written out here in plain Python).
    g = torch.Generator().manual_seed(7)
    probs = torch.tensor([0.1, 0.2, 0.3, 0.4])
    expected_u = [float(torch.rand((), generator=g)) for _ in range(3)]

    def inverse_cdf(u: float) -> int:
        total, acc = sum(probs.double().tolist()), 0.0
        for i, p in enumerate(probs.double().tolist()):
            acc += p
            if acc > u * total:
                return i
        return len(probs) - 1

    expected_x = [inverse_cdf(float(torch.rand((), generator=g, dtype=torch.float64)))
                  for _ in range(20)]
    rand = make(7)
    assert [rand.uniform() for _ in range(3)] == expected_u
    assert [rand.draw(probs) for _ in range(20)] == expected_x


def test_torch_random_is_the_seeded_generator_stream() -> None:
    check_torch_random_stream(TorchRandom)


def test_torch_random_check_rejects_a_reseeded_stream() -> None:
    broken = mutant(rng_mod.TorchRandom, ("manual_seed(seed)", "manual_seed(seed + 1)"))
    with pytest.raises(AssertionError):
        check_torch_random_stream(broken)

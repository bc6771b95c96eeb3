"""One tally of a run's counts: every figure (α, by position, by drafter, speedup) derives from it.

The engine folds each Round it yields into a Tally and builds its Summary from it; the app
and the benchmarks fold the same events (live or replayed), or add Summaries of several runs,
so all of them count the same way. Qt-free.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .events import DrafterTally, Round, Summary

# The formulas live with the rest of the speed maths; re-exported for the tally's readers.
from .speed import expected_speedup as expected_speedup
from .speed import expected_tokens_per_round as expected_tokens_per_round
from .speed import pass_costs


@dataclass
class _PerDrafter:
    rounds: int = 0
    drafted: int = 0
    tested: int = 0
    accepted: int = 0
    draft_time_s: float = 0.0


def _grow(counts: list[int], n: int) -> None:
    if len(counts) < n:
        counts.extend([0] * (n - len(counts)))


@dataclass
class Tally:
    """Counts of one or more runs; O(1) per fold (O(K) per round)."""

    tokens: int = 0
    rounds: int = 0
    drafted: int = 0
    tested: int = 0
    accepted: int = 0
    siblings: int = 0  # tree rounds: siblings tested at a position after its first test
    siblings_kept: int = 0  # of them, kept (its position counts as kept in ``kept`` too)
    trees: int = 0  # rounds whose drafts branch (Round.branches)
    target_calls: int = 0
    draft_calls: int = 0
    draft_time_s: float = 0.0
    verify_time_s: float = 0.0
    wall_time_s: float = 0.0
    forward_time_s: float = 0.0
    exact: bool = True
    reached: list[int] = field(default_factory=list)  # tested drafts at position i
    kept: list[int] = field(default_factory=list)  # kept drafts at position i
    rounds_by_k: list[int] = field(default_factory=list)
    by_drafter: dict[str, _PerDrafter] = field(default_factory=dict)

    def add_round(self, rnd: Round) -> None:
        """Fold one Round event in (calls and elapsed time are running totals in the event)."""
        self.rounds += 1
        self.tokens += len(rnd.appended_ids)
        self.drafted += rnd.k
        self.accepted += rnd.n_accepted
        self.draft_time_s += rnd.draft_time_s
        self.verify_time_s += rnd.verify_time_s
        self.exact = self.exact and rnd.exact
        self.trees += rnd.branches
        _grow(self.rounds_by_k, rnd.k + 1)
        self.rounds_by_k[rnd.k] += 1
        _grow(self.reached, len(rnd.drafted))
        _grow(self.kept, len(rnd.drafted))
        # Where each draft stands: its index in a chain; a tree node's depth (0 below the
        # committed text). A tree's position is tested once however many siblings it took
        # (one context per depth is tested), so α stays P(a position's draft kept | tested)
        # and is comparable with a chain's; the siblings beside the first are counted apart.
        depth: list[int] = []
        for d in rnd.drafted:
            depth.append(d.index if d.parent is None else
                         0 if d.parent < 0 else depth[d.parent] + 1)
        counted: set[int] = set()
        seen: set[str] = set()
        for d, at in zip(rnd.drafted, depth, strict=True):
            who = self.by_drafter.setdefault(d.drafter, _PerDrafter())
            if d.drafter not in seen:
                seen.add(d.drafter)
                who.rounds += 1
            who.drafted += 1
            if d.status == "discarded":
                continue
            if at in counted:
                self.siblings += 1
                self.siblings_kept += d.status == "accepted"
            else:
                counted.add(at)
                self.tested += 1
                self.reached[at] += 1
                who.tested += 1
            if d.status == "accepted":
                self.kept[at] += 1
                who.accepted += 1
        if rnd.drafted:  # a round drafts with one drafter; its time goes to that one
            self.by_drafter[rnd.drafted[0].drafter].draft_time_s += rnd.draft_time_s

    def close(self, wall_time_s: float, target_calls: int, draft_calls: int,
              forward_time_s: float = 0.0) -> None:
        """Totals only the end of a run knows (the Rounds carry running values)."""
        self.wall_time_s += wall_time_s
        self.target_calls += target_calls
        self.draft_calls += draft_calls
        self.forward_time_s += forward_time_s

    def add_summary(self, s: Summary) -> None:
        """Add a whole run's Summary (runs add up: α of the sum is Σkept / Σtested)."""
        self.tokens += s.tokens
        self.rounds += s.rounds
        self.drafted += s.drafted
        self.tested += s.tested
        self.accepted += s.accepted
        self.siblings += s.siblings
        self.siblings_kept += s.siblings_kept
        self.trees += s.trees
        self.target_calls += s.target_calls
        self.draft_calls += s.draft_calls
        self.draft_time_s += s.draft_time_s
        self.verify_time_s += s.verify_time_s
        self.wall_time_s += s.wall_time_s
        self.forward_time_s += s.forward_time_s
        self.exact = self.exact and s.exact
        for counts, more in ((self.reached, s.reached_by_position),
                             (self.kept, s.kept_by_position), (self.rounds_by_k, s.rounds_by_k)):
            _grow(counts, len(more))
            for i, n in enumerate(more):
                counts[i] += n
        for d in s.by_drafter:
            who = self.by_drafter.setdefault(d.drafter, _PerDrafter())
            who.rounds += d.rounds
            who.drafted += d.drafted
            who.tested += d.tested
            who.accepted += d.accepted
            who.draft_time_s += d.draft_time_s

    @classmethod
    def of(cls, summaries: list[Summary]) -> Tally:
        """The tally of several runs."""
        tally = cls()
        for s in summaries:
            tally.add_summary(s)
        return tally

    # Figures, all derived from the counts above.

    @property
    def alpha(self) -> float:
        """P(draft kept | tested): the maximum-likelihood α of Leviathan et al.; a tree's
        position counts one test whatever number of siblings it tested (``siblings``)."""
        return self.accepted / self.tested if self.tested else 0.0

    @property
    def acceptance_rate(self) -> float:
        """Accepted / drafted (drafts after a rejection count, though never tested)."""
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_tokens_per_round(self) -> float:
        return self.tokens / self.rounds if self.rounds else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.wall_time_s if self.wall_time_s > 0 else 0.0

    @property
    def overhead_share(self) -> float:
        """Share of wall time spent outside model forward passes (the engine's own cost)."""
        if self.wall_time_s <= 0:
            return 0.0
        return max(0.0, 1.0 - self.forward_time_s / self.wall_time_s)

    def acceptance_by_position(self) -> list[float]:
        """P(accepted | position reached), per draft position (0 where never reached)."""
        return [k / r if r else 0.0 for k, r in zip(self.kept, self.reached, strict=True)]

    def alpha_by_drafter(self) -> dict[str, float]:
        return {name: d.accepted / d.tested if d.tested else 0.0
                for name, d in self.by_drafter.items()}

    def cost_ratio(self, step_s: float = 0.0) -> float:
        """c (speed.pass_costs): one draft pass ÷ the target's one-token step, or ÷ one
        verify pass where no step was measured (0 before any)."""
        return pass_costs(self.draft_time_s, self.draft_calls, self.verify_time_s,
                          self.target_calls, step_s)[0]

    def mean_k(self) -> float:
        """Drafts per round (K varies under the adaptive policies)."""
        return self.drafted / self.rounds if self.rounds else 0.0

    def expected_speedup(self, k: int | None = None) -> float:
        """Leviathan et al.'s estimate from α, c and K (the mean K, rounded, by default)."""
        if k is None:
            k = round(self.mean_k())
        return expected_speedup(self.alpha, k, self.cost_ratio())

    def summary(self) -> Summary:
        """A Summary with every count, so summaries of several runs add up again."""
        return Summary(
            tokens=self.tokens,
            rounds=self.rounds,
            drafted=self.drafted,
            accepted=self.accepted,
            acceptance_rate=self.acceptance_rate,
            mean_tokens_per_round=self.mean_tokens_per_round,
            acceptance_by_position=tuple(self.acceptance_by_position()),
            target_calls=self.target_calls,
            draft_calls=self.draft_calls,
            draft_time_s=self.draft_time_s,
            verify_time_s=self.verify_time_s,
            wall_time_s=self.wall_time_s,
            tokens_per_s=self.tokens_per_s,
            alpha=self.alpha,
            tested=self.tested,
            siblings=self.siblings,
            siblings_kept=self.siblings_kept,
            trees=self.trees,
            reached_by_position=tuple(self.reached),
            kept_by_position=tuple(self.kept),
            by_drafter=tuple(
                DrafterTally(drafter=name, rounds=d.rounds, drafted=d.drafted, tested=d.tested,
                             accepted=d.accepted, draft_time_s=d.draft_time_s)
                for name, d in sorted(self.by_drafter.items())),
            rounds_by_k=tuple(self.rounds_by_k),
            forward_time_s=self.forward_time_s,
            exact=self.exact,
        )

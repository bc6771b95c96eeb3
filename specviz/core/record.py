"""RunRecord: what the views need from a stream of events, accumulated per event (no Qt).

It consumes ``specviz.core.events`` objects only, so a live run and a replayed JSON-lines
recording build the same record.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .events import Event, Round, RunFailed, RunFinished, RunStarted
from .speed import (
    describe_step,
    expected_speedup,
    expected_tokens_per_round,
    pass_costs,
    speedup_vs_run,
    speedup_vs_step,
)
from .tally import Tally

# A round whose time since the round before exceeds its own measured passes by more than
# this (and twice them) had a pause or a step's wait inside it: a person's pause is seconds,
# the time outside the passes a few per cent of a round (at most 4.7 % in
# benchmarks/results/2026-11-25-0246-drafters.md).
PAUSE_SLACK_S = 0.25


def paused_in(gap_s: float, passes_s: float) -> float:
    """Seconds of a round's ``gap_s`` (since the round before) spent paused, not decoding."""
    if gap_s > 2 * passes_s + PAUSE_SLACK_S:
        return gap_s - passes_s
    return 0.0


@dataclass
class SpeedStats:
    """Throughput figures of the run so far; every speedup names what it was measured against."""

    tokens_per_s: float = 0.0
    target_calls_per_token: float = 0.0
    alpha: float = 0.0  # P(draft kept | tested): the α of the speedup formula
    cost_ratio: float = 0.0  # c = one draft pass ÷ one target step (÷ verify pass if no step)
    verify_cost: float = 0.0  # v = one verify pass (K + 1 positions) ÷ one target step
    target_step_s: float = 0.0  # the reference: one target step, measured (0 = not known)
    expected_speedup: float = 0.0  # E[tokens/round] ÷ (K·c + v); 0 when v is not measured
    paper_speedup: float = 0.0  # the paper's form, v = 1 (for the tooltip)
    measured_speedup: float = 0.0  # 0 = nothing measured to compare with: shown as a dash
    measured_against: str = ""  # what the measured speedup compares with, for the label


@dataclass
class RunRecord:
    """Every event of one run plus running statistics, updated in O(1) per event."""

    events: list[Event] = field(default_factory=list)
    started: RunStarted | None = None
    rounds: list[Round] = field(default_factory=list)
    finished: RunFinished | None = None
    failed: RunFailed | None = None
    tally: Tally = field(default_factory=Tally)  # the counts: core's one tally of a run
    cumulative_rate: list[float] = field(default_factory=list)  # after each round
    round_rate: list[float] = field(default_factory=list)  # n_accepted / k, per round
    histogram: list[int] = field(default_factory=list)  # rounds with 0..K accepted
    k_per_round: list[int] = field(default_factory=list)  # K chosen, every round
    token_count: int = 0
    paused_s: float = 0.0  # between rounds, paused or waiting for Step: not decoding time

    @property
    def k(self) -> int:
        return self.started.settings.k if self.started else 0

    @property
    def speculative(self) -> bool:
        return self.started is not None and self.started.mode == "speculative"

    def add(self, event: Event) -> None:
        """Fold one event in."""
        self.events.append(event)
        if isinstance(event, RunStarted):
            self.started = event
            k = event.settings.k if event.mode == "speculative" else 0
            self.histogram = [0] * (k + 1)
            self.tally = Tally()
        elif isinstance(event, Round):
            self._add_round(event)
        elif isinstance(event, RunFinished):
            self.finished = event
        elif isinstance(event, RunFailed):
            self.failed = event

    def _add_round(self, rnd: Round) -> None:
        before = self.rounds[-1].elapsed_s if self.rounds else 0.0
        self.paused_s += paused_in(rnd.elapsed_s - before, rnd.draft_time_s + rnd.verify_time_s)
        self.rounds.append(rnd)
        self.token_count = rnd.n_generated
        self.tally.add_round(rnd)
        self.k_per_round.append(rnd.k)
        if rnd.k == 0:
            return
        self.cumulative_rate.append(self.tally.acceptance_rate)
        self.round_rate.append(rnd.n_accepted / rnd.k)
        if rnd.n_accepted >= len(self.histogram):  # a larger K than announced (K policies)
            self.histogram.extend([0] * (rnd.n_accepted + 1 - len(self.histogram)))
        self.histogram[rnd.n_accepted] += 1

    # Counts, read from the tally (the views' names for them).

    @property
    def drafted(self) -> int:
        return self.tally.drafted

    @property
    def accepted(self) -> int:
        return self.tally.accepted

    @property
    def reached(self) -> list[int]:
        """Drafts tested at each position 1…K (K announced, or larger if a round drafted more)."""
        return self._padded(self.tally.reached)

    @property
    def kept(self) -> list[int]:
        return self._padded(self.tally.kept)

    def _padded(self, counts: list[int]) -> list[int]:
        return counts + [0] * (len(self.histogram) - 1 - len(counts))

    def decoding_s(self) -> float:
        """Seconds spent decoding so far: elapsed, less the time paused or waiting for Step
        (``paused_in`` each round; a stop or pause after the last round is left out too)."""
        if not self.rounds:
            return 0.0
        last = self.rounds[-1].elapsed_s
        end = last
        if self.finished is not None and self.finished.stop_reason != "stopped":
            wall = self.finished.summary.wall_time_s
            end = wall if wall - last <= PAUSE_SLACK_S else last  # the run's own finish
        return max(0.0, end - self.paused_s)

    @property
    def exact(self) -> bool:
        """False once lenience < 1 is announced or a round says so: the output is not p's."""
        settings = self.started.settings if self.started else None
        return self.tally.exact and (settings is None or settings.lenience >= 1.0)

    @property
    def acceptance_rate(self) -> float:
        """Accepted / drafted (drafts after a rejection count, though never tested)."""
        return self.tally.acceptance_rate

    @property
    def alpha(self) -> float:
        """P(draft kept | tested): the maximum-likelihood α of Leviathan et al.

        Under i.i.d. acceptance a round keeps n < K drafts with probability α^n (1 − α);
        the likelihood α^(Σn) (1 − α)^(rejections) peaks at Σn / (Σn + rejections).
        """
        return self.tally.alpha

    def acceptance_by_position(self) -> list[float]:
        """P(accepted | position reached), per draft position (0 where never reached)."""
        return [k / r if r else 0.0 for k, r in zip(self.kept, self.reached, strict=True)]

    def alpha_by_drafter(self) -> dict[str, tuple[float, int]]:
        """α and drafts tested, per drafter that drafted (model, lookup), in that order."""
        by = self.tally.by_drafter
        return {name: (by[name].accepted / by[name].tested if by[name].tested else 0.0,
                       by[name].tested)
                for name in sorted(by, key=lambda n: (n != "model", n))}

    def speed(self, baseline_tokens_per_s: float | None = None,
              target_step_s: float | None = None, race: bool = False,
              step_kept: bool = False) -> SpeedStats:
        """Throughput and speedups so far, against what was measured and nothing else.

        ``baseline_tokens_per_s``: a target-alone run of this pair (the other half of a race
        when ``race``); ``target_step_s``: the target's one-token step, measured at load (or
        ``step_kept`` from an earlier launch on this machine: the caption says so).
        Without either, there is no measured speedup (0, drawn as a dash).
        """
        stats = SpeedStats()
        if not self.rounds:
            return stats
        last = self.rounds[-1]
        n = last.n_generated
        elapsed = self.decoding_s()  # pauses and Step's waits are not decoding time
        stats.tokens_per_s = n / elapsed if elapsed > 0 else 0.0
        stats.target_calls_per_token = last.target_calls / n if n else 0.0
        if not self.speculative:
            stats.expected_speedup = stats.paper_speedup = stats.measured_speedup = 1.0
            stats.measured_against = "this is the target alone"
            return stats
        # The tally's running totals (added in round order, as a sum here would): a redraw
        # no longer walks every round.
        c, v = pass_costs(self.tally.draft_time_s, last.draft_calls, self.tally.verify_time_s,
                          last.target_calls, target_step_s or 0.0)
        stats.alpha = self.alpha
        # The K the rounds used: under the heuristic and cost policies it is not the setting.
        k = self.k if self.started is None or self.started.settings.k_policy == "fixed" \
            else max(1, round(self.tally.mean_k()))
        step = target_step_s or 0.0
        if step > 0:
            stats.target_step_s = step
            stats.cost_ratio, stats.verify_cost = c, v
            stats.expected_speedup = expected_speedup(stats.alpha, k, c, v)
            stats.paper_speedup = expected_speedup(stats.alpha, k, c)
        elif v > 0:
            # No step measured: c against the verify pass, and only the paper's form (v = 1),
            # which the view keeps out of the big number.
            stats.cost_ratio = c
            stats.paper_speedup = expected_speedup(stats.alpha, k, c)
        if baseline_tokens_per_s:
            stats.measured_speedup = speedup_vs_run(stats.tokens_per_s, baseline_tokens_per_s)
            stats.measured_against = ("vs target alone, same prompt and seed (race)" if race
                                      else "vs a baseline run of the target alone")
        elif step > 0:
            stats.measured_speedup = speedup_vs_step(n, elapsed, step)
            stats.measured_against = describe_step(step, step_kept)
        else:
            stats.measured_against = "nothing measured to compare with: run a race"
        for name in ("measured_speedup", "expected_speedup", "paper_speedup"):
            if not math.isfinite(getattr(stats, name)):
                setattr(stats, name, 0.0)
        return stats


__all__ = ["RunRecord", "SpeedStats", "expected_speedup", "expected_tokens_per_round"]

"""A race: the speculative run and the target alone, same prompt, seed and settings.

On one machine the two would compete for the same cores, so they run ONE AFTER THE OTHER
(speculative first), each timing itself (``Round.elapsed_s`` from its own start); a view
plays both on one shared clock from those timestamps.

A race recording is just the two runs, consecutive: ``RunStarted(mode="speculative")`` …
``RunFinished``, then ``RunStarted(mode="baseline")`` … ``RunFinished``, with the same
prompt ids, target, device and sampling settings (seed included). No new event type or
field: every reader that reads two runs reads a race, and :func:`as_race` recognises one.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from . import lineup as _lineup
from .events import Event, RunStarted, Settings
from .lineup import LaneSpec, Lineup, LineupDecoder, Side, split_runs
from .speed import speedup_vs_run

# The settings both runs must share (K and the drafter only concern the speculative one).
SHARED_SETTINGS = ("temperature", "top_k", "top_p", "max_new_tokens", "seed")


def run_race(pair: object, settings: Settings, prompt: str,
             stop: threading.Event | None = None) -> Iterator[Event]:
    """Speculative run, then (if it finished) the target alone: events of both, in order.

    The two-lane case of :func:`~specviz.core.lineup.run_lineup`."""
    lanes = (LaneSpec(settings), LaneSpec(settings, mode="baseline"))
    return _lineup.run_lineup(pair, lanes, prompt, stop)  # looked up here: tests swap it


class RaceDecoder(LineupDecoder):
    """A decoder-shaped race, for a worker that calls ``run(prompt, stop)``."""

    def __init__(self, pair: object, settings: Settings) -> None:
        super().__init__(pair, (LaneSpec(settings), LaneSpec(settings, mode="baseline")))
        self.settings = settings


@dataclass(frozen=True)
class Race:
    """A speculative run and the target alone on the same prompt, seed and settings."""

    speculative: Side
    baseline: Side

    @property
    def lineup(self) -> Lineup:
        """The race as the two-lane lineup it is."""
        return Lineup((self.speculative, self.baseline))

    @property
    def duration_s(self) -> float:
        return self.lineup.duration_s

    @property
    def complete(self) -> bool:
        return self.speculative.finished is not None and self.baseline.finished is not None

    @property
    def speedup(self) -> float:
        """Measured: speculative tokens/s ÷ target-alone tokens/s (0 until both finished)."""
        if not self.complete:
            return 0.0
        assert self.speculative.finished is not None and self.baseline.finished is not None
        return speedup_vs_run(self.speculative.finished.summary.tokens_per_s,
                              self.baseline.finished.summary.tokens_per_s)

    @property
    def greedy(self) -> bool:
        return self.speculative.started.settings.temperature == 0

    @property
    def identical(self) -> bool | None:
        """At T = 0: the same token ids on both sides? None at T > 0 or before both finish."""
        if not self.greedy or not self.complete:
            return None
        assert self.speculative.finished is not None and self.baseline.finished is not None
        return self.speculative.finished.generated_ids == self.baseline.finished.generated_ids

    def first_difference(self) -> int | None:
        """The first output token where the two sides differ (None if they agree throughout)."""
        if not self.complete:
            return None
        assert self.speculative.finished is not None and self.baseline.finished is not None
        a = self.speculative.finished.generated_ids
        b = self.baseline.finished.generated_ids
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            if x != y:
                return i
        return None if len(a) == len(b) else min(len(a), len(b))

    @property
    def events(self) -> list[Event]:
        """The race recording: both runs, speculative first."""
        return [*self.speculative.events, *self.baseline.events]


def same_race(a: RunStarted, b: RunStarted) -> bool:
    """Could ``a`` (speculative) and ``b`` (target alone) be the two runs of one race?"""
    return (a.mode == "speculative" and b.mode == "baseline"
            and a.prompt_ids == b.prompt_ids
            and (a.pair.target, a.pair.device) == (b.pair.target, b.pair.device)
            and all(getattr(a.settings, f) == getattr(b.settings, f) for f in SHARED_SETTINGS))


def as_race(events: Sequence[Event]) -> Race | None:
    """The race a recording holds: exactly a speculative run then its target-alone run."""
    runs = split_runs(events)
    if len(runs) == 1 and runs[0].started.mode == "speculative":
        return None  # a race whose second half has not started (yet): see race_so_far
    if len(runs) != 2 or not same_race(runs[0].started, runs[1].started):
        return None
    return Race(runs[0], runs[1])


def race_so_far(events: Sequence[Event]) -> tuple[Side | None, Side | None]:
    """Both sides of a race still arriving: (speculative, target alone or None yet)."""
    runs = split_runs(events)
    spec = runs[0] if runs and runs[0].started.mode == "speculative" else None
    base = runs[1] if spec is not None and len(runs) > 1 and \
        same_race(spec.started, runs[1].started) else None
    return spec, base


__all__ = ["SHARED_SETTINGS", "Race", "RaceDecoder", "Side", "as_race", "race_so_far",
           "run_race", "same_race", "split_runs"]

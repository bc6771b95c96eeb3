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

import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

from .events import Event, Round, RunFailed, RunFinished, RunStarted, Settings
from .speed import speedup_vs_run

# The settings both runs must share (K and the drafter only concern the speculative one).
SHARED_SETTINGS = ("temperature", "top_k", "top_p", "max_new_tokens", "seed")


def run_race(pair: object, settings: Settings, prompt: str,
             stop: threading.Event | None = None) -> Iterator[Event]:
    """Speculative run, then (if it finished) the target alone: events of both, in order."""
    from .engine import AutoregressiveDecoder, SpeculativeDecoder, guarded

    if settings.seed is None:  # both runs must draw from the same seed
        settings = replace(settings, seed=int.from_bytes(os.urandom(4), "little"))
    finished = False
    for event in guarded(SpeculativeDecoder(pair, settings).run(prompt, stop)):  # type: ignore[arg-type]
        finished = isinstance(event, RunFinished)
        yield event
    if not finished or (stop is not None and stop.is_set()):
        return  # a failed or stopped speculative run: no race to finish
    # The target alone starts only now: the two runs never share the cores.
    yield from guarded(AutoregressiveDecoder(pair, settings).run(prompt, stop))  # type: ignore[arg-type]


class RaceDecoder:
    """A decoder-shaped race, for a worker that calls ``run(prompt, stop)``."""

    def __init__(self, pair: object, settings: Settings) -> None:
        self.pair = pair
        self.settings = settings

    def run(self, prompt: str, stop: threading.Event | None = None) -> Iterator[Event]:
        return run_race(self.pair, self.settings, prompt, stop)


@dataclass(frozen=True)
class Side:
    """One run of a race: its events and where it stands at a shared time."""

    started: RunStarted
    rounds: tuple[Round, ...]
    finished: RunFinished | None
    failed: RunFailed | None = None

    @property
    def events(self) -> list[Event]:
        tail: list[Event] = [e for e in (self.finished, self.failed) if e is not None]
        return [self.started, *self.rounds, *tail]

    @property
    def duration_s(self) -> float:
        """The run's own measured wall time (its last round's time if it did not finish)."""
        if self.finished is not None:
            return self.finished.summary.wall_time_s
        return self.rounds[-1].elapsed_s if self.rounds else 0.0

    def rounds_at(self, t: float) -> int:
        """Rounds done by time ``t`` of the run's own clock."""
        n = 0
        for rnd in self.rounds:  # elapsed_s only grows
            if rnd.elapsed_s > t:
                break
            n += 1
        return n

    def tokens_at(self, t: float) -> int:
        n = self.rounds_at(t)
        return self.rounds[n - 1].n_generated if n else 0

    def done_at(self, t: float) -> bool:
        return self.finished is not None and t >= self.duration_s

    def tokens_per_s_at(self, t: float) -> float:
        """Tokens so far ÷ time so far on the shared clock (the final figure once done)."""
        if self.done_at(t):
            assert self.finished is not None
            return self.finished.summary.tokens_per_s
        return self.tokens_at(t) / t if t > 0 else 0.0


@dataclass(frozen=True)
class Race:
    """A speculative run and the target alone on the same prompt, seed and settings."""

    speculative: Side
    baseline: Side

    @property
    def duration_s(self) -> float:
        return max(self.speculative.duration_s, self.baseline.duration_s)

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


def split_runs(events: Sequence[Event]) -> list[Side]:
    """The runs of a recording (a RunFailed outside any run is left out)."""
    runs: list[Side] = []
    started: RunStarted | None = None
    rounds: list[Round] = []
    for event in events:
        if isinstance(event, RunStarted):
            if started is not None:  # a run cut short, then another began
                runs.append(Side(started, tuple(rounds), None))
            started, rounds = event, []
        elif isinstance(event, Round) and started is not None:
            rounds.append(event)
        elif isinstance(event, RunFinished | RunFailed) and started is not None:
            finished = event if isinstance(event, RunFinished) else None
            failed = event if isinstance(event, RunFailed) else None
            runs.append(Side(started, tuple(rounds), finished, failed))
            started, rounds = None, []
    if started is not None:
        runs.append(Side(started, tuple(rounds), None))
    return runs


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

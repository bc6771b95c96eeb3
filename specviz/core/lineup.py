"""A lineup: 2-5 runs of one prompt under different settings, replayed side by side.

On one machine the runs would compete for the same cores, so they run ONE AFTER THE OTHER,
each timing itself (``Round.elapsed_s`` from its own start); a view plays them all on one
shared clock from those timestamps, as if they had started together. The race
(:mod:`specviz.core.race`) is the two-lane case: a speculative run, then the target alone.

A lineup recording is just its runs, consecutive: ``RunStarted`` … ``RunFinished`` per
lane, each with its own settings, all with the same prompt ids, target, device, seed and
token budget. No new event type or field: every reader that reads several runs reads a
lineup (:class:`~specviz.core.recording.RecordingReader` included), and :func:`as_lineup`
recognises one. A lane may draft with a model of its own (``LaneSpec.draft``, ``draft=SPEC``
in a configuration): loaded beside the pair, with the same target and tokenizer; its
``RunStarted`` names it, and :meth:`Lineup.label` shows it where the drafts differ.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from .events import Event, Round, RunFailed, RunFinished, RunStarted, Settings
from .speed import speedup_vs_run

MIN_LANES, MAX_LANES = 2, 5  # up to 4 configurations, and the target alone beside them
# What every lane shares, so that their speeds compare: the same draws, the same budget.
LINEUP_SHARED = ("max_new_tokens", "seed")


@dataclass(frozen=True)
class LaneSpec:
    """One lane to run: its settings, and whether it is the target alone."""

    settings: Settings
    mode: Literal["speculative", "baseline"] = "speculative"
    pair: Any = None  # another pair (another draft model) for this lane; None = the lineup's
    # Another draft model for this lane (alias, preset, hub id, folder or .gguf), loaded by
    # run_lineup beside the lineup's pair (its target, its tokenizer); None = the pair's draft.
    draft: str | None = None


DRAFT_KEY = "draft"  # the key of a lane's own draft model in a configuration ("draft=PATH")


def draft_source(spec: str) -> str:
    """What ``draft=SPEC`` names: a preset's draft, or the model SPEC itself."""
    from .presets import PRESETS

    return PRESETS[spec][0] if spec in PRESETS else spec


def pair_with_draft(pair: Any, spec: str, load: Callable[..., Any] | None = None) -> Any:
    """``pair``'s target and tokenizer with another draft model (what ``draft=SPEC`` asks).

    The draft must tokenize as the target does (one shared vocabulary): otherwise one
    TokenizerMismatchError that names both, before any lane runs. ``load`` (tests) stands in
    for :func:`specviz.core.models.load_model`.
    """
    from .models import LoadedModel, check_tokenizers, check_vocab_map, load_model

    dtype = str(pair.dtype).removeprefix("torch.")
    loaded = (load or load_model)(draft_source(spec), str(pair.device),
                                  dtype if dtype in ("float32", "float16", "bfloat16") else "auto")
    target = LoadedModel(model=pair.target, tokenizer=pair.tokenizer, name=pair.target_name)
    check_tokenizers(target, loaded)
    check_vocab_map(target, loaded)
    return replace(pair, draft=loaded.model, draft_name=loaded.name,
                   draft_vocab_map=loaded.vocab_map, draft_oov_id=loaded.oov_id,
                   draft_temperature_scale=loaded.temperature_scale, vocab_size=0)


def with_drafts(pair: Any, lanes: Sequence[LaneSpec], loaded: dict[str, Any] | None = None,
                load: Callable[..., Any] | None = None) -> list[LaneSpec]:
    """The lanes, each lane with ``draft=`` given its pair (each model loaded once; kept in
    ``loaded`` for the next lineup)."""
    loaded = {} if loaded is None else loaded
    out = []
    for lane in lanes:
        if lane.draft is not None and lane.pair is None and lane.mode == "speculative":
            if lane.draft not in loaded:
                loaded[lane.draft] = pair_with_draft(pair, lane.draft, load)
            lane = replace(lane, pair=loaded[lane.draft])
        out.append(lane)
    return out


def decoder_for(pair: Any, lane: LaneSpec) -> Any:
    """The decoder that runs ``lane`` (imports torch: only when a lineup really runs)."""
    from .engine import AutoregressiveDecoder, SpeculativeDecoder

    cls = SpeculativeDecoder if lane.mode == "speculative" else AutoregressiveDecoder
    return cls(lane.pair if lane.pair is not None else pair, lane.settings)


def run_lineup(pair: Any, lanes: Sequence[LaneSpec], prompt: str,
               stop: threading.Event | None = None, loaded: dict[str, Any] | None = None,
               load: Callable[..., Any] | None = None) -> Iterator[Event]:
    """Each lane's events, one lane after the other; a lane that fails or is stopped ends it.

    A seed of None is drawn once and given to every lane, so that all draw alike. Lanes with
    a draft model of their own have it loaded first (see :func:`with_drafts`): a draft that
    cannot be loaded or does not share the target's tokenizer raises before any lane runs.
    """
    from .engine import guarded

    if not MIN_LANES <= len(lanes) <= MAX_LANES:
        from .errors import InputError

        raise InputError(f"A lineup runs {MIN_LANES} to {MAX_LANES} lanes, got {len(lanes)}.")
    lanes = with_drafts(pair, lanes, loaded, load)
    seed = lanes[0].settings.seed
    if seed is None:
        seed = int.from_bytes(os.urandom(4), "little")
    for lane in lanes:
        lane = replace(lane, settings=replace(lane.settings, seed=seed))
        finished = False
        for event in guarded(_events(pair, lane, prompt, stop)):
            finished = isinstance(event, RunFinished)
            yield event
        if not finished or (stop is not None and stop.is_set()):
            return  # the next lane starts only after this one finished: none left to run


def _events(pair: Any, lane: LaneSpec, prompt: str,
            stop: threading.Event | None) -> Iterator[Event]:
    # The decoder is built inside the generator: a bad setting becomes the lane's RunFailed.
    yield from decoder_for(pair, lane).run(prompt, stop)


class LineupDecoder:
    """A decoder-shaped lineup, for a worker that calls ``run(prompt, stop)``."""

    def __init__(self, pair: Any, lanes: Sequence[LaneSpec]) -> None:
        self.pair = pair
        self.lanes = tuple(lanes)
        self.loaded: dict[str, Any] = {}  # lanes' own drafts, loaded once

    def run(self, prompt: str, stop: threading.Event | None = None) -> Iterator[Event]:
        return run_lineup(self.pair, self.lanes, prompt, stop, self.loaded)


@dataclass(frozen=True)
class Side:
    """One run of a lineup (or race): its events and where it stands at a shared time."""

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

    def tokens_per_round_at(self, t: float) -> float:
        n = self.rounds_at(t)
        return self.tokens_at(t) / n if n else 0.0

    @property
    def tokens_per_s(self) -> float:
        """The measured figure once finished (0 before)."""
        return self.finished.summary.tokens_per_s if self.finished is not None else 0.0

    @property
    def label(self) -> str:
        """How the lane is named on screen: 'target alone', 'model K 4', 'hybrid cost' …"""
        return lane_label(self.started)


def lane_label(started: RunStarted) -> str:
    """A short name of a run's configuration (what a lineup varies)."""
    if started.mode == "baseline":
        return "target alone"
    s = started.settings
    policy = f"K {s.k}" if s.k_policy == "fixed" else f"{s.k_policy} (K from {s.k})"
    if s.drafter == "lookup":
        policy = f"budget {s.lookup_k}" if s.k_policy == "fixed" else s.k_policy
    parts = [s.drafter, policy, started.temperature_text()]
    if s.lenience < 1.0:
        parts.append(f"lenience {s.lenience:g}")
    return ", ".join(parts)


@dataclass(frozen=True)
class LaneState:
    """One lane at one time of the shared clock."""

    label: str
    rounds: int
    tokens: int
    tokens_per_s: float
    tokens_per_round: float
    done: bool


@dataclass(frozen=True)
class Lineup:
    """Runs of one prompt under different settings, on one clock."""

    lanes: tuple[Side, ...]

    @property
    def duration_s(self) -> float:
        """The shared clock's end: the slowest lane's own wall time."""
        return max((lane.duration_s for lane in self.lanes), default=0.0)

    @property
    def complete(self) -> bool:
        return all(lane.finished is not None for lane in self.lanes)

    def label(self, lane: Side) -> str:
        """The lane's name; with its draft model's where the lanes draft with several."""
        drafts = {x.started.pair.draft for x in self.lanes if x.started.mode == "speculative"}
        if len(drafts) > 1 and lane.started.mode == "speculative":
            return f"{lane.label}, draft {lane.started.pair.draft}"
        return lane.label

    def at(self, t: float) -> list[LaneState]:
        """Every lane at time ``t`` of the shared clock, each from its own timestamps."""
        return [LaneState(self.label(lane), lane.rounds_at(t), lane.tokens_at(t),
                          lane.tokens_per_s_at(t), lane.tokens_per_round_at(t), lane.done_at(t))
                for lane in self.lanes]

    @property
    def baseline(self) -> Side | None:
        """The target-alone lane, if the lineup has one (what speedups divide by)."""
        return next((lane for lane in self.lanes if lane.started.mode == "baseline"), None)

    def speedup(self, lane: Side) -> float:
        """Measured: the lane's tokens/s ÷ the target alone's (0 without one, or unfinished)."""
        base = self.baseline
        if base is None:
            return 0.0
        return speedup_vs_run(lane.tokens_per_s, base.tokens_per_s)

    def ranking(self) -> list[Side]:
        """Finished lanes, fastest first (measured tokens/s); unfinished ones last."""
        return sorted(self.lanes, key=lambda lane: (lane.finished is None, -lane.tokens_per_s))

    def identical(self, lane: Side) -> bool | None:
        """At T = 0: the same token ids as the target alone? None where it cannot tell."""
        base = self.baseline
        if (base is None or lane is base or lane.finished is None or base.finished is None
                or lane.started.settings.temperature != 0
                or base.started.settings.temperature != 0):
            return None
        return lane.finished.generated_ids == base.finished.generated_ids

    @property
    def events(self) -> list[Event]:
        """The lineup recording: every lane's run, in order."""
        return [e for lane in self.lanes for e in lane.events]


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


def same_lineup(a: RunStarted, b: RunStarted) -> bool:
    """Could ``a`` and ``b`` be two lanes of one lineup (same prompt, target, seed, budget)?"""
    return (a.prompt_ids == b.prompt_ids
            and (a.pair.target, a.pair.device) == (b.pair.target, b.pair.device)
            and all(getattr(a.settings, f) == getattr(b.settings, f) for f in LINEUP_SHARED))


def as_lineup(events: Sequence[Event]) -> Lineup | None:
    """The lineup a recording holds: 2-5 runs of one prompt, target, seed and budget."""
    runs = split_runs(events)
    if not MIN_LANES <= len(runs) <= MAX_LANES:
        return None
    if not all(same_lineup(runs[0].started, r.started) for r in runs[1:]):
        return None
    return Lineup(tuple(runs))


__all__ = ["DRAFT_KEY", "LINEUP_SHARED", "MAX_LANES", "MIN_LANES", "LaneSpec", "LaneState",
           "Lineup", "LineupDecoder", "Side", "as_lineup", "decoder_for", "draft_source",
           "lane_label", "pair_with_draft", "run_lineup", "same_lineup", "split_runs",
           "with_drafts"]

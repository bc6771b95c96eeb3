"""Typed events emitted by the decoders.

Notation everywhere in specviz: **p = target** distribution, **q = draft** distribution
(as in Leviathan et al. and transformers' ``_speculative_sampling``).

A run is the sequence ``RunStarted, Round*, RunFinished`` (or ``RunFailed`` last when
something broke). The same events drive the CLI, the GUI and replays: ``to_json`` /
``from_json`` turn each into one JSON object with a ``type`` field.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Literal

from .options import DEFAULTS, RECORDED

# Fate of a drafted token in a round.
Status = Literal["accepted", "rejected", "discarded"]
# Where an extra (non-draft) token came from: residual resample, bonus after full
# acceptance, or a plain target step (the autoregressive baseline).
ExtraKind = Literal["resampled", "bonus", "target"]
StopReason = Literal["eos", "max_new_tokens", "stopped", "context", "error"]
# Version of the event schema a recording was written with. 1: before drafters and K
# policies (no ``format`` field at all); 2: drafter per position, policy reason, lenience;
# 3: token trees (a draft's ``parent``, and after a rejected one the ``residual_top`` its
# next sibling meets). Each version reads the older ones: a missing field is a chain.
FORMAT_VERSION = 3


@dataclass(frozen=True)
class Settings:
    """Sampling and drafting settings, applied identically to p and q.

    Every default, range and help text lives in :mod:`specviz.core.options` (one table for
    the API, the CLI, the app and the recording reader); ``options.settings(profile, **kw)``
    builds checked Settings. A recording that lacks a field is read with what it was made
    with (``options.RECORDED``), not with today's defaults.
    """

    k: int = DEFAULTS["k"]
    temperature: float = DEFAULTS["temperature"]
    top_k: int = DEFAULTS["top_k"]  # 0 = off
    top_p: float = DEFAULTS["top_p"]  # 1.0 = off
    max_new_tokens: int = DEFAULTS["max_new_tokens"]
    seed: int | None = DEFAULTS["seed"]  # None: draw one (the run's RunStarted says which)
    top_n: int = DEFAULTS["top_n"]  # how many candidates per distribution the events carry
    # Who drafts: "model" (the draft model q), "lookup" (copy what followed the most recent
    # earlier occurrence of the last n tokens; q is one-hot) or "hybrid" (lookup on a long
    # enough match, the model otherwise); core/registry.py lists them.
    drafter: str = DEFAULTS["drafter"]
    ngram_min: int = DEFAULTS["ngram_min"]  # shortest suffix lookup may match
    ngram_max: int = DEFAULTS["ngram_max"]  # longest suffix lookup tries first
    # Lookup's own budget: a lookup round drafts up to this many tokens of the matched text
    # (fewer where the copy reaches the end of the context), whatever K the model drafter
    # uses; its drafts cost no forward pass, so only the wider verify pass limits them.
    lookup_k: int = DEFAULTS["lookup_k"]
    # How K is chosen each round: "fixed" (k), "heuristic" (transformers' schedule, starting
    # at k) or "cost" (the K in 0..16 with the most expected tokens per measured second).
    k_policy: str = DEFAULTS["k_policy"]
    # r ~ U[0, lenience): below 1 drafts are kept more often and the output NO LONGER follows
    # the target's distribution (Round.exact and Summary.exact say so). 1.0 = exact.
    lenience: float = DEFAULTS["lenience"]


@dataclass(frozen=True)
class TopN:
    """The N most probable tokens of one distribution (descending), with their text."""

    ids: tuple[int, ...]
    probs: tuple[float, ...]
    texts: tuple[str, ...]


@dataclass(frozen=True)
class DraftPosition:
    """One drafted token x and the decision taken on it."""

    index: int  # 0-based position within the round
    token_id: int
    text: str  # the token's own text (may hold U+FFFD for a split multi-byte char)
    q: float  # q(x): draft probability of x
    p: float  # p(x): target probability of x
    ratio: float  # min(1, p(x)/q(x)): the acceptance probability
    r: float | None  # the uniform draw, accepted iff r < ratio; None once discarded
    status: Status
    q_top: TopN
    p_top: TopN
    drafter: str = "model"  # who proposed x: "model" or "lookup" (then q is one-hot on x)
    # A tree round: the index of x's parent draft (-1: the committed text); None: a chain.
    parent: int | None = None
    # A tree round, x rejected: top-N of the p the next sibling is tested against (the
    # residual after x, e.g. norm(max(0, p − q))); the last sibling's is the extra's law.
    residual_top: TopN | None = None


@dataclass(frozen=True)
class ExtraToken:
    """The token a round adds after its accepted drafts."""

    kind: ExtraKind
    token_id: int
    text: str
    prob: float  # probability of the token under the distribution it was drawn from
    p: float  # p(token) under the target at that position
    dist_top: TopN  # top-N of the distribution it was drawn from (residual, or p)


@dataclass(frozen=True)
class Round:
    """One speculative round (or one baseline step, with no drafts)."""

    index: int
    k: int  # drafts attempted this round (0 for the baseline, or a plain target step)
    drafted: tuple[DraftPosition, ...]
    n_accepted: int
    extra: ExtraToken | None  # None only when the round was trimmed before it
    bonus_top: TopN | None  # p at position K (the bonus distribution), if computed
    appended_ids: tuple[int, ...]  # tokens committed by this round (after trimming)
    appended_text: str  # text those tokens add to the output (multi-byte safe)
    appended_texts: tuple[str, ...]  # per appended token, how the text grew (may be "")
    draft_time_s: float
    verify_time_s: float
    n_generated: int  # tokens generated so far, this round included
    target_calls: int  # target forward passes so far
    draft_calls: int  # draft forward passes so far
    elapsed_s: float  # since the run started
    final: bool = False  # no round follows: the next event is RunFinished
    # Why the K policy chose this round's K, e.g. "α̂ 0.62, c 0.10, v 1.4 → K 3".
    policy_reason: str = ""
    exact: bool = True  # False when lenience < 1: kept drafts no longer follow p

    @property
    def branches(self) -> bool:
        """Whether the drafts form a tree that is not a chain: a parent other than the
        chain's -1, 0, 1, … (a chain round has no parents at all, or those)."""
        d = self.drafted
        return bool(d) and d[0].parent is not None and \
            any(x.parent != i - 1 for i, x in enumerate(d))


@dataclass(frozen=True)
class PairInfo:
    draft: str | None  # None for the target-only baseline
    target: str
    device: str
    dtype: str
    vocab_size: int
    # The draft drew q at temperature T × this (its calibration, models.TEMPERATURE_SCALE_KEY).
    draft_temperature_scale: float = 1.0


@dataclass(frozen=True)
class RunStarted:
    mode: Literal["speculative", "baseline"]
    prompt: str
    prompt_ids: tuple[int, ...]
    pair: PairInfo
    settings: Settings
    format: int = 1  # event schema version (absent, so 1, in old recordings)

    def temperature_text(self, eq: str = "=") -> str:
        """"T=0.7" or "greedy", and where the draft draws at another temperature, by how much
        (", q at T×0.85"): the q an audience sees is the q the draft drew from."""
        t = self.settings.temperature
        if t == 0:
            return "greedy"
        scale = self.pair.draft_temperature_scale
        return f"T{eq}{t:g}" + (f", q at T×{scale:g}" if scale != 1.0 else "")


@dataclass(frozen=True)
class DrafterTally:
    """Counts of one drafter's proposals in a run (so runs and drafters add up)."""

    drafter: str
    rounds: int = 0  # rounds it drafted in
    drafted: int = 0
    tested: int = 0  # accepted + rejected
    accepted: int = 0
    draft_time_s: float = 0.0


@dataclass(frozen=True)
class Summary:
    tokens: int
    rounds: int
    drafted: int
    accepted: int
    acceptance_rate: float  # accepted / drafted (0 when nothing was drafted)
    mean_tokens_per_round: float
    acceptance_by_position: tuple[float, ...]  # P(accepted | position reached), per position
    target_calls: int
    draft_calls: int
    draft_time_s: float
    verify_time_s: float
    wall_time_s: float
    tokens_per_s: float
    # α of Leviathan et al.: P(a draft is kept | it was tested) = accepted / (accepted +
    # rejected), the maximum-likelihood α under i.i.d. acceptance. Drafts after a rejection
    # are never tested, so accepted / drafted (above) is lower: (α + … + α^K) / K.
    alpha: float = 0.0
    tested: int = 0  # drafts compared against p (accepted + rejected)
    # Tree rounds: a position (a depth of the tree) counts one test in ``tested`` and α however
    # many siblings were tested there (α per position, comparable with a chain's); these are
    # the siblings tested after the first at a position, and of them the ones kept (the
    # position counts as kept in α too). ``trees``: rounds whose drafts branch
    # (Round.branches). Recordings made before these two carry neither: 0 (the rounds in
    # them hold what a RunRecord counts again).
    siblings: int = 0
    siblings_kept: int = 0
    trees: int = 0
    # Counts behind the ratios above, so summaries of several runs add up (tally.Tally).
    reached_by_position: tuple[int, ...] = ()  # drafts tested at position i
    kept_by_position: tuple[int, ...] = ()  # drafts kept at position i
    by_drafter: tuple[DrafterTally, ...] = ()
    rounds_by_k: tuple[int, ...] = ()  # rounds that drafted k tokens, k = 0, 1, ...
    forward_time_s: float = 0.0  # inside model forward passes; wall - this = engine overhead
    exact: bool = True  # False when lenience < 1: the output does not follow p


@dataclass(frozen=True)
class RunFinished:
    generated_ids: tuple[int, ...]
    text: str
    stop_reason: StopReason
    summary: Summary


@dataclass(frozen=True)
class RunFailed:
    message: str
    kind: str = "error"  # a short class: "oom", "load", "input", "decoder" ...


Event = RunStarted | Round | RunFinished | RunFailed

_TYPE_NAMES: dict[type, str] = {
    RunStarted: "run_started",
    Round: "round",
    RunFinished: "run_finished",
    RunFailed: "error",
}
_TYPES_BY_NAME = {v: k for k, v in _TYPE_NAMES.items()}


def event_type(event: Event) -> str:
    """The JSON ``type`` name of an event."""
    return _TYPE_NAMES[type(event)]


def to_dict(event: Event) -> dict[str, Any]:
    """A JSON-ready dict of an event, with its ``type`` first."""
    return {"type": event_type(event), **dataclasses.asdict(event)}


def to_json(event: Event) -> str:
    return json.dumps(to_dict(event), ensure_ascii=False)


def _build(cls: type, data: Any) -> Any:
    """Rebuild a (possibly nested) frozen dataclass from ``asdict`` output."""
    if data is None:
        return None
    kwargs: dict[str, Any] = {}
    hints = {f.name: f for f in dataclasses.fields(cls)}
    if cls is Settings:  # fields added since format 1: what the recording was made with
        kwargs.update({k: v for k, v in RECORDED.items() if k not in data})
    for name, value in data.items():
        if name not in hints:
            continue
        kwargs[name] = _convert(name, value)
    return cls(**kwargs)


_NESTED: dict[str, type] = {
    "q_top": TopN,
    "p_top": TopN,
    "dist_top": TopN,
    "bonus_top": TopN,
    "residual_top": TopN,
    "extra": ExtraToken,
    "pair": PairInfo,
    "settings": Settings,
    "summary": Summary,
}
_NESTED_TUPLES: dict[str, type] = {
    "by_drafter": DrafterTally,
}


def _convert(name: str, value: Any) -> Any:
    if name in _NESTED:
        return _build(_NESTED[name], value)
    if name == "drafted" and isinstance(value, list):  # Round.drafted, not Summary.drafted
        return tuple(_build(DraftPosition, v) for v in value)
    if name in _NESTED_TUPLES and isinstance(value, list):
        return tuple(_build(_NESTED_TUPLES[name], v) for v in value)
    if isinstance(value, list):
        return tuple(value)
    return value


def from_dict(data: dict[str, Any]) -> Event:
    """Inverse of :func:`to_dict`."""
    cls = _TYPES_BY_NAME[data["type"]]
    body = {k: v for k, v in data.items() if k != "type"}
    result: Event = _build(cls, body)
    return result


def from_json(line: str) -> Event:
    return from_dict(json.loads(line))


__all__ = [
    "FORMAT_VERSION",
    "DraftPosition",
    "DrafterTally",
    "Event",
    "ExtraToken",
    "PairInfo",
    "Round",
    "RunFailed",
    "RunFinished",
    "RunStarted",
    "Settings",
    "Summary",
    "TopN",
    "event_type",
    "from_dict",
    "from_json",
    "to_dict",
    "to_json",
]

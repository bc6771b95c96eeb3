"""Every run option, once: name, type, range, help text and default.

The Python API's :class:`~specviz.core.events.Settings`, the CLI's argparse, the app's controls
and the recording reader all read this table; nothing else writes a default or a range.
Torch-free (the window imports it before torch loads).

- ``default`` is *the* default: what the API, the CLI and the app use unless told otherwise.
  It is the measured best combination (benchmarks/drafters.py, docs/benchmarks.md):
  hybrid drafting with the cost policy, greedy, 64 tokens.
- :data:`PROFILES` hold named departures from it, e.g. the app's ``"presentation"`` profile
  samples at T 0.7 for 128 tokens, so a room sees the draws that speculative sampling is about.
- :data:`RECORDED` says what a recording that lacks a field was made with (fields added
  after format 1: the engine then drafted with the model at a fixed K, lookup copied ≤ 10).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

from . import registry
from .errors import InputError

if TYPE_CHECKING:  # events imports this module for its defaults
    from .events import Settings

K_LIMIT = 16  # the largest K any drafter or policy drafts (events carry at most this)
NGRAM_LIMIT = 8  # the longest suffix prompt lookup matches
TOP_N_LIMIT = 1024  # candidates per distribution an event may carry
SEED_LIMIT = 2**63 - 1  # torch.Generator.manual_seed takes a signed 64-bit integer
TEMPERATURE_MIN = 1e-30  # below this, logits / T overflows float32; greedy is 0
# The widest the app's spin boxes go where the engine itself has no upper bound.
UI_TEMPERATURE_MAX = 2.0
UI_TOP_K_MAX = 100_000
UI_MAX_NEW_TOKENS = 100_000


@dataclass(frozen=True)
class Option:
    """One run option (a field of ``Settings``)."""

    name: str  # the Settings field; the CLI flag is --name-with-dashes
    type: type  # int, float or str
    default: Any
    help: str
    label: str  # short, for the app's form and headers
    low: float | None = None  # smallest allowed (inclusive unless low_open)
    high: float | None = None  # largest allowed (inclusive)
    low_open: bool = False  # low itself excluded (top-p, lenience)
    choices: Callable[[], tuple[str, ...]] | None = None  # names, read when asked
    ui_low: float | None = None  # where the app's spin box starts, if not at low
    ui_high: float | None = None  # where it ends, if not at high
    special: str | None = None  # what the spin box shows at its lowest value (0 = "off")
    metavar: str | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def names(self) -> tuple[str, ...]:
        return self.choices() if self.choices is not None else ()

    def spin_range(self) -> tuple[float, float]:
        """The app's spin box range: within the option's own, bounded for a spin box."""
        low = self.ui_low if self.ui_low is not None else self.low
        high = self.ui_high if self.ui_high is not None else self.high
        assert low is not None and high is not None, self.name
        return low, high

    def check(self, value: Any) -> None:
        """Raise InputError with one line if ``value`` is not allowed."""
        what = self.label
        if self.choices is not None:
            names = self.names()
            if value not in names:
                raise InputError(f"The {what} must be one of {', '.join(names)}, got {value!r}.")
            return
        if self.type is int and (isinstance(value, bool) or not isinstance(value, int)):
            raise InputError(f"{what} must be a whole number, got {value!r}.")
        if self.type is float and (isinstance(value, bool)
                                   or not isinstance(value, int | float)):
            raise InputError(f"{what} must be a number, got {value!r}.")
        if self.name == "temperature":  # 0, or a positive finite number that does not overflow
            if not (value == 0 or TEMPERATURE_MIN <= value < math.inf):  # also refuses NaN
                raise InputError(f"Temperature must be 0 (greedy) or a finite number from "
                                 f"{TEMPERATURE_MIN:g}, got {value}.")
            return
        low_ok = self.low is None or (value > self.low if self.low_open else value >= self.low)
        high_ok = self.high is None or value <= self.high
        if not (low_ok and high_ok):  # NaN fails both
            raise InputError(f"{what} must be {self.range_text()}, got {value}.")

    def range_text(self) -> str:
        lo, hi = self.low, self.high

        def fmt(v: float) -> str:
            return f"{v:g}" if self.type is float else f"{int(v)}"

        if lo is not None and hi is not None:
            return (f"in ({fmt(lo)}, {fmt(hi)}]" if self.low_open
                    else f"between {fmt(lo)} and {fmt(hi)}")
        if lo is not None:
            return f"at least {fmt(lo)}" if not self.low_open else f"above {fmt(lo)}"
        return f"at most {fmt(hi)}" if hi is not None else "valid"


# Why these defaults (drafter hybrid, K policy cost, lookup budget 16), measured with
# benchmarks/drafters.py (docs/benchmarks.md, "Drafters and K policies";
# benchmarks/results/2026-11-25-0246-drafters.md): hybrid drafting (prompt lookup on
# a match of 2+ tokens, the draft model otherwise) with the cost policy (each round the drafter
# and K, 0 included, with the most expected tokens per measured second) was the only
# combination near the best on all three prompt sets (T = 0, busy 2-core machine, 1 thread,
# geomean over the target alone): pasted text 1.42x (lookup fixed 1.54x, model fixed 0.66x),
# template 2.03x (model fixed 1.88x, lookup fixed 0.94x), hand-written 0.95x (model fixed
# 0.87x; every combination within noise of 1.0x there). Lookup's budget is only a cap under
# the cost policy, and a copied span often runs past 10 tokens: on pasted text (12 prompts,
# T = 0, hybrid + cost) 16 ran 2.05x the target alone against 1.86x with 10, in the same run;
# on hand-written and template prompts the two were within 2%. The app starts on the same
# policy: fixed K 4 raced at 0.88x of the target alone on hand-written prompts (cost 1.21x).
OPTIONS: tuple[Option, ...] = (
    Option("k", int, 4, "draft tokens per round (the cost policy's cap is 16; the heuristic "
           "starts here)", "K", 1, K_LIMIT),
    Option("temperature", float, 0.0, "0 = greedy", "Temperature", 0.0, None,
           ui_high=UI_TEMPERATURE_MAX, special="0 (greedy)"),
    Option("top_k", int, 0, "keep the k most probable tokens (0 = off)", "top-k", 0, None,
           ui_high=UI_TOP_K_MAX, special="off"),
    Option("top_p", float, 1.0, "nucleus: keep the smallest set with mass ≥ p (1 = off)",
           "top-p", 0.0, 1.0, low_open=True, ui_low=0.01),
    Option("max_new_tokens", int, 64, "tokens to generate at most", "max new tokens", 1, None,
           ui_high=UI_MAX_NEW_TOKENS),
    Option("seed", int, 0, "random seed (the app's -1 draws one)", "seed", 0, SEED_LIMIT,
           ui_low=-1, ui_high=2**31 - 1, special="random"),
    Option("top_n", int, 10, "candidates per distribution the events carry", "top-N", 1,
           TOP_N_LIMIT),
    Option("drafter", str, "hybrid", "who drafts: the draft model, prompt lookup (copies "
           "earlier text; needs no draft model), or lookup on a long enough match and the "
           "model else", "drafter", choices=registry.drafter_names),
    Option("ngram_min", int, 1, "shortest suffix prompt lookup may match", "n-gram min", 1,
           NGRAM_LIMIT),
    Option("ngram_max", int, 4, "longest suffix prompt lookup tries first", "n-gram max", 1,
           NGRAM_LIMIT),
    Option("lookup_k", int, 16, "most tokens a prompt-lookup round drafts (the model "
           "drafter's is --k)", "lookup budget", 1, K_LIMIT),
    Option("k_policy", str, "cost", "K each round: fixed --k; heuristic (+2 after a fully "
           "kept round, -1 else, from --k); cost (the K, 0 included, with most expected tokens "
           "per measured second)", "K policy", choices=registry.policy_names),
    Option("lenience", float, 1.0, "keep drafts when B*U < p/q; below 1 the output is NOT the "
           "target's distribution (1 = exact)", "Lenience", 0.0, 1.0, low_open=True,
           ui_low=0.05, metavar="B"),
)
BY_NAME: dict[str, Option] = {o.name: o for o in OPTIONS}
DEFAULTS: dict[str, Any] = {o.name: o.default for o in OPTIONS}

# Named departures from the defaults. The app opens on "presentation": sampled text, longer.
PROFILES: dict[str, dict[str, Any]] = {
    "default": {},
    "presentation": {"temperature": 0.7, "max_new_tokens": 128},
}
APP_PROFILE = "presentation"

# What a recording made before a field existed was made with (its reader fills these in).
RECORDED: dict[str, Any] = {"drafter": "model", "k_policy": "fixed", "lookup_k": 10}


def profile(name: str) -> dict[str, Any]:
    """Every option's value under profile ``name`` (the defaults, then its departures)."""
    return {**DEFAULTS, **PROFILES[name]}


def settings(profile_name: str = "default", **changes: Any) -> Settings:
    """Settings of a profile with ``changes`` (checked: a bad value raises InputError)."""
    from .events import Settings

    out = Settings(**{**profile(profile_name), **changes})
    validate(out)
    return out


def validate(s: Settings, speculative: bool = True, names: bool = True, *,
             drafters: Mapping[str, Any] | None = None,
             policies: Mapping[str, Any] | None = None) -> None:
    """Raise InputError with a one-line reason for any setting out of range.

    ``speculative=False`` (the target alone) leaves K unchecked; ``names=False`` (a recording,
    which may name a drafter registered only where it was made) leaves names unchecked.
    Names are the registry's, or those of the tables given (an engine Factory's own)."""
    tables = {"drafter": drafters, "k_policy": policies}
    for opt in OPTIONS:
        if (opt.name == "k" and not speculative) or (opt.choices is not None and not names):
            continue
        value = getattr(s, opt.name)
        table = tables.get(opt.name)
        if table is not None:
            if value not in table:
                raise InputError(f"The {opt.label} must be one of {', '.join(table)}, got "
                                 f"{value!r}.")
            continue
        if opt.name == "seed" and value is None:  # None: draw one
            continue
        opt.check(value)
    if s.ngram_min > s.ngram_max:
        raise InputError(f"n-gram sizes need 1 <= min <= max <= {NGRAM_LIMIT}, got min "
                         f"{s.ngram_min}, max {s.ngram_max}.")


def parse_assignment(text: str, base: Settings) -> Settings:
    """``"k=8"`` / ``"k_policy=cost"`` / ``"temperature=0.7"`` applied to ``base`` (checked).

    The form a lineup or a sweep names its configurations in, on the command line and in files.
    """
    name, sep, raw = text.partition("=")
    name = name.strip().replace("-", "_")
    if not sep or name not in BY_NAME:
        known = ", ".join(BY_NAME)
        raise InputError(f"{text!r}: expected NAME=VALUE with NAME one of {known}.")
    opt = BY_NAME[name]
    value: Any = raw.strip()
    try:
        if opt.type is int:
            value = None if name == "seed" and value in ("none", "random") else int(value)
        elif opt.type is float:
            value = float(value)
    except ValueError:
        kind = "a whole number" if opt.type is int else "a number"
        raise InputError(f"{text!r}: {opt.label} must be {kind}.") from None
    out = replace(base, **{name: value})
    validate(out)
    return out


def setting_names() -> tuple[str, ...]:
    """The Settings fields, in order (a test checks they are exactly the options)."""
    from .events import Settings

    return tuple(f.name for f in fields(Settings))


def k_text(settings: object, ks: Sequence[int] = ()) -> str:
    """How K was chosen, as every header says it (the CLI's, the window's, the race's, the
    exports'): "K = 4" when fixed; else the policy and the K range its rounds used (``ks``:
    each round's K), "K by the cost policy (K 0–16 used)", never the starting K alone (the
    policy varied it)."""
    policy = getattr(settings, "k_policy", "fixed")
    k = getattr(settings, "k", 0)
    if policy == "fixed":
        return f"K\u00a0=\u00a0{k}"
    if not ks:
        return f"K by the {policy} policy"
    low, high = min(ks), max(ks)
    used = f"K\u00a0{low}" if low == high else f"K\u00a0{low}–{high}"
    return f"K by the {policy} policy ({used} used)"


__all__ = ["APP_PROFILE", "BY_NAME", "DEFAULTS", "K_LIMIT", "NGRAM_LIMIT", "OPTIONS", "Option",
           "PROFILES", "RECORDED", "SEED_LIMIT", "TEMPERATURE_MIN", "TOP_N_LIMIT", "k_text",
           "parse_assignment", "profile", "settings", "validate"]

"""The recording check's fast path for plain lists: counted work, and exactly as strict.

Each test also runs a broken copy of the code it guards (tests/mutation.py) and shows it fails.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from specviz.core import events as ev
from specviz.core import recording
from specviz.core.recording import RecordingReader, _Invalid
from tests.mutation import mutant, with_globals

NORMAL = Path(__file__).resolve().parents[2] / "assets" / "recordings" / "normal.jsonl"
PLAIN = (int, float, str)


def item_checks(value_fn) -> tuple[int, int]:
    """(events, item-by-item checks of plain list items) reading normal.jsonl with ``value_fn``.

    The reader runs copies of its steps that call ``value_fn`` through a counter (its own
    recursion included); core/recording.py is left as it is."""
    calls = [0]

    def counting(hint, value, where, key):
        if hint in PLAIN and where.endswith("]"):
            calls[0] += 1
        return checked(hint, value, where, key)

    build = with_globals(recording._build, _value=counting)
    checked = with_globals(value_fn, _value=counting, _build=build)

    class Counted(RecordingReader):
        _event = with_globals(RecordingReader._event, _build=build)

    events = Counted().feed(NORMAL.read_bytes())
    return len(events), calls[0]


SLOW = mutant(recording._value, ("fast = _plain_items(item, value, key)", "fast = None"))


def test_plain_lists_are_checked_in_one_pass() -> None:
    """Top-N ids, probs and texts (most of a recording) get no per-item call and message."""
    n, checks = item_checks(recording._value)
    assert n > 10 and checks == 0
    n_slow, slow_checks = item_checks(SLOW)  # broken: item by item, as before
    assert n_slow == n and slow_checks > 50 * n


ODD = [[], [0, 1, 2], [1, True], [True], [0.5, float("nan")], [float("inf")], [-0.0],
       [-1e-7], [1.0000001], [1.00001], [-1], [2**53], [2**53 + 1], [10**400], [1e308],
       ["a", 1], ["a", None], [None], [0.5, "x"], [1.5], [3], [17], [16], [1, 2.0]]
KEYS = [(ev.TopN, "probs"), (ev.TopN, "ids"), (ev.TopN, "texts"), (ev.Round, "appended_ids"),
        (ev.Summary, "acceptance_by_position"), (ev.Settings, "seed"), (ev.Round, "k")]


def outcome(fn, hint, value, key):
    try:
        out = fn(hint, value, "x", key)
    except (_Invalid, OverflowError) as exc:
        return type(exc), str(exc)
    return "ok", out, [type(v) for v in out]


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("item", PLAIN)
def test_the_fast_path_agrees_with_the_item_by_item_check(key, item) -> None:
    """Same tuple (same item types) or the same error for odd lists: NaN, ±inf, bools, huge
    ints, just outside [0, 1], mixed kinds."""
    hint = tuple[item, ...]
    for value in ODD:
        fast, slow = outcome(recording._value, hint, value, key), outcome(SLOW, hint, value, key)
        assert repr(fast) == repr(slow), (value, fast, slow)


def test_a_broken_fast_path_is_caught() -> None:
    """Broken: the fast path lets a NaN probability through (no finiteness check)."""
    broken_plain = mutant(recording._plain_items,
                          ("all(low <= v <= high and math.isfinite(v) for v in out)",
                           "all(math.isnan(v) or low <= v <= high for v in out)"))
    calls_broken = mutant(recording._value, ("fast = _plain_items(", "fast = broken_plain("))
    broken = with_globals(calls_broken, broken_plain=broken_plain)
    hint, key = tuple[float, ...], (ev.TopN, "probs")
    value = [0.5, math.nan]
    assert outcome(broken, hint, value, key)[0] == "ok"
    assert outcome(SLOW, hint, value, key)[0] is _Invalid

"""Reading recordings (JSON lines of events) safely: every line checked as it is read.

A recording is what ``specviz-cli --json`` prints or the app saves: one event per line,
runs one after another, each ``RunStarted, Round*, RunFinished | RunFailed``; a
``RunFailed`` may also stand alone (a CLI that could not load its models).

:class:`RecordingReader` takes lines (or raw chunks) as they arrive, so a file still being
written or a pipe can be shown live. Each line is checked before it becomes an event:

- types, derived from the annotations of the dataclasses in :mod:`specviz.core.events`
  (a field the engine adds is checked without touching this file);
- ranges: 0 <= K <= 16, probabilities in [0, 1], counts >= 0, finite numbers, sizes a
  screen can show, equal lengths where lists run in parallel;
- the order of events within a run.

Anything wrong raises one :class:`RecordingError` naming the line, e.g.
``line 3: round.n_accepted must be an integer, got '2'``, and carrying the good events read
before it (a recording cut short by a crash is the one a user most wants to see:
:func:`read_prefix` gives them with the error). Unknown extra fields are ignored, so old and
newer recordings open; a recording without ``format`` is format 1.

Reading is linear in the input: a line split over many chunks is joined once, when its
newline comes, and one longer than ``MAX_LINE_BYTES`` is refused as soon as it gets there
(every reader: the app's replay, the export, ``read_recording``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

from specviz.core import events as ev
from specviz.core import options
from specviz.core.errors import InputError
from specviz.core.events import Event, Round, RunFailed, RunFinished, RunStarted

MAX_K = options.K_LIMIT  # drafts per round
MAX_TOP_N = options.TOP_N_LIMIT  # candidates per distribution an event may carry
MAX_COUNT = 2**53  # any count, id or index: beyond this no run is real (and floats lose ints)
MAX_SEED = 2**64
MAX_LINE_BYTES = 32 * 1024 * 1024  # one event; a K = 16, top-N = 1024 round is ~2 MB
EPS = 1e-6  # float32 rounding in probabilities

# (class, field) -> what the number must be. Every other number is a finite count >= 0.
PROBABILITY = {
    (ev.DraftPosition, "q"), (ev.DraftPosition, "p"), (ev.DraftPosition, "ratio"),
    (ev.DraftPosition, "r"), (ev.ExtraToken, "prob"), (ev.ExtraToken, "p"),
    (ev.TopN, "probs"), (ev.Summary, "acceptance_rate"), (ev.Summary, "alpha"),
    (ev.Summary, "acceptance_by_position"), (ev.Settings, "top_p"), (ev.Settings, "lenience"),
}
SIGNED = {(ev.Settings, "seed")}
# Where a number may go below 0: a tree node's parent -1 is the committed text.
LOWER: dict[tuple[type, str], int] = {(ev.DraftPosition, "parent"): -1}
UPPER = {
    (ev.Settings, "k"): MAX_K, (ev.Round, "k"): MAX_K, (ev.Round, "n_accepted"): MAX_K,
    (ev.DraftPosition, "index"): MAX_K - 1, (ev.DraftPosition, "parent"): MAX_K - 2,
    (ev.Settings, "top_n"): MAX_TOP_N,
    (ev.Settings, "seed"): MAX_SEED,
}
# Tuples: the most items they may hold (the rest are bounded by the line size).
MAX_ITEMS = {
    (ev.Round, "drafted"): MAX_K, (ev.Round, "appended_ids"): MAX_K + 1,
    (ev.Round, "appended_texts"): MAX_K + 1, (ev.Summary, "acceptance_by_position"): MAX_K,
    (ev.TopN, "ids"): MAX_TOP_N + 1, (ev.TopN, "probs"): MAX_TOP_N + 1,
    (ev.TopN, "texts"): MAX_TOP_N + 1,
}

EVENT_TYPES: dict[str, type] = {
    "run_started": RunStarted, "round": Round, "run_finished": RunFinished, "error": RunFailed,
}


class RecordingError(ValueError):
    """A recording that cannot be shown: one message naming the line and what is wrong.

    ``events``: the good events the failing call had decoded before the bad line, so a
    caller that shows what it read loses none of them (the reader stays failed after).
    """

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(f"line {line}: {message}" if line is not None else message)
        self.line = line
        self.reason = message
        self.events: list[Event] = []


TOO_LONG = f"longer than {MAX_LINE_BYTES // (1024 * 1024)} MiB: not a recording"


class _Invalid(Exception):
    """A field that fails its check (turned into a RecordingError with the line number)."""


def _shown(value: Any) -> str:
    """A short, readable rendering of a bad value for the message."""
    if isinstance(value, str):
        text = repr(value)
    elif isinstance(value, dict):
        text = "an object"
    elif isinstance(value, list):
        text = f"a list of {len(value)} item{'s' * (len(value) != 1)}" if value else "[]"
    else:
        try:
            text = json.dumps(value)
        except (ValueError, TypeError):  # pragma: no cover - json values always dump
            text = repr(value)
    return text if len(text) <= 40 else text[:37] + "…"


def _describe(hint: Any) -> str:
    """How a type reads in a message: 'an integer', 'a number', 'a list' ..."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        parts = [_describe(a) for a in typing.get_args(hint) if a is not type(None)]
        return " or ".join(parts) + " or null"
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(hint))
    if origin is tuple:
        return "a list"
    if dataclasses.is_dataclass(hint):
        return "an object"
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}.get(
        hint, str(hint))


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    """Field name -> resolved annotation, cached (events.py uses postponed annotations)."""
    if cls not in _HINTS:
        resolved = typing.get_type_hints(cls)
        _HINTS[cls] = {f.name: resolved[f.name] for f in dataclasses.fields(cls)}
    return _HINTS[cls]


def _check_number(value: float, where: str, key: tuple[type, str]) -> None:
    if not math.isfinite(value):
        raise _Invalid(f"{where} must be a finite number, got {_shown(value)}")
    if key in PROBABILITY:
        if not -EPS <= value <= 1.0 + EPS:
            raise _Invalid(f"{where} must be a probability in [0, 1], got {_shown(value)}")
        return
    low = -MAX_SEED if key in SIGNED else LOWER.get(key, 0)
    high = UPPER.get(key, MAX_COUNT)
    if value < low:
        raise _Invalid(f"{where} must be at least {low}, got {_shown(value)}")
    if value > high:
        raise _Invalid(f"{where} must be at most {high}, got {_shown(value)}")


def _value(hint: Any, value: Any, where: str, key: tuple[type, str]) -> Any:
    """``value`` checked against ``hint`` and converted (lists to tuples, objects built)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None:
            if type(None) in options:
                return None
            raise _Invalid(f"{where} must be {_describe(hint)}, got null")
        inner = [a for a in options if a is not type(None)]
        if len(inner) == 1:
            try:
                return _value(inner[0], value, where, key)
            except _Invalid:
                if type(None) in options and _matches_kind(inner[0], value):
                    raise  # the right kind, a wrong value: say why
                raise _Invalid(f"{where} must be {_describe(hint)}, got {_shown(value)}") \
                    from None
        for option in inner:  # pragma: no cover - events have no such union today
            try:
                return _value(option, value, where, key)
            except _Invalid:
                continue
        raise _Invalid(f"{where} must be {_describe(hint)}, got {_shown(value)}")
    if origin is Literal:
        if not isinstance(value, str) or value not in typing.get_args(hint):
            raise _Invalid(f"{where} must be {_describe(hint)}, got {_shown(value)}")
        return value
    if origin is tuple:
        if not isinstance(value, list):
            raise _Invalid(f"{where} must be a list, got {_shown(value)}")
        limit = MAX_ITEMS.get(key)
        if limit is not None and len(value) > limit:
            raise _Invalid(f"{where} may hold at most {limit} items, got {len(value)}")
        item = typing.get_args(hint)[0]
        fast = _plain_items(item, value, key)
        if fast is not None:
            return fast
        return tuple(_value(item, v, f"{where}[{i}]", key) for i, v in enumerate(value))
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            raise _Invalid(f"{where} must be an object, got {_shown(value)}")
        return _build(hint, value, where)  # type: ignore[arg-type]
    if hint is bool:
        if not isinstance(value, bool):
            raise _Invalid(f"{where} must be true or false, got {_shown(value)}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Invalid(f"{where} must be an integer, got {_shown(value)}")
        _check_number(value, where, key)
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _Invalid(f"{where} must be a number, got {_shown(value)}")
        _check_number(float(value), where, key)
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise _Invalid(f"{where} must be a string, got {_shown(value)}")
        return value
    raise _Invalid(f"{where}: no check for the type {hint!r}")  # pragma: no cover


def _plain_items(item: Any, value: list[Any], key: tuple[type, str]) -> tuple[Any, ...] | None:
    """A list of plain strings or in-range numbers as the tuple ``_value`` makes of it, in one
    pass with no message built per item (most of a recording: top-N ids, probs and texts);
    None when any item is not plainly good, and the item-by-item check says what is wrong.
    Exactly as strict: an item passes here only if ``_value`` would pass it unchanged."""
    try:
        if item is str:
            return tuple(value) if all(type(v) is str for v in value) else None
        if item is not int and item is not float:
            return None
        if key in PROBABILITY:
            low, high = -EPS, 1.0 + EPS
        else:
            low, high = (-MAX_SEED if key in SIGNED else 0), UPPER.get(key, MAX_COUNT)
        if item is int:
            if all(type(v) is int and low <= v <= high and math.isfinite(v) for v in value):
                return tuple(value)
            return None
        out = tuple(float(v) for v in value if type(v) is int or type(v) is float)
        if len(out) == len(value) and all(low <= v <= high and math.isfinite(v) for v in out):
            return out
    except Exception:  # noqa: BLE001 - an odd item: the item-by-item check decides, as before
        return None
    return None


def _matches_kind(hint: Any, value: Any) -> bool:
    """Whether ``value`` is at least the JSON kind ``hint`` asks for (for the message)."""
    if dataclasses.is_dataclass(hint):
        return isinstance(value, dict)
    if typing.get_origin(hint) is tuple:
        return isinstance(value, list)
    if hint in (int, float):
        return isinstance(value, int | float) and not isinstance(value, bool)
    return False


_FIELDS: dict[type, list[tuple[str, Any, bool, tuple[type, str]]]] = {}


def _fields(cls: type) -> list[tuple[str, Any, bool, tuple[type, str]]]:
    """(name, annotation, required, key) of each field of ``cls``, cached."""
    if cls not in _FIELDS:
        hints = _hints(cls)
        _FIELDS[cls] = [
            (f.name, hints[f.name], f.default is dataclasses.MISSING
             and f.default_factory is dataclasses.MISSING, (cls, f.name))
            for f in dataclasses.fields(cls)]
    return _FIELDS[cls]


def _build(cls: type, data: dict[str, Any], where: str) -> Any:
    """An instance of the dataclass ``cls`` from a JSON object, every field checked."""
    kwargs: dict[str, Any] = {}
    if cls is ev.Settings:  # fields added since format 1: what the recording was made with
        kwargs.update({k: v for k, v in options.RECORDED.items() if k not in data})
    for name, hint, required, key in _fields(cls):
        if name not in data:
            if required:
                raise _Invalid(f"{where}.{name} is missing")
            continue
        kwargs[name] = _value(hint, data[name], f"{where}.{name}", key)
    obj = cls(**kwargs)
    _check_object(obj, where)
    return obj


def _check_object(obj: Any, where: str) -> None:
    """Rules between the fields of one object."""
    if isinstance(obj, ev.TopN):
        if not len(obj.ids) == len(obj.probs) == len(obj.texts):
            raise _Invalid(f"{where}: ids, probs and texts must have the same length, got "
                           f"{len(obj.ids)}, {len(obj.probs)} and {len(obj.texts)}")
    elif isinstance(obj, ev.Settings):
        try:  # the ranges a run is held to (options.py), K included: a recording has one
            options.validate(obj, names=False)
        except InputError as exc:
            raise _Invalid(f"{where}: {exc}") from None
    elif isinstance(obj, Round):
        if len(obj.drafted) > obj.k:
            raise _Invalid(f"{where}: {len(obj.drafted)} drafts in a round of k = {obj.k}")
        if obj.n_accepted > len(obj.drafted):
            raise _Invalid(f"{where}.n_accepted is {obj.n_accepted} but only "
                           f"{len(obj.drafted)} tokens were drafted")
        for i, d in enumerate(obj.drafted):
            if d.index != i:
                raise _Invalid(f"{where}.drafted[{i}].index must be {i}, got {d.index}")
            # A tree's nodes come parent first; a round is a chain (no parents) or a tree.
            if d.parent is not None and d.parent >= i:
                raise _Invalid(f"{where}.drafted[{i}].parent must come before it (at most "
                               f"{i - 1}), got {d.parent}")
            if (d.parent is None) != (obj.drafted[0].parent is None):
                raise _Invalid(f"{where}.drafted[{i}].parent: a round's drafts must all have "
                               "a parent (a tree) or none (a chain)")
        if len(obj.appended_texts) != len(obj.appended_ids):
            raise _Invalid(f"{where}: appended_ids and appended_texts must have the same "
                           f"length, got {len(obj.appended_ids)} and "
                           f"{len(obj.appended_texts)}")


class RecordingReader:
    """Checks and decodes a recording line by line; feed it as the lines arrive.

    ``feed_line`` takes one line, ``feed`` raw chunks (it keeps a partial last line until
    its newline comes), ``close`` says the input ended. Each returns the events it decoded
    and raises :class:`RecordingError` for the first thing wrong; after that the reader
    stays failed (it raises the same error again).
    """

    def __init__(self) -> None:
        self.line = 0  # lines read so far (the number of the last one)
        self.in_run = False  # a RunStarted was read and its end was not
        self.runs = 0  # runs that ended (finished or failed)
        self.rounds = 0  # rounds in the current run
        self.error: RecordingError | None = None
        self._started: RunStarted | None = None
        # The line still open (no newline yet), as the pieces it came in: joined once, when
        # it ends, so a long line costs its length, not its length times its pieces.
        self._pieces: list[bytes] = []
        self._partial_bytes = 0
        self.scanned = 0  # bytes looked at for newlines or joined (linear in the input)

    @property
    def complete(self) -> bool:
        """At least one event was read and no run is open: a good place for the input to end."""
        return self.runs > 0 and not self.in_run

    def feed(self, chunk: bytes) -> list[Event]:
        """Events from the complete lines in ``chunk`` (plus what an earlier chunk left)."""
        self._raise_if_failed()
        out: list[Event] = []
        try:
            self._feed(chunk, out)
        except RecordingError as exc:
            exc.events = out  # decoded before the bad line: the caller keeps them
            raise
        return out

    def _feed(self, chunk: bytes, out: list[Event]) -> None:
        end = chunk.find(b"\n")
        self.scanned += len(chunk) if end < 0 else end + 1
        if end < 0:  # the open line goes on
            if chunk:
                self._pieces.append(chunk)
            self._partial_bytes += len(chunk)
            if self._partial_bytes > MAX_LINE_BYTES:
                self._pieces, self._partial_bytes = [], 0
                self._fail(TOO_LONG, self.line + 1)
            return
        first = b"".join([*self._pieces, chunk[:end]]) if self._pieces else chunk[:end]
        self.scanned += len(first) if self._pieces else 0
        self._pieces, self._partial_bytes = [], 0
        *lines, rest = chunk[end + 1:].split(b"\n")
        self.scanned += len(chunk) - end - 1
        for line in (first, *lines):
            event = self.feed_line(line)
            if event is not None:
                out.append(event)
        if rest:
            self._pieces, self._partial_bytes = [rest], len(rest)
            if len(rest) > MAX_LINE_BYTES:
                self._pieces, self._partial_bytes = [], 0
                self._fail(TOO_LONG, self.line + 1)

    def close(self) -> list[Event]:
        """The input ended: decode a last line without newline; fail if a run is open."""
        self._raise_if_failed()
        out: list[Event] = []
        try:
            self._close(out)
        except RecordingError as exc:
            exc.events = out
            raise
        return out

    def _close(self, out: list[Event]) -> None:
        if self._pieces:
            partial = b"".join(self._pieces)
            self._pieces, self._partial_bytes = [], 0
            event = self.feed_line(partial, last=True)
            if event is not None:
                out.append(event)
        if self.in_run:
            self._fail("the recording ends in the middle of a run (after "
                       f"{self.rounds} round{'s' * (self.rounds != 1)}, with no run_finished "
                       "or error line): it is cut short", self.line)
        if self.runs == 0:
            self._fail("the recording is empty: no events" if self.line == 0 else
                       "the recording holds no events", None if self.line == 0 else self.line)

    def feed_line(self, line: bytes | str, last: bool = False) -> Event | None:
        """The event on one line (None for a blank line); ``last``: the input ended within
        it (no newline), so JSON that stops short means the file was cut there."""
        self._raise_if_failed()
        self.line += 1
        if isinstance(line, bytes):
            if len(line) > MAX_LINE_BYTES:
                self._fail(TOO_LONG, self.line)
            try:
                line = line.decode("utf-8")
            except UnicodeDecodeError as exc:
                self._fail(f"not UTF-8 text (byte {exc.start + 1}): not a recording", self.line)
        assert isinstance(line, str)
        if not line.strip():
            return None
        try:
            data = json.loads(line, parse_constant=_no_constant)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError, huge ints, deep nesting
            reason = exc.msg if isinstance(exc, json.JSONDecodeError) else \
                "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
            if last and self.line > 1 and line.lstrip().startswith("{"):
                self._fail("the file ends in the middle of this event (cut short)",
                           self.line)
            self._fail(f"not a JSON event ({reason})", self.line)
        try:
            event = self._event(data)
            self._order(event)
        except _Invalid as exc:
            self._fail(str(exc), self.line)
        return event

    # -- checks ---------------------------------------------------------------------------

    def _event(self, data: Any) -> Event:
        if not isinstance(data, dict):
            raise _Invalid(f"an event must be a JSON object, got {_shown(data)}")
        name = data.get("type")
        if name not in EVENT_TYPES:
            expected = ", ".join(EVENT_TYPES)
            if "type" not in data:
                raise _Invalid(f"the event has no \"type\" (one of {expected})")
            raise _Invalid(f"unknown event type {_shown(name)} (expected one of {expected})")
        assert isinstance(name, str)
        event: Event = _build(EVENT_TYPES[name], data, name)
        return event

    def _order(self, event: Event) -> None:
        """The grammar: RunStarted, Round*, RunFinished | RunFailed; RunFailed also alone."""
        if isinstance(event, RunStarted):
            if self.in_run:
                raise _Invalid("run_started before the previous run ended (it has no "
                               "run_finished or error line)")
            self.in_run, self.rounds, self._started = True, 0, event
            return
        if isinstance(event, RunFailed):
            self.in_run, self._started = False, None
            self.runs += 1
            return
        if not self.in_run or self._started is None:
            raise _Invalid(f"{ev.event_type(event)} before any run_started: events out of "
                           "order (or the file's start is missing)")
        if isinstance(event, Round):
            if event.index != self.rounds:
                raise _Invalid(f"round.index must be {self.rounds} (rounds so far), got "
                               f"{event.index}: rounds missing or out of order")
            if self._started.mode == "baseline" and (event.k or event.drafted):
                raise _Invalid("a baseline run's rounds draft nothing: k must be 0, "
                               f"got {event.k}")
            self.rounds += 1
            return
        assert isinstance(event, RunFinished)
        self.in_run, self._started = False, None
        self.runs += 1

    def _fail(self, message: str, line: int | None) -> typing.NoReturn:
        self.error = RecordingError(message, line)
        raise self.error

    def _raise_if_failed(self) -> None:
        if self.error is not None:
            raise self.error


def _no_constant(name: str) -> float:
    """json's NaN / Infinity are not JSON: refuse them when parsing."""
    raise ValueError(f"{name} is not a number JSON allows")


def read_lines(lines: Iterable[bytes | str]) -> Iterator[Event]:
    """Events of a recording given as lines; raises RecordingError at the first bad one."""
    reader = RecordingReader()
    for line in lines:
        event = reader.feed_line(line)
        if event is not None:
            yield event
    reader.close()


def read_recording(path: str | Path) -> list[Event]:
    """Every event of a recording file, checked; RecordingError names what is wrong."""
    events, error = read_prefix(path)
    if error is not None:
        raise error
    return events


def read_prefix(path: str | Path) -> tuple[list[Event], RecordingError | None]:
    """The good events of a recording file up to the first thing wrong, and what that is
    (None: the whole file is good). A file cut short by a crash shows what it holds."""
    reader = RecordingReader()
    out: list[Event] = []
    try:
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                out.extend(reader.feed(chunk))
        out.extend(reader.close())
    except OSError as exc:
        return out, RecordingError(f"cannot read {path}: {exc.strerror or exc}")
    except RecordingError as exc:
        out.extend(exc.events)
        exc.events = []
        return out, exc
    return out, None


def ended_early(error: RecordingError, shown: int) -> str:
    """One line for a recording read up to an error: where and why it ends, what is kept."""
    if not shown:
        return str(error)
    were = f"the {shown} events before it are" if shown != 1 else "the event before it is"
    return f"{error} ({were} shown)"


__all__ = ["MAX_K", "MAX_LINE_BYTES", "RecordingError", "RecordingReader", "ended_early",
           "read_lines", "read_prefix", "read_recording"]

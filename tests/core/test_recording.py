"""The recording reader refuses every hostile file with one clear message, and nothing else.

A real recording (tiny models, the engine, ``events.to_json``) is cut at every line and every
byte, its fields get wrong types and absurd values, its events are put out of order, and it
is replaced by binary garbage: each gives a RecordingError naming the line; no other
exception escapes. The same checks run against the app's old reader to show they catch it.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from specviz.core import recording
from specviz.core.engine import AutoregressiveDecoder, SpeculativeDecoder
from specviz.core.events import Event, RunFailed, RunFinished, from_json, to_json
from specviz.core.recording import RecordingError, RecordingReader, read_lines, read_recording
from tests.plain import plain
from tests.tiny import tiny_pair as make_tiny_pair

Reader = Callable[[bytes], list[Event]]


@pytest.fixture(scope="module")
def lines() -> list[str]:
    """A speculative run and a baseline run, back to back (as `specviz-cli --json` twice)."""
    pair = make_tiny_pair(sharpness=8.0)
    settings = plain(k=3, max_new_tokens=6, seed=3, top_n=3)
    events = [*SpeculativeDecoder(pair, settings).run("the cat"),
              *AutoregressiveDecoder(pair, settings).run("the cat")]
    assert isinstance(events[-1], RunFinished)
    return [to_json(e) for e in events]


def blob(lines: list[str]) -> bytes:
    return ("\n".join(lines) + "\n").encode("utf-8")


def new_reader(data: bytes) -> list[Event]:
    reader = RecordingReader()
    return [*reader.feed(data), *reader.close()]


def old_reader(data: bytes) -> list[Event]:
    """The app's reader before this change (specviz.gui.windows.app.read_recording): no checks."""
    text = data.decode("utf-8")
    return [from_json(line) for line in text.splitlines() if line.strip()]


def refusal(read: Reader, data: bytes) -> str:
    """The message with which ``read`` refuses ``data``; fails if it accepts or crashes."""
    try:
        events = read(data)
    except RecordingError as exc:
        message = str(exc)
        assert message and "\n" not in message and len(message) < 400, message
        return message
    except Exception as exc:  # noqa: BLE001 - the point: anything else is a bug
        pytest.fail(f"{type(exc).__name__} escaped instead of a RecordingError: {exc}")
    pytest.fail(f"accepted a bad recording ({len(events)} events)")


# -- a good recording ------------------------------------------------------------------------


def test_a_real_recording_reads_back_exactly(lines: list[str], tmp_path: Path) -> None:
    expected = [from_json(line) for line in lines]
    assert new_reader(blob(lines)) == expected
    assert list(read_lines(lines)) == expected
    path = tmp_path / "run.jsonl"
    path.write_bytes(blob(lines))
    assert read_recording(path) == expected


def test_incremental_feeding_gives_each_event_when_its_line_ends(lines: list[str]) -> None:
    data = blob(lines)
    reader = RecordingReader()
    got: list[Event] = []
    first_line_end = data.index(b"\n")
    for i in range(0, len(data), 7):  # 7-byte chunks: lines and UTF-8 characters split
        got.extend(reader.feed(data[i:i + 7]))
        if i + 7 <= first_line_end:
            assert got == []  # nothing before the first newline
    assert reader.complete and got == [from_json(line) for line in lines]
    assert reader.close() == []


def test_old_recordings_and_unknown_fields_still_open(lines: list[str]) -> None:
    first = json.loads(lines[0])
    first.pop("format", None)  # format 1: the field did not exist
    first["from_the_future"] = {"x": 1}
    first["settings"]["new_knob"] = "on"
    changed = [json.dumps(first), *lines[1:]]
    expected = [from_json(line) for line in lines]
    expected[0] = dataclasses.replace(expected[0], format=1)  # type: ignore[type-var]
    assert new_reader(blob(changed)) == expected


def test_last_line_without_newline_and_blank_lines(lines: list[str]) -> None:
    data = "\n\n".join(lines).encode()  # blank lines between, none at the end
    assert new_reader(data) == [from_json(line) for line in lines]


def test_a_failure_alone_is_a_recording() -> None:
    line = to_json(RunFailed("Could not load 'x': no such folder.", "load"))
    assert new_reader(line.encode()) == [RunFailed("Could not load 'x': no such folder.", "load")]


# -- the crashes of issue 10 -----------------------------------------------------------------


def test_the_issue_files_are_refused_with_the_line(lines: list[str]) -> None:
    finished_alone = b'{"type":"run_finished","generated_ids":[],"text":"",' \
                     b'"stop_reason":"eos","summary":[]}\n'
    message = refusal(new_reader, finished_alone)
    assert message.startswith("line 1: run_finished.summary must be an object")

    rnd = json.loads(lines[1])
    rnd["n_accepted"] = "2"
    assert refusal(new_reader, blob([lines[0], json.dumps(rnd), *lines[2:]])) == \
        "line 2: round.n_accepted must be an integer, got '2'"

    rnd = json.loads(lines[1])
    rnd["drafted"][0]["p"] = "high"
    assert refusal(new_reader, blob([lines[0], json.dumps(rnd), *lines[2:]])) == \
        "line 2: round.drafted[0].p must be a number, got 'high'"

    end = next(i for i, line in enumerate(lines) if '"run_finished"' in line)
    fin = json.loads(lines[end])
    fin["summary"] = None
    assert refusal(new_reader, blob([*lines[:end], json.dumps(fin)])) == \
        f"line {end + 1}: run_finished.summary must be an object, got null"

    start = json.loads(lines[0])
    start["settings"]["k"] = 20000000
    assert refusal(new_reader, blob([json.dumps(start), *lines[1:]])) == \
        "line 1: run_started.settings.k must be at most 16, got 20000000"


# -- fuzz: truncations ------------------------------------------------------------------------


def test_cut_at_every_line(lines: list[str]) -> None:
    ends = {i + 1 for i, line in enumerate(lines) if '"run_finished"' in line}
    for n in range(len(lines)):
        data = blob(lines[:n]) if n else b""
        if n in ends:
            assert new_reader(data) == [from_json(line) for line in lines[:n]]
            continue
        message = refusal(new_reader, data)
        assert ("middle of a run" in message and message.startswith(f"line {n}:")) or \
            (n == 0 and "empty" in message), message


def test_cut_at_every_byte(lines: list[str]) -> None:
    data = blob(lines)
    full = [from_json(line) for line in lines]
    reader = RecordingReader()
    offset = 0
    for line in data.split(b"\n")[:-1]:
        for cut in range(len(line) + 1):
            clone = copy.deepcopy(reader)  # the reader after every earlier line
            try:
                got = [*clone.feed(line[:cut]), *clone.close()]
            except RecordingError as exc:
                assert str(exc).startswith("line ") or offset + cut == 0, exc
            except Exception as exc:  # noqa: BLE001
                pytest.fail(f"cut at byte {offset + cut}: {type(exc).__name__}: {exc}")
            else:
                assert clone.complete, f"cut at byte {offset + cut} accepted"
                assert len(got) <= 1
        reader.feed(line + b"\n")
        offset += len(line) + 1
    assert reader.close() == [] and reader.complete
    assert new_reader(data[:-1]) == full  # only the final newline gone: still whole


# -- fuzz: wrong types and absurd values -------------------------------------------------------


def leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """Every (path, value) in a JSON tree, the first item of each list only."""
    yield path, value
    if isinstance(value, dict):
        for k, v in value.items():
            if k != "type":
                yield from leaves(v, (*path, k))
    elif isinstance(value, list) and value:
        yield from leaves(value[0], (*path, 0))


def replaced(data: Any, path: tuple[Any, ...], new: Any) -> Any:
    data = copy.deepcopy(data)
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = new
    return data


def wrong_values(value: Any) -> list[Any]:
    """Values of another JSON kind than ``value`` (never null: some fields allow it)."""
    if isinstance(value, bool):
        return [1, "true"]
    if isinstance(value, int):
        return ["2", 2.5, True, [2], {"n": 2}]
    if isinstance(value, float):
        return ["high", True, [0.5]]
    if isinstance(value, str):
        return [5, ["a"], {"s": "a"}]
    if isinstance(value, list):
        return [{"0": 1}, "1,2", 3]
    if isinstance(value, dict):
        return [[], "{}", 7]
    return []  # null: optional fields (r, extra, bonus_top, seed, draft)


def test_every_field_with_a_wrong_type_names_its_line_and_field(lines: list[str]) -> None:
    checked = 0
    for n, line in enumerate(lines, start=1):
        event = json.loads(line)
        for path, value in leaves(event):
            if not path or (event["type"] == "round" and path[0] == "index"):
                continue
            for bad in wrong_values(value):
                changed = [*lines[:n - 1], json.dumps(replaced(event, path, bad)), *lines[n:]]
                message = refusal(new_reader, blob(changed))
                assert message.startswith(f"line {n}: "), message
                name = path[-1] if isinstance(path[-1], str) else path[-2]
                assert str(name) in message, (path, message)
                checked += 1
    assert checked > 500


@pytest.mark.parametrize(("field", "value", "expected"), [
    (("settings", "k"), 17, "run_started.settings.k must be at most 16"),
    (("settings", "k"), -1, "must be at least 0"),
    (("settings", "top_n"), 10**6, "settings.top_n must be at most 1024"),
    (("settings", "top_p"), 1.5, "settings.top_p must be a probability in [0, 1]"),
    (("settings", "temperature"), 1e400, "must be a finite number, got Infinity"),
    (("settings", "max_new_tokens"), 10**30, "must be at most 9007199254740992"),
    (("pair", "vocab_size"), -5, "pair.vocab_size must be at least 0"),
    (("prompt_ids",), [1, -2], "prompt_ids[1] must be at least 0"),
    (("mode",), "turbo", "mode must be one of 'speculative', 'baseline'"),
    (("pair",), None, "run_started.pair must be an object, got null"),
    (("settings", "seed"), "0", "settings.seed must be an integer or null"),
])
def test_absurd_values_in_run_started(lines: list[str], field: tuple[str, ...], value: Any,
                                      expected: str) -> None:
    changed = json.dumps(replaced(json.loads(lines[0]), field, value))
    changed = changed.replace("Infinity", "1e400")  # json's reader turns it into inf
    message = refusal(new_reader, blob([changed, *lines[1:]]))
    assert message.startswith("line 1: ") and expected in message, message


@pytest.mark.parametrize(("field", "value", "expected"), [
    (("k",), 20000000, "round.k must be at most 16"),
    (("n_accepted",), 99, "round.n_accepted must be at most 16"),
    (("n_accepted",), 4, "only 3 tokens were drafted"),
    (("drafted", 0, "p"), 1.01, "round.drafted[0].p must be a probability"),
    (("drafted", 0, "r"), -0.5, "round.drafted[0].r must be a probability"),
    (("drafted", 0, "status"), "maybe", "round.drafted[0].status must be one of"),
    (("drafted", 0, "index"), 2, "round.drafted[0].index must be 0"),
    (("drafted", 0, "q_top", "probs"), [0.5], "ids, probs and texts must have the same length"),
    (("drafted", 0, "q_top", "ids"), list(range(2000)), "may hold at most 1025 items"),
    (("appended_texts",), [], "appended_ids and appended_texts must have the same length"),
    (("elapsed_s",), -1.0, "round.elapsed_s must be at least 0"),
    (("extra", "kind"), "magic", "round.extra.kind must be one of"),
    (("extra",), 3, "round.extra must be an object or null, got 3"),
    (("index",), 5, "round.index must be 0 (rounds so far), got 5"),
    (("drafted",), None, "round.drafted must be a list, got null"),
])
def test_absurd_values_in_a_round(lines: list[str], field: tuple[Any, ...], value: Any,
                                  expected: str) -> None:
    changed = json.dumps(replaced(json.loads(lines[1]), field, value))
    message = refusal(new_reader, blob([lines[0], changed, *lines[2:]]))
    assert message.startswith("line 2: ") and expected in message, message


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_refused(lines: list[str], literal: str) -> None:
    changed = lines[1].replace('"elapsed_s": ', f'"elapsed_s": {literal}, "was": ', 1)
    message = refusal(new_reader, blob([lines[0], changed, *lines[2:]]))
    assert message.startswith("line 2: not a JSON event") and literal.lstrip("-") in message


def test_huge_numbers_and_deep_nesting(lines: list[str]) -> None:
    big = lines[1].replace('"n_accepted": ', '"n_accepted": ' + "9" * 5000 + ", \"x\": ", 1)
    assert refusal(new_reader, blob([lines[0], big])).startswith("line 2: not a JSON event")
    deep = "[" * 100000 + "]" * 100000
    assert "nested too deeply" in refusal(new_reader, deep.encode())
    assert "must be a JSON object" in refusal(new_reader, b"[1, 2, 3]\n")


# -- fuzz: order --------------------------------------------------------------------------------


def test_events_out_of_order(lines: list[str]) -> None:
    start, first, second = lines[0], lines[1], lines[2]
    end = next(line for line in lines if '"run_finished"' in line)
    cases = {
        "round before any run_started": [first, end],
        "run_finished before any run_started": [end],
        "run_started before the previous run ended": [start, first, start, first],
        "round.index must be 1": [start, first, first],
        "round.index must be 0": [start, second],
        "round before any run_started: events out": [start, end, first],
        "middle of a run": [start, first, second],
    }
    for expected, order in cases.items():
        message = refusal(new_reader, blob(order))
        assert expected in message, (expected, message)
    assert "unknown event type 'progress'" in refusal(new_reader, b'{"type": "progress"}\n')
    assert 'has no "type"' in refusal(new_reader, b'{"mode": "speculative"}\n')


def test_baseline_rounds_draft_nothing(lines: list[str]) -> None:
    base = next(i for i, line in enumerate(lines) if '"baseline"' in line)
    rnd = json.loads(lines[base + 1])
    rnd["k"] = 2
    changed = [*lines[:base + 1], json.dumps(rnd), *lines[base + 2:]]
    assert "baseline run's rounds draft nothing" in refusal(new_reader, blob(changed))


# -- fuzz: not a recording at all ---------------------------------------------------------------


def test_binary_garbage_and_empty_files(lines: list[str]) -> None:
    rng = random.Random(10)
    assert "empty" in refusal(new_reader, b"")
    assert "holds no events" in refusal(new_reader, b"\n  \n\n")
    assert "not UTF-8" in refusal(new_reader, b"\xff\xfe\x00garbage\n")
    assert "not a JSON event" in refusal(new_reader, b"\x00" * 100)
    assert "longer than" in refusal(new_reader, b"x" * (recording.MAX_LINE_BYTES + 10))
    for _ in range(200):
        garbage = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300)))
        refusal(new_reader, garbage)
    # Garbage spliced into a good recording: the line number is the garbage's.
    data = blob(lines[:3]) + b"\x89PNG\r\n\x1a\n" + blob(lines[3:])
    assert refusal(new_reader, data).startswith("line 4: not UTF-8")


def test_after_an_error_the_reader_stays_failed(lines: list[str]) -> None:
    reader = RecordingReader()
    with pytest.raises(RecordingError) as first:
        reader.feed(b"{oops\n" + blob(lines))
    with pytest.raises(RecordingError) as again:
        reader.feed(blob(lines))
    assert again.value is first.value and reader.error is first.value


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(RecordingError, match="cannot read"):
        read_recording(tmp_path / "nope.jsonl")


# -- the same fuzz catches the old reader --------------------------------------------------------


def test_the_fuzz_catches_the_old_reader(lines: list[str]) -> None:
    """The checks above, run on the reader the app had: each kind of file gets through it."""
    rnd = json.loads(lines[1])
    rnd["n_accepted"] = "2"
    start = json.loads(lines[0])
    start["settings"]["k"] = 20000000
    bad_files = {
        "wrong type": blob([lines[0], json.dumps(rnd), *lines[2:]]),
        "huge K": blob([json.dumps(start), *lines[1:]]),
        "summary []": b'{"type":"run_finished","generated_ids":[],"text":"",'
                      b'"stop_reason":"eos","summary":[]}\n',
        "cut short": blob(lines[:3]),
        "out of order": blob([lines[1], lines[0]]),
        "binary": b"\xff\xfe\x00",
        "empty": b"",
    }
    for name, data in bad_files.items():
        assert refusal(new_reader, data), name
        with pytest.raises(pytest.fail.Exception):
            refusal(old_reader, data)

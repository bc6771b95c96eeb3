"""Recordings of tree rounds (format 3): parent links and residuals read back; a broken tree
refused with one message; chain recordings of format 2 still open."""

from __future__ import annotations

import json

import pytest

from specviz.core import events as ev
from specviz.core import recording
from specviz.core.engine import SpeculativeDecoder
from specviz.core.events import FORMAT_VERSION, Round, RunStarted, to_json
from specviz.core.recording import RecordingError, RecordingReader
from tests.mutation import mutant
from tests.plain import plain

PROMPT = "the cat sat on the mat the cat ran to the cat sat on a red mat the cat"


@pytest.fixture(scope="module")
def tree_lines() -> list[str]:
    from tests.tiny import tiny_pair

    events = list(SpeculativeDecoder(tiny_pair(sharpness=8.0), plain(
        k=8, max_new_tokens=16, seed=3, temperature=1.0, drafter="lookup-tree",
        lookup_k=8)).run(PROMPT))
    return [to_json(e) for e in events]


def read(lines: list[str]) -> list:
    return RecordingReader().feed("".join(line + "\n" for line in lines).encode())


def test_tree_rounds_read_back_with_parents_and_residuals(tree_lines: list[str]) -> None:
    events = read(tree_lines)
    assert [to_json(e) for e in events] == tree_lines
    started = events[0]
    assert isinstance(started, RunStarted) and started.format == FORMAT_VERSION == 3
    trees = [e for e in events if isinstance(e, Round)
             and any(d.parent not in (None, i - 1) for i, d in enumerate(e.drafted))]
    assert trees, "the run drafted no branching tree"
    for rnd in trees:
        assert all(d.parent is not None and -1 <= d.parent < d.index for d in rnd.drafted)
        # Each rejected node carries the residual its next sibling meets; no other node does.
        assert all((d.residual_top is not None) == (d.status == "rejected")
                   for d in rnd.drafted)


def test_the_old_bound_on_parent_refused_every_tree(tree_lines: list[str]) -> None:
    """Broken (the reader before format 3): every number a count >= 0, so parent -1 (a node
    on the committed text), which every tree recording holds, was refused."""
    key = (ev.DraftPosition, "parent")
    old = mutant(recording._check_number, ("LOWER.get(key, 0)", "0"))  # noqa: SLF001
    parents = {d["parent"] for line in tree_lines if json.loads(line)["type"] == "round"
               for d in json.loads(line)["drafted"]}
    assert -1 in parents
    with pytest.raises(recording._Invalid, match=r"parent must be at least 0, got -1"):  # noqa: SLF001
        old(-1, "round.drafted[0].parent", key)
    recording._check_number(-1, "round.drafted[0].parent", key)  # noqa: SLF001 - today's: fine


def _tree_round(lines: list[str]) -> tuple[int, dict]:
    for i, line in enumerate(lines):
        data = json.loads(line)
        if data["type"] == "round" and len(data["drafted"]) > 2 and any(
                d["parent"] not in (None, j - 1) for j, d in enumerate(data["drafted"])):
            return i, data
    raise AssertionError("no tree round")


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d["drafted"][1].update(parent=1), r"drafted\[1\]\.parent must come before it"),
    (lambda d: d["drafted"][2].update(parent=5), r"drafted\[2\]\.parent must come before it"),
    (lambda d: d["drafted"][1].update(parent=-2), r"drafted\[1\]\.parent must be at least -1"),
    (lambda d: d["drafted"][1].update(parent=None), r"must all have a parent .* or none"),
])
def test_a_broken_tree_is_refused_with_one_message(tree_lines: list[str], edit,  # noqa: ANN001
                                                   message: str) -> None:
    at, data = _tree_round(tree_lines)
    edit(data)
    lines = [*tree_lines[:at], json.dumps(data), *tree_lines[at + 1:]]
    with pytest.raises(RecordingError, match=message) as info:
        read(lines)
    assert info.value.line == at + 1 and len(info.value.events) == at  # what came before kept


def test_a_format_2_chain_recording_still_opens(tree_lines: list[str]) -> None:
    """A chain run written before trees: no parent, no residual_top, format 2."""
    from tests.tiny import tiny_pair

    events = list(SpeculativeDecoder(tiny_pair(sharpness=8.0), plain(
        k=3, max_new_tokens=8, seed=1)).run("the cat sat"))
    old = []
    for e in events:
        data = json.loads(to_json(e))
        if data["type"] == "run_started":
            data["format"] = 2
        for d in data.get("drafted", []) if data["type"] == "round" else []:
            del d["parent"], d["residual_top"]
        old.append(json.dumps(data))
    back = read(old)
    assert back[0].format == 2 and len(back) == len(events)
    assert all(d.parent is None and d.residual_top is None
               for e in back if isinstance(e, Round) for d in e.drafted)


def test_a_tree_recording_written_before_the_tree_counts_still_opens(
        tree_lines: list[str]) -> None:
    """Format 3 as written before the summary carried ``trees`` and ``siblings_kept``: it
    opens, its summary reads 0 for both, and a RunRecord counts them again from its rounds
    (what the app's α caption shows), as the engine's summary of the same run has them."""
    from specviz.core.record import RunRecord
    from tests.core.test_tree_tally import counted_per_parent

    now = json.loads(tree_lines[-1])["summary"]
    old = []
    for line in tree_lines:
        data = json.loads(line)
        if data["type"] == "run_finished":
            del data["summary"]["trees"], data["summary"]["siblings_kept"]
        old.append(json.dumps(data))
    back = read(old)
    assert len(back) == len(tree_lines)
    assert (back[-1].summary.trees, back[-1].summary.siblings_kept) == (0, 0)
    record = RunRecord()
    for e in back:
        record.add(e)
    counts = (record.tally.trees, record.tally.siblings, record.tally.siblings_kept)
    assert counts == counted_per_parent(record.rounds) == \
        (now["trees"], now["siblings"], now["siblings_kept"])
    assert record.tally.trees > 0 and record.tally.siblings > 0

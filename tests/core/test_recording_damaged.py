"""Damaged recordings: the good events before the damage are kept and the one message says
where and why the file ends; a long line is read in linear work and refused at the shared limit.

Each test also runs the broken code it guards (tests/mutation.py, or the old algorithm written
out below) and shows that it fails.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specviz.core import recording
from specviz.core.recording import (
    MAX_LINE_BYTES,
    RecordingError,
    RecordingReader,
    ended_early,
    read_prefix,
    read_recording,
)
from tests.mutation import mutant

NORMAL = Path(__file__).resolve().parents[2] / "assets" / "recordings" / "normal.jsonl"


@pytest.fixture(scope="module")
def good() -> list:
    events = read_recording(NORMAL)
    assert len(events) == 19
    return events


def test_a_file_cut_mid_line_keeps_its_first_18_events(good: list, tmp_path: Path) -> None:
    """The issue's case: the last 200 bytes gone. 18 events read, one message: line 19, cut."""
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(NORMAL.read_bytes()[:-200])
    events, error = read_prefix(cut)
    assert events == good[:18]
    assert error is not None and error.line == 19
    message = ended_early(error, len(events))
    assert message == ("line 19: the file ends in the middle of this event (cut short) "
                       "(the 18 events before it are shown)")
    with pytest.raises(RecordingError, match="line 19: the file ends in the middle"):
        read_recording(cut)


def test_a_bad_line_in_the_middle_keeps_the_events_before_it(good: list,
                                                             tmp_path: Path) -> None:
    lines = NORMAL.read_bytes().split(b"\n")
    lines[9] = lines[9][:50] + b"XX" + lines[9][50:]
    data = b"\n".join(lines)
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(data)
    events, error = read_prefix(bad)
    assert events == good[:9] and error is not None and error.line == 10
    assert "not a JSON event" in str(error)
    # One feed of the whole file (as the app's reader gets a chunk): the error carries them.
    with pytest.raises(RecordingError) as caught:
        RecordingReader().feed(data)
    assert caught.value.events == good[:9]

    # Broken variant: the old feed dropped what it had decoded when a later line failed.
    old = mutant(RecordingReader, ("exc.events = out  # decoded before the bad line: the "
                                   "caller keeps them", "pass"))
    with pytest.raises(RecordingError) as dropped:
        old().feed(data)
    assert dropped.value.events == []


def test_a_run_cut_at_a_line_end_and_a_missing_file(good: list, tmp_path: Path) -> None:
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(b"".join(line + b"\n" for line in NORMAL.read_bytes().split(b"\n")[:5]))
    events, error = read_prefix(cut)
    assert events == good[:5] and error is not None
    assert "line 5: the recording ends in the middle of a run (after 4 rounds" in str(error)
    events, error = read_prefix(tmp_path / "nope.jsonl")
    assert events == [] and error is not None and "cannot read" in str(error)


# -- a long line: linear work, refused at the shared limit ---------------------------------


class QuadraticReader(RecordingReader):
    """The old feed: the open line re-joined with each piece and the whole re-split."""

    def _feed(self, chunk: bytes, out: list) -> None:
        data = b"".join(self._pieces) + chunk
        self.scanned += len(data) * 2  # the join copies it all, the split scans it all
        *lines, partial = data.split(b"\n")
        self._pieces, self._partial_bytes = [partial], len(partial)
        if len(partial) > MAX_LINE_BYTES:
            self._fail(recording.TOO_LONG, self.line + 1)
        for line in lines:
            event = self.feed_line(line)
            if event is not None:
                out.append(event)


def scanned_reading_a_long_line(reader: RecordingReader, size: int, piece: int) -> int:
    """Bytes ``reader`` scans taking a ``size``-byte event line in ``piece``-byte pieces."""
    line = NORMAL.read_bytes().split(b"\n")[1]
    data = line + b" " * (size - len(line)) + b"\n"
    for at in range(0, len(data), piece):
        reader.feed(data[at:at + piece])
    return reader.scanned


@pytest.mark.parametrize("cls", [RecordingReader, QuadraticReader])
def test_a_long_line_costs_its_length_not_its_length_times_its_pieces(cls: type) -> None:
    """A 2 MiB line in 16 KiB pieces (the app's reader slices so): the work is at most a few
    times the bytes. The old reader scanned ~128 times them (a 1 GB line: 240 s)."""
    size = 2 * 1024 * 1024
    probe = cls()
    probe.feed(NORMAL.read_bytes().split(b"\n")[0] + b"\n")  # a run_started first
    before = probe.scanned
    work = scanned_reading_a_long_line(probe, size, 16 * 1024) - before
    if cls is QuadraticReader:
        assert work > 50 * size  # the broken variant is caught
    else:
        assert work <= 3 * size


def test_a_line_over_the_limit_is_refused_when_it_gets_there() -> None:
    """Fed a line far over MAX_LINE_BYTES, the reader fails as soon as the line passes it,
    in linear work, with the message every reader (replay, export) gives."""
    reader = RecordingReader()
    piece = b"x" * (1024 * 1024)
    fed = 0
    with pytest.raises(RecordingError) as caught:
        for _ in range(1024):  # up to 1 GiB if it never stopped
            reader.feed(piece)
            fed += len(piece)
    assert fed == MAX_LINE_BYTES  # refused with the piece that went past 32 MiB
    assert str(caught.value) == "line 1: longer than 32 MiB: not a recording"
    assert reader.scanned <= MAX_LINE_BYTES + len(piece)

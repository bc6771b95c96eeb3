"""Reading one long line in 16 KiB pieces (as the app's replay reader slices its reads): the
reader against the old one that re-joined and re-split the open line with every piece.

    .venv/bin/python benchmarks/long_line.py [--mib 4,8,16,32]

Per size: seconds for each reader, side by side in one run, and their ratio. The old reader
grows with the square of the line (issue 26: a 1 GB one-line file ran 240 s before the
32 MiB limit refused it); the reader grows with the line.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specviz.core import recording  # noqa: E402
from specviz.core.recording import RecordingError, RecordingReader  # noqa: E402

PIECE = 16 * 1024


class OldReader(RecordingReader):
    """The feed before the fix: the open line joined with each piece and the whole re-split."""

    def _feed(self, chunk: bytes, out: list) -> None:  # type: ignore[type-arg]
        data = b"".join(self._pieces) + chunk
        *lines, partial = data.split(b"\n")
        self._pieces, self._partial_bytes = [partial], len(partial)
        if len(partial) > recording.MAX_LINE_BYTES:
            self._fail(recording.TOO_LONG, self.line + 1)
        for line in lines:
            event = self.feed_line(line)
            if event is not None:
                out.append(event)


def seconds(cls: type[RecordingReader], size: int) -> float:
    piece = b" " * PIECE
    reader = cls()
    start = time.perf_counter()
    try:
        for _ in range(size // PIECE):
            reader.feed(piece)
        reader.feed(b"\n")
    except RecordingError:
        pass  # a blank line is fine; anything else ends it the same way for both
    return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", default="4,8,16,32", help="line sizes in MiB (32 is the limit)")
    args = ap.parse_args()
    print(f"{'line':>8} {'reader s':>10} {'old s':>10} {'old / reader':>13}")
    for mib in (float(m) for m in args.mib.split(",")):
        size = int(mib * 1024 * 1024)
        new, old = seconds(RecordingReader, size), seconds(OldReader, size)
        print(f"{mib:6g} MiB {new:10.3f} {old:10.3f} {old / new:12.0f}×", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

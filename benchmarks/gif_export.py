"""How long the window stops answering while a GIF is exported: the old way (every frame drawn,
quantised and written inside one slot) against File → Export now (frames drawn one per timer
tick, quantised and written on a thread), side by side in one run.

A 10 ms timer on the GUI thread stands for the window: the longest gap between its ticks is
how long a click or a close would wait.

    QT_QPA_PLATFORM=offscreen python benchmarks/gif_export.py [assets/recordings/race.jsonl]
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from PySide6.QtCore import QEventLoop, QTimer


class Gaps:
    """The ticks of a 10 ms timer and the longest gap between two of them."""

    def __init__(self) -> None:
        self.ticks = 0
        self.longest = 0.0
        self.last = time.perf_counter()
        self.timer = QTimer()
        self.timer.setInterval(10)
        self.timer.timeout.connect(self._tick)

    def start(self) -> None:
        self.ticks, self.longest, self.last = 0, 0.0, time.perf_counter()
        self.timer.start()

    def stop(self) -> float:
        self._tick()  # the time since the last tick counts too
        self.timer.stop()
        return self.longest

    def _tick(self) -> None:
        now = time.perf_counter()
        self.longest = max(self.longest, now - self.last)
        self.last = now
        self.ticks += 1


def main(argv: list[str]) -> int:
    from specviz.core.recording import read_recording
    from specviz.gui.stage import export
    from specviz.gui.windows.app import make_app

    app = make_app()
    path = argv[0] if argv else "assets/recordings/race.jsonl"
    events = read_recording(path)
    out = Path(tempfile.mkdtemp())
    gaps = Gaps()
    loop = QEventLoop()

    # The old way: the menu's slot ran the whole export.
    gaps.start()
    began = time.perf_counter()
    QTimer.singleShot(0, lambda: (export.export_animation(events, out / "old.gif"), loop.quit()))
    loop.exec()
    old_total, old_gap, old_ticks = time.perf_counter() - began, gaps.stop(), gaps.ticks

    # Now: AnimationJob, as File → Export runs it.
    job = export.AnimationJob(events, out / "new.gif")
    job.finished.connect(lambda _p, _n: loop.quit())
    job.failed.connect(lambda _m: loop.quit())
    gaps.start()
    began = time.perf_counter()
    job.start()
    loop.exec()
    new_total, new_gap, new_ticks = time.perf_counter() - began, gaps.stop(), gaps.ticks

    print(f"{path}: {job.total} frames at 1920 × 1080")
    print(f"in the slot (old): {old_total:6.1f} s in all, longest gap {old_gap * 1000:8.0f} ms, "
          f"{old_ticks} ticks of a 10 ms timer")
    print(f"AnimationJob:      {new_total:6.1f} s in all, longest gap {new_gap * 1000:8.0f} ms, "
          f"{new_ticks} ticks of a 10 ms timer")
    print(f"longest gap, old ÷ new: {old_gap / new_gap:.0f}×")
    del app
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""A bounded soak of the app, offscreen, on a tiny random-weight pair: crashes, stalls, memory.

    .venv/bin/python benchmarks/soak.py [--cycles 500] [--every 50] [--gif-every 10] [--trace]

One main window is built as a user gets it (settings in a temporary folder) with a tiny pair
(tests/tiny.py: no download, runs take milliseconds, so the app's own costs show). Each cycle
does the mix of the issue-26 rehearsal, through the window's own methods and actions: run
then Stop; a paused run, two steps, Pause to play on, Stop; a race (F7) to its end; open a
recording (assets/recordings/normal.jsonl, at 4×) and stop it part-way; the next theme; a run
with the transcript and acceptance plots exported mid-run (File → Export, its path chosen for
it); every ``--gif-every`` cycles that run exported as a GIF too.

The event loop runs as app.exec() would run it, objects given deleteLater() included (driven
by processEvents alone they are never deleted: ~9 MB a cycle that the app does not leak). A
timer on the GUI thread notes every gap between its 20 ms ticks: a gap over 2 s is a stall.
After one warm-up cycle (the first paint and the first run's imports; not counted), every
``--every`` cycles one line: cycle, resident memory (VmRSS), the process's threads (OS), Python
threads, the worst gap and the stalls so far. ``--trace`` adds the Python allocations that grew
most since the first report (tracemalloc).

Exits 1 if anything raised into Qt (a crash the user would see as a traceback) or stalled.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import os
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QEvent

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="specviz-soak-")
RECORDING = ROOT / "assets" / "recordings" / "normal.jsonl"
STALL_S = 2.0
TICK_MS = 20


def proc_status(field: str) -> int:
    """A number from /proc/self/status (VmRSS in kB, Threads)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return -1


class Soak:
    def __init__(self, max_new: int) -> None:
        import torch
        from PySide6.QtCore import QSettings, QTimer, qInstallMessageHandler

        from specviz.core.events import Round
        from specviz.gui.stage import stage
        from specviz.gui.windows.app import CUSTOM, MainWindow, make_app
        from tests.tiny import tiny_pair, word_tokenizer

        torch.set_num_threads(1)
        self.app = make_app()
        # The offscreen platform's notes about window hints are not the app's: keep them out.
        qInstallMessageHandler(lambda mode, context, text: None if "This plugin does not "
                               "support" in text else print(text, file=sys.stderr))
        self.out = Path(tempfile.mkdtemp(prefix="specviz-soak-out-"))
        pair = tiny_pair(tokenizer=word_tokenizer(eos=False), sharpness=8.0)
        settings = QSettings(str(self.out / "specviz.ini"), QSettings.Format.IniFormat)
        w = MainWindow(loader=lambda *a, **k: pair, settings=settings, autoload=False)
        w._set_preset(CUSTOM)
        w.controls.draft_edit.setText("tiny-draft")
        w.controls.target_edit.setText("tiny-target")
        w.controls.device.setCurrentText("cpu")
        w.controls.max_new.setValue(max_new)
        w.controls.prompt.setPlainText("the cat sat on the mat")
        w.resize(1600, 950)
        w.show()
        self.w = w
        self.rounds = 0
        w.controller.yielded.connect(self._count)
        self._round = Round
        paths = itertools.count()
        # File → Export asks for a path; the soak answers for the user.
        stage._ask_path = lambda parent, title, name, filters: str(  # type: ignore[assignment]
            self.out / f"{next(paths) % 4}-{name}")
        self.gif_action = None
        self.export_actions = self._export_actions()
        self.themes = itertools.cycle(["dark", "contrast", "light"])
        # Crashes: anything raised into a Qt slot or timer reaches sys.excepthook.
        self.crashes: list[str] = []
        self.timeouts = 0  # waits that ran out: a step of the mix that never happened
        sys.excepthook = lambda *exc: self.crashes.append(
            "".join(traceback.format_exception(*exc))[-2000:])
        # Stalls: gaps between the ticks of a timer on the GUI thread.
        self.last_tick = time.perf_counter()
        self.worst_gap = 0.0
        self.stalls: list[float] = []
        self.ticker = QTimer()
        self.ticker.timeout.connect(self._tick)
        self.ticker.start(TICK_MS)

    def _export_actions(self) -> list:
        from PySide6.QtWidgets import QMenu

        found = []
        for menu in self.w.findChildren(QMenu):
            for action in menu.actions():
                if action.text().startswith(("Coloured transcript", "Acceptance plots as PNG")):
                    found.append(action)
                elif action.text().startswith("Run as an animated GIF"):
                    self.gif_action = action
        return found

    def _count(self, event: object) -> None:
        if isinstance(event, self._round):
            self.rounds += 1

    def _tick(self) -> None:
        now = time.perf_counter()
        gap = now - self.last_tick
        self.last_tick = now
        self.worst_gap = max(self.worst_gap, gap)
        if gap > STALL_S:
            self.stalls.append(gap)

    # -- waiting, with the event loop running ---------------------------------------------

    def wait(self, done: Callable[[], bool], timeout: float = 60.0, quiet: bool = False) -> bool:
        """Run the event loop until ``done``; False (and counted, unless ``quiet``) on timeout."""
        end = time.monotonic() + timeout
        while not done():
            if time.monotonic() > end:
                self.timeouts += 0 if quiet else 1
                return False
            self.app.processEvents()
            # As app.exec() would when control returns to it: objects given deleteLater()
            # go (processEvents alone, outside exec, never deletes them).
            self.app.sendPostedEvents(None, QEvent.Type.DeferredDelete)
            time.sleep(0.002)
        return True

    def idle(self) -> bool:
        c = self.w.controller
        return not c.busy and not c.loading and not self.w.race_runner.phase

    def settle(self) -> None:
        if not self.wait(self.idle, 60):
            self.crashes.append("did not become idle within 60 s")

    def rounds_after(self, n: int) -> Callable[[], bool]:
        start = self.rounds
        return lambda: self.rounds >= start + n or self.idle()

    # -- the mix ---------------------------------------------------------------------------

    def step_round(self) -> None:
        """F10 until a new round arrives (a staged round first walks its phases)."""
        start = self.rounds
        for _ in range(16):
            self.w.step()
            if self.wait(lambda: self.rounds > start, 0.5, quiet=True):
                return
        self.timeouts += 1

    def cycle(self, gif: bool = False) -> None:
        w = self.w
        w.run()  # run, then Stop mid-run
        self.wait(self.rounds_after(3))
        w.stop()
        self.settle()
        self.step_round()  # a paused run, two rounds stepped (F10), then play on and stop
        self.step_round()
        w.toggle_pause()
        self.wait(self.rounds_after(2))
        w.stop()
        self.settle()
        w.race_runner.start()  # a race to its end
        self.settle()
        w.open_recording(str(RECORDING))  # a recording (at 4×), stopped part-way
        w.replayer.set_speed(4.0)
        self.wait(lambda: w.replayer.position >= 5 or not w.replayer.active, 30)
        w.stop()
        w.set_theme(next(self.themes))
        w.run()  # export mid-run
        self.wait(self.rounds_after(2))
        for action in self.export_actions:
            action.trigger()
        w.stop()
        self.settle()
        if gif and self.gif_action is not None:  # the run as a GIF, after it
            self.gif_action.trigger()
            self.wait(lambda: not any(t.name.startswith("specviz-export")
                                      for t in threading.enumerate()), 120)

    def report(self, cycle: int, began: float) -> str:
        gc.collect()
        self.app.processEvents()
        return (f"cycle {cycle:4d}  rss {proc_status('VmRSS') / 1024:7.1f} MB  "
                f"threads {proc_status('Threads'):3d} (python {threading.active_count()})  "
                f"worst gap {self.worst_gap * 1000:6.0f} ms  stalls>{STALL_S:g}s "
                f"{len(self.stalls)}  crashes {len(self.crashes)}  timeouts {self.timeouts}  "
                f"{time.monotonic() - began:6.0f} s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cycles", type=int, default=500)
    ap.add_argument("--every", type=int, default=50, help="report every N cycles")
    ap.add_argument("--max-new-tokens", type=int, default=24, help="per run")
    ap.add_argument("--gif-every", type=int, default=10,
                    help="export the run as a GIF every N cycles (0: never)")
    ap.add_argument("--trace", action="store_true", help="tracemalloc: what grew most")
    args = ap.parse_args()
    soak = Soak(args.max_new_tokens)
    if args.trace:
        import tracemalloc

        tracemalloc.start(8)
    began = time.monotonic()
    first = None
    soak.cycle()  # warm-up: the first paint, the first run's imports and caches
    print(soak.report(0, began) + "  (after a warm-up cycle; its gaps are not counted)",
          flush=True)
    soak.worst_gap, soak.stalls = 0.0, []
    for i in range(1, args.cycles + 1):
        soak.cycle(gif=args.gif_every > 0 and i % args.gif_every == 0)
        if i % args.every == 0 or i == args.cycles:
            print(soak.report(i, began), flush=True)
            if args.trace:
                snap = tracemalloc.take_snapshot()
                if first is None:
                    first = snap
                else:
                    for stat in snap.compare_to(first, "traceback")[:5]:
                        print(f"    +{stat.size_diff / 1024:8.1f} KiB  {stat.count_diff:+6d}  "
                              + " <- ".join(f"{Path(f.filename).name}:{f.lineno}"
                                            for f in stat.traceback[:4]), flush=True)
    soak.w.close()
    for crash in soak.crashes[:3]:
        print("crash:", crash, file=sys.stderr)
    print(f"{args.cycles} cycles: {len(soak.crashes)} crashes, {len(soak.stalls)} stalls over "
          f"{STALL_S:g} s (worst gap {soak.worst_gap * 1000:.0f} ms)")
    return 1 if soak.crashes or soak.stalls else 0


if __name__ == "__main__":
    raise SystemExit(main())

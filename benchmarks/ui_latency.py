"""UI latency: main-thread stalls and event-to-screen latency, live and in a replay.

    QT_QPA_PLATFORM=offscreen .venv/bin/python benchmarks/ui_latency.py [--tokens 1000]
        [--runs 20] [--replay-mb 50] [--replay-s 60] [--save live.jsonl]
    QT_QPA_PLATFORM=offscreen .venv/bin/python benchmarks/ui_latency.py --recording live.jsonl
        (phase 3 alone, no model: a saved recording repeated to --replay-mb)

On the main window, with the bundled pair (PRESETS[DEFAULT_PAIR]) on the CPU:

1. live: runs until ``--tokens`` tokens were generated. A 5 ms heartbeat QTimer on the GUI
   thread measures stalls (how late each beat fires); each event is stamped when the
   worker emits it and again when the RunView's frame that appended it to the stream
   returns (a frame draws a bounded share: a round may wait a frame or two in the view's
   backlog; the plots follow within RunView.STATS_S). Garbage collections (run by a
   GUI-thread timer) are listed with their longest pause.
2. memory: ``--runs`` runs of the same pair (the first phase's included); RSS and thread
   count after each.
3. replay: the live runs' events, repeated into a ~``--replay-mb`` MB recording, replayed at
   full speed (``interval_ms=0``): stalls, time to first event on screen, latency from the
   Replayer handing an event to the view to the frame that drew it, and events/s.

Goals (issue 10): stalls p99 < 33 ms (one frame), latency p95 < 50 ms. Absolute figures
depend on the machine and its load; the script prints the load average with them. To
compare two trees, run each with PYTHONPATH=<tree> (the script then imports that tree).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if not os.environ.get("PYTHONPATH"):  # PYTHONPATH=<another tree> measures that tree
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("PYQTGRAPH_QT_LIB", "PySide6")

from PySide6.QtCore import QEventLoop, QSettings, Qt, QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from specviz.core.events import Round, RunFinished, Settings, to_json  # noqa: E402
from specviz.core.models import DEFAULT_PAIR, DEFAULT_PROMPT, PRESETS  # noqa: E402
from specviz.gui.windows.app import MainWindow, make_app  # noqa: E402
from specviz.gui.worker import PairSpec  # noqa: E402

STALL_GOAL_MS = 33.0
LATENCY_GOAL_MS = 50.0
BEAT_MS = 5


def proc_status() -> tuple[float, int]:
    """(RSS in MiB, threads) of this process, from /proc (Linux)."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text()
                  .splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["Threads"])


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


class Heartbeat:
    """A fast timer on the GUI thread: how late each beat fires is how long the thread stalled."""

    def __init__(self) -> None:
        self.timer = QTimer()
        self.timer.setTimerType(Qt.TimerType.PreciseTimer)
        self.timer.setInterval(BEAT_MS)
        self.timer.timeout.connect(self._on_beat)
        self.late_ms: list[float] = []
        self._last: float | None = None
        self.recording = False

    def start(self) -> None:
        self._last = None
        self.timer.start()

    def _on_beat(self) -> None:
        now = time.perf_counter()
        if self._last is not None and self.recording:
            self.late_ms.append(max(0.0, (now - self._last) * 1000 - BEAT_MS))
        self._last = now


class StallSampler:
    """Where the GUI thread is while it stalls (``--stacks``): a thread looks at it every 2 ms
    and, while the heartbeat is more than 25 ms late, counts its innermost frames."""

    def __init__(self, beat: Heartbeat) -> None:
        import collections
        import threading

        self.beat = beat
        self.main = threading.get_ident()
        self.counts: collections.Counter[str] = collections.Counter()
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import traceback

        while not self._stop.wait(0.002):
            last = self.beat._last
            if not self.beat.recording or last is None:
                continue
            if time.perf_counter() - last < 0.025:
                continue
            frame = sys._current_frames().get(self.main)
            if frame is None:
                continue
            stack = traceback.extract_stack(frame)[-6:]
            self.samples += 1
            self.counts[" < ".join(f"{Path(f.filename).name}:{f.name}:{f.lineno}"
                                   for f in reversed(stack))] += 1

    def report(self, top: int = 12) -> str:
        self._stop.set()
        lines = [f"where the GUI thread was while stalled > 25 ms ({self.samples} samples "
                 f"every 2 ms; innermost first):"]
        for stack, n in self.counts.most_common(top):
            lines.append(f"  {n:5d}  {stack}")
        return "\n".join(lines)


class FrameClock:
    """Stamps rounds when they enter (emit or hand-over) and when a frame has drawn them.

    A round is drawn when the frame that appended it to the stream returns (the view may
    fold a round into its record in one frame and append it in a later one: its backlog).
    A round whose run a later run replaced before it was drawn never shows: not counted.
    """

    def __init__(self, view: Any) -> None:
        self.view = view
        self.entered: dict[int, float] = {}
        self.latency_ms: list[float] = []
        self.flush_ms: list[float] = []
        self.skipped = 0
        self.recording = False
        self.gc = GcClock()
        # The timer calls self.frame() (self.flush() before frames were bounded); explicit
        # calls flush(): both instance attributes, so both are timed.
        for name in ("frame", "flush"):
            if hasattr(view, name):
                setattr(view, name, self._timed(getattr(view, name)))

    def _timed(self, real: Any) -> Any:
        view = self.view

        def timed(now: float | None = None) -> None:
            waiting = [id(e) for e in (*view.queue, *getattr(view, "backlog", ()))]
            t0 = time.perf_counter()
            real(now)
            t1 = time.perf_counter()
            if not self.recording:
                return
            if waiting:
                self.flush_ms.append((t1 - t0) * 1000)
            left = {id(r) for r in getattr(view, "backlog", ())}
            shown = {id(r) for r in view.record.rounds}
            for key in waiting:
                if key in left or key not in self.entered:
                    continue
                t = self.entered.pop(key)
                if key in shown:
                    self.latency_ms.append((t1 - t) * 1000)
                else:
                    self.skipped += 1

        return timed

    def stamp(self, event: Any) -> None:
        if isinstance(event, Round):
            self.entered[id(event)] = time.perf_counter()


class GcClock:
    """Garbage collections (automatic collection is off in the app: a GUI-thread timer runs
    them) and how long each took: a full one walks every object, the model's included."""

    def __init__(self) -> None:
        self.ms: dict[int, list[float]] = {0: [], 1: [], 2: []}
        self._t = 0.0
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._t = time.perf_counter()
        else:
            self.ms[info["generation"]].append((time.perf_counter() - self._t) * 1000)

    def line(self) -> str:
        return "garbage collections: " + ", ".join(
            f"gen {g}: {len(v)} (max {max(v, default=0):.0f} ms)" for g, v in self.ms.items())

    def clear(self) -> None:
        for v in self.ms.values():
            v.clear()


def wait(app: QApplication, seconds: float) -> None:
    loop = QEventLoop()
    QTimer.singleShot(int(seconds * 1000), loop.quit)
    loop.exec()


def wait_for(signal: Any, timeout_s: float) -> None:
    loop = QEventLoop()
    signal.connect(loop.quit)
    QTimer.singleShot(int(timeout_s * 1000), loop.quit)
    loop.exec()
    signal.disconnect(loop.quit)


def report(name: str, stalls: list[float], latency: list[float], extra: str = "") -> list[str]:
    s50, s99 = pct(stalls, 50), pct(stalls, 99)
    l50, l95 = pct(latency, 50), pct(latency, 95)
    ok_s = "ok" if s99 < STALL_GOAL_MS else "MISSED"
    ok_l = "ok" if l95 < LATENCY_GOAL_MS else "MISSED"
    lines = [
        f"{name}:",
        f"  main-thread stalls (heartbeat {BEAT_MS} ms, lateness, n={len(stalls)}): "
        f"p50 {s50:.1f} ms, p99 {s99:.1f} ms, max {max(stalls, default=0):.0f} ms  "
        f"[goal p99 < {STALL_GOAL_MS:.0f} ms: {ok_s}]",
        f"  event-to-screen latency (n={len(latency)} rounds): p50 {l50:.1f} ms, "
        f"p95 {l95:.1f} ms, max {max(latency, default=0):.0f} ms  "
        f"[goal p95 < {LATENCY_GOAL_MS:.0f} ms: {ok_l}]",
    ]
    if extra:
        lines.append("  " + extra)
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=1000, help="tokens in the live phase")
    ap.add_argument("--runs", type=int, default=20, help="runs for memory and threads")
    ap.add_argument("--replay-mb", type=float, default=50.0, help="size of the replayed file")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--save", type=Path, help="also write the live runs' recording here")
    ap.add_argument("--replay-s", type=float, default=60.0,
                    help="stop the replay after this long (it measures, it need not finish)")
    ap.add_argument("--recording", type=Path,
                    help="skip the live runs (phases 1 and 2, no model loaded): replay this "
                         "recording, repeated to --replay-mb")
    ap.add_argument("--stacks", action="store_true",
                    help="also print where the GUI thread was during stalls (sampled)")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(max(1, (os.cpu_count() or 2) - 1))  # one core left for the GUI
    app = make_app()
    tmp = Path(tempfile.mkdtemp(prefix="specviz-ui-latency-"))
    store = QSettings(str(tmp / "settings.ini"), QSettings.Format.IniFormat)
    window = MainWindow(settings=store, autoload=False)
    window.resize(1600, 950)
    window.show()
    view = window.run_view
    beat = Heartbeat()
    clock = FrameClock(view)
    controller = window.controller
    controller.worker.yielded.connect(clock.stamp, Qt.ConnectionType.DirectConnection)
    beat.start()

    if args.recording is not None:
        print(f"specviz UI latency benchmark: replay of {args.recording} only; Qt platform "
              f"{app.platformName()}; load average {os.getloadavg()[0]:.1f} on "
              f"{os.cpu_count()} cores", flush=True)
        lines = [x for x in args.recording.read_text(encoding="utf-8").splitlines() if x]
        return replay_phase(args, app, window, view, beat, clock, lines, tmp)
    draft, target = PRESETS[DEFAULT_PAIR]
    spec = PairSpec(draft, target, "cpu")
    t0 = time.perf_counter()
    controller.load(spec)
    wait_for(controller.loaded, 120)
    print(f"specviz UI latency benchmark: {DEFAULT_PAIR}, K={args.k}, T=0.7, CPU "
          f"({torch.get_num_threads()} torch threads), Qt platform "
          f"{app.platformName()}; load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} cores", flush=True)
    print(f"pair loaded in {time.perf_counter() - t0:.1f} s", flush=True)

    # -- 1 and 2: live runs -------------------------------------------------------------------
    per_run = max(1, -(-args.tokens // args.runs))
    memory: list[tuple[float, int]] = []
    recorded: list[Any] = []
    tokens = 0
    live_s = 0.0
    beat.recording = clock.recording = True
    clock.gc.clear()
    run = 0
    while run < args.runs or tokens < args.tokens:
        settings = Settings(k=args.k, temperature=0.7, max_new_tokens=per_run, seed=run,
                            drafter="model", k_policy="fixed", lookup_k=10)
        t = time.perf_counter()
        controller.start(spec, settings, DEFAULT_PROMPT)
        wait_for(controller.finished, 300)
        wait(app, 0.1)  # the last frame
        live_s += time.perf_counter() - t
        events = list(view.record.events)
        recorded.extend(events)
        finished = events[-1] if events and isinstance(events[-1], RunFinished) else None
        tokens += finished.summary.tokens if finished else 0
        run += 1
        memory.append(proc_status())
        if run >= 200:
            break
    beat.recording = clock.recording = False
    live = report(f"live: {run} runs, {tokens} tokens in {live_s:.1f} s "
                  f"({tokens / live_s:.1f} tokens/s with the UI)", beat.late_ms,
                  clock.latency_ms, f"frame work (RunView frame/flush with events): p50 "
                  f"{pct(clock.flush_ms, 50):.1f} ms, p99 {pct(clock.flush_ms, 99):.1f} ms")
    print("\n".join(live) + "\n  " + clock.gc.line(), flush=True)
    rss = [m[0] for m in memory]
    threads = [m[1] for m in memory]
    first = min(len(rss), 2)
    mem = [f"memory over {len(memory)} runs: RSS after run 1 {rss[0]:.0f} MiB, after run "
           f"{first} {rss[first - 1]:.0f} MiB, after run {len(rss)} {rss[-1]:.0f} MiB "
           f"(max {max(rss):.0f}); growth from run {first} to {len(rss)}: "
           f"{rss[-1] - rss[first - 1]:+.0f} MiB",
           f"threads: {threads[0]} after run 1, {threads[-1]} after run {len(threads)} "
           f"(min {min(threads)}, max {max(threads)})"]

    print("\n".join(mem), flush=True)

    # -- 3: a big recording at full speed ----------------------------------------------------
    lines = [to_json(e) for e in recorded]
    if args.save:
        args.save.write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    return replay_phase(args, app, window, view, beat, clock, lines, tmp)


def replay_phase(args: argparse.Namespace, app: QApplication, window: Any, view: Any,
                 beat: Heartbeat, clock: FrameClock, lines: list[str], tmp: Path) -> int:
    """Phase 3: ``lines`` (one recording) repeated to ~``--replay-mb`` MB, at full speed."""
    one = sum(len(x.encode()) + 1 for x in lines)
    copies = max(1, int(args.replay_mb * 1024 * 1024 // one))
    path = tmp / "big.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(copies):
            f.write("\n".join(lines) + "\n")
    size_mb = path.stat().st_size / 1024 / 1024
    n_events = len(lines) * copies
    replayer = window.replayer
    replayer.interval_ms = 0
    beat.late_ms.clear()
    clock.latency_ms.clear()
    clock.flush_ms.clear()
    clock.entered.clear()
    clock.skipped = 0
    clock.gc.clear()
    real_apply = view.apply

    def apply(event: Any) -> None:
        clock.stamp(event)
        real_apply(event)

    view.apply = apply  # the Replayer hands events to view.apply
    first_shown: list[float] = []
    sampler = StallSampler(beat) if args.stacks else None
    beat.recording = clock.recording = True
    t = time.perf_counter()
    replayer.open(str(path))
    opened = time.perf_counter() - t
    while not first_shown:
        wait(app, 0.005)
        if view.record.events:
            first_shown.append(time.perf_counter() - t)
    wait_for(replayer.finished, max(0.0, args.replay_s - (time.perf_counter() - t)))
    beat.recording = clock.recording = False
    done = not replayer.active
    replayer.stop()
    replay_s = time.perf_counter() - t
    n_shown = replayer.count
    wait(app, 0.1)
    view.apply = real_apply
    rss_after, threads_after = proc_status()
    replay = report(
        f"replay at full speed: {size_mb:.0f} MB ({n_events} events), "
        f"{'all' if done else 'stopped after'} {n_shown} events in {replay_s:.1f} s "
        f"({n_shown / replay_s:.0f} events/s); open_recording returned in "
        f"{opened * 1000:.1f} ms, first event on screen after {first_shown[0] * 1000:.0f} ms",
        beat.late_ms, clock.latency_ms,
        f"frame work: p50 {pct(clock.flush_ms, 50):.1f} ms, p99 "
        f"{pct(clock.flush_ms, 99):.1f} ms; {clock.skipped} rounds never drawn (their run "
        f"was replaced in the frame); after the replay RSS {rss_after:.0f} MiB, "
        f"{threads_after} threads (latency here: handed to the view -> drawn)")

    print("\n".join(replay) + "\n  " + clock.gc.line())
    if sampler is not None:
        print(sampler.report())
    print(f"goals: stalls p99 < {STALL_GOAL_MS:.0f} ms, latency p95 < {LATENCY_GOAL_MS:.0f} ms")
    window.close()
    path.unlink()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

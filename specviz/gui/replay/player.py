"""Replays: a recording as an event source beside the decoding worker, feeding the same RunView.

This module is the player; the reading is :mod:`specviz.gui.replay.reader`.

A recording is read and checked (:mod:`specviz.core.recording`) on a reader thread, never
on the GUI thread, so a 50 MB file does not freeze the window. The source may be a file, a
file still being written (followed until its run ends), or a pipe such as standard input
(``ssh gpu-box specviz-cli --json … | specviz --replay -``): events show as they arrive.

The reader hands batches over a bounded queue (it waits when the window is behind, so the
events read ahead of the screen stay few) and wakes the GUI thread with a queued signal. On
the GUI thread a timer paces the events: with a ``speed``, each round waits the time it took
when it was recorded (``Round.elapsed_s``) divided by the speed, or for Step (round by
round); without one, one event per ``interval_ms``; as fast as they come (a few dozen per
frame at most) for a pipe, a followed file that caught up, or ``interval_ms=0``.

Every event read is kept, so a replay can pause, step a round either way and seek: a seek
back clears the view with the run's own RunStarted and applies the run's events up to there
again, so the view after a seek is the view that playing reaches (gui/windows/replay_bar.py has the
controls). A file that holds a race (a speculative run, then the target alone) can go to the
race window instead (``detect_races``).

A replay never mixes with a live run. Opening one stops the live run, and the live events
reach the view only through :attr:`Replayer.live_yielded`, which drops those of a job started
before the replay (still queued when it opened); a live run that starts stops the replay.
"""

from __future__ import annotations

import bisect
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from PySide6.QtCore import QObject, Qt, QTimer, Signal

from specviz.core.events import Event, Round, RunFailed, RunStarted
from specviz.core.race import as_race
from specviz.core.recording import RecordingError, ended_early
from specviz.gui.replay.reader import (
    CAUGHT_UP,
    END,
    ERROR,
    EVENTS,
    PENDING_MAX,
    STDIN,
    WAITING,
    ReadJob,
    Wake,
    open_pipe_reader,
)
from specviz.gui.views.run_view import FRAME_FRAGMENTS, fragments

LIVE_TICK_MS = 10  # how often events that arrived are handed over
# Events handed to the view per tick at most. A frame's fixed cost (painting the plots)
# dominates at small batches and the stream's text at large ones, so the batch adapts: it
# halves after a tick that came late (a frame overran) and grows while ticks are on time.
LIVE_BATCH = 256
MIN_BATCH = 8
FRAME_BUDGET_S = 0.025  # a tick later than this: the frame before it was long, hand less

ROUND_BY_ROUND = 0.0  # a speed: no clock, a round only on Step (F10, the clicker)
SPEEDS = (0.25, 0.5, 1.0, 2.0, 4.0)  # times the recorded timing
# Events held back, at most, while a file may still be a race (a race is known at its end):
# a race's first run has fewer rounds than this; an ordinary big file starts at once after.
HOLD_MAX = 2048


def recorded_delays(events: Sequence[Event]) -> list[float]:
    """Seconds each event took when it was recorded: a round its own measured time (its
    ``elapsed_s`` less the previous round's in the same run); every other event none."""
    out: list[float] = []
    last = 0.0
    for event in events:
        if isinstance(event, RunStarted):
            last = 0.0
        if isinstance(event, Round):
            out.append(max(0.0, event.elapsed_s - last))
            last = event.elapsed_s
        else:
            out.append(0.0)
    return out


def schedule(events: Sequence[Event], speed: float) -> list[float]:
    """When each event shows, in seconds from the start, at ``speed`` × the recorded timing
    (round by round: every round waits for Step, ``inf``)."""
    out: list[float] = []
    t = 0.0
    for delay in recorded_delays(events):
        t += delay / speed if speed > 0 else (math.inf if delay > 0 else 0.0)
        out.append(t)
    return out


def speed_text(speed: float | None) -> str:
    if speed is None:
        return "paced"
    if speed == ROUND_BY_ROUND:
        return "round by round"
    return f"{speed:g}×"


class Replayer(QObject):
    """Feeds a RunView from a recording read on a thread; keeps a live run's stale events out.

    Every event read is kept (``events``); ``position`` of them are on screen. Play, pause,
    a speed, a step either way and a seek move ``position``; a seek back rebuilds the view
    from the run's first event, so the view after a seek is the view playing got there.
    """

    finished = Signal()  # the replay ended: all shown, an error, or stopped
    failed = Signal(object)  # RunFailed: the recording is bad (the view shows it already)
    progressed = Signal(str)  # a status line: what is being replayed, how far
    live_yielded = Signal(object)  # the controller's events that belong on screen
    changed = Signal()  # position, playing, speed or what is known changed (the bar redraws)
    run_shown = Signal(object)  # RunStarted: a run of the recording is on screen now
    left = Signal()  # the replay was left (stopped, closed, a live run took the view)
    race_found = Signal(object)  # list[Event]: the file is a race (speculative, then alone)

    def __init__(self, view: Any, controller: Any = None, interval_ms: int = 60,
                 follow_s: float = 30.0, speed: float | None = None,
                 detect_races: bool = False) -> None:
        super().__init__(view)
        self.view = view
        self.interval_ms = interval_ms  # paced (speed None): one event per interval
        self.speed = speed  # None: paced by interval_ms; else × the recorded timing
        self.follow_s = follow_s  # a file that ends mid-run is watched this long for more
        self.detect_races = detect_races
        self.events: list[Event] = []  # every event read so far, shown or not
        self.position = 0  # how many of them are on screen
        self.paused = False
        self.loaded = False  # a recording is on screen (until left)
        self._delays: list[float] = []  # recorded seconds before each event
        self._round_ends: list[int] = []  # position after each round
        self.name = ""
        self.count = 0
        self.skipped = 0  # events of runs replaced within one tick at full speed: not drawn
        self._job: ReadJob | None = None
        self._live = False  # hand events over as they come (not one per interval)
        self._deciding = False  # holding a file's first events: is it a race?
        self._batch = MIN_BATCH  # events per tick when live; adapts to the frames' cost
        self._last_tick: float | None = None
        self._ended = False  # the reader is done: ``events`` is the whole recording
        self._done = False  # ``finished`` was emitted for what is known
        self._wake = Wake()
        self._wake.ready.connect(self._on_ready, Qt.ConnectionType.QueuedConnection)
        self.timer = QTimer(self)
        self.timer.setInterval(interval_ms)
        self.timer.timeout.connect(self._on_timeout)
        # The live run's jobs, as the controller reports them (ids only grow).
        self._worker_job: int | None = None  # the job whose events are arriving now
        self._last_job = 0
        self._stale_upto = 0  # jobs with an id up to this one started before the replay
        self.controller = controller
        if controller is not None:
            controller.started.connect(self._on_job_started)
            controller.finished.connect(self._on_job_finished)
            controller.yielded.connect(self._on_live_event)

    # -- what the window asks for -----------------------------------------------------------

    def open(self, path: str) -> None:
        """Replay a file (followed while it is written) or, for ``-``, standard input."""
        if path == STDIN:
            stream = getattr(sys.stdin, "buffer", None)
            if stream is None:
                self._begin("standard input", live=True)
                self._fail("there is no standard input to read (start specviz from a shell "
                           "with a pipe: … | specviz --replay -)")
                return
            self.open_stream(stream, "standard input")
            return
        self._begin(Path(path).name, live=self.interval_ms == 0)
        self._deciding = self.detect_races
        self._start_job(ReadJob(None, path, self.name, self._live, self.follow_s, self._wake))

    def open_stream(self, stream: IO[bytes], name: str) -> None:
        """Replay a pipe or any binary stream, showing events as they arrive."""
        self._begin(name, live=True)
        self._start_job(ReadJob(stream, None, name, True, 0.0, self._wake))

    def start(self, events: list[Event], name: str = "events") -> None:
        """Replay events already in memory (checked by whoever built them), called ``name``."""
        self._begin(name, live=self.interval_ms == 0)
        self._add(events)
        self._ended = True
        self._resume()

    def stop(self) -> None:
        """Stop reading and showing, and leave the replay; what is on screen stays."""
        was_active, was_loaded = self.active, self.loaded
        if self._job is not None:
            self._job.stop()
            self._job = None
        self.timer.stop()
        self._deciding = False
        self.events, self._delays, self._round_ends = [], [], []
        self.position = 0
        self.loaded = False
        if was_active:
            self.progressed.emit(f"Stopped replaying {self.name} after {self.count} events")
            self.finished.emit()
        if was_loaded:
            self.left.emit()
            self.changed.emit()

    @property
    def active(self) -> bool:
        """Reading or showing: not everything read is on screen yet, or more may come."""
        return self._job is not None or self.position < len(self.events) or \
            self.timer.isActive()

    @property
    def pending(self) -> list[Event]:
        """Events read and not shown yet."""
        return self.events[self.position:]

    @property
    def live(self) -> bool:
        """Events show as they arrive (a pipe, a followed file that caught up)."""
        return self._live

    @property
    def ended(self) -> bool:
        return self._ended

    # -- the controls ------------------------------------------------------------------------

    @property
    def rounds_known(self) -> int:
        return len(self._round_ends)

    @property
    def rounds_shown(self) -> int:
        return bisect.bisect_right(self._round_ends, self.position)

    @property
    def at_end(self) -> bool:
        return self._ended and self.position >= len(self.events)

    @property
    def playing(self) -> bool:
        return self.loaded and not self.paused and not self.at_end

    def set_speed(self, speed: float | None) -> None:
        """× the recorded timing (ROUND_BY_ROUND: Step alone moves it); None: paced."""
        self.speed = speed
        if self.timer.isActive():
            self.timer.stop()
            self._resume()
        self.changed.emit()

    def play(self) -> None:
        """Play from here (from the start when at the end); following resumes."""
        if not self.loaded and not self.events:
            return
        if self.at_end:
            self.seek(0)
        self.paused = False
        self._resume()
        self.changed.emit()

    def pause(self) -> None:
        """Nothing more shows until Play or Step (a followed file is read on meanwhile)."""
        self.paused = True
        self.timer.stop()
        self.changed.emit()

    def toggle_pause(self) -> None:
        self.play() if self.paused or self.at_end else self.pause()

    def step(self) -> bool:
        """Pause, then one round more (with the events up to the next round); False at the end."""
        self.paused = True
        self.timer.stop()
        if self.position >= len(self.events):
            self.changed.emit()
            return False
        self._refill()
        self.seek(self.rounds_shown + 1)
        return True

    def step_back(self) -> bool:
        """Pause, then one round less; False at the start."""
        self.paused = True
        self.timer.stop()
        n = self.rounds_shown
        if n == 0:
            self.changed.emit()
            return False
        self.seek(n - 1)
        return True

    def seek(self, n: int) -> None:
        """Show the state after round ``n`` (0: the run's start; all rounds: its end, if read).

        Forward: the events in between are applied. Back: the view is cleared by its run's
        RunStarted and every event of the run up to there is applied again.
        """
        n = max(0, min(n, self.rounds_known))
        if self._live and not self._ended and self._stop(n) < len(self.events):
            self.paused = True  # scrubbing back in a followed stream pauses it until Play
        self.timer.stop()
        self._show_upto(self._stop(n))
        if self.paused or self.at_end:
            self.changed.emit()
        else:
            self._resume()

    def _stop(self, n: int) -> int:
        """The position after round ``n`` (0: before the first round)."""
        ends = self._round_ends
        if n <= 0:
            return ends[0] - 1 if ends else len(self.events)
        if n >= len(ends) and self._ended:
            return len(self.events)  # the last round, and whatever ends the run
        end = ends[min(n, len(ends)) - 1]
        return end

    def _show_upto(self, target: int) -> None:
        """Make the view show exactly ``events[:target]``."""
        target = max(0, min(target, len(self.events)))
        view = self.view
        if target < self.position:
            start = next((i for i in range(target - 1, -1, -1)
                          if isinstance(self.events[i], RunStarted)), 0)
            view.queue.clear()
            view.stager.stop()
            self.position = start
        while self.position < target:
            if not self._apply_next():
                return
        view.flush()
        view.stream.apply_strikes(now=math.inf)  # a past round's rejections are struck
        if self.position < len(self.events):
            self._done = False
        self._check_end()

    def _apply(self, event: Event) -> None:
        self.view.apply(event)
        self.count += 1
        if isinstance(event, RunStarted):
            self.run_shown.emit(event)

    def status_text(self) -> str:
        """E.g. "Replaying normal.jsonl: round 12 of 40 · 1× · paused"."""
        if not self.loaded:
            return ""
        total = "…" if not self._ended and not self._live else ""
        known = f"{self.rounds_known}{total}"
        state = ("live" if self._live and self.position >= len(self.events)
                 and not self._ended and not self.paused
                 else "done" if self.at_end
                 else "F10: next round" if self.speed == ROUND_BY_ROUND and not self._live
                 else "paused" if self.paused else "playing")
        speed = "as it arrives" if self._live and not self._ended else speed_text(self.speed)
        verb = "Replayed" if self.at_end else "Replaying"
        return (f"{verb} {self.name}: round {self.rounds_shown} of {known} · {speed} · "
                f"{state}")

    # -- the live run --------------------------------------------------------------------

    def _on_job_started(self, job_id: int) -> None:
        self._worker_job = job_id
        self._last_job = max(self._last_job, job_id)
        if job_id > self._stale_upto and (self.active or self.loaded):
            self.stop()  # a live run started: it has the view now

    def _on_job_finished(self, job_id: int) -> None:
        if self._worker_job == job_id:
            self._worker_job = None

    def _on_live_event(self, event: Event) -> None:
        if self._worker_job is not None and self._worker_job > self._stale_upto:
            self.live_yielded.emit(event)

    def _silence_live_run(self) -> None:
        """Stop the live run and drop every event of it (and of older jobs) still queued."""
        current = getattr(self.controller, "current", None)
        self._stale_upto = max(self._stale_upto, self._last_job,
                               getattr(current, "job_id", 0) or 0)
        if self.controller is not None:
            self.controller.stop()

    # -- reading ------------------------------------------------------------------------------

    def _begin(self, name: str, live: bool) -> None:
        self.stop()
        self._silence_live_run()
        self.name, self.count, self.skipped = name, 0, 0
        self._live, self._ended, self._done = live, False, False
        self.paused, self.loaded = False, True
        self._last_elapsed = 0.0
        self.timer.setInterval(LIVE_TICK_MS if live else self.interval_ms)
        self.progressed.emit(f"Replaying {name}…")
        self.changed.emit()

    def _start_job(self, job: ReadJob) -> None:
        self._job = job
        job.start()

    def _add(self, events: list[Event]) -> None:
        """Keep events read; note each one's recorded delay and where each round ends."""
        for event in events:
            delay = 0.0
            if isinstance(event, RunStarted):
                self._last_elapsed = 0.0
            elif isinstance(event, Round):
                delay = max(0.0, event.elapsed_s - self._last_elapsed)
                self._last_elapsed = event.elapsed_s
            self.events.append(event)
            self._delays.append(delay)
            if isinstance(event, Round):
                self._round_ends.append(len(self.events))

    def _on_ready(self) -> None:
        """The reader put something: take it, and show the first event now if idle."""
        self._refill()
        if self._deciding and not self._decide():
            return
        if self.paused or not self.loaded:
            self.changed.emit()  # the bar: more is known
            return
        self._resume()

    def _decide(self) -> bool:
        """Whether to start showing a file held back: a race is known once it is all read (it
        then goes to ``race_found`` instead); anything else as soon as it cannot be one."""
        starts = [e for e in self.events if isinstance(e, RunStarted)]
        if self._ended:
            damaged = bool(self.events) and isinstance(self.events[-1], RunFailed) \
                and self.events[-1].kind == "recording"  # shown here, with where it ends
            race = as_race(self.events) if len(starts) == 2 and not damaged else None
            if race is not None:
                events = list(self.events)
                name = self.name
                self.stop()
                self.race_found.emit(events)
                self.progressed.emit(f"{name} is a race: it plays in the race window (F7)")
                return False
        elif not (self._live or len(self.events) >= HOLD_MAX or len(starts) > 2
                  or (starts and starts[0].mode != "speculative")):
            return False  # it may still be a race: hold on
        self._deciding = False
        return True

    def _refill(self) -> None:
        """Take the reader's batches while few events wait (the reader waits meanwhile)."""
        limit = HOLD_MAX if self._deciding else PENDING_MAX
        while self._job is not None and len(self.events) - self.position < limit:
            items = self._job.take(1)
            if not items:
                return
            kind, value = items[0]
            if kind == EVENTS:
                events, _read_at = value
                self._add(events)
            elif kind == CAUGHT_UP:  # a followed file: from now on, as the lines come
                self._live = True
                self.timer.setInterval(LIVE_TICK_MS)
            elif kind == WAITING:
                self.progressed.emit(f"Following {self.name}: waiting for the run's next "
                                     "lines (Stop ends it)")
            elif kind == END:
                self._job, self._ended = None, True
            elif kind == ERROR:
                self._job, self._ended = None, True
                if isinstance(value, RecordingError):  # where and why it ends; what shows
                    value = ended_early(value, len(self.events))
                self._add([RunFailed(f"Could not read {self.name}: {value}", "recording")])

    def _due_now(self, i: int) -> bool:
        """Whether event ``i`` shows without waiting (after the one before it)."""
        if self._live or self.speed is None:
            return True
        if self.speed == ROUND_BY_ROUND:
            return not isinstance(self.events[i], Round)
        return self._delays[i] == 0.0

    def _resume(self) -> None:
        """Show what is due now and time the next event (nothing while paused)."""
        if self.paused or not self.loaded or self._deciding or self.timer.isActive():
            return
        self._last_tick = None  # it was idle, not late
        if self.position >= len(self.events) or self._due_now(self.position):
            self._on_timeout()  # the first event shows now, not one interval later
        else:
            self._after_tick()

    def _on_timeout(self) -> None:
        self._refill()
        if self.paused or self._deciding:
            self.timer.stop()
            return
        if self._live or self.speed is None:
            n = self._live_batch() if self._live else 1
            if self._live and n:
                n -= self._skip_replaced(n)
            # Live, no more tokens than one frame of the view appends: what is handed over
            # shows in the next frame, not after frames of backlog (a 50 MB replay at full
            # speed: latency p95 53 -> 33-37 ms).
            tokens = 0
            while n and self.position < len(self.events):
                event = self.events[self.position]
                if self._live and isinstance(event, Round):
                    tokens += fragments(event)
                    if tokens > FRAME_FRAGMENTS and tokens > fragments(event):
                        break
                if not self._apply_next():
                    return
                n -= 1
        elif self.position < len(self.events) and (
                self.speed != ROUND_BY_ROUND or self._due_now(self.position)):
            if not self._apply_next():  # the event whose time came, and those due with it
                return
            while self.position < len(self.events) and self._due_now(self.position):
                if not self._apply_next():
                    return
        self._after_tick()

    def _skip_replaced(self, n: int) -> int:
        """Go straight to the last run that starts among the next ``n`` events: the runs
        before it would be replaced in the frame that draws this tick, never seen, after a
        reset each (the text, the bars' panels, the plots, the controls). A 50 MB file of
        short runs at full speed spent its frames on those. They count as replayed; a seek
        or a step shows them. Returns how many events were passed over."""
        end = min(len(self.events), self.position + n)
        for j in range(end - 1, self.position, -1):
            if isinstance(self.events[j], RunStarted):
                skipped = j - self.position
                self.position = j
                self.count += skipped
                self.skipped += skipped
                return skipped
        return 0

    def _apply_next(self) -> bool:
        """Show the next event; False if it is the reader's failure (the replay ended)."""
        event = self.events[self.position]
        if isinstance(event, RunFailed) and event.kind == "recording":
            self._fail_with(event)
            return False
        self.position += 1
        self._apply(event)
        return True

    def _after_tick(self) -> None:
        """Time the next event; at the end, say so once."""
        if self.position < len(self.events):
            if self._live:
                interval = LIVE_TICK_MS
            elif self.speed is None:
                interval = self.interval_ms
            elif self.speed == ROUND_BY_ROUND and not self._due_now(self.position):
                self.timer.stop()  # the next round waits for Step
                self.changed.emit()
                return
            else:
                interval = round(self._delays[self.position] / max(self.speed, 1e-9) * 1000)
            if not self.timer.isActive() or self.timer.interval() != interval:
                self.timer.start(interval)
        else:
            self.timer.stop()  # all shown; the reader wakes us when more comes
            self._check_end()
        self.changed.emit()

    def _check_end(self) -> None:
        if self.at_end and not self._done:
            self._done = True
            self.progressed.emit(f"Replayed {self.name}: {self.count} events")
            self.finished.emit()

    def _live_batch(self) -> int:
        """How many events this tick hands over: none while the last batch is undrawn; fewer
        after a tick that came late (a long frame), more again after one on time."""
        now = time.perf_counter()
        late = now - (self._last_tick or now) - LIVE_TICK_MS / 1000
        self._last_tick = now
        busy = getattr(self.view, "busy", None)
        if busy() if busy is not None else getattr(self.view, "queue", None):
            return 0  # the view's frames have not drawn what it has: don't pile up
        if late > FRAME_BUDGET_S:
            self._batch = max(MIN_BATCH, self._batch // 2)
        elif late < FRAME_BUDGET_S / 2:
            self._batch = min(LIVE_BATCH, self._batch + max(1, self._batch // 4))
        return self._batch

    def _fail(self, message: str) -> None:
        self._fail_with(RunFailed(f"Could not read {self.name}: {message}", "recording"))

    def _fail_with(self, failure: RunFailed) -> None:
        """One banner through the view's failure display; what was shown stays."""
        if self._job is not None:
            self._job.stop()
            self._job = None
        self.timer.stop()
        del self.events[self.position:], self._delays[self.position:]
        self._round_ends = [e for e in self._round_ends if e <= self.position]
        self._ended = self._done = True  # what was shown is the whole replay
        self.view.apply(failure)
        self.view.flush()
        self.progressed.emit(failure.message)
        self.failed.emit(failure)
        self.finished.emit()



__all__ = ["ROUND_BY_ROUND", "SPEEDS", "STDIN", "Replayer", "open_pipe_reader", "recorded_delays",
           "schedule", "speed_text"]

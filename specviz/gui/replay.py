"""Replays: a recording as an event source beside the decoding worker, feeding the same RunView.

A recording is read and checked (:mod:`specviz.core.recording`) on a reader thread, never
on the GUI thread, so a 50 MB file does not freeze the window. The source may be a file, a
file still being written (followed until its run ends), or a pipe such as standard input
(``ssh gpu-box specviz-cli --json … | specviz --replay -``): events show as they arrive.

The reader hands batches over a bounded queue (it waits when the window is behind, so memory
stays flat) and wakes the GUI thread with a queued signal. On the GUI thread a timer paces
the events: one per ``interval_ms`` for a file, as a live run would look; as fast as they
come (a few dozen per frame at most) for a pipe, a followed file that caught up, or
``interval_ms=0``.

A replay never mixes with a live run. Opening one stops the live run, and the live events
reach the view only through :attr:`Replayer.live_yielded`, which drops those of a job started
before the replay (still queued when it opened); a live run that starts stops the replay.
"""

from __future__ import annotations

import copy
import os
import queue
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import IO, Any

from PySide6.QtCore import QObject, Qt, QTimer, Signal

from specviz.core.events import Event, RunFailed, RunStarted
from specviz.core.recording import RecordingError, RecordingReader

STDIN = "-"
CHUNK = 256 * 1024  # bytes per read: a few hundred rounds
LIVE_TICK_MS = 10  # how often events that arrived are handed over
# Events handed to the view per tick at most. A frame's fixed cost (painting the plots)
# dominates at small batches and the stream's text at large ones, so the batch adapts: it
# halves after a tick that came late (a frame overran) and grows while ticks are on time.
LIVE_BATCH = 256
MIN_BATCH = 8
FRAME_BUDGET_S = 0.025  # a tick later than this: the frame before it was long, hand less
FOLLOW_POLL_S = 0.05  # how often a followed file is checked for new lines
PENDING_MAX = 512  # events taken from the reader ahead of the view; then the reader waits

# What the reader thread puts on the queue.
_EVENTS, _WAITING, _CAUGHT_UP, _END, _ERROR = "events", "waiting", "caught_up", "end", "error"


class _Wake(QObject):
    """Lives on the GUI thread; the reader thread emits ``ready`` (queued) when it put something."""

    ready = Signal()


class _ReadJob:
    """One reading of one source, on its own daemon thread; ``stop`` abandons it.

    A daemon thread, not a QThread: a read from a pipe blocks until data comes, and an
    abandoned reader must neither hold up quitting nor outlive a QThread object.
    """

    def __init__(self, stream: IO[bytes] | None, path: str | None, name: str, live: bool,
                 follow_s: float, wake: _Wake) -> None:
        self.stream, self.path, self.name = stream, path, name
        self.live, self.follow_s = live, follow_s
        # Batches read ahead (~2 MB of lines); the reader waits when the window is behind.
        self.items: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=8)
        self.stopped = threading.Event()
        self.wake = wake  # referenced here, so it lives as long as the thread
        self._pending = threading.Event()  # a wake-up is on its way; don't send another
        self.thread = threading.Thread(target=self._run, name=f"specviz-replay {name}",
                                       daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopped.set()

    def take(self, limit: int) -> list[tuple[str, Any]]:
        """Up to ``limit`` items the reader has put (GUI thread)."""
        self._pending.clear()
        out = []
        while len(out) < limit:
            try:
                out.append(self.items.get_nowait())
            except queue.Empty:
                break
        return out

    # -- the reader thread --------------------------------------------------------------

    def _put(self, kind: str, value: Any = None) -> bool:
        """Queue an item, waiting while the GUI is behind; False once stopped."""
        while not self.stopped.is_set():
            try:
                self.items.put((kind, value), timeout=0.1)
            except queue.Full:
                continue
            if not self._pending.is_set():
                self._pending.set()
                self.wake.ready.emit()
            return True
        return False

    def _run(self) -> None:
        reader = RecordingReader()
        try:
            # Unbuffered: a raw read holds no lock of the stream's (see _pump).
            stream = self.stream if self.stream is not None else \
                open(self.path or "", "rb", buffering=0)  # noqa: SIM115
        except OSError as exc:
            self._put(_ERROR, f"cannot open it: {exc.strerror or exc}")
            return
        try:
            self._pump(stream, reader)
        except RecordingError as exc:
            self._put(_ERROR, str(exc))
        except (OSError, ValueError) as exc:  # a read error, a stream closed under us
            self._put(_ERROR, f"reading failed: {exc}")
        except Exception as exc:  # noqa: BLE001 - a bug here must still end the replay
            self._put(_ERROR, f"{type(exc).__name__}: {exc}")
        finally:
            if self.stream is None:
                stream.close()

    def _pump(self, stream: IO[bytes], reader: RecordingReader) -> None:
        # A pipe: whatever has arrived. Through its file descriptor when it has one: a
        # daemon thread blocked inside a BufferedReader (sys.stdin.buffer) holds its lock,
        # and the interpreter aborts at exit ("could not acquire lock … at interpreter
        # shutdown", SIGABRT) when it flushes the standard streams.
        fd = _fileno(stream)
        if fd is not None:
            def read(n: int) -> bytes:
                return os.read(fd, n)
        else:
            read = getattr(stream, "read1", stream.read)
        idle_since: float | None = None
        caught_up = self.live
        while not self.stopped.is_set():
            chunk = read(CHUNK)
            if chunk:
                idle_since = None
                events = reader.feed(chunk)
                if events and not self._put(_EVENTS, (events, time.monotonic())):
                    return
                continue
            # End of what there is. A pipe has ended; a file may still be written to.
            if self.path is not None and self.follow_s > 0 and not _ends_here(reader):
                now = time.monotonic()
                if idle_since is None:
                    idle_since = now
                    if not caught_up:
                        caught_up = True
                        self._put(_CAUGHT_UP)
                    self._put(_WAITING)
                if now - idle_since < self.follow_s:
                    self.stopped.wait(FOLLOW_POLL_S)
                    continue
            events = reader.close()
            if events:
                self._put(_EVENTS, (events, time.monotonic()))
            self._put(_END, reader.line)
            return


def _fileno(stream: IO[bytes]) -> int | None:
    """The stream's file descriptor, if it has one (the stream must not have been read yet:
    what a buffered stream holds already would be skipped)."""
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):  # BytesIO and the like
        return None


def _ends_here(reader: RecordingReader) -> bool:
    """Whether the input may end here: no run open, counting a last line with no newline."""
    if reader.complete:
        return True
    probe = copy.deepcopy(reader)
    try:
        probe.close()
    except RecordingError:
        return False
    return True


class Replayer(QObject):
    """Feeds a RunView from a recording read on a thread; keeps a live run's stale events out."""

    finished = Signal()  # the replay ended: all shown, an error, or stopped
    failed = Signal(object)  # RunFailed: the recording is bad (the view shows it already)
    progressed = Signal(str)  # a status line: what is being replayed, how far
    live_yielded = Signal(object)  # the controller's events that belong on screen

    def __init__(self, view: Any, controller: Any = None, interval_ms: int = 60,
                 follow_s: float = 30.0) -> None:
        super().__init__(view)
        self.view = view
        self.interval_ms = interval_ms
        self.follow_s = follow_s  # a file that ends mid-run is watched this long for more
        self.pending: deque[Event] = deque()
        self.name = ""
        self.count = 0
        self._job: _ReadJob | None = None
        self._live = False  # hand events over as they come (not one per interval)
        self._batch = MIN_BATCH  # events per tick when live; adapts to the frames' cost
        self._last_tick: float | None = None
        self._ended = False
        self._wake = _Wake()
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
        self._start_job(_ReadJob(None, path, self.name, self._live, self.follow_s, self._wake))

    def open_stream(self, stream: IO[bytes], name: str) -> None:
        """Replay a pipe or any binary stream, showing events as they arrive."""
        self._begin(name, live=True)
        self._start_job(_ReadJob(stream, None, name, True, 0.0, self._wake))

    def start(self, events: list[Event]) -> None:
        """Replay events already in memory (checked by whoever built them)."""
        self._begin("events", live=self.interval_ms == 0)
        self.pending.extend(events)
        self._ended = True
        self.timer.start()

    def stop(self) -> None:
        """Stop reading and showing; what is on screen stays."""
        was_active = self.active
        if self._job is not None:
            self._job.stop()
            self._job = None
        self.timer.stop()
        self.pending.clear()
        if was_active:
            self.progressed.emit(f"Stopped replaying {self.name} after {self.count} events")
            self.finished.emit()

    @property
    def active(self) -> bool:
        return self._job is not None or bool(self.pending) or self.timer.isActive()

    # -- the live run --------------------------------------------------------------------

    def _on_job_started(self, job_id: int) -> None:
        self._worker_job = job_id
        self._last_job = max(self._last_job, job_id)
        if job_id > self._stale_upto and self.active:
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
        self.name, self.count = name, 0
        self._live, self._ended = live, False
        self.timer.setInterval(LIVE_TICK_MS if live else self.interval_ms)
        self.progressed.emit(f"Replaying {name}…")

    def _start_job(self, job: _ReadJob) -> None:
        self._job = job
        job.start()

    def _on_ready(self) -> None:
        """The reader put something: take it, and show the first event now if idle."""
        self._refill()
        if not self.timer.isActive() and (self.pending or self._ended):
            self._last_tick = None  # it was idle, not late
            self._on_timeout()  # the first event shows now, not one interval later
            if self.active:
                self.timer.start()

    def _refill(self) -> None:
        """Take the reader's batches while few events wait (the reader waits meanwhile)."""
        while self._job is not None and len(self.pending) < PENDING_MAX:
            items = self._job.take(1)
            if not items:
                return
            kind, value = items[0]
            if kind == _EVENTS:
                events, _read_at = value
                self.pending.extend(events)
            elif kind == _CAUGHT_UP:  # a followed file: from now on, as the lines come
                self._live = True
                self.timer.setInterval(LIVE_TICK_MS)
            elif kind == _WAITING:
                self.progressed.emit(f"Following {self.name}: waiting for the run's next "
                                     "lines (Stop ends it)")
            elif kind == _END:
                self._job, self._ended = None, True
            elif kind == _ERROR:
                self._job, self._ended = None, True
                self.pending.append(RunFailed(f"Could not read {self.name}: {value}",
                                              "recording"))

    def _on_timeout(self) -> None:
        self._refill()
        n = self._live_batch() if self._live else 1
        while n and self.pending:
            event = self.pending.popleft()
            n -= 1
            if isinstance(event, RunFailed) and event.kind == "recording":
                self._fail_with(event)
                return
            self.view.apply(event)
            self.count += 1
            if isinstance(event, RunStarted):
                self.progressed.emit(f"Replaying {self.name}")
        if self.pending:
            return
        if self._ended:
            self.timer.stop()
            self._ended = False
            self.progressed.emit(f"Replayed {self.name}: {self.count} events")
            self.finished.emit()
        elif self._job is not None:
            self.timer.stop()  # the reader wakes us when more comes

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
        self.pending.clear()
        self._ended = False
        self.view.apply(failure)
        self.view.flush()
        self.progressed.emit(failure.message)
        self.failed.emit(failure)
        self.finished.emit()


def open_pipe_reader(fd: int) -> IO[bytes]:
    """A binary stream on a file descriptor (tests, and callers with their own pipe)."""
    return os.fdopen(fd, "rb", buffering=0)


__all__ = ["STDIN", "Replayer", "open_pipe_reader"]

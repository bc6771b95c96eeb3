"""Reading a recording for a replay: a file, a file still being written, or a pipe, parsed and
checked (:mod:`specviz.core.recording`) on a daemon thread of its own, never the GUI thread.

The reader hands batches to the GUI thread over a bounded queue (it waits when the window is
behind) and wakes it with a queued signal; :mod:`specviz.gui.replay.player` paces what it
hands over. While any reader parses, the interpreter's thread switch interval is shortened
(``reading``): the one process-wide setting a replay changes, given back after the last reader.
"""

from __future__ import annotations

import copy
import os
import queue
import sys
import threading
import time
from typing import IO, Any

from PySide6.QtCore import QObject, Signal

from specviz.core.events import Event
from specviz.core.recording import RecordingError, RecordingReader

STDIN = "-"
CHUNK = 256 * 1024  # bytes per read: a few hundred rounds
FOLLOW_POLL_S = 0.05  # how often a followed file is checked for new lines
# The reader parses in slices of at most READ_SLICE_S and then rests, so that it holds the
# GIL at most READ_DUTY of the time. Reading flat out, every Qt call of the GUI thread that
# lets go of the GIL waited to get it back: a 50 MB replay at full speed stalled p99 46 ms
# while its file was being read and 15 ms after (benchmarks/ui_latency.py). At 0.4 the same
# replay stalls p99 26 ms and plays 730 events/s (0.3: 17 ms, 620-720/s; 0.5: 24-26 ms,
# 1,035/s): the reader, not the drawing, then sets a full-speed replay's pace.
READ_SLICE_S = 0.002
READ_DUTY = 0.4
PIECE = 16 * 1024  # bytes parsed between two looks at the clock (a few rounds)
PENDING_MAX = 512  # events taken from the reader ahead of the view; then the reader waits

# While a reader thread parses, the interpreter switches threads this often (seconds) instead
# of every 5 ms. Each Qt call that lets go of the GIL waits, to get it back, until the busy
# reader is made to drop it: at 5 ms a frame of a few dozen such calls stalled 50-600 ms (a
# 50 MB replay at full speed: stalls p99 80 ms); at 0.5 ms less (p99 46 ms while reading),
# and with the reader resting between slices (READ_DUTY, above) little.
READ_SWITCH_S = 0.0005
_switch_lock = threading.Lock()
_switch_users = 0
_switch_saved = 0.005


def reading(on: bool) -> None:
    """A reader thread starts (True) or ends (False): the short switch interval holds while
    any reads; the interpreter's own comes back after the last."""
    global _switch_users, _switch_saved
    with _switch_lock:
        if on:
            if _switch_users == 0:
                _switch_saved = sys.getswitchinterval()
                sys.setswitchinterval(min(_switch_saved, READ_SWITCH_S))
            _switch_users += 1
        else:
            _switch_users -= 1
            if _switch_users == 0:
                sys.setswitchinterval(_switch_saved)


# What the reader thread puts on the queue.
EVENTS, WAITING, CAUGHT_UP, END, ERROR = "events", "waiting", "caught_up", "end", "error"


class Wake(QObject):
    """Lives on the GUI thread; the reader thread emits ``ready`` (queued) when it put something."""

    ready = Signal()


class ReadJob:
    """One reading of one source, on its own daemon thread; ``stop`` abandons it.

    A daemon thread, not a QThread: a read from a pipe blocks until data comes, and an
    abandoned reader must neither hold up quitting nor outlive a QThread object.
    """

    def __init__(self, stream: IO[bytes] | None, path: str | None, name: str, live: bool,
                 follow_s: float, wake: Wake) -> None:
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
        reading(True)
        try:
            self._read()
        finally:
            reading(False)

    def _read(self) -> None:
        reader = RecordingReader()
        try:
            # Unbuffered: a raw read holds no lock of the stream's (see _pump).
            stream = self.stream if self.stream is not None else \
                open(self.path or "", "rb", buffering=0)  # noqa: SIM115
        except OSError as exc:
            self._put(ERROR, f"cannot open it: {exc.strerror or exc}")
            return
        try:
            self._pump(stream, reader)
        except RecordingError as exc:  # the good events before the bad line show first
            if exc.events and not self._put(EVENTS, (exc.events, time.monotonic())):
                return
            self._put(ERROR, exc)
        except (OSError, ValueError) as exc:  # a read error, a stream closed under us
            self._put(ERROR, f"reading failed: {exc}")
        except Exception as exc:  # noqa: BLE001 - a bug here must still end the replay
            self._put(ERROR, f"{type(exc).__name__}: {exc}")
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
                events = self._parse(reader, chunk)
                if events and not self._put(EVENTS, (events, time.monotonic())):
                    return
                continue
            # End of what there is. A pipe has ended; a file may still be written to: it
            # is followed until it has been still for follow_s (one cut short by a crash
            # long ago ends at once, with what it holds and where it stops).
            if self.path is not None and self.follow_s > 0 and not _ends_here(reader) \
                    and _changed_within(self.path, self.follow_s):
                now = time.monotonic()
                if idle_since is None:
                    idle_since = now
                    if not caught_up:
                        caught_up = True
                        self._put(CAUGHT_UP)
                    self._put(WAITING)
                if now - idle_since < self.follow_s:
                    self.stopped.wait(FOLLOW_POLL_S)
                    continue
            events = reader.close()
            if events:
                self._put(EVENTS, (events, time.monotonic()))
            self._put(END, reader.line)
            return

    def _parse(self, reader: RecordingReader, chunk: bytes) -> list[Event]:
        """The events in ``chunk``, parsed a slice at a time with rests between (READ_DUTY)."""
        events: list[Event] = []
        start = time.perf_counter()
        for at in range(0, len(chunk), PIECE):
            try:
                events.extend(reader.feed(chunk[at:at + PIECE]))
            except RecordingError as exc:  # this chunk's good events go with the error
                exc.events = events + exc.events
                raise
            busy = time.perf_counter() - start
            if busy >= READ_SLICE_S:
                if self.stopped.wait(busy * (1 - READ_DUTY) / READ_DUTY):
                    break
                start = time.perf_counter()
        return events


def _fileno(stream: IO[bytes]) -> int | None:
    """The stream's file descriptor, if it has one (the stream must not have been read yet:
    what a buffered stream holds already would be skipped)."""
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):  # BytesIO and the like
        return None


def _changed_within(path: str, seconds: float) -> bool:
    """Whether the file was written to in the last ``seconds`` (it may still be growing)."""
    try:
        return time.time() - os.stat(path).st_mtime < seconds
    except OSError:
        return False


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



def open_pipe_reader(fd: int) -> IO[bytes]:
    """A binary stream on a file descriptor (tests, and callers with their own pipe)."""
    return os.fdopen(fd, "rb", buffering=0)


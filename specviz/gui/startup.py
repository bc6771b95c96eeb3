"""Process-level plumbing for the app: Ctrl+C, the first paint, start-up timing, a hard exit."""

from __future__ import annotations

import gc
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable

from PySide6.QtCore import QEvent, QObject, QSocketNotifier, QTimer
from PySide6.QtGui import QFont
from PySide6.QtWidgets import QApplication, QWidget

from specviz.gui.look.style import UI_POINT_SIZE

# SPECVIZ_STARTUP_TRACE=1 prints "specviz-startup <what> <unix time>" lines on stdout when the
# window first paints ("shown") and when the pair is ready ("ready") or failed ("failed");
# =quit also quits after that (scripts/startup_time.py times launches with it).
TRACE_ENV = "SPECVIZ_STARTUP_TRACE"


def trace_mode() -> str:
    return os.environ.get(TRACE_ENV, "")


def trace(what: str, detail: str = "") -> None:
    if trace_mode():
        print(f"specviz-startup {what} {time.time():.3f}" + (f" {detail}" if detail else ""),
              flush=True)


class GuiThreadCollector(QObject):
    """Python's cyclic garbage collector, run only on the GUI thread between events.

    An automatic collection starts wherever an allocation crosses the threshold: inside a
    paint (CI once segfaulted in ``AxisItem.paint`` while a collection freed Qt wrappers under
    it), or on the decoder or loader thread, which must never destroy Qt objects. So automatic
    collection is off and a timer collects from the event loop, where no C++ frame holds a
    pointer to a Python-owned item (pyqtgraph's ``util.garbage_collector`` does the same).
    Reference counting still frees almost everything at once; only cycles wait for the timer.
    """

    # Often: a collection of the young generation walks what was allocated since the last
    # one, and a full-speed replay allocates fast (at 500 ms: 36-71 ms pauses; at 100 ms:
    # 5-18 ms, ui_latency.py --recording on a busy machine).
    INTERVAL_MS = 100
    # A full collection walks every object not frozen (a replay's events: 0.3 s) and comes
    # after threshold[2] collections of generation 1: that many times more of them, so full
    # ones are no more frequent in time than with a timer every 500 ms.
    FULL_SCALE = 5

    def __init__(self, app: QApplication) -> None:
        super().__init__(app)
        young, middle, full = gc.get_threshold()
        self.threshold = (young, middle, full * self.FULL_SCALE)
        gc.disable()
        self.timer = QTimer(self)
        self.timer.timeout.connect(self.collect)
        self.timer.start(self.INTERVAL_MS)

    def collect(self) -> None:
        collect_due(self.threshold)


def collect_due(threshold: tuple[int, int, int]) -> None:
    """What an automatic collection would do now: each generation whose count passed its
    threshold, youngest first (a collection of generation n also collects the younger ones)."""
    counts = gc.get_count()
    due = -1
    for generation in range(3):
        if counts[generation] <= threshold[generation]:
            break
        due = generation
    if due >= 0:
        gc.collect(due)


def install_gui_collector(app: QApplication) -> GuiThreadCollector:
    """One collector per application (``make_app`` may be called more than once)."""
    found = app.findChild(GuiThreadCollector)
    return found if isinstance(found, GuiThreadCollector) else GuiThreadCollector(app)


class FirstPaint(QObject):
    """Calls back once, just after the window's first paint (it is on screen then)."""

    def __init__(self, window: QWidget, callback: Callable[[], None]) -> None:
        super().__init__(window)
        self.callback: Callable[[], None] | None = callback
        window.installEventFilter(self)

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt override
        if event.type() == QEvent.Type.Paint and self.callback is not None:
            callback, self.callback = self.callback, None
            obj.removeEventFilter(self)
            QTimer.singleShot(0, callback)  # after this paint has reached the screen
        return False


class SignalBridge(QObject):
    """Runs Python's handlers for SIGINT / SIGTERM while Qt's event loop has the thread.

    Python runs a signal handler only between bytecodes of the main thread, and ``app.exec()``
    keeps that thread in C++; Ctrl+C would wait for the next Python slot (and then raise
    KeyboardInterrupt inside it, a traceback while the app keeps running). The C-level handler
    writes the signal number to a socket (``signal.set_wakeup_fd``); a QSocketNotifier on the
    other end wakes the event loop, whose Python slot lets the interpreter run our handler.
    """

    def __init__(self, app: QApplication, on_signal: Callable[[int], None]) -> None:
        super().__init__(app)
        self.on_signal = on_signal
        self._read, self._write = socket.socketpair()
        for sock in (self._read, self._write):
            sock.setblocking(False)
        self._old_fd = signal.set_wakeup_fd(self._write.fileno(), warn_on_full_buffer=False)
        self.notifier = QSocketNotifier(self._read.fileno(), QSocketNotifier.Type.Read, self)
        self.notifier.activated.connect(self._drain)
        self._old = {s: signal.signal(s, self._handle) for s in (signal.SIGINT, signal.SIGTERM)}

    def _handle(self, signum: int, _frame: object) -> None:
        self.on_signal(signum)

    def _drain(self, *_args: object) -> None:
        try:
            while self._read.recv(64):
                pass
        except OSError:  # BlockingIOError: nothing more to read
            pass

    def restore(self) -> None:
        """Put back the handlers that were there before (tests build several apps)."""
        for s, old in self._old.items():
            signal.signal(s, old)
        signal.set_wakeup_fd(self._old_fd)
        self.notifier.setEnabled(False)
        self._read.close()
        self._write.close()


def hard_exit(code: int) -> None:
    """End the process now, leaving behind threads that cannot be stopped.

    Called only after the settings are saved and synced, when a load is still inside
    ``from_pretrained`` (or a long round still runs): a normal interpreter exit would wait
    for it (huggingface_hub's download pools are joined at exit) or tear Qt and torch down
    under a running thread ("QThread: Destroyed while thread is still running" aborts).
    Nothing of the user's is lost: the load's result was going to be discarded anyway.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    logging.shutdown()
    os._exit(code)


def make_app(argv: list[str] | None = None) -> QApplication:
    """The QApplication, with fonts large enough for a projector."""
    app = QApplication.instance()
    if not isinstance(app, QApplication):
        app = QApplication([sys.argv[0], *(argv or [])])
    app.setOrganizationName("specviz")
    app.setApplicationName("specviz")
    font = QFont(app.font())
    font.setPointSize(UI_POINT_SIZE)
    app.setFont(font)
    install_gui_collector(app)
    return app

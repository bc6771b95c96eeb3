"""Made for the stage: the race, the step measured at load, and File → Export: one component,
:class:`Stage`, that a MainWindow creates (``self.stage = Stage(self)``) and listens to
(``stage.failed``: a problem for the window to show), so the window's own code stays small.

- The step the worker timed after a pair loaded (``DecodeController.step_measured``) goes
  to the run view as the reference of its speed figures.
- Run → Race (F7), or Run (F5) with Race ticked in the controls: the speculative run, then
  the target alone, as two jobs of the same controller, one after the other; a race window
  plays them together when both are measured. Stop, or another run, ends the race.
- A race recording (the app's, or ``specviz-cli --race --json``) opened with File → Open or
  ``specviz --replay`` plays in the race window (:func:`open_if_race`).
- File → Open race recording…, File → Export ▸ (plots as PNG / SVG, transcript as HTML, the
  run or the race as an animated GIF at 1920 × 1080).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from PySide6.QtCore import QEvent, QObject, QPoint, Qt, Signal
from PySide6.QtGui import QAction, QCloseEvent, QKeySequence
from PySide6.QtWidgets import (
    QFileDialog,
    QLabel,
    QMainWindow,
    QMenu,
    QMenuBar,
    QProgressBar,
    QStatusBar,
    QToolButton,
    QWidget,
)

from specviz.core.errors import InputError
from specviz.core.events import Event, RunFailed, RunFinished, Settings, to_json
from specviz.core.race import as_race
from specviz.core.run import Request, check
from specviz.gui.look.themes import Theme, apply_palette
from specviz.gui.stage.race_view import RaceView

if TYPE_CHECKING:  # types only: these never import this module, and app imports them anyway
    from specviz.gui.replay.player import Replayer
    from specviz.gui.views.run_view import RunView
    from specviz.gui.windows.controls import ControlsPanel
    from specviz.gui.worker import DecodeController, PairSpec

RACE_KEY = "F7"


class StageHost(Protocol):
    """What the race, the exports and the measured step use of the main window (MainWindow)."""

    controller: DecodeController
    run_view: RunView
    replayer: Replayer
    controls: ControlsPanel
    status_label: QLabel
    actions_by_name: dict[str, QAction]

    def pair_spec(self) -> PairSpec: ...
    def sampling(self) -> Settings: ...
    def save_settings(self) -> None: ...
    def menuBar(self) -> QMenuBar: ...  # noqa: N802 - Qt's name
    def statusBar(self) -> QStatusBar: ...  # noqa: N802 - Qt's name
    def addAction(self, action: QAction) -> None: ...  # noqa: N802 - Qt's name


class RaceWindow(QMainWindow):
    """A window of its own for the race (drag it to the projector; F11 full screen, Esc back)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        # A window of its own, owned by the main window: it goes when that one goes, and
        # never keeps the application running by itself.
        self.setWindowFlag(Qt.WindowType.Window)
        self.setWindowTitle("specviz — race: speculative vs the target alone")
        self.view = RaceView()
        self.setCentralWidget(self.view)
        self.resize(1600, 950)
        for keys, slot in ((["F11"], self.toggle_full_screen), (["Esc"], self.showNormal),
                           (["Space"], self.view.toggle_play), (["Ctrl+S"], self.save),
                           (["Home"], self.view.restart)):
            action = QAction(self)
            action.setShortcuts([QKeySequence(k) for k in keys])
            action.triggered.connect(slot)
            self.addAction(action)

    def toggle_full_screen(self) -> None:
        self.showNormal() if self.isFullScreen() else self.showFullScreen()

    def save(self, path: str | None = None) -> None:
        """Save the race recording (both runs, speculative first)."""
        if not self.view.events:
            return
        if not path:
            path, _ = QFileDialog.getSaveFileName(self, "Save race recording", "race.jsonl",
                                                  "Recordings (*.jsonl)")
        if path:
            write_file(self, path, "".join(to_json(e) + "\n" for e in self.view.events))

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 - Qt override
        self.view.pause()
        super().closeEvent(event)


class RaceRunner(QObject):
    """Runs a race through the window's controller: speculative job, then target-alone job."""

    failed = Signal(object)  # RunFailed: a race that cannot start (the window shows it)

    def __init__(self, window: StageHost, race_window: RaceWindow) -> None:
        super().__init__(window)  # type: ignore[arg-type] - a MainWindow: a QObject
        self.window = window
        self.race_window = race_window
        self.job_id: int | None = None
        self.phase = ""  # "speculative", "baseline" or "" (no race running)
        self.request: tuple[Any, Any, str, bool] | None = None
        self._finished_run = False
        self._arriving: int | None = None  # the job whose events arrive now
        c = window.controller
        c.started.connect(self._on_job_started)
        c.yielded.connect(self._on_yielded)
        c.failed.connect(self._on_failed)
        c.finished.connect(self._on_job_finished)

    def start(self) -> None:
        """F7, or Run (F5) with Race ticked: the same checks as a run, then the race."""
        w = self.window
        spec, settings = w.pair_spec(), w.sampling()
        prompt = w.controls.prompt.toPlainText()
        chat = w.controls.chat.isChecked()
        try:  # the checks every run passes (core/run.py), as Run's
            check(Request(prompt, settings, "race", chat),
                  has_draft=spec.draft is not None, has_target=bool(spec.target),
                  allow_empty=False)
        except InputError as exc:
            self.failed.emit(RunFailed(str(exc), exc.kind))
            return
        if settings.seed is None:  # both runs draw from one seed
            from dataclasses import replace

            settings = replace(settings, seed=int.from_bytes(os.urandom(4), "little"))
        # One spec for both runs (a lookup race too): the second never reloads the pair.
        self.request = (spec, settings, prompt, chat)
        w.save_settings()  # as Run does
        w.run_view.user_prompt = prompt
        self.race_window.view.clear()
        self.race_window.show()
        self.race_window.raise_()
        self._hold(True)  # the race window is in front; the main view catches up afterwards
        self._start_phase("speculative")

    def _start_phase(self, phase: str) -> None:
        assert self.request is not None
        spec, settings, prompt, chat = self.request
        self.phase, self._finished_run = phase, False
        w = self.window
        w.replayer.stop()
        job = w.controller.start(spec, settings, prompt, chat=chat,
                                 baseline=phase == "baseline")
        self.job_id = job.job_id

    def _on_job_started(self, job_id: int) -> None:
        self._arriving = job_id

    def _on_yielded(self, event: Event) -> None:
        if self.phase and self._arriving == self.job_id:  # not a run that replaced the race
            self.race_window.view.apply(event)
            # Stopped (Stop, or another run started): the race ends with its first half.
            self._finished_run = isinstance(event, RunFinished) and \
                event.stop_reason != "stopped"

    def _hold(self, on: bool) -> None:
        """The main window's run view draws nothing while the race measures (RunView.hold)."""
        view = self.window.run_view
        view.hold() if on else view.release()

    def _end(self) -> None:
        self.phase = ""
        self._hold(False)

    def _on_failed(self, failure: RunFailed) -> None:
        if self.phase:
            self._end()

    def _on_job_finished(self, job_id: int) -> None:
        if not self.phase or job_id != self.job_id:
            return
        current = self.window.controller.current
        replaced = current is not None and current.job_id != job_id  # a run began meanwhile
        if self.phase == "speculative" and self._finished_run and not replaced:
            self._start_phase("baseline")  # only now: the two never share the cores
        else:
            self._end()


def _ask_path(parent: QWidget, title: str, name: str, filters: str) -> str:
    path, _ = QFileDialog.getSaveFileName(parent, title, name, filters)
    return path


def _say(window: StageHost, message: str) -> None:
    window.status_label.setText(message)


def export_plot(window: StageHost, kind: str, suffix: str) -> str:
    """Ask for a path, then export the shown round's p/q panel ("pq-panel") or the acceptance
    plots ("acceptance") as PNG or SVG (gui/stage/export.py); the path, or "" if none was made."""
    from specviz.gui.stage import export

    name = f"{kind}.{suffix}"
    path = _ask_path(window, f"Export {kind} as {suffix.upper()}", name,
                     f"{suffix.upper()} (*.{suffix})")
    if not path:
        return ""
    problem = export.writable_problem(path)
    if problem:
        window.run_view.show_error(problem, "error")
        _say(window, problem)
        return ""
    if kind == "pq-panel":
        rnd = window.run_view.shown_round()
        if rnd is None:
            _say(window, "Nothing to export yet: run or open a recording first.")
            return ""
        export.export_bars(rnd, path)
    else:
        export.export_acceptance(list(window.run_view.record.events), path)
    _say(window, f"Exported {path} (1920 × 1080, projector type)")
    return path


def plot_menu(window: StageHost, kind: str, parent: QWidget) -> QMenu:
    """The right-click menu of the p/q panels or the acceptance plots."""
    menu = QMenu(parent)
    menu.addAction("Export as PNG…", lambda: export_plot(window, kind, "png"))
    menu.addAction("Export as SVG…", lambda: export_plot(window, kind, "svg"))
    return menu


def popup(menu: QMenu, where: QPoint) -> None:
    """Show ``menu`` at ``where`` until the user picks or leaves (tests replace this)."""
    menu.exec(where)


def install_plot_menus(window: StageHost) -> dict[str, QWidget]:
    """Right-click on the p/q panels or the acceptance plots: Export as PNG… / SVG….

    pyqtgraph's own ViewBox menus are off (setMenuEnabled(False)). A right click on a
    graphics view's viewport reaches the view itself (QAbstractScrollArea.viewportEvent), so
    the menu belongs to the view.
    """
    view = window.run_view
    targets = {"pq-panel": view.bars.graphics, "acceptance": view.acceptance}
    for kind, widget in targets.items():
        widget.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        widget.customContextMenuRequested.connect(
            lambda pos, k=kind, w=widget: popup(plot_menu(window, k, w),
                                                w.viewport().mapToGlobal(pos)))
    return targets


def write_file(window: StageHost | RaceWindow, path: str | Path, text: str) -> bool:
    """Write ``text`` to ``path``; on failure one clear message in the window (the main one,
    or the race window), and False (whatever was on screen stays there: nothing is lost)."""
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        reason = exc.strerror or str(exc)
        name = Path(path).name
        if isinstance(window, RaceWindow):  # its own status bar
            window.statusBar().showMessage(f"Could not write {path}: {reason}. Choose another "
                                           "place.")
        else:  # the file's name first: a long path is capped there
            window.run_view.show_error(f"Could not write {name}: {reason}. Choose another "
                                       f"place. ({path})", "error")
            _say(window, f"Could not write {path}: {reason}.")
        return False
    return True


class ExportProgress(QObject):
    """The one GIF export at a time: its progress and Cancel in the status bar; closing the
    window cancels it (an event filter on the window: its own closeEvent stays as it is)."""

    def __init__(self, window: StageHost) -> None:
        super().__init__(window)  # type: ignore[arg-type] - a MainWindow
        self.window = window
        self.job: Any = None
        self.bar = QProgressBar()
        self.bar.setMaximumWidth(220)
        self.bar.setFormat("GIF %v / %m")
        self.cancel_button = QToolButton()
        self.cancel_button.setText("✕ Cancel export")
        self.cancel_button.setToolTip("Stop the GIF export: nothing is written")
        self.cancel_button.clicked.connect(self.cancel)
        status = window.statusBar()
        status.addWidget(self.bar)
        status.addWidget(self.cancel_button)
        self.bar.hide()
        self.cancel_button.hide()
        window.installEventFilter(self)

    @property
    def running(self) -> bool:
        return self.job is not None and self.job.running

    def start(self, events: list[Event], path: str, reference: Any = None) -> bool:
        """Begin exporting ``events`` as a GIF at ``path`` (False: one already runs, or the
        path cannot be written, said in the window)."""
        from specviz.gui.stage.export import PROJECTOR, AnimationJob

        if self.running:
            _say(self.window, "A GIF export is running: wait for it, or cancel it first.")
            return False
        if self.job is not None:
            self.job.deleteLater()  # the last export's (ended) job: one at a time, kept none
        job = AnimationJob(events, path, PROJECTOR, reference=reference, parent=self)
        job.progressed.connect(self._on_progressed)
        job.finished.connect(self._on_finished)
        job.failed.connect(self._on_failed)
        job.cancelled.connect(self._on_cancelled)
        self.job = job
        if not job.start():
            return False
        self.bar.setRange(0, job.total)
        self.bar.setValue(0)
        self.bar.show()
        self.cancel_button.show()
        _say(self.window, f"Exporting {Path(path).name}: {job.total} frames, the window "
                          "stays yours (Cancel in the status bar)")
        return True

    def cancel(self) -> None:
        if self.job is not None:
            self.job.cancel()

    def _done(self) -> None:
        self.bar.hide()
        self.cancel_button.hide()

    def _on_progressed(self, done: int, total: int) -> None:
        self.bar.setValue(done)

    def _on_finished(self, path: str, n: int) -> None:
        self._done()
        w, h = self.job.size
        _say(self.window, f"Exported {path}: {n} frames at {w} × {h}")

    def _on_failed(self, message: str) -> None:
        self._done()
        self.window.run_view.show_error(message, "error")
        _say(self.window, f"Export failed: {message}")

    def _on_cancelled(self) -> None:
        self._done()
        _say(self.window, "GIF export cancelled: nothing written.")

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt override
        if watched is self.window and event.type() == QEvent.Type.Close:
            self.cancel()  # closing the window ends the export: quitting stays quick
        return False


def build_export_menu(window: StageHost, race_window: RaceWindow,
                      progress: ExportProgress) -> QMenu:
    """File → Export: the shown round's p/q panel, the acceptance plots, the transcript, GIFs
    (one GIF at a time, through ``progress``)."""
    from specviz.gui.stage import export

    menu = QMenu("&Export", window)

    def events() -> list[Event]:
        return list(window.run_view.record.events)

    def say(message: str) -> None:
        _say(window, message)

    def plot(kind: str, suffix: str) -> None:
        export_plot(window, kind, suffix)

    def transcript() -> None:
        path = _ask_path(window, "Export the transcript", "transcript.html", "HTML (*.html)")
        if path and write_file(window, path, export.transcript_html(events())):
            say(f"Exported {path}")

    def animation(race: bool) -> None:
        source = race_window.view.events if race else events()
        if not source:
            say("Nothing to animate yet.")
            return
        path = _ask_path(window, "Export an animation", "race.gif" if race else "run.gif",
                         "GIF (*.gif)")
        if path:
            progress.start(list(source), path, reference=window.run_view)

    for label, slot in (
            ("p/q panel of the shown round as PNG…", lambda: plot("pq-panel", "png")),
            ("p/q panel of the shown round as SVG…", lambda: plot("pq-panel", "svg")),
            ("Acceptance plots as PNG…", lambda: plot("acceptance", "png")),
            ("Acceptance plots as SVG…", lambda: plot("acceptance", "svg")),
            ("Coloured transcript as HTML…", transcript),
            ("Run as an animated GIF (1920 × 1080)…", lambda: animation(False)),
            ("Race as an animated GIF (1920 × 1080)…", lambda: animation(True))):
        menu.addAction(label, slot)
    menu.addAction("Cancel the GIF export", progress.cancel)
    return menu


RACE_SCAN_BYTES = 16 * 1024 * 1024  # a race recording is far smaller; larger files: the replay
_RUN_STARTED = re.compile(rb'"type"\s*:\s*"run_started"')


def race_recording(path: str) -> list[Event] | None:
    """The events of ``path`` if it is a race recording; None for anything else (a pipe, a big
    or unreadable file, one run, two runs that are no race): the ordinary replay reads those
    on its own thread and says what is wrong with them."""
    from specviz.core.recording import RecordingError, read_recording

    try:
        file = Path(path)
        if path == "-" or not file.is_file() or file.stat().st_size > RACE_SCAN_BYTES:
            return None
        if len(_RUN_STARTED.findall(file.read_bytes())) != 2:  # most recordings: one run
            return None
        events = read_recording(file)
    except (OSError, RecordingError):
        return None
    return events if as_race(events) is not None else None


def open_if_race(race_window: RaceWindow, path: str) -> str:
    """Open/--replay: a race recording plays in the race window, and the line that says so;
    "": not a race."""
    events = race_recording(path)
    if events is None:
        return ""
    _play_race(race_window, events)
    return (f"Replaying the race {Path(path).name} in the race window (Space: pause, "
            "Home: again)")


def _play_race(race_window: RaceWindow, events: list[Event]) -> None:
    race_window.view.load(events)
    race_window.show()
    race_window.raise_()
    race_window.view.play()


def open_race_recording(window: StageHost, race_window: RaceWindow, path: str | None = None,
                        failed: Callable[[RunFailed], None] | None = None) -> bool:
    """Open a race recording in the race window; False (and ``failed`` told) if it is none."""
    if not path:
        path, _ = QFileDialog.getOpenFileName(window, "Open race recording", "",
                                              "Recordings (*.jsonl *.json);;All files (*)")
    if not path:
        return False
    from specviz.core.recording import RecordingError, read_recording

    try:
        events = read_recording(path)
    except RecordingError:  # damaged or cut short: the replay shows what it holds, and why
        window.replayer.open(path)
        return False
    if as_race(events) is None:
        if failed is not None:
            failed(RunFailed(f"{Path(path).name} is not a race (a speculative run, then the "
                             "target alone on the same prompt and settings): open it with "
                             "Open recording.", "input"))
        return False
    _play_race(race_window, events)
    return True


_REPLAY_NOTE = re.compile(r"(Replaying|Replayed) |.* is a race: it plays in the race window")


def clear_replay_note(window: StageHost) -> None:
    """A live run began: a status line still speaking of a replay is stale (it stayed through
    later live runs); say what runs now instead."""
    if _REPLAY_NOTE.match(window.status_label.text()):
        window.status_label.setText("Live run started.")


class Stage(QObject):
    """The race (F7), the step measured at load and File → Export of one MainWindow.

    Created by the window after its menus (it adds Run → Race and File → Export to them);
    a problem to show (a race that cannot start, a file that is no race) comes out of
    :attr:`failed`.
    """

    failed = Signal(object)  # RunFailed

    def __init__(self, window: StageHost) -> None:
        super().__init__(window)  # type: ignore[arg-type] - a MainWindow: a QObject
        self.window = window
        # The step the worker timed at load: the run view's speed reference.
        window.controller.step_measured.connect(window.run_view.set_target_step)
        self.race_window = race_window = RaceWindow(window)  # type: ignore[arg-type]
        self.race_runner = RaceRunner(window, race_window)
        self.race_runner.failed.connect(self.failed)
        window.controller.started.connect(lambda _job: clear_replay_note(window))

        self.race_action = race = QAction("Race: speculative, then the target alone", self)
        race.setShortcut(QKeySequence(RACE_KEY))
        race.setShortcutContext(Qt.ShortcutContext.ApplicationShortcut)
        race.setToolTip(f"Race ({RACE_KEY}): the same prompt, seed and settings, measured one "
                        "after the other, then replayed side by side on one clock")
        race.triggered.connect(self.race_runner.start)
        window.addAction(race)
        window.actions_by_name["race"] = race
        menus = {m.title().replace("&", ""): m for m in
                 (a.menu() for a in window.menuBar().actions()) if m is not None}
        menus["Run"].addAction(race)
        file_menu = menus["File"]
        first = file_menu.actions()[2] if len(file_menu.actions()) > 2 else None
        open_race = QAction("Open race recording (.jsonl)…", self)
        open_race.triggered.connect(lambda: self.open_race_recording())
        file_menu.insertAction(first, open_race)
        self.export_progress = ExportProgress(window)
        file_menu.insertMenu(first, build_export_menu(window, race_window, self.export_progress))
        self.plot_menu_targets = install_plot_menus(window)

    def open_if_race(self, path: str) -> bool:
        """Open/--replay: a race recording plays in the race window; False: not a race."""
        said = open_if_race(self.race_window, path)
        if said:
            self.window.status_label.setText(said)
        return bool(said)

    def open_race_recording(self, path: str | None = None) -> bool:
        """File → Open race recording: False, and :attr:`failed` told, if it is none."""
        return open_race_recording(self.window, self.race_window, path, self.failed.emit)

    def set_theme(self, theme: Theme) -> None:
        """The race window in ``theme`` (the main window's own: gui/look/themes.py)."""
        apply_palette(self.race_window, theme)
        self.race_window.view.set_theme(theme)


__all__ = ["ExportProgress", "RaceRunner", "RaceWindow", "build_export_menu",
           "export_plot", "write_file",
           "install_plot_menus", "Stage", "StageHost", "open_if_race",
           "open_race_recording", "plot_menu", "race_recording"]

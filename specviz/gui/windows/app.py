"""The main window: controls on the left, the run's views in the middle; and ``main``."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from typing import Any

from PySide6.QtCore import QSettings, Qt
from PySide6.QtGui import QAction, QCloseEvent, QKeySequence
from PySide6.QtWidgets import (
    QApplication,
    QDockWidget,
    QFileDialog,
    QLabel,
    QMainWindow,
    QProgressBar,
    QToolButton,
)

from specviz.core.errors import InputError
from specviz.core.events import Event, RunFailed, Settings, to_json

# Not specviz.core.models: that imports torch (~3 s), which the load thread does instead.
from specviz.core.presets import PRESETS
from specviz.core.run import Request, check, needs_draft_model
from specviz.gui.geometry import (
    Presentation,
    available,
    restore_window,
    save_window,
    scrolled,
)
from specviz.gui.look.themes import Theme, Themes, lenience_style, prompt_style, theme_named
from specviz.gui.replay.player import Replayer
from specviz.gui.stage.stage import RaceRunner, RaceWindow, Stage, write_file
from specviz.gui.startup import (
    make_app as make_app,  # re-exported: scripts and tests call it here
)
from specviz.gui.views.glossary import install_help
from specviz.gui.views.labels import ElidedLabel
from specviz.gui.views.run_view import RunView
from specviz.gui.views.zoom import Zoom, add_actions, step_back, step_forward
from specviz.gui.windows import demo
from specviz.gui.windows.controls import CUSTOM, DEVICES, ControlsPanel
from specviz.gui.windows.presets import mark_presets
from specviz.gui.windows.replay_bar import ReplayBar, ReplayToolbar
from specviz.gui.worker import DecodeController, Loader, PairSpec, background_threads

# name -> (shortcuts, tooltip). Application-wide, so they work while typing in the prompt.
SHORTCUTS = {
    "run": (["F5", "Ctrl+Return"], "Run (F5, Ctrl+Enter): start a new run; a running one stops"),
    "stop": (["Shift+F5", "Ctrl+."], "Stop (Shift+F5, Ctrl+.): ends within one round"),
    "pause": (["F6", "Ctrl+P"], "Pause / Resume (F6, Ctrl+P)"),
    "step": (["F10", "Ctrl+Right"], "Step (F10, Ctrl+→): exactly one round"),
}


class MainWindow(QMainWindow):
    """Controls, the run view, and the worker that decodes."""

    def __init__(self, loader: Loader | None = None, settings: QSettings | None = None,
                 draft: str | None = None, target: str | None = None,
                 device: str | None = None, prompt: str | None = None,
                 autoload: bool = True) -> None:
        super().__init__()
        self.setWindowTitle("specviz — speculative decoding, made visible")
        self.store = settings if settings is not None else QSettings("specviz", "specviz")
        self.controller = DecodeController(loader, self)
        self.run_view = RunView()
        # Stale live events stay out; a file plays at its recorded timing; a race file goes to
        # the race window (gui/windows/replay_bar.py: the bar, the keys, the read-only controls).
        self.replayer = Replayer(self.run_view, self.controller, speed=1.0, detect_races=True)
        self.replayer.progressed.connect(lambda text: self.status_label.setText(text))
        self.setCentralWidget(scrolled(self.run_view))  # zoomed in, the views scroll
        self._build_controls()
        self._build_actions()
        self._build_status()
        self._restore(draft, target, device, prompt)

        w = self.controller
        w.progressed.connect(self._on_progressed)
        w.loaded.connect(self._on_loaded)
        self.replayer.live_yielded.connect(self.run_view.apply)
        w.failed.connect(self.report_failure)
        w.load_cancelled.connect(self._on_load_cancelled)
        w.loading_changed.connect(self._on_loading_changed)
        w.availability.connect(self._on_availability)
        self.controller.state_changed.connect(self._on_state_changed)
        self._on_state_changed("idle")
        self._closed = False
        self.clean_exit = True  # False: closing left a load or a round running (main ends it)
        # Play / pause / speed / scrub while a recording is shown (gui/windows/replay_bar.py).
        self.replay_toolbar = ReplayToolbar(self.replayer, self.controls, self.zoom, self)
        self.addToolBar(Qt.ToolBarArea.BottomToolBarArea, self.replay_toolbar)
        self.replay_toolbar.said.connect(self.status_label.setText)
        self.replay_toolbar.corner.connect(self._on_replay_corner)
        # The race (F7), the step measured at load, File → Export (gui/stage/stage.py).
        self.stage = Stage(self)
        self.stage.failed.connect(self.report_failure)
        self.replayer.race_found.connect(self._on_race_found)  # a race read from a pipe
        # View → Theme, remembered; Ctrl+Shift+T (gui/look/themes.py).
        self.themes = Themes(self, self.store)
        self.themes.changed.connect(self._on_theme_changed)
        self.themes.restore()
        install_help(self)  # Help → Glossary (F1): the fates, α, c, v, K (gui/views/glossary.py)
        if autoload:
            self.load_pair()

    # -- building -------------------------------------------------------------------------------

    def _build_controls(self) -> None:
        self.controls = panel = ControlsPanel()  # its widgets: window.controls.k, .prompt, …
        self.controls.load_button.clicked.connect(self.load_pair)
        self.dock = QDockWidget("Controls", self)
        self.dock.setObjectName("controls")
        self.dock.setFeatures(QDockWidget.DockWidgetFeature.DockWidgetMovable
                              | QDockWidget.DockWidgetFeature.DockWidgetClosable)
        self.dock.setWidget(panel)
        self.addDockWidget(Qt.DockWidgetArea.LeftDockWidgetArea, self.dock)
        # The panel's minimum width is what its form needs, so the window can never squeeze
        # it (after a run, F9 or F11); the dock starts there, the user may drag it wider.
        self.resizeDocks([self.dock], [panel.minimumSizeHint().width()],
                         Qt.Orientation.Horizontal)

    def _build_actions(self) -> None:
        self.actions_by_name: dict[str, QAction] = {}
        slots = {"run": self.play_or_run, "stop": self.stop, "pause": self.toggle_pause,
                 "step": self.step}
        buttons = {"run": self.controls.run_button, "stop": self.controls.stop_button,
                   "pause": self.controls.pause_button, "step": self.controls.step_button}
        for name, (keys, tip) in SHORTCUTS.items():
            action = QAction(name.capitalize(), self)
            action.setShortcuts([QKeySequence(k) for k in keys])
            action.setShortcutContext(Qt.ShortcutContext.ApplicationShortcut)
            action.setToolTip(tip)
            action.triggered.connect(slots[name])
            self.addAction(action)
            # The Run button always runs the model; F5 plays a replay that is shown.
            buttons[name].clicked.connect(
                (lambda: self.run()) if name == "run" else action.trigger)
            buttons[name].setToolTip(tip)
            self.actions_by_name[name] = action

        file_menu = self.menuBar().addMenu("&File")
        file_menu.addAction("Open recording (.jsonl)…", QKeySequence("Ctrl+O"),
                            self.open_recording)
        file_menu.addAction("Save recording (.jsonl)…", QKeySequence("Ctrl+S"),
                            self.save_recording)
        file_menu.addSeparator()
        file_menu.addAction("Quit", QKeySequence("Ctrl+Q"), self.close)
        run_menu = self.menuBar().addMenu("&Run")
        for action in self.actions_by_name.values():
            run_menu.addAction(action)
        run_menu.addSeparator()
        self.explore_action = run_menu.addAction(
            "Explore: lineups, K sweeps, where the draft goes wrong…", QKeySequence("Ctrl+E"),
            self.open_explore)
        view_menu = self.menuBar().addMenu("&View")
        toggle = self.dock.toggleViewAction()
        toggle.setText("Show controls")
        toggle.setShortcut(QKeySequence("F9"))
        view_menu.addAction(toggle)
        self.present_action = QAction("Presentation mode (full screen, no controls)", self)
        self.present_action.setCheckable(True)
        self.present_action.setShortcut(QKeySequence("F11"))
        self.present_action.toggled.connect(self._on_present_toggled)
        view_menu.addAction(self.present_action)
        self.addAction(self.present_action)
        self._build_stage_keys(view_menu)

    def _build_stage_keys(self, view_menu) -> None:  # noqa: ANN001
        """Zoom (Ctrl +/-/0, Ctrl+wheel), clicker keys and Esc (gui/views/zoom.py)."""
        self.zoom = Zoom(self.run_view, (self.controls,))  # the controls zoom too
        self.presentation = Presentation(self, self.dock, self.run_view, self.zoom)
        self.stage_actions = add_actions(
            self, self.zoom,
            forward=lambda: step_forward(self.run_view, self.step, self.run_view.stager.forward),
            back=self.back,
            leave=lambda: self.present_action.setChecked(False))
        view_menu.addSeparator()
        for name in ("zoom_in", "zoom_out", "zoom_reset"):
            view_menu.addAction(self.stage_actions[name])
        view_menu.addSeparator()
        self.stage_action = QAction("Staged rounds in step mode (PgDn / PgUp)", self)
        self.stage_action.setCheckable(True)
        self.stage_action.setChecked(True)
        self.stage_action.setToolTip("Step (F10, PgDn) unfolds a round phase by phase: draft, "
                                     "score, each test, discard, residual, the drawn token")
        view_menu.addAction(self.stage_action)
        self.template_action = QAction("Show the chat template", self)
        self.template_action.setCheckable(True)
        self.template_action.setToolTip("Off: the stream shows your prompt, not the system "
                                        "prompt and turn markers the template wraps it in")
        self.template_action.toggled.connect(self.run_view.set_show_template)
        view_menu.addAction(self.template_action)
        self.draft_splits_action = QAction("Show the draft's token starts", self)
        self.draft_splits_action.setCheckable(True)
        self.draft_splits_action.setToolTip("A pair across tokenizers: a tick under the text "
                                            "where the draft's own tokenizer starts a token "
                                            "(the boxes are the target's tokens)")
        self.draft_splits_action.toggled.connect(self.run_view.set_show_draft_splits)
        view_menu.addAction(self.draft_splits_action)
        demo_menu = self.menuBar().addMenu("&Demo prompts")
        self.demo_actions = demo.add_menu(self, demo_menu, self._choose_demo)
        edit_menu = self.menuBar().addMenu("&Edit")
        self.copy_output_action = QAction("Copy output (generated text alone)", self)
        self.copy_output_action.setShortcut(QKeySequence("Ctrl+Shift+C"))
        self.copy_output_action.triggered.connect(self.copy_output)
        edit_menu.addAction(self.copy_output_action)
        self.addAction(self.copy_output_action)

    def set_theme(self, key: str) -> None:
        """Light, dark or high contrast (gui/look/themes.py) on every view, and remember it."""
        self.themes.choose(theme_named(key))

    def _on_theme_changed(self, theme: Theme) -> None:
        """The window's palette is painted (Themes.apply); now every view of it."""
        self.run_view.set_theme(theme)
        # The box Run reads: its frame in the theme's own ink, every theme.
        self.controls.prompt.setStyleSheet(prompt_style(theme))
        self.controls.lenience_note.setStyleSheet(lenience_style(theme))
        self.stage.set_theme(theme)

    # The components' parts the window always showed (tests and scripts read them here).

    @property
    def theme(self) -> Theme:
        return self.themes.current

    @property
    def theme_actions(self) -> dict[str, QAction]:
        return self.themes.actions

    @property
    def replay_bar(self) -> ReplayBar:
        return self.replay_toolbar.bar

    @property
    def race_window(self) -> RaceWindow:
        return self.stage.race_window

    @property
    def race_runner(self) -> RaceRunner:
        return self.stage.race_runner

    def _choose_demo(self, chosen: demo.Demo) -> None:
        """A demo prompt into the prompt box for the next run; the status says so (demo.py)."""
        demo.choose(self, chosen)

    def copy_output(self) -> None:
        """The generated text, without the prompt or rejected drafts, to the clipboard."""
        QApplication.clipboard().setText(self.run_view.output_text())

    def _build_status(self) -> None:
        self.status_label = ElidedLabel("Starting…")  # a long error must not widen the window
        self.busy = QProgressBar()
        self.busy.setRange(0, 0)  # indeterminate: loading has no honest percentage
        self.busy.setMaximumWidth(180)
        self.busy.hide()
        # Cancel gives control back at once; the load itself is abandoned (worker.py says why).
        self.cancel_action = QAction("Cancel loading", self)
        self.cancel_action.setShortcut(QKeySequence("Esc"))
        self.cancel_action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        self.cancel_action.setToolTip("Cancel loading (Esc): the window is yours again at once")
        self.cancel_action.triggered.connect(self.cancel_load)
        self.cancel_action.setEnabled(False)
        self.addAction(self.cancel_action)
        self.cancel_button = QToolButton()
        self.cancel_button.setDefaultAction(self.cancel_action)
        self.cancel_button.setText("✕ Cancel")
        self.cancel_button.hide()
        self.state_label = QLabel()
        f = self.state_label.font()
        f.setBold(True)
        self.state_label.setFont(f)
        self.statusBar().addWidget(self.busy)
        self.statusBar().addWidget(self.cancel_button)
        self.statusBar().addWidget(self.status_label, 1)
        self.statusBar().addPermanentWidget(self.state_label)

    # -- settings --------------------------------------------------------------------------------

    def _restore(self, draft: str | None, target: str | None, device: str | None,
                 prompt: str | None) -> None:
        s = self.store
        self.controls.restore(s)
        self.controls.set_pair(draft, target)
        if device is not None:
            self.controls.device.setCurrentText(device)
        if prompt is not None:
            self.controls.prompt.setPlainText(prompt)
        restore_window(self, s, self.dock)

    def save_settings(self) -> None:
        """Persist every control (QSettings: the platform's usual place) and the window."""
        self.controls.save(self.store)
        save_window(self, self.store, self.presentation)
        self.store.sync()

    def _set_preset(self, name: str) -> None:
        self.controls.set_preset(name)

    # -- what the user asks for ------------------------------------------------------------------

    def pair_spec(self) -> PairSpec:
        self._leave_replay()
        return PairSpec(*self.controls.pair_fields(),
                        cross_tokenizer=self.controls.cross_tokenizer())

    def sampling(self) -> Settings:
        self._leave_replay()
        return self.controls.settings()

    def _leave_replay(self) -> None:
        """Starting something live (a run, a race) leaves a replay: the user's settings back."""
        if self.controls.showing_recording:
            self.replayer.stop()

    def load_pair(self) -> None:
        spec = self.pair_spec()
        if not spec.target:
            self.report_failure(RunFailed("Choose a target model (p) first.", "input"))
            return
        self.busy.show()
        self.status_label.setText(f"Loading {spec.describe()}…")
        self.controller.load(spec)

    def run(self, paused: bool = False, steps: int = 0) -> None:
        """Start a run with the current settings (the worker reloads only if the pair changed)."""
        if self.controls.race.isChecked() and not (paused or steps):
            self.stage.race_runner.start()  # Race ticked: the race F7 starts (gui/stage/stage.py)
            return
        self.replayer.stop()
        spec = self.pair_spec()
        if not spec.target:
            self.report_failure(RunFailed("Choose a target model (p) first.", "input"))
            return
        settings = self.sampling()
        request = Request(self.controls.prompt.toPlainText(), settings,
                          "baseline" if self.controls.baseline.isChecked() else "speculative",
                          self.controls.chat.isChecked())
        if request.speculative and not needs_draft_model(request):
            spec = dataclasses.replace(spec, draft=None)  # lookup: no draft model to load
        try:  # the checks every run passes (core/run.py), before anything loads
            check(request, has_draft=spec.draft is not None or not request.speculative,
                  allow_empty=False)
        except InputError as exc:
            # An empty prompt would generate from the chat template alone.
            self.report_failure(RunFailed(str(exc), exc.kind))
            if "prompt" in str(exc):
                self.controls.prompt.setFocus()
            return
        self.save_settings()
        c = self.controls
        self.run_view.user_prompt = c.prompt.toPlainText()
        self.controller.start(spec, settings, c.prompt.toPlainText(), chat=c.chat.isChecked(),
                              baseline=c.baseline.isChecked(), paused=paused, steps=steps)

    def stop(self) -> None:
        self.replayer.stop()
        self.controller.stop()

    def open_explore(self) -> None:
        """The Explore window (gui/windows/explore.py) on the pair the controls name. It loads
        its own copy on its own thread with its first run: its runs and this window's never share a
        model's state, and each runs one after the other on the cores they share."""
        from specviz.gui.windows.explore import ExploreWindow

        spec = self.pair_spec()
        if not spec.target:
            self.report_failure(RunFailed("Choose a target model (p) first.", "input"))
            return

        def load() -> Any:
            from specviz.core.models import load_pair, locate

            return load_pair(locate(spec.draft) if spec.draft else None, locate(spec.target),
                             spec.device, spec.dtype, cross_tokenizer=spec.cross_tokenizer)

        window = getattr(self, "explore_window", None)
        if window is None or window.pair_spec != spec:
            if window is not None:
                window.close()
            window = self.explore_window = ExploreWindow(load, self.show_recorded_round)
            window.pair_spec = spec
            area = available(self)
            window.resize(min(1280, area.width()), min(800, area.height()))
        window.show()
        window.raise_()
        window.activateWindow()

    def show_recorded_round(self, events: list[Event], index: int, name: str) -> None:
        """Replay one run's ``events`` up to its round ``index`` (0-based) and pause there, in
        front: where the Explore window's Diagnose tab points (a token it rejected)."""
        self.replayer.start(list(events), name)
        self.replayer.pause()
        self.replayer.seek(index + 1)
        if self.isMinimized():
            self.showNormal()
        self.raise_()
        self.activateWindow()

    def play_or_run(self) -> None:
        """F5: play the recording on screen (until its end); otherwise run the model."""
        if self.replayer.loaded and not self.replayer.at_end:
            self.replayer.play()
        else:
            self.run()

    def toggle_pause(self) -> None:
        if self.replayer.loaded:  # F6 pauses / plays the recording on screen
            self.replayer.toggle_pause()
            return
        self.controller.toggle_pause()

    def step(self) -> None:
        """One round; when nothing runs, start a run that holds after its first round. A staged
        round first walks its phases (as PgDn does): F10 never skips what is left of it."""
        if self.run_view.stager.forward():
            return
        if self.replayer.loaded:  # a recording on screen: its next round
            self.replayer.step()
            return
        self.run_view.stage_next = self.stage_action.isChecked()
        if not self.controller.step():
            self.run(paused=True, steps=1)

    def back(self) -> None:
        """PgUp / ←: a phase back in a staged round; a round back (replay or the bars)."""
        if self.run_view.stager.back():
            return
        if self.replayer.loaded:
            self.replayer.step_back()
        else:
            step_back(self.run_view)

    def open_recording(self, path: str | None = None) -> None:
        """Replay a JSON-lines recording through the same views (``-``: standard input).

        Read and checked on a thread; the live run stops and none of its events follow. A
        race recording (a run, then the target alone) plays in the race window instead.
        """
        if not path:
            path, _ = QFileDialog.getOpenFileName(self, "Open recording", "",
                                                  "Recordings (*.jsonl *.json);;All files (*)")
        if not path:
            return
        if self.stage.open_if_race(path):  # a race recording plays in the race window
            return
        self.replayer.open(path)

    def save_recording(self, path: str | None = None) -> None:
        """Write the shown run's events as JSON lines (replayable with Open recording)."""
        if not path:
            path, _ = QFileDialog.getSaveFileName(self, "Save recording", "run.jsonl",
                                                  "Recordings (*.jsonl)")
        if not path:
            return
        lines = [to_json(e) for e in self.run_view.record.events]
        if write_file(self, path, "\n".join(lines) + "\n"):  # else one message, in the window
            self.status_label.setText(f"Saved {len(lines)} events to {path}")

    # -- worker reports ----------------------------------------------------------------------------

    def cancel_load(self) -> None:
        """Give control back now; the abandoned load's result is dropped when it arrives."""
        self.controller.cancel_load()

    def _on_progressed(self, message: str) -> None:
        self.busy.show()
        self.status_label.setText(message)

    def _on_loading_changed(self, loading: bool) -> None:
        self.cancel_action.setEnabled(loading)
        self.cancel_button.setVisible(loading)
        self.busy.setVisible(loading)

    def _on_load_cancelled(self, description: str) -> None:
        self.status_label.setText(f"Cancelled loading {description}. Nothing is loaded: press "
                                  "Load pair or Run to load a pair.")
        if self.run_view.record.started is None:
            self.run_view.info.setText("Nothing loaded: pick a pair, then press Load pair "
                                       "or Run (F5).")

    def _on_loaded(self, description: str) -> None:
        self.busy.hide()
        pair = self.controller.pair
        self.controls.set_draft_temperature_scale(
            pair.draft_temperature_scale if pair is not None else 1.0)
        if pair is not None:
            self.run_view.set_shared_vocab(pair.target_name, pair.draft_name, pair.shared_vocab,
                                           pair.draft_tokenizer)
        self.status_label.setText(f"Ready: {description}")
        self.run_view.clear_error()  # a good pair: the last failure is history
        if self.run_view.record.started is None:
            self.run_view.info.setText(f"Ready: {description}. Press Run (F5) or Step (F10).")

    def report_failure(self, failure: RunFailed) -> None:
        """One clear message: the status line, and the run view's error (shown at once)."""
        if not self.controller.loading:
            self.busy.hide()
        self.status_label.setText(f"Error: {failure.message}")
        if self.run_view.record.started is None and self.controller.pair is None and \
                failure.kind in ("load", "tokenizer", "oom"):
            self.run_view.info.setText("Nothing loaded: fix the pair named above, then press "
                                       "Load pair or Run.")
        self.run_view.apply(failure)
        self.run_view.flush()  # an error shows at once, even if the timer is busy

    def _on_replay_corner(self, text: str) -> None:
        """The replay bar's word for the corner; "idle" only when no live run has it."""
        if text != "idle" or not self.controls.stop_button.isEnabled():
            self.state_label.setText(text)

    def _on_race_found(self, events: list[Any]) -> None:
        """A race read by the replay (a pipe, a big file) plays in the race window."""
        race_window = self.stage.race_window
        if race_window.view.load(events):
            race_window.show()
            race_window.raise_()
            race_window.view.play()

    def _on_availability(self, availability: dict[str, str]) -> None:
        mark_presets(self.controls.preset, availability)

    def _on_state_changed(self, state: str) -> None:
        busy = state != "idle"
        self.controls.stop_button.setEnabled(busy)
        self.controls.pause_button.setEnabled(busy)
        self.controls.pause_button.setText("▶ Resume" if state == "paused" else "❚❚ Pause")
        self.state_label.setText({"idle": "idle", "running": "● running",
                                  "paused": "❚❚ paused — Step (F10) or Resume (F6)"}[state])
        if not busy and not self.controller.loading:
            self.busy.hide()

    def _on_present_toggled(self, on: bool) -> None:
        """F11: full screen without controls; again: the window exactly as it was."""
        if on:  # zoom, splitters and window given back on leaving (gui/geometry.py)
            self.presentation.enter()
            self.run_view.setFocus()  # clicker keys reach the window, not the prompt
        else:
            self.presentation.leave()

    # -- closing ---------------------------------------------------------------------------

    # A round of a big model on a CPU can take seconds, and a load cannot be interrupted:
    # closing waits this long for the round in flight, never for a load (main() then ends
    # the process without them; see startup.hard_exit). 1 s, not more: on a loaded 2-core
    # machine a close mid-run measured 1.87 s with 1.5 s here, and the promise is 2 s.
    CLOSE_WAIT_MS = 1000

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 - Qt override
        """Save settings, stop the run, abandon a load; wait for a round at most 1 s."""
        if not self._closed:
            self._closed = True
            self.replayer.stop()  # first: the user's settings back in the controls
            self.save_settings()
            self.run_view.timer.stop()
            self.hide()  # feels instant even while the last round finishes
            explore_done = True
            explore = getattr(self, "explore_window", None)
            if explore is not None:  # its run stops after the round in flight; no 30 s wait
                explore.worker.stop.set()
                explore.thread_.quit()
                explore.hide()
                explore_done = explore.thread_.wait(self.CLOSE_WAIT_MS)
            self.clean_exit = self.controller.shutdown(wait_ms=self.CLOSE_WAIT_MS) and \
                not background_threads() and explore_done
        event.accept()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="specviz", description="Watch speculative decoding happen.")
    p.add_argument("--pair", choices=list(PRESETS), metavar="PRESET",
                   help="a preset pair: " + "; ".join(PRESETS))
    p.add_argument("--draft", help="draft model q: alias, hub id, folder or .gguf")
    p.add_argument("--target", help="target model p: alias, hub id, folder or .gguf")
    p.add_argument("--device", choices=DEVICES, help="where the models run")
    p.add_argument("--prompt", help="the prompt to start with")
    p.add_argument("--replay", metavar="JSONL", help="replay a recording (specviz-cli --json; "
                   "a race recording, specviz-cli --race --json, plays as a race); "
                   "- reads standard input as it arrives: … | specviz --replay -")
    p.add_argument("--no-load", action="store_true", help="don't load the pair at launch")
    return p


# PySide6 releases that drop references to None (the app aborts with "none_dealloc" after a
# few hundred rounds of drawing). See tests/gui/test_refcounts.py.
BROKEN_PYSIDE = {"6.12.0"}


def main(argv: list[str] | None = None) -> int:
    """Show the window first; torch, transformers and the pair load on a thread after that."""
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    import PySide6

    from specviz.gui.startup import FirstPaint, SignalBridge, hard_exit, trace, trace_mode

    if PySide6.__version__ in BROKEN_PYSIDE:
        print(f"specviz: warning: PySide6 {PySide6.__version__} has a reference-count bug that "
              "crashes long runs; install another release: pip install 'PySide6-Essentials<6.12'",
              file=sys.stderr)
    app = make_app()
    draft, target = (PRESETS[args.pair] if args.pair else (args.draft, args.target))
    autoload = not args.no_load and not args.replay
    window = MainWindow(draft=draft, target=target, device=args.device, prompt=args.prompt,
                        autoload=False)
    if args.pair:
        window._set_preset(args.pair)
    if not autoload and not args.replay:
        window.status_label.setText("Nothing loaded (--no-load): press Load pair or Run (F5).")
        window.run_view.info.setText("No pair loaded yet: pick one on the left, then press "
                                     "Load pair, or Run (F5) to load it and run.")

    exit_code: list[int] = []

    def on_signal(signum: int) -> None:
        if exit_code:  # a second Ctrl+C while closing: go now
            hard_exit(exit_code[0])
        exit_code.append(128 + signum)  # the shell's convention: 130 for SIGINT
        window.close()
        app.exit(exit_code[0])

    bridge = SignalBridge(app, on_signal)
    quit_after = trace_mode() == "quit"

    def on_shown() -> None:
        trace("shown", f"cpu={time.process_time():.3f}")
        if autoload:
            window.load_pair()  # the load thread imports torch and transformers now
            trace("loading")
        elif quit_after and not args.replay:
            window.close()
        window.controller.probe_availability()

    def on_ready(what: str) -> None:
        trace(what, f"cpu={time.process_time():.3f}")
        if quit_after:
            window.close()

    if trace_mode():
        window.controller.loaded.connect(lambda _d: on_ready("ready"))
        window.controller.failed.connect(lambda _f: on_ready("failed"))
        window.controller.progressed.connect(lambda message: trace("progress", message))
    FirstPaint(window, on_shown)
    window.show()
    if args.replay:
        window.open_recording(args.replay)
    try:
        code = int(app.exec())
    finally:
        if not window._closed:
            window.close()  # saves the settings
        bridge.restore()
    code = exit_code[0] if exit_code else code
    if not window.clean_exit or "torch" in sys.modules:
        # A load (or a long round) is still running, or torch is loaded: finalising torch and
        # transformers takes the interpreter 1-3 s more and saves nothing (settings are
        # synced, stdio is flushed by hard_exit): close means gone.
        hard_exit(code)
    return code


__all__ = ["CUSTOM", "MainWindow", "main"]

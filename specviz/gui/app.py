"""The main window: controls on the left, the run's views in the middle; and ``main``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from PySide6.QtCore import QObject, QSettings, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QCloseEvent, QFont, QKeySequence
from PySide6.QtWidgets import (
    QApplication,
    QCheckBox,
    QComboBox,
    QDockWidget,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMainWindow,
    QMenu,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from specviz.core.events import Event, RunFailed, Settings, from_json, to_json
# Not specviz.core.models: that imports torch (~3 s), which the load thread does instead.
from specviz.core.presets import DEFAULT_PAIR, DEFAULT_PROMPT, PRESETS

from .presets import mark_presets
from .run_view import RunView
from .style import UI_POINT_SIZE
from .worker import DecodeController, Loader, PairSpec, background_threads

CUSTOM = "Custom: hub id, folder or .gguf"
DEVICES = ("auto", "cpu", "cuda", "mps")

# name -> (shortcuts, tooltip). Application-wide, so they work while typing in the prompt.
SHORTCUTS = {
    "run": (["F5", "Ctrl+Return"], "Run (F5, Ctrl+Enter): start a new run; a running one stops"),
    "stop": (["Shift+F5", "Ctrl+."], "Stop (Shift+F5, Ctrl+.): ends within one round"),
    "pause": (["F6", "Ctrl+P"], "Pause / Resume (F6, Ctrl+P)"),
    "step": (["F10", "Ctrl+Right"], "Step (F10, Ctrl+→): exactly one round"),
}


class Replayer(QObject):
    """Feeds recorded events to a RunView at a steady pace, as a live run would."""

    finished = Signal()

    def __init__(self, view: RunView, interval_ms: int = 60) -> None:
        super().__init__(view)
        self.view = view
        self.events: list[Event] = []
        self.timer = QTimer(self)
        self.timer.setInterval(interval_ms)
        self.timer.timeout.connect(self._on_timeout)

    def start(self, events: list[Event]) -> None:
        self.events = list(reversed(events))
        self.timer.start()

    def stop(self) -> None:
        self.timer.stop()
        self.events.clear()

    @property
    def active(self) -> bool:
        return self.timer.isActive()

    def _on_timeout(self) -> None:
        if not self.events:
            self.timer.stop()
            self.finished.emit()
            return
        self.view.apply(self.events.pop())


def read_recording(path: str | Path) -> list[Event]:
    """Events from a JSON-lines file (``specviz-cli --json``, or Save recording)."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [from_json(line) for line in lines if line.strip()]


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
        self.replayer = Replayer(self.run_view)
        self.setCentralWidget(self.run_view)
        self._build_controls()
        self._build_actions()
        self._build_status()
        self._restore(draft, target, device, prompt)

        w = self.controller
        w.progressed.connect(self._on_progressed)
        w.loaded.connect(self._on_loaded)
        w.yielded.connect(self.run_view.apply)
        w.failed.connect(self._on_failed)
        w.load_cancelled.connect(self._on_load_cancelled)
        w.loading_changed.connect(self._on_loading_changed)
        w.availability.connect(self._on_availability)
        self.controller.state_changed.connect(self._on_state_changed)
        self._on_state_changed("idle")
        self._closed = False
        self.clean_exit = True  # False: closing left a load or a round running (main ends it)
        if autoload:
            self.load_pair()

    # -- building -------------------------------------------------------------------------------

    def _build_controls(self) -> None:
        panel = QWidget()
        col = QVBoxLayout(panel)

        pair_box = QGroupBox("Model pair (q = draft, p = target)")
        form = QFormLayout(pair_box)
        self.preset = QComboBox()
        self.preset.addItems([*PRESETS, CUSTOM])
        self.preset.currentTextChanged.connect(self._on_preset_changed)
        self.preset.setToolTip("Presets: the bundled offline pair first, then hub pairs")
        form.addRow(self.preset)
        self.draft_edit, draft_row = self._model_row("draft")
        self.target_edit, target_row = self._model_row("target")
        form.addRow("Draft q", draft_row)
        form.addRow("Target p", target_row)
        self.device = QComboBox()
        self.device.addItems(DEVICES)
        form.addRow("Device", self.device)
        self.load_button = QPushButton("Load pair")
        self.load_button.clicked.connect(self.load_pair)
        form.addRow(self.load_button)
        col.addWidget(pair_box)

        samp = QGroupBox("Sampling (same for p and q)")
        form = QFormLayout(samp)
        self.k = QSpinBox()
        self.k.setRange(1, 16)
        self.k.setValue(4)
        self.k.setToolTip("Draft tokens per round")
        self.temperature = QDoubleSpinBox()
        self.temperature.setRange(0.0, 2.0)
        self.temperature.setSingleStep(0.1)
        self.temperature.setDecimals(2)
        self.temperature.setSpecialValueText("0 (greedy)")
        self.temperature.setValue(0.7)
        self.top_k = QSpinBox()
        self.top_k.setRange(0, 100000)
        self.top_k.setSpecialValueText("off")
        self.top_p = QDoubleSpinBox()
        self.top_p.setRange(0.01, 1.0)
        self.top_p.setSingleStep(0.05)
        self.top_p.setValue(1.0)
        self.max_new = QSpinBox()
        self.max_new.setRange(1, 100000)
        self.max_new.setValue(128)
        self.seed = QSpinBox()
        self.seed.setRange(-1, 2**31 - 1)
        self.seed.setSpecialValueText("random")
        self.seed.setValue(0)
        form.addRow("K (drafts / round)", self.k)
        form.addRow("Temperature", self.temperature)
        form.addRow("top-k", self.top_k)
        form.addRow("top-p", self.top_p)
        form.addRow("Max new tokens", self.max_new)
        form.addRow("Seed", self.seed)
        self.baseline = QCheckBox("Target alone (baseline)")
        self.baseline.setToolTip("Run p alone, one forward pass per token, to compare speed")
        self.chat = QCheckBox("Use the chat template")
        self.chat.setChecked(True)
        form.addRow(self.baseline)
        form.addRow(self.chat)
        col.addWidget(samp)

        col.addWidget(QLabel("Prompt"))
        self.prompt = QPlainTextEdit()
        self.prompt.setPlaceholderText("Type a prompt (multi-line and Chinese welcome)")
        self.prompt.setMinimumHeight(110)
        col.addWidget(self.prompt, 1)

        buttons = QHBoxLayout()
        self.run_button = QPushButton("▶ Run")
        self.stop_button = QPushButton("■ Stop")
        self.pause_button = QPushButton("❚❚ Pause")
        self.step_button = QPushButton("▶| Step")
        for b in (self.run_button, self.stop_button, self.pause_button, self.step_button):
            f = b.font()
            f.setBold(True)
            b.setFont(f)
            b.setMinimumHeight(40)
            buttons.addWidget(b)
        col.addLayout(buttons)

        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(panel)
        self.dock = QDockWidget("Controls", self)
        self.dock.setObjectName("controls")
        self.dock.setFeatures(QDockWidget.DockWidgetFeature.DockWidgetMovable
                              | QDockWidget.DockWidgetFeature.DockWidgetClosable)
        self.dock.setWidget(scroll)
        self.dock.setMinimumWidth(360)
        self.addDockWidget(Qt.DockWidgetArea.LeftDockWidgetArea, self.dock)

    def _model_row(self, which: str) -> tuple[QLineEdit, QWidget]:
        edit = QLineEdit()
        edit.setPlaceholderText("alias, hub id, folder or .gguf")
        edit.textEdited.connect(lambda _text: self._set_preset(CUSTOM))
        browse = QToolButton()
        browse.setText("…")
        browse.setToolTip(f"Pick a {which} folder or .gguf file")
        menu = QMenu(browse)
        menu.addAction("Model folder…", lambda: self._browse(edit, folder=True))
        menu.addAction("GGUF file…", lambda: self._browse(edit, folder=False))
        browse.setMenu(menu)
        browse.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        row = QWidget()
        h = QHBoxLayout(row)
        h.setContentsMargins(0, 0, 0, 0)
        h.addWidget(edit, 1)
        h.addWidget(browse)
        return edit, row

    def _build_actions(self) -> None:
        self.actions_by_name: dict[str, QAction] = {}
        slots = {"run": self.run, "stop": self.stop, "pause": self.toggle_pause,
                 "step": self.step}
        buttons = {"run": self.run_button, "stop": self.stop_button,
                   "pause": self.pause_button, "step": self.step_button}
        for name, (keys, tip) in SHORTCUTS.items():
            action = QAction(name.capitalize(), self)
            action.setShortcuts([QKeySequence(k) for k in keys])
            action.setShortcutContext(Qt.ShortcutContext.ApplicationShortcut)
            action.setToolTip(tip)
            action.triggered.connect(slots[name])
            self.addAction(action)
            buttons[name].clicked.connect(action.trigger)
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

    def _build_status(self) -> None:
        self.status_label = QLabel("Starting…")
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
        self.statusBar().addWidget(self.cancel_button)
        self.state_label = QLabel()
        f = self.state_label.font()
        f.setBold(True)
        self.state_label.setFont(f)
        self.statusBar().addWidget(self.busy)
        self.statusBar().addWidget(self.status_label, 1)
        self.statusBar().addPermanentWidget(self.state_label)

    # -- settings --------------------------------------------------------------------------------

    def _restore(self, draft: str | None, target: str | None, device: str | None,
                 prompt: str | None) -> None:
        s = self.store
        preset = str(s.value("pair/preset", DEFAULT_PAIR))
        self._set_preset(preset if preset in PRESETS or preset == CUSTOM else DEFAULT_PAIR)
        self._on_preset_changed(self.preset.currentText())  # no signal if it was already set
        if preset == CUSTOM:
            self.draft_edit.setText(str(s.value("pair/draft", "")))
            self.target_edit.setText(str(s.value("pair/target", "")))
        if draft is not None or target is not None:
            self._set_preset(CUSTOM)
            if draft is not None:
                self.draft_edit.setText(draft)
            if target is not None:
                self.target_edit.setText(target)
        self.device.setCurrentText(device or str(s.value("pair/device", "auto")))
        self.k.setValue(int(self._number("sampling/k", self.k.value())))
        self.temperature.setValue(self._number("sampling/temperature",
                                               self.temperature.value()))
        self.top_k.setValue(int(self._number("sampling/top_k", self.top_k.value())))
        self.top_p.setValue(self._number("sampling/top_p", self.top_p.value()))
        self.max_new.setValue(int(self._number("sampling/max_new_tokens", self.max_new.value())))
        self.seed.setValue(int(self._number("sampling/seed", self.seed.value())))
        self.baseline.setChecked(str(s.value("mode/baseline", "false")).lower() == "true")
        self.chat.setChecked(str(s.value("mode/chat", "true")).lower() == "true")
        self.prompt.setPlainText(prompt if prompt is not None
                                 else str(s.value("prompt", DEFAULT_PROMPT)))
        geometry = s.value("window/geometry")
        if geometry is not None:
            self.restoreGeometry(geometry)
        state = s.value("window/state")
        if state is not None:
            self.restoreState(state)

    def _number(self, key: str, default: float) -> float:
        """A stored number; a missing or garbled one falls back to the default."""
        try:
            return float(str(self.store.value(key, default)))
        except ValueError:
            return default

    def save_settings(self) -> None:
        """Persist every control (QSettings: the platform's usual place)."""
        s = self.store
        s.setValue("pair/preset", self.preset.currentText())
        s.setValue("pair/draft", self.draft_edit.text())
        s.setValue("pair/target", self.target_edit.text())
        s.setValue("pair/device", self.device.currentText())
        s.setValue("sampling/k", self.k.value())
        s.setValue("sampling/temperature", self.temperature.value())
        s.setValue("sampling/top_k", self.top_k.value())
        s.setValue("sampling/top_p", self.top_p.value())
        s.setValue("sampling/max_new_tokens", self.max_new.value())
        s.setValue("sampling/seed", self.seed.value())
        s.setValue("mode/baseline", "true" if self.baseline.isChecked() else "false")
        s.setValue("mode/chat", "true" if self.chat.isChecked() else "false")
        s.setValue("prompt", self.prompt.toPlainText())
        s.setValue("window/geometry", self.saveGeometry())
        s.setValue("window/state", self.saveState())
        s.sync()

    def _set_preset(self, name: str) -> None:
        self.preset.setCurrentText(name)

    def _on_preset_changed(self, name: str) -> None:
        if name in PRESETS:
            draft, target = PRESETS[name]
            self.draft_edit.setText(draft)
            self.target_edit.setText(target)

    def _browse(self, edit: QLineEdit, folder: bool) -> None:
        if folder:
            path = QFileDialog.getExistingDirectory(self, "Model folder")
        else:
            path, _ = QFileDialog.getOpenFileName(self, "GGUF file", "", "GGUF (*.gguf)")
        if path:
            edit.setText(path)
            self._set_preset(CUSTOM)

    # -- what the user asks for ------------------------------------------------------------------

    def pair_spec(self) -> PairSpec:
        draft = self.draft_edit.text().strip() or None
        return PairSpec(draft, self.target_edit.text().strip(), self.device.currentText())

    def sampling(self) -> Settings:
        seed = self.seed.value()
        return Settings(k=self.k.value(), temperature=self.temperature.value(),
                        top_k=self.top_k.value(), top_p=self.top_p.value(),
                        max_new_tokens=self.max_new.value(), seed=None if seed < 0 else seed)

    def load_pair(self) -> None:
        spec = self.pair_spec()
        if not spec.target:
            self._on_failed(RunFailed("Choose a target model (p) first.", "input"))
            return
        self.busy.show()
        self.status_label.setText(f"Loading {spec.describe()}…")
        self.controller.load(spec)

    def run(self, paused: bool = False, steps: int = 0) -> None:
        """Start a run with the current settings (the worker reloads only if the pair changed)."""
        self.replayer.stop()
        spec = self.pair_spec()
        if not spec.target:
            self._on_failed(RunFailed("Choose a target model (p) first.", "input"))
            return
        if spec.draft is None and not self.baseline.isChecked():
            self._on_failed(RunFailed("Choose a draft model (q), or tick 'Target alone'.",
                                      "input"))
            return
        if not self.prompt.toPlainText().strip():
            # Without this the models generate from the chat template alone.
            self._on_failed(RunFailed("The prompt is empty: type a prompt, then press Run.",
                                      "input"))
            self.prompt.setFocus()
            return
        self.save_settings()
        self.controller.start(spec, self.sampling(), self.prompt.toPlainText(),
                              chat=self.chat.isChecked(), baseline=self.baseline.isChecked(),
                              paused=paused, steps=steps)

    def stop(self) -> None:
        self.replayer.stop()
        self.controller.stop()

    def toggle_pause(self) -> None:
        self.controller.toggle_pause()

    def step(self) -> None:
        """One round; when nothing runs, start a run that holds after its first round."""
        if not self.controller.step():
            self.run(paused=True, steps=1)

    def open_recording(self, path: str | None = None) -> None:
        """Replay a JSON-lines recording through the same views."""
        if not path:
            path, _ = QFileDialog.getOpenFileName(self, "Open recording", "",
                                                  "Recordings (*.jsonl *.json);;All files (*)")
        if not path:
            return
        try:
            events = read_recording(path)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self._on_failed(RunFailed(f"Could not read {path}: {exc}", "input"))
            return
        self.controller.stop()
        self.status_label.setText(f"Replaying {Path(path).name} ({len(events)} events)")
        self.replayer.start(events)

    def save_recording(self, path: str | None = None) -> None:
        """Write the shown run's events as JSON lines (replayable with Open recording)."""
        if not path:
            path, _ = QFileDialog.getSaveFileName(self, "Save recording", "run.jsonl",
                                                  "Recordings (*.jsonl)")
        if not path:
            return
        lines = [to_json(e) for e in self.run_view.record.events]
        Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")
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
        self.status_label.setText(f"Ready: {description}")
        self.run_view.clear_error()  # a good pair: the last failure is history
        if self.run_view.record.started is None:
            self.run_view.info.setText(f"Ready: {description}. Press Run (F5) or Step (F10).")

    def _on_failed(self, failure: RunFailed) -> None:
        if not self.controller.loading:
            self.busy.hide()
        self.status_label.setText(f"Error: {failure.message}")
        if self.run_view.record.started is None:
            self.run_view.info.setText("Nothing loaded: fix the pair (or the setting) named "
                                       "above, then press Load pair or Run.")
        self.run_view.apply(failure)
        self.run_view.flush()  # an error shows at once, even if the timer is busy

    def _on_availability(self, availability: dict[str, str]) -> None:
        mark_presets(self.preset, availability)

    def _on_state_changed(self, state: str) -> None:
        busy = state != "idle"
        self.stop_button.setEnabled(busy)
        self.pause_button.setEnabled(busy)
        self.pause_button.setText("▶ Resume" if state == "paused" else "❚❚ Pause")
        self.state_label.setText({"idle": "idle", "running": "● running",
                                  "paused": "❚❚ paused — Step (F10) or Resume (F6)"}[state])
        if not busy and not self.controller.loading:
            self.busy.hide()

    def _on_present_toggled(self, on: bool) -> None:
        self.dock.setVisible(not on)
        self.menuBar().setVisible(not on)
        if on:
            self.showFullScreen()
        else:
            self.showNormal()

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
            self.save_settings()
            self.replayer.stop()
            self.run_view.timer.stop()
            self.hide()  # feels instant even while the last round finishes
            self.clean_exit = self.controller.shutdown(wait_ms=self.CLOSE_WAIT_MS) and \
                not background_threads()
        event.accept()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="specviz", description="Watch speculative decoding happen.")
    p.add_argument("--pair", choices=list(PRESETS), metavar="PRESET",
                   help="a preset pair: " + "; ".join(PRESETS))
    p.add_argument("--draft", help="draft model q: alias, hub id, folder or .gguf")
    p.add_argument("--target", help="target model p: alias, hub id, folder or .gguf")
    p.add_argument("--device", choices=DEVICES, help="where the models run")
    p.add_argument("--prompt", help="the prompt to start with")
    p.add_argument("--replay", metavar="JSONL", help="replay a recording (specviz-cli --json)")
    p.add_argument("--no-load", action="store_true", help="don't load the pair at launch")
    return p


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
    return app


# PySide6 releases that drop references to None (the app aborts with "none_dealloc" after a
# few hundred rounds of drawing). See tests/gui/test_refcounts.py.
BROKEN_PYSIDE = {"6.12.0"}


def main(argv: list[str] | None = None) -> int:
    """Show the window first; torch, transformers and the pair load on a thread after that."""
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    import PySide6

    from .startup import FirstPaint, SignalBridge, hard_exit, trace, trace_mode

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
    if window.store.value("window/geometry") is None:
        window.resize(1600, 950)
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
        trace("shown")
        if autoload:
            window.load_pair()  # the load thread imports torch and transformers now
            trace("loading")
        elif quit_after and not args.replay:
            window.close()
        window.controller.probe_availability()

    def on_ready(what: str) -> None:
        trace(what)
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


__all__ = ["MainWindow", "main", "read_recording"]

"""The controls panel: model pair, sampling, prompt, run buttons; one table maps them to
``Settings`` and to QSettings, so a new control is one ``FIELDS`` row and one widget.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import (
    QAbstractSpinBox,
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QFrame,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMenu,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QSpinBox,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from specviz.core import options, registry  # torch-free
from specviz.core.events import Settings
from specviz.core.presets import DEFAULT_PAIR, DEFAULT_PROMPT, PRESETS

CUSTOM = "Custom: hub id, folder or .gguf"
DEVICES = ("auto", "cpu", "cuda", "mps")
# The app opens on the options table's presentation profile (sampled, longer runs).
APP_DEFAULTS = options.profile(options.APP_PROFILE)

RACE_HELP = ("Race: Run (F5) runs the speculative decoder, then the target alone, on the same "
             "prompt, seed and settings. The two runs go one after the other (side by side they "
             "would compete for the same cores), then play together on one clock from each "
             "run's measured timestamps, with the measured speedup and, at T = 0, an identical "
             "text check. F7 races whether or not this is ticked.")

SAMPLING_TITLE = "Sampling (same for p and q)"


class _NoStrayWheel:
    """A wheel turned over a control it does not have focus on scrolls the panel instead of
    changing the value (a presenter scrolling the controls changed n-gram min unnoticed).
    Click or Tab into the control first, then the wheel changes it."""

    def _init_wheel(self) -> None:
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)  # type: ignore[attr-defined]

    def wheelEvent(self, event: Any) -> None:  # noqa: N802 - Qt override
        if self.hasFocus():  # type: ignore[attr-defined]
            super().wheelEvent(event)  # type: ignore[misc]
        else:
            event.ignore()  # the scroll area behind takes it


class SpinBox(_NoStrayWheel, QSpinBox):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._init_wheel()


class DoubleSpinBox(_NoStrayWheel, QDoubleSpinBox):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._init_wheel()


class ComboBox(_NoStrayWheel, QComboBox):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._init_wheel()


def spin_for(name: str, double: bool = False) -> QSpinBox | QDoubleSpinBox:
    """A spin box with the options table's range (and its special text at the bottom)."""
    opt = options.BY_NAME[name]
    low, high = opt.spin_range()
    spin: QSpinBox | QDoubleSpinBox
    if double:
        spin = DoubleSpinBox()
        spin.setRange(float(low), float(high))
    else:
        spin = SpinBox()
        spin.setRange(int(low), int(min(high, 2**31 - 1)))
    if opt.special:
        spin.setSpecialValueText(opt.special)
    spin.setToolTip(opt.help[:1].upper() + opt.help[1:])
    return spin


def combo_for(name: str) -> QComboBox:
    """A combo box of the registry's names, each explained in the tooltip."""
    entries = registry.DRAFTERS if name == "drafter" else registry.K_POLICIES
    combo = ComboBox()
    combo.addItems(list(entries))
    combo.setToolTip("<br>".join(f"<b>{e.name}</b>: {e.help}" for e in entries.values()))
    return combo


class WideComboBox(ComboBox):
    """A combo box that stays narrow but opens a list wide enough for whole names."""

    def showPopup(self) -> None:  # noqa: N802 - Qt override
        view = self.view()
        view.setMinimumWidth(max(self.width(), view.sizeHintForColumn(0)
                                 + view.verticalScrollBar().sizeHint().width() + 8))
        super().showPopup()


def _seed(value: int) -> int | None:
    return None if value < 0 else value  # the spin box's "random" (-1)


@dataclass(frozen=True)
class Field:
    """One persisted control: where it is stored, its widget, its default and its type."""

    key: str  # QSettings key
    widget: str  # attribute name of the widget on ControlsPanel
    default: Any
    type: type  # str | int | float | bool: how a stored value is read back
    setting: str | None = None  # the ``Settings`` field it fills, if any
    to_setting: Callable[[Any], Any] | None = None  # widget value -> Settings value


# THE table. Order matters only for restore: the preset comes before the edits it fills.
FIELDS: tuple[Field, ...] = (
    Field("pair/preset", "preset", DEFAULT_PAIR, str),
    Field("pair/draft", "draft_edit", "", str),
    Field("pair/target", "target_edit", "", str),
    Field("pair/device", "device", "auto", str),
    *(Field(f"{group}/{name}", widget, APP_DEFAULTS[name], options.BY_NAME[name].type, name,
            _seed if name == "seed" else None)
      for group, name, widget in (
          ("sampling", "k", "k"), ("sampling", "temperature", "temperature"),
          ("sampling", "top_k", "top_k"), ("sampling", "top_p", "top_p"),
          ("sampling", "max_new_tokens", "max_new"), ("sampling", "seed", "seed"),
          ("drafting", "drafter", "drafter"), ("drafting", "ngram_min", "ngram_min"),
          ("drafting", "ngram_max", "ngram_max"), ("drafting", "lookup_k", "lookup_k"),
          ("drafting", "k_policy", "k_policy"), ("drafting", "lenience", "lenience"))),
    Field("mode/baseline", "baseline", False, bool),
    # A run mode, not a Settings field: the engine never races; Run starts two engine runs of
    # the same Settings (gui/stage/stage.py). Stored like Target alone, so a demo set up stays
    # set up.
    Field("mode/race", "race", False, bool),
    Field("mode/chat", "chat", True, bool),
    Field("prompt", "prompt", DEFAULT_PROMPT, str),
)


def read_value(widget: QWidget) -> Any:
    """A control's value, whatever its kind."""
    if isinstance(widget, QCheckBox):
        return widget.isChecked()
    if isinstance(widget, (QSpinBox, QDoubleSpinBox)):
        return widget.value()
    if isinstance(widget, QComboBox):
        return widget.currentText()
    if isinstance(widget, QLineEdit):
        return widget.text()
    if isinstance(widget, QPlainTextEdit):
        return widget.toPlainText()
    raise TypeError(f"no reader for {type(widget).__name__}")


def write_value(widget: QWidget, value: Any) -> None:
    """Set a control's value, whatever its kind."""
    if isinstance(widget, QCheckBox):
        widget.setChecked(bool(value))
    elif isinstance(widget, QSpinBox):
        widget.setValue(int(value))
    elif isinstance(widget, QDoubleSpinBox):
        widget.setValue(float(value))
    elif isinstance(widget, QComboBox):
        widget.setCurrentText(str(value))
    elif isinstance(widget, QLineEdit):
        widget.setText(str(value))
    elif isinstance(widget, QPlainTextEdit):
        widget.setPlainText(str(value))
    else:
        raise TypeError(f"no writer for {type(widget).__name__}")


def parse(raw: Any, kind: type, default: Any) -> Any:
    """A stored value as ``kind``; a missing or garbled one falls back to the default."""
    if raw is None:
        return default
    try:
        if kind is bool:  # QSettings' ini files give "true"/"false" back as strings
            text = str(raw).strip().lower()
            if text in ("true", "1"):
                return True
            if text in ("false", "0"):
                return False
            return default
        if kind is int:
            return int(float(str(raw)))
        if kind is float:
            return float(str(raw))
        return str(raw)
    except (TypeError, ValueError):
        return default


class ControlsPanel(QWidget):
    """Everything the user sets before a run. The dock holds it; MainWindow reads it."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        form_panel = QWidget()
        col = QVBoxLayout(form_panel)

        pair_box = QGroupBox("Model pair (q = draft, p = target)")
        form = QFormLayout(pair_box)
        self.preset = WideComboBox()
        self.preset.addItems([*PRESETS, CUSTOM])
        self.preset.currentTextChanged.connect(self._on_preset_changed)
        self.preset.setToolTip("Presets: the bundled offline pair first, then hub pairs")
        # Long preset names must not widen the panel: the box elides, its list shows all.
        self.preset.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.preset.setMinimumContentsLength(18)
        form.addRow(self.preset)
        self.draft_edit, draft_row = self._model_row("draft")
        self.target_edit, target_row = self._model_row("target")
        form.addRow("Draft q", draft_row)
        form.addRow("Target p", target_row)
        self.device = ComboBox()
        self.device.addItems(DEVICES)
        form.addRow("Device", self.device)
        self.load_button = QPushButton("Load pair")
        form.addRow(self.load_button)
        col.addWidget(pair_box)

        samp = self.sampling_box = QGroupBox(SAMPLING_TITLE)
        form = QFormLayout(samp)
        self.k = spin_for("k")
        self.temperature = spin_for("temperature", double=True)
        self.temperature.setSingleStep(0.1)
        self.temperature.setDecimals(2)
        self.top_k = spin_for("top_k")
        self.top_p = spin_for("top_p", double=True)
        self.top_p.setSingleStep(0.05)
        self.max_new = spin_for("max_new_tokens")
        self.seed = spin_for("seed")
        form.addRow("K (drafts / round)", self.k)
        form.addRow("Temperature", self.temperature)
        form.addRow("top-k", self.top_k)
        form.addRow("top-p", self.top_p)
        form.addRow("Max new tokens", self.max_new)
        form.addRow("Seed", self.seed)
        for spin in (self.k, self.temperature, self.top_k, self.top_p, self.max_new, self.seed):
            spin.setCorrectionMode(QAbstractSpinBox.CorrectionMode.CorrectToNearestValue)
        self.baseline = QCheckBox("Target alone (baseline)")
        self.baseline.setToolTip("Run p alone, one forward pass per token, to compare speed")
        self.race = QCheckBox("Race vs the target alone")
        self.race.setToolTip(RACE_HELP)
        # A race runs the target alone itself: the two modes exclude each other.
        self.race.toggled.connect(lambda on: on and self.baseline.setChecked(False))
        self.baseline.toggled.connect(lambda on: on and self.race.setChecked(False))
        self.chat = QCheckBox("Use the chat template")
        form.addRow(self.baseline)
        form.addRow(self.race)
        form.addRow(self.chat)
        col.addWidget(samp)
        col.addWidget(self._drafting_box())

        col.addStretch(1)

        # The form scrolls (vertically only) on short screens; the run buttons stay in view.
        self.scroll = QScrollArea()
        self.scroll.setWidgetResizable(True)
        self.scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.scroll.setWidget(form_panel)
        self.form_panel = form_panel

        buttons = QGridLayout()
        self.run_button = QPushButton("▶ Run")
        self.stop_button = QPushButton("■ Stop")
        self.pause_button = QPushButton("❚❚ Pause")
        self.step_button = QPushButton("▶| Step")
        for i, b in enumerate((self.run_button, self.stop_button, self.pause_button,
                               self.step_button)):
            f = b.font()
            f.setBold(True)
            b.setFont(f)
            b.setMinimumHeight(40)
            # Wide enough for the longest text a button takes ("▶ Resume").
            b.setMinimumWidth(b.fontMetrics().horizontalAdvance("▶ Resume") + 28)
            buttons.addWidget(b, i // 2, i % 2)
        # Ticked, Run races: the button says so (F5 and its tooltip do the same).
        self.race.toggled.connect(lambda on: self.run_button.setText("▶ Race" if on else "▶ Run"))

        # The prompt comes first and never scrolls away: it is what Run (F5) runs.
        self.prompt_label = QLabel("<b>Prompt</b> — what Run (F5) continues")
        self.prompt = QPlainTextEdit()
        self.prompt.setPlaceholderText("Type a prompt here (multi-line and Chinese welcome)")
        # Four lines: enough to see what runs, little enough to leave the form room at 768 px
        # (longer prompts scroll inside the box; the stream shows them whole).
        lines = self.prompt.fontMetrics().lineSpacing()
        self.prompt.setMinimumHeight(3 * lines + 12)
        self.prompt.setMaximumHeight(5 * lines + 12)
        self.prompt.setTabChangesFocus(True)
        self.prompt_label.setBuddy(self.prompt)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 4)
        layout.addWidget(self.prompt_label)
        layout.addWidget(self.prompt)
        layout.addWidget(self.scroll, 1)
        layout.addLayout(buttons)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Expanding)
        for f in FIELDS:  # defaults from the table, the one place they are written
            write_value(self.widget(f), f.default)
        self._on_preset_changed(self.preset.currentText())

    def _drafting_box(self) -> QGroupBox:
        """Who drafts, how K is chosen, and the (inexact) lenience knob."""
        box = QGroupBox("Drafting")
        form = QFormLayout(box)
        self.drafter = combo_for("drafter")
        self.ngram_min = spin_for("ngram_min")
        self.ngram_max = spin_for("ngram_max")
        for spin in (self.ngram_min, self.ngram_max):
            spin.setToolTip("Lookup matches the last n tokens, n from max down to min")
        self.ngram_min.valueChanged.connect(
            lambda v: self.ngram_max.setValue(max(v, self.ngram_max.value())))
        self.ngram_max.valueChanged.connect(
            lambda v: self.ngram_min.setValue(min(v, self.ngram_min.value())))
        ngram = QWidget()
        h = QHBoxLayout(ngram)
        h.setContentsMargins(0, 0, 0, 0)
        h.addWidget(self.ngram_min)
        h.addWidget(QLabel("to"))
        h.addWidget(self.ngram_max)
        self.lookup_k = spin_for("lookup_k")
        self.lookup_k.setToolTip("Most tokens a prompt-lookup round copies after a match "
                                 "(the draft model drafts K); copies are nearly free to "
                                 "draft, so a long match may propose more than K")
        self.k_policy = combo_for("k_policy")
        self.lenience = spin_for("lenience", double=True)
        self.lenience.setSingleStep(0.05)
        self.lenience.setDecimals(2)
        self.lenience.setToolTip("r ~ U[0, B): below 1 drafts are kept more often and the "
                                 "output NO LONGER follows the target's distribution")
        self.lenience.valueChanged.connect(self._on_lenience_changed)
        self.lenience_note = QLabel("⚠ B < 1: output no longer follows p")
        self.lenience_note.setStyleSheet("color: #A03F00; font-weight: bold")
        self.lenience_note.setWordWrap(True)
        self.lenience_note.hide()
        form.addRow("Drafter", self.drafter)
        form.addRow("n-gram", ngram)
        form.addRow("Lookup copies ≤", self.lookup_k)
        form.addRow("K policy", self.k_policy)
        form.addRow("Lenience B", self.lenience)
        form.addRow(self.lenience_note)
        for spin in (self.ngram_min, self.ngram_max, self.lookup_k, self.lenience):
            spin.setCorrectionMode(QAbstractSpinBox.CorrectionMode.CorrectToNearestValue)
        return box

    def _on_lenience_changed(self, value: float) -> None:
        self.lenience_note.setVisible(value < 1.0)

    def minimumSizeHint(self):  # noqa: N802 - Qt override
        """As wide as the form needs (so it never squeezes), as short as the buttons allow."""
        hint = super().minimumSizeHint()
        bar = self.scroll.verticalScrollBar().sizeHint().width()
        hint.setWidth(max(hint.width(), self.form_panel.minimumSizeHint().width() + bar))
        return hint

    def _model_row(self, which: str) -> tuple[QLineEdit, QWidget]:
        edit = QLineEdit()
        edit.setPlaceholderText("alias, hub id, folder or .gguf")
        edit.textEdited.connect(lambda _text: self.set_preset(CUSTOM))
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

    # -- the table ----------------------------------------------------------------------------

    def widget(self, field: Field) -> QWidget:
        return getattr(self, field.widget)

    def values(self) -> dict[str, Any]:
        """Every control's value, by QSettings key."""
        return {f.key: read_value(self.widget(f)) for f in FIELDS}

    def settings(self) -> Settings:
        """The sampling settings of a run, from the table's ``setting`` column."""
        kwargs = {}
        for f in FIELDS:
            if f.setting is not None:
                value = read_value(self.widget(f))
                kwargs[f.setting] = f.to_setting(value) if f.to_setting else value
        return Settings(**kwargs)

    def restore(self, store: QSettings) -> None:
        """Every control from ``store``; a missing or garbled value keeps the default."""
        for f in FIELDS:
            write_value(self.widget(f), parse(store.value(f.key), f.type, f.default))
        preset = self.preset.currentText()
        if preset not in PRESETS and preset != CUSTOM:  # a preset since renamed
            self.set_preset(DEFAULT_PAIR)
        self._on_preset_changed(self.preset.currentText())  # a preset's models win

    def save(self, store: QSettings) -> None:
        """Every control into ``store`` (booleans as "true"/"false", as QSettings reads them)."""
        for key, value in self.values().items():
            store.setValue(key, ("true" if value else "false") if isinstance(value, bool)
                           else value)

    # -- the pair --------------------------------------------------------------------------

    def prompt_text(self) -> str:
        return self.prompt.toPlainText()

    def set_draft_temperature_scale(self, scale: float) -> None:
        """Say when the loaded draft draws at T × its calibration instead of at T."""
        self.sampling_box.setTitle(SAMPLING_TITLE if scale == 1.0 else
                                   f"Sampling (q at T×{scale:g}: its calibration)")

    def set_pair(self, draft: str | None, target: str | None) -> None:
        """Models given on the command line: a custom pair."""
        if draft is None and target is None:
            return
        self.set_preset(CUSTOM)
        if draft is not None:
            self.draft_edit.setText(draft)
        if target is not None:
            self.target_edit.setText(target)

    def pair_fields(self) -> tuple[str | None, str, str]:
        """(draft or None, target, device) as typed."""
        return (self.draft_edit.text().strip() or None, self.target_edit.text().strip(),
                self.device.currentText())

    def cross_tokenizer(self) -> bool:
        """Whether the chosen drafter drafts with the draft's own tokenizer (the pair then
        loads accepting one that differs from the target's)."""
        entry = registry.DRAFTERS.get(self.drafter.currentText())
        return entry is not None and entry.cross_tokenizer

    def set_preset(self, name: str) -> None:
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
            self.set_preset(CUSTOM)

    # -- a recording's settings (replays) ------------------------------------------------------

    def show_recording(self, settings: Settings, pair: tuple[str | None, str, str] | None = None,
                       baseline: bool = False, prompt: str | None = None,
                       chat: bool | None = None) -> None:
        """Show a recording's settings (and pair, mode, prompt), read-only, until ``release``.

        The user's own values are kept aside the first time and come back with ``release``.
        """
        if getattr(self, "_held", None) is None:
            self._held: dict[str, Any] | None = self.values()
        shown: dict[str, Any] = {"mode/baseline": baseline}
        for f in FIELDS:
            if f.setting is not None:
                value = getattr(settings, f.setting)
                shown[f.key] = -1 if f.setting == "seed" and value is None else value
        if pair is not None:
            shown["pair/preset"] = CUSTOM
            shown["pair/draft"], shown["pair/target"], shown["pair/device"] = \
                pair[0] or "", pair[1], pair[2]
        if prompt is not None:
            shown["prompt"] = prompt
        if chat is not None:
            shown["mode/chat"] = chat
        for f in FIELDS:
            if f.key in shown:
                write_value(self.widget(f), shown[f.key])
        self.form_panel.setEnabled(False)
        note = getattr(self, "recording_note", None)
        if note is None:
            self.recording_note = note = QLabel(
                "▶ Showing the recording's settings (read-only). Run, Stop or ✕ Close on "
                "the replay bar gives yours back.")
            note.setWordWrap(True)
            note.setStyleSheet("QLabel { background: #DCEBFA; color: #0B2E4F; "
                               "border: 2px solid #0072B2; padding: 6px; font-weight: bold; }")
            layout = self.layout()
            assert isinstance(layout, QVBoxLayout)
            layout.insertWidget(0, note)
        note.show()

    @property
    def showing_recording(self) -> bool:
        return getattr(self, "_held", None) is not None

    def release(self) -> None:
        """The user's own settings back, unchanged and editable (after ``show_recording``)."""
        held = getattr(self, "_held", None)
        if held is None:
            return
        self._held = None
        for f in FIELDS:  # in the table's order: the preset before the edits it fills
            write_value(self.widget(f), held[f.key])
        self.form_panel.setEnabled(True)
        note = getattr(self, "recording_note", None)
        if note is not None:
            note.hide()


__all__ = ["APP_DEFAULTS", "CUSTOM", "DEVICES", "FIELDS", "RACE_HELP", "ComboBox",
           "ControlsPanel", "DoubleSpinBox", "Field", "SpinBox", "parse"]

"""Explore window: a K sweep against the theory, a lineup of settings on one clock, a prompt
set's table by category, and where the draft goes wrong.

    python -m specviz.gui.windows.explore [--draft …] [--target …]

Both run on one worker QObject on its own QThread (the window never blocks): a sweep
streams its points as they finish (the plot fills in live), shows progress and an estimate
of the time left, and Cancel stops it after the run in flight, keeping what it has (Save
writes it as the resumable JSON of ``specviz-explore sweep``). A lineup runs its lanes one
after the other, then replays them side by side on one clock from their own timestamps,
and ranks them by measured speed. A prompt set (one prompt per line, or Spec-Bench's JSON
lines) runs each prompt beside the target alone and fills its table by category as prompts
finish; Cancel keeps the prompts done. The Diagnose tab reads a recording, the lineup, or a
prompt file it runs itself (read as the Prompt set tab reads one), and, opened from the main
window, replays there the round a rejected token points at.
"""

from __future__ import annotations

import os

os.environ.setdefault("PYQTGRAPH_QT_LIB", "PySide6")

import argparse  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Iterable, Sequence  # noqa: E402
from dataclasses import dataclass, field, replace  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import pyqtgraph as pg  # noqa: E402
from PySide6.QtCore import QObject, Qt, QThread, QTimer, Signal, Slot  # noqa: E402
from PySide6.QtWidgets import (  # noqa: E402
    QApplication,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QMainWindow,
    QMenu,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from specviz.core.events import Event, RunFailed, RunFinished, Settings  # noqa: E402
from specviz.core.lineup import LaneSpec, Lineup, as_lineup  # noqa: E402
from specviz.core.presets import DEFAULT_PROMPT  # noqa: E402
from specviz.core.promptset import (  # noqa: E402
    PromptItem,
    PromptOutcome,
    PromptResult,
    PromptSetError,
)
from specviz.core.sweep import (  # noqa: E402
    BASELINE,
    Point,
    Sample,
    SweepResult,
    planned_runs,
    summarize,
)
from specviz.gui.stage.lineup_view import LineupView, lane_html  # noqa: E402
from specviz.gui.views.stats import integer_ticks  # noqa: E402

BLUE, ORANGE, GREEN = "#0072B2", "#D55E00", "#009E73"


@dataclass(frozen=True)
class SweepJob:
    points: tuple[Point, ...]
    prompts: tuple[str, ...]
    repeats: int
    done: frozenset[tuple[int, int, int]] = frozenset()  # (point, prompt, repeat) kept
    settle: float | None = None  # stop repeating a point once its speedup varies this little
    earlier: tuple[Sample, ...] = field(default=(), compare=False)  # the kept samples (done)


@dataclass(frozen=True)
class LineupJob:
    lanes: tuple[LaneSpec, ...]
    prompt: str


@dataclass(frozen=True)
class SetJob:
    items: tuple[PromptItem, ...]
    configs: tuple[tuple[str, Settings], ...]  # (label, settings), each beside the target alone
    done: frozenset[PromptItem] = frozenset()  # prompts a resumed set keeps (not run again)


@dataclass(frozen=True)
class DiagnoseJob:
    items: tuple[PromptItem, ...]
    settings: Settings  # one speculative run per prompt


PROMPT_FILES = "Prompt files (*.txt *.jsonl);;All files (*)"


def read_prompt_items(path: str, per_category: int) -> list[PromptItem]:
    """The prompts a prompt-file field names, as the Prompt set and Diagnose tabs read them:
    one per line or Spec-Bench's question.jsonl, the first ``per_category`` of each category
    (0: all). PromptSetError says what is wrong, an empty field included."""
    from specviz.core.promptset import pick, read_prompts

    if not path.strip():
        raise PromptSetError("Choose a prompt file (one prompt per line, or Spec-Bench's "
                             "question.jsonl).")
    return pick(read_prompts(path.strip()), per_category or None)


def prompt_file_fields(parent: QWidget) -> tuple[QLineEdit, QPushButton, QSpinBox]:
    """The prompt file's path, its Choose… button (wired to a file dialog) and the count per
    category, as the Prompt set and Diagnose tabs both ask for them."""
    path = QLineEdit()
    path.setPlaceholderText("a prompt file: one prompt per line, or Spec-Bench's "
                            "question.jsonl")
    browse = QPushButton("Choose…")

    def choose() -> None:
        chosen, _ = QFileDialog.getOpenFileName(parent, "Choose a prompt file", "", PROMPT_FILES)
        if chosen:
            path.setText(chosen)

    browse.clicked.connect(choose)
    per_category = QSpinBox(minimum=0, maximum=10_000, value=2)
    per_category.setSpecialValueText("all")
    per_category.setToolTip("The first N prompts of each category (0: all of them)")
    return path, browse, per_category


def _pick_recording(parent: QWidget, title: str) -> str:
    """A recording's path from the file dialog ("" when cancelled)."""
    path, _ = QFileDialog.getOpenFileName(parent, title, "",
                                          "Recordings (*.jsonl *.json);;All files (*)")
    return path


def _read_or_say(path: str, status: QLabel) -> list[Event] | None:
    """The recording's events, or None with why in ``status`` (one line, nothing raised)."""
    from specviz.core.recording import RecordingError, read_recording

    try:
        return list(read_recording(path))
    except RecordingError as exc:
        status.setText(f"{Path(path).name}: {exc}")
        return None


class ExploreWorker(QObject):
    """Loads the pair once, then runs sweeps, lineups, prompt sets and the Diagnose tab's
    prompts; lives on its own QThread."""

    loaded = Signal(str)
    sampled = Signal(object)  # a sweep's Sample
    yielded = Signal(object)  # a lineup's Event
    compared = Signal(object)  # a prompt set's PromptOutcome (one prompt: results or skipped)
    recorded = Signal(object)  # a diagnosed prompt's run: its events (a list)
    finished = Signal(str)  # "sweep", "lineup", "set" or "diagnose"
    failed = Signal(str)

    def __init__(self, load: Callable[[], Any]) -> None:
        super().__init__()
        self._load = load
        self.pair: Any = None
        self.drafts: dict[str, Any] = {}  # lanes' own draft models (draft=…), loaded once
        self.stop = threading.Event()

    def _ensure(self) -> bool:
        if self.pair is None:
            try:
                pair = self._load()
                from specviz.core.engine import calibrate

                calibrate(pair)  # the cost policy's v(n), once per pair: before any run's clock
            except Exception as exc:  # noqa: BLE001 - one line in the window, never a crash
                self.failed.emit(f"Could not load the models: {exc}")
                return False
            self.pair = pair
            self.loaded.emit(f"{self.pair.draft_name} → {self.pair.target_name}")
        return True

    def _stream(self, kind: str, items: Callable[[], Iterable[Any]], signal: Any) -> None:
        """Load the pair once, then emit on ``signal`` each item that ``items()`` yields; a
        failure is one line (``failed``), the end ``finished(kind)``."""
        if not self._ensure():
            return
        try:
            for item in items():
                signal.emit(item)
        except Exception as exc:  # noqa: BLE001 - one line in the window, never a crash
            self.failed.emit(str(exc))
            return
        self.finished.emit(kind)

    @Slot(object)
    def run_sweep(self, job: SweepJob) -> None:
        from specviz.core.engine import chat_prompt
        from specviz.core.sweep import run_sweep

        def samples() -> Iterable[Any]:
            prompts = [chat_prompt(self.pair.tokenizer, p) for p in job.prompts]
            return run_sweep(self.pair, job.points, prompts, job.repeats, self.stop,
                             done=job.done, settle=job.settle, earlier=job.earlier)

        self._stream("sweep", samples, self.sampled)

    @Slot(object)
    def run_lineup(self, job: LineupJob) -> None:
        from specviz.core.engine import chat_prompt
        from specviz.core.lineup import run_lineup

        def events() -> Iterable[Any]:
            prompt = chat_prompt(self.pair.tokenizer, job.prompt)
            return run_lineup(self.pair, job.lanes, prompt, self.stop, self.drafts)

        self._stream("lineup", events, self.yielded)

    @Slot(object)
    def run_set(self, job: SetJob) -> None:
        from specviz.core.promptset import run_prompt_set

        def outcomes() -> Iterable[Any]:
            return run_prompt_set(self.pair, job.items, job.configs, chat=True,
                                  stop=self.stop, done=job.done)

        self._stream("set", outcomes, self.compared)

    @Slot(object)
    def run_diagnose(self, job: DiagnoseJob) -> None:
        from specviz.core.engine import SpeculativeDecoder, chat_prompt, guarded

        def runs() -> Iterable[Any]:
            for item in job.items:
                prompt = chat_prompt(self.pair.tokenizer, item.text)
                events = list(guarded(SpeculativeDecoder(self.pair, job.settings)
                                      .run(prompt, self.stop)))
                if self.stop.is_set():  # cut short: only whole runs are diagnosed
                    return
                yield events

        self._stream("diagnose", runs, self.recorded)


def _base() -> Settings:
    return Settings()  # the options table's defaults (core/options.py)


class JobPanel(QWidget):
    """A tab whose runs go to the window's worker: its Run and Cancel buttons, and the job it
    asks for (``requested``). One job runs at a time: the window disables every Run button
    while one does, and calls ``ended`` on the panel whose job it was."""

    requested = Signal(object)

    def __init__(self, run_text: str) -> None:
        super().__init__()
        self.run_button = QPushButton(run_text)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setEnabled(False)

    def running(self, on: bool) -> None:
        """Cancel while this panel's job runs, Run otherwise."""
        self.run_button.setEnabled(not on)
        self.cancel_button.setEnabled(on)

    def ended(self, cancelled: bool) -> None:
        """The job ended (finished, cancelled or failed): what it leaves on show."""
        self.running(False)


class SweepPanel(JobPanel):
    """K list, prompts, repeats; Run / Cancel / Save PNG; progress; the plot; the table."""

    def __init__(self) -> None:
        super().__init__("Run sweep")
        self.ks = QLineEdit("1,2,3,4,6,8")
        self.prompts = QPlainTextEdit(DEFAULT_PROMPT)
        self.prompts.setPlaceholderText("one prompt per line")
        self.prompts.setMaximumHeight(76)
        self.repeats = QSpinBox(minimum=1, maximum=10, value=1)
        self.tokens = QSpinBox(minimum=8, maximum=512, value=64)
        self.settle = QDoubleSpinBox(minimum=0.0, maximum=1000.0, value=0.0, decimals=1,
                                     suffix=" %")
        self.settle.setSpecialValueText("off")
        self.settle.setToolTip("With 3 repeats or more: stop repeating a K once its speedup has "
                               "varied by at most this much on every prompt over its first 2+ "
                               "repeats; the others go on, interleaved as before")
        self.export_button = QPushButton("Save PNG…")
        self.export_button.setEnabled(False)
        self.save_button = QPushButton("Save JSON…")
        self.save_button.setEnabled(False)
        self.resume_button = QPushButton("Resume")
        self.resume_button.setEnabled(False)
        self.resume_button.setToolTip("Run only what a cancelled sweep has not (same fields)")
        self.progress = QProgressBar()
        self.status = QLabel("Sweeps K with the draft model at T = 0 beside the target alone.")
        self.status.setWordWrap(True)
        form = QFormLayout()
        form.addRow("K values", self.ks)
        form.addRow("Prompts", self.prompts)
        row = QHBoxLayout()
        row.addWidget(QLabel("Repeats"))
        row.addWidget(self.repeats)
        row.addWidget(QLabel("New tokens"))
        row.addWidget(self.tokens)
        row.addWidget(QLabel("Settle"))
        row.addWidget(self.settle)
        row.addStretch(1)
        row.addWidget(self.run_button)
        row.addWidget(self.cancel_button)
        row.addWidget(self.resume_button)
        row.addWidget(self.export_button)
        row.addWidget(self.save_button)
        form.addRow(row)

        self.plot = pg.PlotWidget(background="w")
        self.plot.setLabel("left", "speedup (×)")
        self.plot.setLabel("bottom", "K")
        # The key above the plot, not a legend inside it: inside, it covered points wherever
        # the speedup fell with K (the bundled pair on a busy CPU) or the best mark.
        self.plot.setTitle("Speedup over the target alone:&nbsp;&nbsp;"
                           f"<span style='color:{BLUE}'>● measured (geomean)</span>"
                           f"&nbsp;&nbsp;&nbsp;<span style='color:{ORANGE}'>□ predicted "
                           "E[tok/round] ÷ (K·c + v)</span>", size="10pt")
        self.plot.showGrid(y=True, alpha=0.2)
        self.measured = self.plot.plot([], [], pen=pg.mkPen(BLUE, width=3), symbol="o",
                                       symbolBrush=BLUE, name="measured (geomean)")
        self.predicted = self.plot.plot([], [], pen=pg.mkPen(ORANGE, width=2,
                                                             style=Qt.PenStyle.DashLine),
                                        symbol="s", symbolBrush=None, symbolPen=ORANGE,
                                        name="predicted E[tok/round] ÷ (K·c + v)")
        self.best = pg.ScatterPlotItem(size=26, pen=pg.mkPen("k", width=2), brush=None)
        self.plot.addItem(self.best)
        self.best_text = pg.TextItem(color="k", anchor=(-0.05, -0.2))
        self.plot.addItem(self.best_text)
        self.plot.addItem(pg.InfiniteLine(pos=1.0, angle=0, pen=pg.mkPen("#999",
                                                                         style=Qt.PenStyle.DotLine)))
        self.alpha_plot = pg.PlotWidget(background="w")
        self.alpha_plot.setLabel("left", "α")
        self.alpha_plot.setLabel("bottom", "K")
        self.alpha_plot.setYRange(0, 1)
        self.alpha = self.alpha_plot.plot([], [], pen=pg.mkPen(GREEN, width=2), symbol="t",
                                          symbolBrush=GREEN)
        self.table = QTableWidget(0, 8)
        self.table.setHorizontalHeaderLabels(["point", "α", "tok/round", "measured", "worst",
                                              "predicted", "gap", "c / v"])
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        self.table.verticalHeader().setVisible(False)

        plots = QSplitter(Qt.Orientation.Horizontal)
        plots.addWidget(self.plot)
        plots.addWidget(self.alpha_plot)
        plots.setSizes([700, 300])
        body = QSplitter(Qt.Orientation.Vertical)
        body.addWidget(plots)
        body.addWidget(self.table)
        body.setStretchFactor(0, 3)
        body.setStretchFactor(1, 2)
        body.setSizes([550, 450])  # shares of the height: the table shows its rows at 1366×768
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.progress)
        layout.addWidget(self.status)
        layout.addWidget(body, 1)

        self.points: list[Point] = []
        self.samples: list[Sample] = []
        self.total = 0
        self.n_prompts = 0
        self.repeat_count = 1
        self.t0 = 0.0
        self.result: SweepResult | None = None
        self.run_button.clicked.connect(self._on_run_clicked)
        self.export_button.clicked.connect(self._on_export_clicked)
        self.save_button.clicked.connect(self._on_save_clicked)
        self.resume_button.clicked.connect(self._on_resume_clicked)
        self.last_job: SweepJob | None = None
        self.resumed_from = 0
        self.settle_spread: float | None = None

    def job(self) -> SweepJob | None:
        """The sweep the fields ask for, or None (the reason in the status line)."""
        try:
            ks = [int(x) for x in self.ks.text().replace(" ", "").split(",") if x]
        except ValueError:
            self.status.setText("K values: comma-separated whole numbers, e.g. 1,2,4,8.")
            return None
        if not ks or any(not 1 <= k <= 16 for k in ks):
            self.status.setText("K values must be between 1 and 16.")
            return None
        prompts = tuple(p.strip() for p in self.prompts.toPlainText().splitlines() if p.strip())
        if not prompts:
            self.status.setText("Type at least one prompt (one per line).")
            return None
        base = replace(_base(), drafter="model", k_policy="fixed",
                       max_new_tokens=self.tokens.value())
        points = tuple(Point(f"K {k}", replace(base, k=k)) for k in sorted(set(ks)))
        settle = self.settle.value() / 100 or None  # 0: off
        return SweepJob(points, prompts, self.repeats.value(), settle=settle)

    def _on_run_clicked(self) -> None:
        job = self.job()
        if job is None:
            return
        self.start(job, [])

    def _on_resume_clicked(self) -> None:
        job = self.last_job
        if job is None or self.job() != job:  # the fields changed: a new sweep, not this one
            self.status.setText("The fields changed since the cancelled sweep: Run starts anew.")
            self.resume_button.setEnabled(False)
            return
        kept = list(self.samples)
        self.start(replace(job, done=frozenset(s.key for s in kept), earlier=tuple(kept)), kept)

    def start(self, job: SweepJob, kept: list[Sample]) -> None:
        self.last_job = replace(job, done=frozenset(), earlier=())
        self.resume_button.setEnabled(False)
        self.points, self.samples = list(job.points), kept
        self.resumed_from = len(kept)
        self.n_prompts, self.repeat_count = len(job.prompts), job.repeats
        self.settle_spread = job.settle
        self.total = self.planned()
        self.progress.setRange(0, self.total)
        self.progress.setValue(len(kept))
        self.t0 = time.monotonic()
        self.status.setText(f"Running {self.total} runs (the first loads the models)…")
        self.running(True)
        self.requested.emit(job)

    def add(self, sample: Sample) -> None:
        """One more run: update the figures, the plot and the time left."""
        self.samples.append(sample)
        done = len(self.samples)
        self.total = self.planned()  # fewer once a point settles
        self.progress.setRange(0, self.total)
        self.progress.setValue(done)
        left = (time.monotonic() - self.t0) / (done - self.resumed_from) * (self.total - done)
        name = "target alone" if sample.point == BASELINE else self.points[sample.point].label
        self.status.setText(f"{done}/{self.total}: {name}, prompt {sample.prompt + 1} — about "
                            f"{left:.0f} s left")
        self.show_result(summarize(self.points, self.samples, self.repeat_count,
                                   self.n_prompts, self.settle_spread))

    def planned(self) -> int:
        """Runs the sweep takes, given what it has (its settled points run no more)."""
        return planned_runs(len(self.points), self.samples, self.repeat_count, self.n_prompts,
                            self.settle_spread)

    def show_result(self, result: SweepResult) -> None:
        self.result = result
        self.export_button.setEnabled(result.samples > 0)
        self.save_button.setEnabled(result.samples > 0)
        rows = result.rows
        ks = [r.k for r in rows]
        meas = [(k, r.speedup) for k, r in zip(ks, rows, strict=True) if r.speedup > 0]
        pred = [(k, r.predicted) for k, r in zip(ks, rows, strict=True) if r.predicted > 0]
        self.measured.setData([x for x, _ in meas], [y for _, y in meas])
        self.predicted.setData([x for x, _ in pred], [y for _, y in pred])
        alpha = [(k, r.alpha) for k, r in zip(ks, rows, strict=True) if r.runs]
        self.alpha.setData([x for x, _ in alpha], [y for _, y in alpha])
        ticks = [[(k, str(k)) for k in sorted(set(ks))]]  # K is whole: no 1.5 or 2.5
        self.plot.getAxis("bottom").setTicks(ticks)
        self.alpha_plot.getAxis("bottom").setTicks(ticks)
        if result.best is not None:
            b = rows[result.best]
            self.best.setData([b.k], [b.speedup])
            self.best_text.setText(f"best K {b.k}: {b.speedup:.2f}× (predicted "
                                   f"{b.predicted:.2f}×, gap {100 * b.gap:+.0f}%)")
            right_half = result.best >= len(rows) / 2
            self.best_text.setAnchor((1.05, -0.2) if right_half else (-0.05, -0.2))
            self.best_text.setPos(b.k, b.speedup)
        self.table.setRowCount(len(rows))
        for i, r in enumerate(rows):
            cells = [r.label + (" ★" if i == result.best else ""), f"{r.alpha:.2f}",
                     f"{r.tokens_per_round:.2f}", f"{r.speedup:.2f}×", f"{r.worst:.2f}×",
                     f"{r.predicted:.2f}×", f"{100 * r.gap:+.0f}%", f"{r.c:.2f} / {r.v:.2f}"]
            for j, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setFlags(item.flags() & ~Qt.ItemFlag.ItemIsEditable)
                self.table.setItem(i, j, item)

    def ended(self, cancelled: bool) -> None:
        super().ended(cancelled)
        done = len(self.samples)
        self.status.setText(f"Cancelled after {done}/{self.total} runs: the figures are of "
                            "those (Resume runs the rest)." if cancelled else
                            f"Done: {done} runs.")
        self.resume_button.setEnabled(cancelled and done < self.total)

    def _on_export_clicked(self) -> None:
        if self.result is None:
            return
        path, _ = QFileDialog.getSaveFileName(self, "Save the sweep plot", "sweep.png",
                                              "PNG (*.png)")
        if path:
            self.export_png(path)

    def _on_save_clicked(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Save the sweep", "sweep.json",
                                              "JSON (*.json)")
        if path:
            self.save_json(path)

    def save_json(self, path: str) -> None:
        """Rows and every run (``specviz-explore sweep --resume`` takes it)."""
        from specviz.core.sweep import to_json

        assert self.result is not None
        try:
            Path(path).write_text(to_json(self.result), encoding="utf-8")
        except OSError as exc:
            self.status.setText(f"Could not save {path}: {exc.strerror or exc}")

    def export_png(self, path: str) -> None:
        from specviz.explore_plot import sweep_png

        assert self.result is not None
        sweep_png(self.result, path)


class LinePanel(JobPanel):
    """Up to four configurations; lanes replayed on one clock; the end card."""

    TICK_MS = 40

    def __init__(self) -> None:
        super().__init__("Run lineup")
        self.prompt = QLineEdit(DEFAULT_PROMPT)
        defaults = ["k=2 drafter=model k_policy=fixed", "k=8 drafter=model k_policy=fixed",
                    "k_policy=cost", ""]
        self.configs = [QLineEdit(text) for text in defaults]
        for edit in self.configs:
            edit.setPlaceholderText("key=value … (draft=PATH for another draft model; "
                                    "empty: no lane)")
        self.tokens = QSpinBox(minimum=8, maximum=512, value=64)
        self.replay_button = QPushButton("Replay on one clock")
        self.replay_button.setEnabled(False)
        self.open_button = QPushButton("Open…")
        self.save_button = QPushButton("Save…")
        self.save_button.setEnabled(False)
        self.export_button = QPushButton("Export…")
        self.export_button.setToolTip("The lineup as a GIF (every lane on one clock), a PNG of "
                                      "its end, or an HTML page of every lane's tokens")
        self.export_button.setEnabled(False)
        export_menu = QMenu(self.export_button)
        export_menu.addAction("Animated GIF…", lambda: self._export("GIF", "gif",
                                                                    self.export_gif))
        export_menu.addAction("PNG of the end…", lambda: self._export("PNG", "png",
                                                                      self.export_png))
        export_menu.addAction("HTML page…", lambda: self._export("HTML", "html",
                                                                 self.export_html))
        self.export_button.setMenu(export_menu)
        self.gif_job: Any = None
        self.status = QLabel("Each lane runs after the other (they would share the cores), then "
                             "all replay together from their own timestamps.")
        self.status.setWordWrap(True)
        form = QFormLayout()
        form.addRow("Prompt", self.prompt)
        for i, edit in enumerate(self.configs):
            form.addRow(f"Lane {i + 1}", edit)
        row = QHBoxLayout()
        row.addWidget(QLabel("New tokens"))
        row.addWidget(self.tokens)
        row.addStretch(1)
        row.addWidget(self.run_button)
        row.addWidget(self.cancel_button)
        row.addWidget(self.replay_button)
        row.addWidget(self.open_button)
        row.addWidget(self.save_button)
        row.addWidget(self.export_button)
        form.addRow(row)
        self.view = LineupView()
        self.card = QTableWidget(0, 6)
        self.card.setHorizontalHeaderLabels(["rank", "lane", "tok/s", "tok/round", "speedup",
                                             "identical"])
        card_header = self.card.horizontalHeader()
        card_header.setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        card_header.setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)  # lane
        self.card.verticalHeader().setVisible(False)
        self.card.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 8)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.status)
        layout.addWidget(self.view)
        layout.addWidget(self.card, 1)
        self.events: list[Event] = []
        self.lineup: Lineup | None = None
        self.t = 0.0
        self.timer = QTimer(self)
        self.timer.setInterval(self.TICK_MS)
        self.timer.timeout.connect(self._on_timer_timeout)
        self.run_button.clicked.connect(self._on_run_clicked)
        self.replay_button.clicked.connect(self.replay)
        self.open_button.clicked.connect(self._on_open_clicked)
        self.save_button.clicked.connect(self._on_save_clicked)

    def job(self) -> LineupJob | None:
        from specviz.core.errors import InputError
        from specviz.explore_cli import parse_lane

        base = replace(_base(), max_new_tokens=self.tokens.value())
        lanes = []
        for i, edit in enumerate(self.configs):
            if edit.text().strip():
                try:
                    settings, draft = parse_lane(edit.text(), base)
                    lanes.append(LaneSpec(settings, draft=draft))
                except InputError as exc:
                    self.status.setText(f"Lane {i + 1}: {exc}")
                    return None
        if not lanes:
            self.status.setText("Fill in at least one lane (e.g. k=4).")
            return None
        lanes.append(LaneSpec(base, mode="baseline"))
        return LineupJob(tuple(lanes), self.prompt.text())

    def _on_run_clicked(self) -> None:
        job = self.job()
        if job is None:
            return
        self.events = []
        self.lineup = None
        self.timer.stop()
        self.card.setRowCount(0)
        self.save_button.setEnabled(False)
        self.export_button.setEnabled(False)
        self.replay_button.setEnabled(False)
        names = [" ".join(e.text().split()) for e in self.configs if e.text().strip()]
        self.view.make_lanes([*names, "target alone"], job.lanes[0].settings.max_new_tokens)
        self.status.setText(f"Running {len(job.lanes)} lanes one after the other…")
        self.running(True)
        self.requested.emit(job)

    def add(self, event: Event) -> None:
        """A lane's event as it runs: its bar fills (the live run, before the replay)."""
        self.events.append(event)
        lane = sum(1 for e in self.events if type(e).__name__ == "RunStarted") - 1
        if not 0 <= lane < len(self.view.bars):
            return
        _, bar, speed = self.view.bars[lane]
        n = getattr(event, "n_generated", None)
        if n is not None:
            bar.setValue(n)
            speed.setText("running")
        elif isinstance(event, RunFinished):
            speed.setText(f"{event.summary.tokens_per_s:.1f} tok/s")
        elif isinstance(event, RunFailed):
            speed.setText("failed")
            self.status.setText(event.message)

    def ended(self, cancelled: bool) -> None:
        super().ended(cancelled)
        self.lineup = as_lineup(self.events)
        if self.lineup is None or not self.lineup.complete:
            self.status.setText("Cancelled: no lineup to replay." if cancelled else
                                "The lineup did not finish: " + self.status.text())
            return
        self.replay_button.setEnabled(True)
        self.save_button.setEnabled(True)
        self.export_button.setEnabled(True)
        self.view.load(self.lineup)
        self.fill_card(self.lineup)
        self.status.setText(f"{len(self.lineup.lanes)} lanes, replayed on one clock from their "
                            "own timestamps; the card ranks them by measured speed.")
        self.replay()

    def _on_open_clicked(self) -> None:
        path = _pick_recording(self, "Open a lineup or race recording")
        if path:
            self.open_recording(path)

    def open_recording(self, path: str) -> bool:
        """Show a saved lineup (or race); a file that is none says why in the status line."""
        events = _read_or_say(path, self.status)
        if events is None:
            return False
        lineup = as_lineup(events)
        if lineup is None or not lineup.complete:
            self.status.setText(f"{Path(path).name}: not a finished lineup (2-5 runs of one "
                                "prompt, target, seed and token budget).")
            return False
        self.timer.stop()
        self.events = list(events)
        self.ended(False)
        self.status.setText(f"{Path(path).name}: {len(lineup.lanes)} lanes.")
        return True

    def _on_save_clicked(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Save the lineup recording", "lineup.jsonl",
                                              "Recordings (*.jsonl)")
        if path:
            self.save_recording(path)

    def save_recording(self, path: str) -> None:
        from specviz.core.events import to_json

        try:
            Path(path).write_text("".join(to_json(e) + "\n" for e in self.events),
                                  encoding="utf-8")
        except OSError as exc:
            self.status.setText(f"Could not save {path}: {exc.strerror or exc}")

    def _export(self, kind: str, suffix: str, write: Callable[[str], bool]) -> None:
        path, _ = QFileDialog.getSaveFileName(self, f"Export the lineup as {kind}",
                                              f"lineup.{suffix}", f"{kind} (*.{suffix})")
        if path:
            write(path)

    def export_png(self, path: str, size: tuple[int, int] = (1920, 1080)) -> bool:
        """The lineup's end, as a slide (every lane done, ranked)."""
        from specviz.gui.stage.export import final_frame, writable_problem

        problem = writable_problem(path)
        if problem or not final_frame(self.events, size).save(path):
            self.status.setText(problem or f"Could not save {Path(path).name}.")
            return False
        self.status.setText(f"Saved {Path(path).name}.")
        return True

    def export_html(self, path: str) -> bool:
        """Every lane's tokens, coloured by fate, under the ranking."""
        from specviz.gui.stage.export import export_lineup_html

        assert self.lineup is not None
        try:
            export_lineup_html(self.lineup, path)
        except OSError as exc:
            self.status.setText(f"Could not save {Path(path).name}: {exc.strerror or exc}")
            return False
        self.status.setText(f"Saved {Path(path).name}.")
        return True

    def export_gif(self, path: str, size: tuple[int, int] = (1920, 1080)) -> bool:
        """The lineup played on one clock, drawn a frame per tick (the window stays live)."""
        from specviz.gui.stage.export import AnimationJob

        if self.gif_job is not None and self.gif_job.running:
            self.status.setText("A GIF is being written; wait for it to finish.")
            return False
        job = AnimationJob(self.events, path, size, parent=self)
        job.drawn.connect(lambda n, total: self.status.setText(
            f"Drawing {Path(path).name}: frame {n}/{total}…"))
        job.finished.connect(lambda p, n: self.status.setText(
            f"Saved {Path(p).name} ({n} frames)."))
        job.failed.connect(self.status.setText)
        self.gif_job = job
        return job.start()

    def fill_card(self, lineup: Lineup) -> None:
        ranked = lineup.ranking()
        self.card.setRowCount(len(ranked))
        for i, lane in enumerate(ranked):
            s = lane.finished.summary if lane.finished is not None else None
            same = lineup.identical(lane)
            speedup = lineup.speedup(lane)
            cells = [str(i + 1), lineup.label(lane),
                     f"{s.tokens_per_s:.1f}" if s else "-",
                     f"{s.mean_tokens_per_round:.2f}" if s else "-",
                     f"{speedup:.2f}×" if speedup else "-",
                     "-" if same is None else "yes" if same else "NO"]
            for j, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setFlags(item.flags() & ~Qt.ItemFlag.ItemIsEditable)
                self.card.setItem(i, j, item)

    def replay(self) -> None:
        """Play every lane from t = 0 on one clock (the runs' own times, not arrival times)."""
        if self.lineup is None:
            return
        self.t = 0.0
        self.show_at(0.0)
        self.timer.start()

    def show_at(self, t: float) -> None:
        self.view.show_at(t)

    def _on_timer_timeout(self) -> None:
        if self.lineup is None:
            self.timer.stop()
            return
        self.t = min(self.lineup.duration_s, self.t + self.TICK_MS / 1000)
        self.show_at(self.t)
        if self.t >= self.lineup.duration_s:
            self.timer.stop()


class DiagnosePanel(JobPanel):
    """Where the draft goes wrong in a recording, the lineup just run, or a prompt file run
    here (read as the Prompt set tab reads it; one speculative run per prompt): the tokens
    rejected most, acceptance against q(x) beside the diagonal, by position. A row lists the
    rounds where its token was rejected; given ``show_round`` (the main window's), each of
    them opens there, replayed up to that round and paused."""

    def __init__(self, show_round: Callable[[list[Event], int, str], None] | None = None
                 ) -> None:
        super().__init__("Run prompts")
        self.show_round = show_round
        self.open_button = QPushButton("Open recording…")
        self.use_lineup_button = QPushButton("Use the lineup")
        self.status = QLabel("Open a recording (a run, a race, a lineup), use the lineup run in "
                             "the Lineup tab, or run a prompt file here.")
        self.status.setWordWrap(True)
        top = QHBoxLayout()
        top.addWidget(self.status, 1)
        top.addWidget(self.use_lineup_button)
        top.addWidget(self.open_button)
        self.path, self.browse_button, self.per_category = prompt_file_fields(self)
        self.new_tokens = QSpinBox(minimum=8, maximum=512, value=64)
        # T > 0 by default: at T = 0 the draft's q is one-hot, the calibration plot one point.
        self.config = QLineEdit("drafter=model k=4 k_policy=fixed temperature=0.8")
        self.config.setPlaceholderText("key=value … (e.g. k=4)")
        self.config.setToolTip("How each prompt runs: key=value pairs, as in the Prompt set tab")
        form = QFormLayout()
        file_row = QHBoxLayout()
        file_row.addWidget(self.path, 1)
        file_row.addWidget(self.browse_button)
        file_row.addWidget(QLabel("Per category"))
        file_row.addWidget(self.per_category)
        form.addRow("Prompt file", file_row)
        run_row = QHBoxLayout()
        run_row.addWidget(self.config, 1)
        run_row.addWidget(QLabel("New tokens"))
        run_row.addWidget(self.new_tokens)
        run_row.addWidget(self.run_button)
        run_row.addWidget(self.cancel_button)
        form.addRow("Configuration", run_row)
        self.tokens = QTableWidget(0, 5)
        self.tokens.setHorizontalHeaderLabels(["token", "rejected", "tested", "mean p(x)",
                                               "mean q(x)"])
        header = self.tokens.horizontalHeader()
        # Every heading and token whole at 1366×768 (five equal stretched shares cut "mean
        # p(x)" and the tokens): each column as wide as it needs, the pane as wide as they.
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(True)
        self._fit_tokens()
        self.tokens.verticalHeader().setVisible(False)
        self.tokens.setSelectionBehavior(QTableWidget.SelectionBehavior.SelectRows)
        self.detail = QLabel(self.HINT)
        self.detail.setWordWrap(True)
        self.detail.setTextFormat(Qt.TextFormat.RichText)
        self.detail.setAlignment(Qt.AlignmentFlag.AlignTop)
        self.detail.linkActivated.connect(self._on_detail_link_activated)
        self.show_button = QPushButton("Show in the main window")
        self.show_button.setToolTip("The main window replays the run up to the first round "
                                    "listed and pauses there (each round listed is a link too)")
        self.show_button.setVisible(show_round is not None)
        self.show_button.setEnabled(False)
        self.calibration = pg.PlotWidget(background="w")
        self.calibration.setLabel("bottom", "draft's confidence q(x)")
        self.calibration.setLabel("left", "P(kept)")
        self.calibration.setXRange(0, 1)
        self.calibration.setYRange(0, 1)
        self.calibration.plot([0, 1], [0, 1], pen=pg.mkPen("#999", style=Qt.PenStyle.DashLine))
        self.curve = self.calibration.plot([], [], pen=pg.mkPen(BLUE, width=2), symbol="o",
                                           symbolBrush=BLUE)
        self.positions = pg.PlotWidget(background="w")
        self.positions.setLabel("bottom", "draft position")
        self.positions.setLabel("left", "P(kept | reached)")
        self.positions.setYRange(0, 1)
        self.position_bars = pg.BarGraphItem(x=[], height=[], width=0.6, brush=GREEN)
        self.positions.addItem(self.position_bars)
        left = QSplitter(Qt.Orientation.Vertical)
        left.addWidget(self.tokens)
        rounds = QWidget()
        rounds_layout = QVBoxLayout(rounds)
        rounds_layout.setContentsMargins(0, 0, 0, 0)
        detail_scroll = QScrollArea()  # a token rejected in many rounds lists them all
        detail_scroll.setWidgetResizable(True)
        detail_scroll.setWidget(self.detail)
        rounds_layout.addWidget(detail_scroll, 1)
        rounds_layout.addWidget(self.show_button)
        left.addWidget(rounds)
        right = QSplitter(Qt.Orientation.Vertical)
        right.addWidget(self.calibration)
        right.addWidget(self.positions)
        body = QSplitter(Qt.Orientation.Horizontal)
        body.addWidget(left)
        body.addWidget(right)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addLayout(form)
        layout.addWidget(body, 1)
        self.events: list[Event] = []
        self.rows: list[Any] = []
        self.name = ""  # what the events are (a file's name, "the lineup")
        self.run_names: list[str] = []  # each run's own name, where known (a prompt's)
        self.items: tuple[PromptItem, ...] = ()  # the prompts being run
        self._summary = ""  # the status line of what is shown (a run's end restores it)
        self.open_button.clicked.connect(self._on_open_clicked)
        self.run_button.clicked.connect(self._on_run_clicked)
        self.show_button.clicked.connect(self._on_show_clicked)
        self.tokens.currentCellChanged.connect(self._on_tokens_current_cell_changed)

    HINT = "Click a token to see the rounds where it was rejected."

    def _fit_tokens(self) -> None:
        """The token table's pane as wide as its columns need (at most 480 px: a longer token
        elides), so the splitter never cuts a heading or a short token."""
        table = self.tokens
        need = sum(max(table.horizontalHeader().sectionSizeHint(j), table.sizeHintForColumn(j))
                   for j in range(table.columnCount()))
        table.setMinimumWidth(min(480, need + 2 * table.frameWidth()
                                  + table.verticalScrollBar().sizeHint().width()))

    def _on_open_clicked(self) -> None:
        path = _pick_recording(self, "Open a recording")
        if path:
            self.open_recording(path)

    def open_recording(self, path: str) -> bool:
        events = _read_or_say(path, self.status)
        if events is None:
            return False
        self.show_events(events, Path(path).name)
        return True

    # -- a prompt file, run here -------------------------------------------------------------

    def job(self) -> DiagnoseJob | None:
        """The prompts and the run the fields ask for, or None (the reason in the status)."""
        from specviz.core.errors import InputError
        from specviz.explore_cli import parse_config

        try:
            items = read_prompt_items(self.path.text(), self.per_category.value())
        except PromptSetError as exc:
            self.status.setText(str(exc))
            return None
        base = replace(_base(), max_new_tokens=self.new_tokens.value())
        try:
            settings = parse_config(self.config.text(), base)
        except InputError as exc:
            self.status.setText(f"Configuration: {exc}")
            return None
        return DiagnoseJob(tuple(items), settings)

    def _on_run_clicked(self) -> None:
        job = self.job()
        if job is None:
            return
        self.items = job.items
        self.show_events([], Path(self.path.text().strip()).name, [])
        self.status.setText(f"{self.name}: running {len(job.items)} prompts (the first loads "
                            "the models)…")
        self.running(True)
        self.requested.emit(job)

    def running(self, on: bool) -> None:
        """While prompts run, what is shown is theirs: no recording or lineup replaces it."""
        super().running(on)
        self.open_button.setEnabled(not on)
        self.use_lineup_button.setEnabled(not on)

    def add_run(self, events: list[Event]) -> None:
        """One prompt's run done: the figures and the table are of every run so far."""
        item = self.items[len(self.run_names)] if len(self.run_names) < len(self.items) \
            else None
        names = [*self.run_names, f"prompt {item.id}, {item.category}" if item else "a run"]
        self.show_events([*self.events, *events], self.name, names)
        self.status.setText(f"{len(names)}/{len(self.items)} prompts: " + self.status.text())

    def ended(self, cancelled: bool) -> None:
        super().ended(cancelled)
        done, total = len(self.run_names), len(self.items)
        if cancelled:
            self.status.setText(f"Cancelled after {done}/{total} prompts: the figures are of "
                                f"those. {self._summary}")
        elif done < total:  # the worker failed: its message is in the status line
            self.status.setText(f"Stopped after {done}/{total} prompts: {self.status.text()}")
        else:
            self.status.setText(f"Done: {done} prompts. {self._summary}")

    # -- what the events show ----------------------------------------------------------------

    def show_events(self, events: Sequence[Event], name: str,
                    run_names: Sequence[str] = ()) -> None:
        """Diagnose ``events`` (one run or several) from ``name``; ``run_names``: each run's
        own (a prompt's), else its settings name it."""
        from specviz.core.diagnose import diagnose

        d = diagnose(events)
        self.events = list(events)
        self.name = name
        self.run_names = list(run_names)
        self.rows = list(d.tokens)
        drafters = ", ".join(f"{n} α {k / t:.2f} ({k}/{t})" if t else n
                             for n, t, k in d.drafters)
        self._summary = f"{name}: {d.tested} tested drafts" + \
            (f"; by drafter: {drafters}" if drafters else "")
        self.status.setText(self._summary)
        self.tokens.setRowCount(len(self.rows))
        for i, t in enumerate(self.rows):
            shown = t.text.replace("\n", "↵").replace(" ", "␣") or "∅"  # spaces seen
            cells = [shown, str(t.rejected),
                     str(t.tested), f"{t.mean_p:.3f}", f"{t.mean_q:.3f}"]
            for j, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setFlags(item.flags() & ~Qt.ItemFlag.ItemIsEditable)
                self.tokens.setItem(i, j, item)
        self._fit_tokens()
        bins = [b for b in d.calibration if b.tested]
        if bins and all(b.low >= 0.9 for b in bins):
            self._summary += (". At T = 0 (or with lookup) q is one-hot: the calibration plot "
                              "needs a run at T > 0.")
            self.status.setText(self._summary)
        self.curve.setData([b.mean_q for b in bins], [b.acceptance for b in bins])
        self.position_bars.setOpts(x=list(range(1, len(d.positions) + 1)),
                                   height=[k / n if n else 0.0 for n, k in d.positions])
        # Positions are whole: no 1.5 or 2.5 between the bars (pyqtgraph's own ticks).
        self.positions.getAxis("bottom").setTicks(
            [integer_ticks(len(d.positions), most=9, first=1, cover=False)]
            if d.positions else None)
        self.detail.setText(self.HINT)
        self.show_button.setEnabled(False)

    def _on_tokens_current_cell_changed(self, row: int, *_: int) -> None:
        if 0 <= row < len(self.rows):
            self.detail.setText(self.rounds_text(self.rows[row]))
            self.show_button.setEnabled(bool(self.rows[row].rounds))

    def _run_name(self, run: int, label: str) -> str:
        return self.run_names[run] if run < len(self.run_names) else label

    def rounds_text(self, token: Any) -> str:
        """The rounds where ``token`` was rejected: the text before it, it struck, the fix.
        With ``show_round``, each round's heading links to it in the main window."""
        from html import escape

        from specviz.core.lineup import split_runs

        runs = split_runs(self.events)
        lines = []
        for run, index in token.rounds[:12]:
            if run >= len(runs):
                continue
            side = runs[run]
            before = "".join(r.appended_text for r in side.rounds[:index])[-60:]
            rnd = side.rounds[index]
            heading = (f"run {run + 1} ({escape(self._run_name(run, side.label))}), "
                       f"round {index + 1}")
            if self.show_round is not None:
                heading = f"<a href='round:{run}:{index}'>{heading}</a>"
            lines.append(f"<b>{heading}:</b> …{escape(before)}{lane_html([rnd])}")
        more = len(token.rounds) - 12
        return "<br>".join(lines) + (f"<br>… and {more} more" if more > 0 else "")

    # -- to the main window ------------------------------------------------------------------

    def _on_show_clicked(self) -> None:
        row = self.tokens.currentRow()
        if 0 <= row < len(self.rows) and self.rows[row].rounds:
            self.show_in_main(*self.rows[row].rounds[0])

    def _on_detail_link_activated(self, link: str) -> None:
        kind, _, where = link.partition(":")
        run, _, index = where.partition(":")
        if kind == "round" and run.isdigit() and index.isdigit():
            self.show_in_main(int(run), int(index))

    def show_in_main(self, run: int, index: int) -> None:
        """The main window shows run ``run``'s events up to its round ``index`` (0-based)."""
        from specviz.core.lineup import split_runs

        runs = split_runs(self.events)
        if self.show_round is None or not 0 <= run < len(runs):
            return
        side = runs[run]
        self.show_round(side.events, index,
                        f"{self.name}, run {run + 1} ({self._run_name(run, side.label)})")


class SetPanel(JobPanel):
    """A prompt file run beside the target alone: progress, Cancel, the table by category
    (filled as prompts finish), exported as CSV, Markdown or PNG."""

    def __init__(self) -> None:
        super().__init__("Run set")
        self.path, self.browse_button, self.per_category = prompt_file_fields(self)
        self.tokens = QSpinBox(minimum=8, maximum=512, value=64)
        self.configs = [QLineEdit("drafter=hybrid k_policy=cost"),
                        QLineEdit("drafter=model k=4 k_policy=fixed")]
        for edit in self.configs:
            edit.setPlaceholderText("key=value … (empty: none)")
        self.resume_button = QPushButton("Resume")
        self.resume_button.setEnabled(False)
        self.resume_button.setToolTip("Run only the prompts a cancelled set has not (same "
                                      "fields)")
        self.csv_button = QPushButton("Save CSV…")
        self.markdown_button = QPushButton("Save Markdown…")
        self.png_button = QPushButton("Save PNG…")
        self.exports = (self.csv_button, self.markdown_button, self.png_button)
        for button in self.exports:
            button.setEnabled(False)
        self.progress = QProgressBar()
        self.status = QLabel("Each prompt runs with every configuration and the target alone "
                             "(same seed, one after the other); the table sums them by "
                             "category.")
        self.status.setWordWrap(True)
        form = QFormLayout()
        file_row = QHBoxLayout()
        file_row.addWidget(self.path, 1)
        file_row.addWidget(self.browse_button)
        form.addRow("Prompt file", file_row)
        for i, edit in enumerate(self.configs):
            form.addRow(f"Configuration {i + 1}", edit)
        row = QHBoxLayout()
        row.addWidget(QLabel("Per category"))
        row.addWidget(self.per_category)
        row.addWidget(QLabel("New tokens"))
        row.addWidget(self.tokens)
        row.addStretch(1)
        row.addWidget(self.run_button)
        row.addWidget(self.cancel_button)
        row.addWidget(self.resume_button)
        for button in self.exports:
            row.addWidget(button)
        form.addRow(row)
        from specviz.core.promptset import HEADER

        self.table = QTableWidget(0, len(HEADER))
        self.table.setHorizontalHeaderLabels(list(HEADER))
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)  # the configuration
        self.table.verticalHeader().setVisible(False)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.progress)
        layout.addWidget(self.status)
        layout.addWidget(self.table, 1)

        self.results: list[PromptResult] = []
        self.outcomes: list[PromptOutcome] = []  # one per prompt done (its results or skipped)
        self.rows: list[Any] = []
        self.total = 0
        self.per_prompt = 1  # results per prompt: the configurations and the target alone
        self.t0 = 0.0
        self.name = ""
        self.last_job: SetJob | None = None
        self.resumed_from = 0
        self.run_button.clicked.connect(self._on_run_clicked)
        self.resume_button.clicked.connect(self._on_resume_clicked)
        self.csv_button.clicked.connect(lambda: self._save("CSV", "csv", self.save_csv))
        self.markdown_button.clicked.connect(lambda: self._save("Markdown", "md",
                                                                self.save_markdown))
        self.png_button.clicked.connect(lambda: self._save("PNG", "png", self.save_png))

    def job(self) -> SetJob | None:
        """The run the fields ask for, or None (the reason in the status line)."""
        from specviz.core.errors import InputError
        from specviz.explore_cli import config_label, parse_config

        path = self.path.text().strip()
        try:
            items = read_prompt_items(path, self.per_category.value())
        except PromptSetError as exc:
            self.status.setText(str(exc))
            return None
        base = replace(_base(), max_new_tokens=self.tokens.value())
        configs = []
        for i, edit in enumerate(self.configs):
            if edit.text().strip():
                try:
                    configs.append((config_label(edit.text()), parse_config(edit.text(), base)))
                except InputError as exc:
                    self.status.setText(f"Configuration {i + 1}: {exc}")
                    return None
        if not configs:
            self.status.setText("Fill in at least one configuration (e.g. k=4).")
            return None
        self.name = Path(path).name
        return SetJob(tuple(items), tuple(configs))

    def _on_run_clicked(self) -> None:
        job = self.job()
        if job is not None:
            self.start(job)

    def _on_resume_clicked(self) -> None:
        job = self.last_job
        if job is None or self.job() != job:  # the fields changed: a new set, not this one
            self.status.setText("The fields changed since the cancelled set: Run starts anew.")
            self.resume_button.setEnabled(False)
            return
        kept = list(self.outcomes)
        self.start(replace(job, done=frozenset(o.item for o in kept)), kept)

    def start(self, job: SetJob, kept: Sequence[PromptOutcome] = ()) -> None:
        """Run ``job``; ``kept``: the outcomes of a cancelled set it resumes (its ``done``)."""
        self.last_job = replace(job, done=frozenset())
        self.resume_button.setEnabled(False)
        self.outcomes = list(kept)
        self.results = [r for o in self.outcomes for r in o.results]
        self.resumed_from = len(self.outcomes)
        self.rows = []
        self.table.setRowCount(0)
        for button in self.exports:
            button.setEnabled(False)
        if self.outcomes:
            self.show_table()
        self.total = len(job.items)
        self.per_prompt = len(job.configs) + 1
        self.progress.setRange(0, self.total)
        self.progress.setValue(len(self.outcomes))
        self.t0 = time.monotonic()
        self.status.setText(f"{self.name}: {self.total} prompts × ({len(job.configs)} "
                            f"configurations + the target alone) = {self.total * self.per_prompt}"
                            " runs" + (f", {len(kept)} prompts kept from before" if kept else "")
                            + " (the first loads the models)…")
        self.running(True)
        self.requested.emit(job)

    @property
    def done(self) -> int:
        """Prompts finished, skipped ones included (a prompt's results arrive together)."""
        return len(self.outcomes)

    @property
    def skipped(self) -> str:
        """``"skipped 1: prompt 242: …"`` ("" when none was)."""
        from specviz.core.promptset import skipped_line

        return skipped_line(self.outcomes)

    def add(self, outcome: PromptOutcome) -> None:
        """One prompt done: its results join the table, or it shows as skipped with why."""
        self.outcomes.append(outcome)
        self.results.extend(outcome.results)
        done = self.done
        self.progress.setValue(done)
        left = (time.monotonic() - self.t0) / (done - self.resumed_from) * (self.total - done)
        what = f"skipped ({outcome.skipped})" if outcome.skipped is not None else "done"
        self.status.setText(f"{done}/{self.total} prompts: {outcome.item.category} "
                            f"{outcome.item.id} {what} — about {left:.0f} s left")
        self.show_table()

    def show_table(self) -> None:
        from specviz.core.promptset import cells, table

        self.rows = table(self.results)
        skipped = [o for o in self.outcomes if o.skipped is not None]
        self.table.clearSpans()
        self.table.setRowCount(len(self.rows) + len(skipped))
        for i, o in enumerate(skipped, len(self.rows)):  # under the table: which and why
            for j, text in enumerate([o.item.category, f"skipped: prompt {o.item.id}", "0",
                                      o.skipped or ""]):
                item = QTableWidgetItem(text)
                item.setFlags(item.flags() & ~Qt.ItemFlag.ItemIsEditable)
                item.setToolTip(o.skipped or "")
                self.table.setItem(i, j, item)
            self.table.setSpan(i, 3, 1, self.table.columnCount() - 3)
        for i, row in enumerate(self.rows):
            for j, text in enumerate(cells(row)):
                item = QTableWidgetItem(text)
                item.setFlags(item.flags() & ~Qt.ItemFlag.ItemIsEditable)
                if j >= 2:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight
                                          | Qt.AlignmentFlag.AlignVCenter)
                self.table.setItem(i, j, item)
        for button in self.exports:
            button.setEnabled(bool(self.rows))

    def ended(self, cancelled: bool) -> None:
        super().ended(cancelled)
        done = self.done
        skipped = (f" {self.skipped[0].upper()}{self.skipped[1:].rstrip('.')}."
                   if self.skipped else "")  # the reason's own full stop, not two
        self.resume_button.setEnabled(done < self.total)
        if cancelled:
            self.status.setText(f"Cancelled after {done}/{self.total} prompts: the table is of "
                                f"those (Resume runs the rest).{skipped}")
        elif done < self.total:  # the worker failed: its message is in the status line
            self.status.setText(f"Stopped after {done}/{self.total} prompts: "
                                f"{self.status.text()}")
        else:
            self.status.setText(f"Done: {done} prompts, {len(self.results)} runs.{skipped}")

    def _save(self, kind: str, suffix: str, write: Callable[[str], bool]) -> None:
        stem = Path(self.name).stem or "promptset"
        path, _ = QFileDialog.getSaveFileName(self, f"Save the table as {kind}",
                                              f"{stem}.{suffix}", f"{kind} (*.{suffix})")
        if path:
            write(path)

    def _write(self, path: str, text: str) -> bool:
        try:
            Path(path).write_text(text, encoding="utf-8")
        except OSError as exc:
            self.status.setText(f"Could not save {Path(path).name}: {exc.strerror or exc}")
            return False
        return True

    def save_csv(self, path: str) -> bool:
        from specviz.core.promptset import to_csv

        return self._write(path, to_csv(self.rows))

    def save_markdown(self, path: str) -> bool:
        from specviz.core.promptset import to_markdown

        return self._write(path, to_markdown(self.rows, self.skipped))

    def save_png(self, path: str) -> bool:
        from specviz.explore_plot import promptset_png

        note = (f"{self.done}/{self.total} prompts" + ("" if self.done == self.total
                                                       else " (cancelled: partial)")
                + (f", {self.skipped.split(':')[0]}" if self.skipped else ""))
        try:
            promptset_png(self.rows, path, f"{self.name}: speedup over the target alone", note)
        except (OSError, ValueError) as exc:
            self.status.setText(f"Could not save {Path(path).name}: "
                                f"{getattr(exc, 'strerror', None) or exc}")
            return False
        return True


class ExploreWindow(QMainWindow):
    """Sweep, Lineup, Prompt set and Diagnose tabs; what they run runs on one worker thread,
    one job at a time."""

    sweep_requested = Signal(object)
    lineup_requested = Signal(object)
    set_requested = Signal(object)
    diagnose_requested = Signal(object)
    ended = Signal()  # a sweep, lineup or set ended (finished, cancelled or failed): GUI thread

    def __init__(self, load: Callable[[], Any],
                 show_round: Callable[[list[Event], int, str], None] | None = None) -> None:
        """``show_round(events, index, name)``: the main window replays one run up to its
        round ``index``; the Diagnose tab's rounds open there (none: the window stands alone)."""
        super().__init__()
        self.setWindowTitle("specviz — explore")
        self.sweep_panel = SweepPanel()
        self.lineup_panel = LinePanel()
        tabs = QTabWidget()
        tabs.addTab(self.sweep_panel, "Sweep")
        tabs.addTab(self.lineup_panel, "Lineup")
        self.set_panel = SetPanel()
        tabs.addTab(self.set_panel, "Prompt set")
        self.diagnose_panel = DiagnosePanel(show_round)
        tabs.addTab(self.diagnose_panel, "Where the draft goes wrong")
        self.diagnose_panel.use_lineup_button.clicked.connect(
            lambda: self.diagnose_panel.show_events(self.lineup_panel.events, "the lineup"))
        self.setCentralWidget(tabs)
        self.tabs = tabs
        self.pair_label = QLabel("models load with the first run")
        self.statusBar().addPermanentWidget(self.pair_label)

        self.thread_ = QThread(self)
        self.worker = ExploreWorker(load)
        self.worker.moveToThread(self.thread_)
        self.thread_.finished.connect(self.worker.deleteLater)  # destroyed on its own thread
        self.sweep_requested.connect(self.worker.run_sweep)
        self.lineup_requested.connect(self.worker.run_lineup)
        self.set_requested.connect(self.worker.run_set)
        self.diagnose_requested.connect(self.worker.run_diagnose)
        self.worker.sampled.connect(self.sweep_panel.add)
        self.worker.yielded.connect(self.lineup_panel.add)
        self.worker.compared.connect(self.set_panel.add)
        self.worker.recorded.connect(self.diagnose_panel.add_run)
        self.worker.finished.connect(self._on_finished)
        self.worker.failed.connect(self._on_failed)
        self.worker.loaded.connect(self.pair_label.setText)
        self.sweep_panel.requested.connect(self._start_sweep)
        self.lineup_panel.requested.connect(self._start_lineup)
        self.set_panel.requested.connect(self._start_set)
        self.diagnose_panel.requested.connect(self._start_diagnose)
        for panel in self.panels:
            panel.cancel_button.clicked.connect(self.cancel)
        self.thread_.start()
        self.busy = False

    def _start_sweep(self, job: SweepJob) -> None:
        self._begin()
        self.sweep_requested.emit(job)

    def _start_lineup(self, job: LineupJob) -> None:
        self._begin()
        self.lineup_requested.emit(job)

    def _start_set(self, job: SetJob) -> None:
        self._begin()
        self.set_requested.emit(job)

    def _start_diagnose(self, job: DiagnoseJob) -> None:
        self._begin()
        self.diagnose_requested.emit(job)

    @property
    def panels(self) -> tuple[JobPanel, ...]:
        """The panels that run on the worker (one at a time)."""
        return self.sweep_panel, self.lineup_panel, self.set_panel, self.diagnose_panel

    def _begin(self) -> None:
        self.worker.stop.clear()
        self.busy = True
        for panel in self.panels:
            panel.run_button.setEnabled(False)

    def cancel(self) -> None:
        self.worker.stop.set()

    def _end(self) -> None:
        self.busy = False
        cancelled = self.worker.stop.is_set()
        for panel in self.panels:
            if panel.cancel_button.isEnabled():  # the panel whose job just ended
                panel.ended(cancelled)
        for panel in self.panels:
            panel.run_button.setEnabled(True)
        self.ended.emit()

    def _on_finished(self, what: str) -> None:
        self._end()

    def _on_failed(self, message: str) -> None:
        self.statusBar().showMessage(message)
        for panel in self.panels:
            if panel.cancel_button.isEnabled():
                panel.status.setText(message)
        self._end()

    def closeEvent(self, event: Any) -> None:  # noqa: N802 - Qt's name
        self.worker.stop.set()
        self.thread_.quit()
        self.thread_.wait(30_000)
        super().closeEvent(event)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m specviz.gui.windows.explore", description=__doc__)
    p.add_argument("--draft")
    p.add_argument("--target")
    p.add_argument("--device", default="auto")
    args = p.parse_args(argv)

    def load() -> Any:
        from specviz.core.models import BUNDLED_TARGET, default_draft, load_pair, locate

        draft = args.draft or default_draft()
        return load_pair(locate(draft) if draft else None, locate(args.target or BUNDLED_TARGET),
                         args.device, "auto")

    app = QApplication.instance() or QApplication(sys.argv)
    window = ExploreWindow(load)
    window.resize(1280, 800)
    window.show()
    return int(app.exec())


if __name__ == "__main__":
    sys.exit(main())

"""The decoding worker: one QObject on one long-lived QThread, keeping the loaded pair.

The engine's generator yields one round per ``next()``, so Pause is "stop pulling", Step
is "pull one more" and Stop is the engine's own ``stop`` event, checked between rounds.
Events cross to the GUI thread as the small frozen dataclasses of ``specviz.core.events``.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QObject, QThread, Signal, Slot

from specviz.core.events import Event, Round, RunFailed, RunFinished, Settings
from specviz.core.models import ModelPair

Loader = Callable[..., ModelPair]  # (draft, target, device, dtype, progress) -> ModelPair


@dataclass(frozen=True)
class PairSpec:
    """Which models to load, and where: the key that decides whether to reload."""

    draft: str | None
    target: str
    device: str = "auto"
    dtype: str = "auto"

    def describe(self) -> str:
        return f"{self.draft} → {self.target}" if self.draft else f"{self.target} alone"


class RunControl:
    """Stop / pause / step for one run, shared by the GUI thread and the worker."""

    def __init__(self, paused: bool = False, steps: int = 0) -> None:
        self.stop_event = threading.Event()  # the engine checks this before each round
        self._cv = threading.Condition()
        self._paused = paused
        self._steps = steps
        self.holding = False  # the worker is blocked between rounds, waiting for its turn

    @property
    def stopped(self) -> bool:
        return self.stop_event.is_set()

    @property
    def paused(self) -> bool:
        return self._paused

    def stop(self) -> None:
        with self._cv:
            self.stop_event.set()
            self._cv.notify_all()

    def pause(self) -> None:
        with self._cv:
            self._paused = True

    def resume(self) -> None:
        with self._cv:
            self._paused = False
            self._steps = 0
            self._cv.notify_all()

    def step(self) -> None:
        """Allow exactly one more round, then hold."""
        with self._cv:
            self._paused = True
            self._steps += 1
            self._cv.notify_all()

    def wait_turn(self) -> None:
        """Block until the next round may run (running, a step, or a stop to wind down)."""
        with self._cv:
            while not self.stop_event.is_set():
                if not self._paused:
                    return
                if self._steps > 0:
                    self._steps -= 1
                    return
                self.holding = True
                self._cv.wait()
                self.holding = False


@dataclass(frozen=True)
class RunJob:
    """Everything one run needs; built on the GUI thread, consumed by the worker."""

    job_id: int
    pair: PairSpec
    settings: Settings
    prompt: str
    chat: bool = True  # wrap the prompt in the model's chat template, if it has one
    baseline: bool = False  # the target alone
    control: RunControl | None = None


def _default_loader(draft: str | None, target: str, device: str = "auto", dtype: str = "auto",
                    progress: Callable[[str], None] | None = None) -> ModelPair:
    from specviz.core.models import load_pair

    return load_pair(draft, target, device, dtype, progress=progress)


def failure(exc: BaseException, during: str) -> RunFailed:
    """A readable RunFailed for any exception (the worker must survive all of them)."""
    from specviz.core.errors import SpecvizError

    if isinstance(exc, SpecvizError):
        return RunFailed(message=str(exc), kind=exc.kind)
    oom_types: tuple[type[BaseException], ...] = (MemoryError,)
    try:
        import torch

        oom_types += (torch.OutOfMemoryError,)
    except (ImportError, AttributeError):  # pragma: no cover - torch without OutOfMemoryError
        pass
    if isinstance(exc, oom_types):
        return RunFailed(message=f"Out of memory while {during}: try a smaller pair, fewer new "
                         "tokens, a smaller K, or another device.", kind="oom")
    kind = "load" if during.startswith("loading") else "decoder"
    return RunFailed(message=f"Failed while {during}: {type(exc).__name__}: {exc}", kind=kind)


def _free_memory() -> None:
    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except Exception:  # noqa: BLE001 - best effort only
        pass


class DecodeWorker(QObject):
    """Loads pairs and runs decoders on its own thread; never dies of an exception."""

    progressed = Signal(str)  # a loading message
    loaded = Signal(str)  # a pair is ready (its description)
    started = Signal(int)  # a job began (job id)
    yielded = Signal(object)  # one core event: RunStarted, Round or RunFinished
    failed = Signal(object)  # RunFailed: loading or decoding went wrong
    finished = Signal(int)  # a job ended, however it ended (job id)

    def __init__(self, loader: Loader | None = None) -> None:
        super().__init__()
        self.loader = loader or _default_loader
        self.pair: ModelPair | None = None
        self.pair_spec: PairSpec | None = None
        self.load_count = 0
        self.closing = threading.Event()

    def _ensure_pair(self, spec: PairSpec) -> ModelPair:
        """The loaded pair, reloading only when the spec changed."""
        if self.pair is not None and self.pair_spec == spec:
            return self.pair
        self.pair, self.pair_spec = None, None
        _free_memory()  # let the old pair go before the new one arrives
        self.progressed.emit(f"Loading {spec.describe()}…")
        self.load_count += 1
        pair = self.loader(spec.draft, spec.target, spec.device, spec.dtype,
                           progress=self.progressed.emit)
        self.pair, self.pair_spec = pair, spec
        self.loaded.emit(f"{spec.describe()} on {pair.device} ({str(pair.dtype)[6:]})")
        return pair

    @Slot(object)
    def load(self, spec: PairSpec) -> None:
        """Load a pair ahead of the first run (at launch, or when the user picks one)."""
        if self.closing.is_set():
            return
        try:
            self._ensure_pair(spec)
        except BaseException as exc:  # noqa: BLE001 - report and stay alive
            if isinstance(exc, KeyboardInterrupt | SystemExit):
                raise
            _free_memory()
            self.failed.emit(failure(exc, f"loading {spec.describe()}"))

    @Slot(object)
    def run(self, job: RunJob) -> None:
        """Run one job to its end, a stop, or a failure; then report ``finished``."""
        control = job.control or RunControl()
        self.started.emit(job.job_id)
        events: Any = None  # a generator: closed when the job ends, however it ends
        try:
            if control.stopped or self.closing.is_set():
                return  # superseded before it began
            pair = self._ensure_pair(job.pair)
            if control.stopped:
                return  # stopped while the models loaded
            from specviz.core.engine import (
                AutoregressiveDecoder,
                SpeculativeDecoder,
                chat_prompt,
                guarded,
            )

            prompt = chat_prompt(pair.tokenizer, job.prompt) if job.chat and job.prompt \
                else job.prompt
            decoder: Any = (AutoregressiveDecoder(pair, job.settings) if job.baseline
                            else SpeculativeDecoder(pair, job.settings))
            events = guarded(decoder.run(prompt, control.stop_event))
            self._pump(events, control, job, pair)
        except BaseException as exc:  # noqa: BLE001 - report and stay alive
            if isinstance(exc, KeyboardInterrupt | SystemExit):
                raise
            _free_memory()
            self.failed.emit(failure(exc, "loading the models" if self.pair is None
                                     else "decoding"))
        finally:
            if events is not None:
                events.close()
            self.finished.emit(job.job_id)

    def _pump(self, events: Any, control: RunControl, job: RunJob, pair: ModelPair) -> None:
        """Pull events one at a time; wait for our turn before each round."""
        wait = False  # RunStarted is free; every later pull computes a round
        while True:
            if wait:
                control.wait_turn()
            try:
                event: Event = next(events)
            except StopIteration:
                return
            if isinstance(event, RunFailed):
                if event.kind == "oom":
                    _free_memory()
                self.failed.emit(event)
                return
            self.yielded.emit(event)
            if isinstance(event, RunFinished):
                return
            # After the last round the next pull only yields RunFinished: don't hold it.
            wait = not (isinstance(event, Round) and event.final)


class DecodeController(QObject):
    """GUI-side handle: owns the thread and the worker, and the control of the current run."""

    # The worker's signals, re-emitted on the GUI thread (connect the UI and tests to these).
    progressed = Signal(str)
    loaded = Signal(str)
    started = Signal(int)
    yielded = Signal(object)
    failed = Signal(object)
    finished = Signal(int)
    state_changed = Signal(str)  # "idle", "running", "paused"
    _load_requested = Signal(object)
    _run_requested = Signal(object)

    def __init__(self, loader: Loader | None = None, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.decoder_thread = QThread()
        self.decoder_thread.setObjectName("specviz-decoder")
        self.worker = DecodeWorker(loader)
        self.worker.moveToThread(self.decoder_thread)
        self._load_requested.connect(self.worker.load)
        self._run_requested.connect(self.worker.run)
        w = self.worker
        # Signal-to-signal connections to an object of this thread are queued: each report
        # is re-emitted here, in order, on the GUI thread.
        for name in ("progressed", "loaded", "started", "yielded", "failed"):
            getattr(w, name).connect(getattr(self, name))
        w.finished.connect(self._on_worker_finished)
        self.decoder_thread.finished.connect(self.worker.deleteLater)
        self.decoder_thread.start()
        self._next_id = 0
        self.current: RunJob | None = None
        self.state = "idle"

    # -- requests -----------------------------------------------------------------------------

    def load(self, spec: PairSpec) -> None:
        self._load_requested.emit(spec)

    def start(self, pair: PairSpec, settings: Settings, prompt: str, chat: bool = True,
              baseline: bool = False, paused: bool = False, steps: int = 0) -> RunJob:
        """Start a run; a run in progress is stopped first (it ends within one round)."""
        self.stop()
        self._next_id += 1
        job = RunJob(self._next_id, pair, settings, prompt, chat, baseline,
                     RunControl(paused=paused, steps=steps))
        self.current = job
        self._set_state("paused" if paused else "running")
        self._run_requested.emit(job)
        return job

    def stop(self) -> None:
        if self.current is not None and self.current.control is not None:
            self.current.control.stop()

    def pause(self) -> None:
        if self.current is not None and self.current.control is not None:
            self.current.control.pause()
            self._set_state("paused")

    def resume(self) -> None:
        if self.current is not None and self.current.control is not None:
            self.current.control.resume()
            self._set_state("running")

    def toggle_pause(self) -> None:
        if self.state == "paused":
            self.resume()
        elif self.state == "running":
            self.pause()

    def step(self) -> bool:
        """One round. While running: pause after the round in flight. Returns False if idle."""
        if self.current is None or self.current.control is None:
            return False
        if self.state == "running":
            self.pause()
        else:
            self.current.control.step()
        return True

    @property
    def busy(self) -> bool:
        return self.current is not None

    def shutdown(self) -> None:
        """Stop the run, end the thread and wait for it (a round at most)."""
        self.worker.closing.set()
        self.stop()
        self.decoder_thread.quit()
        self.decoder_thread.wait()

    # -- worker reports -----------------------------------------------------------------------

    def _set_state(self, state: str) -> None:
        if state != self.state:
            self.state = state
            self.state_changed.emit(state)

    def _on_worker_finished(self, job_id: int) -> None:
        if self.current is not None and self.current.job_id == job_id:
            self.current = None
            self._set_state("idle")
        self.finished.emit(job_id)

"""The decoding worker: one QObject on one long-lived QThread, each job on a thread of its own.

The engine's generator yields one round per ``next()``, so Pause is "stop pulling", Step
is "pull one more" and Stop is the engine's own ``stop`` event, checked between rounds.
Events cross to the GUI thread as the small frozen dataclasses of ``specviz.core.events``.

Loading is different: ``from_pretrained`` (a GGUF conversion, the hub's retries) cannot be
interrupted from outside, so each load runs on its own daemon Python thread and Cancel (or
closing the window) abandons it: its result is dropped when it arrives. This module imports
neither torch nor transformers; the load thread does, after the window is on screen.
"""

from __future__ import annotations

import dataclasses
import gc
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, QThread, Signal, Slot

from specviz.core.events import Event, Round, RunFailed, RunFinished, Settings

if TYPE_CHECKING:  # torch comes with it: imported on the load thread, not at start-up
    from specviz.core.models import ModelPair

# (draft, target, device, dtype, progress=, cross_tokenizer=) -> ModelPair
Loader = Callable[..., "ModelPair"]


@dataclass(frozen=True)
class PairSpec:
    """Which models to load, and where: the key that decides whether to reload."""

    draft: str | None
    target: str
    device: str = "auto"
    dtype: str = "auto"
    # The chosen drafter drafts with the draft's own tokenizer (its registry entry says so):
    # the pair loads accepting a draft whose tokenizer differs from the target's.
    cross_tokenizer: bool = False

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
    models: ModelPair | None = None  # the loaded pair, filled in when the job is dispatched


def _default_loader(draft: str | None, target: str, device: str = "auto", dtype: str = "auto",
                    progress: Callable[[str], None] | None = None,
                    cross_tokenizer: bool = False) -> ModelPair:
    from specviz.core.models import load_pair

    return load_pair(draft, target, device, dtype, progress=progress,
                     cross_tokenizer=cross_tokenizer)


def serves(have: PairSpec, want: PairSpec) -> bool:
    """Whether a load of ``have`` gives a pair a run wanting ``want`` can use: the same models,
    and the tokenizer flag the same or set on ``have`` (a load accepting another tokenizer
    loads every pair one not accepting it does, and those with the draft's own tokenizer)."""
    return have == want or (have.cross_tokenizer
                            and dataclasses.replace(want, cross_tokenizer=True) == have)


def vocab_line(pair: Any) -> str:
    """How much of the target's vocabulary the draft shares, for a pair across tokenizers."""
    vocab = pair.shared_vocab
    if vocab is None:
        return ""
    return (f"; across tokenizers: {vocab.size:,} of the target's {vocab.target_size:,} "
            f"tokens shared with the draft's {vocab.draft_size:,}")


def failure(exc: BaseException, during: str) -> RunFailed:
    """A readable RunFailed for any exception (the worker must survive all of them)."""
    from specviz.core.errors import SpecvizError

    if isinstance(exc, SpecvizError):
        return RunFailed(message=str(exc), kind=exc.kind)
    oom_types: tuple[type[BaseException], ...] = (MemoryError,)
    torch = sys.modules.get("torch")  # never import it just to classify an error
    if torch is not None and hasattr(torch, "OutOfMemoryError"):
        oom_types += (torch.OutOfMemoryError,)
    if isinstance(exc, oom_types):
        return RunFailed(message=f"Out of memory while {during}: try a smaller pair, fewer new "
                         "tokens, a smaller K, or another device.", kind="oom")
    kind = "load" if during.startswith("loading") else "decoder"
    return RunFailed(message=f"Failed while {during}: {type(exc).__name__}: {exc}", kind=kind)


class _Collector(QObject):
    """Runs the garbage collector on the GUI thread, whichever thread asks for it.

    A collection finalises whatever sits in reference cycles, Qt wrappers included; Qt objects
    destroyed off the thread that owns them crash the process (seen once in the test suite,
    a segfault after a worker-thread ``gc.collect()``), so other threads only ask.
    """

    requested = Signal()

    def __init__(self) -> None:
        super().__init__()
        self.requested.connect(self._collect)  # queued when emitted from another thread

    @Slot()
    def _collect(self) -> None:
        _collect_everything()


_collector: _Collector | None = None  # made on the GUI thread by the first DecodeController


def _collect_everything() -> None:
    """A full collection that reaches the frozen objects too (a pair let go is among them);
    what survives is frozen again (see ``DecodeController._on_load_done``). GUI thread only."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()


def _free_memory() -> None:
    if threading.current_thread() is threading.main_thread():
        _collect_everything()
    elif _collector is not None:
        _collector.requested.emit()
    torch = sys.modules.get("torch")  # nothing to free on a device if torch never loaded
    try:
        if torch is not None and torch.cuda.is_available():
            torch.cuda.empty_cache()
    except Exception:  # noqa: BLE001 - best effort only
        pass


class LoadAbandoned(Exception):  # noqa: N818 - not an error: the user moved on
    """Raised inside an abandoned load at its next progress message, so it stops early."""


@dataclass(eq=False)
class LoadTask:
    """One load on its own thread; ``token`` says which request still wants its result."""

    spec: PairSpec
    token: int
    thread: threading.Thread | None = None

    @property
    def alive(self) -> bool:
        return self.thread is not None and self.thread.is_alive()


# Every thread this module starts, so the app can tell whether exiting must leave some behind.
_threads: set[threading.Thread] = set()
_threads_lock = threading.Lock()


def _spawn(target: Callable[[], None], name: str) -> threading.Thread:
    """A daemon thread: an abandoned load must never keep the process alive."""

    def body() -> None:
        try:
            target()
        finally:
            with _threads_lock:
                _threads.discard(thread)

    thread = threading.Thread(target=body, name=name, daemon=True)
    with _threads_lock:
        _threads.add(thread)
    thread.start()
    return thread


def background_threads() -> list[threading.Thread]:
    """Load and probe threads still running (abandoned ones included)."""
    with _threads_lock:
        return [t for t in _threads if t.is_alive()]


# -- which presets work offline ------------------------------------------------------------------

AVAILABILITY_MARKS = {
    "bundled": "offline",
    "local": "offline",
    "cached": "in local cache",
    "download": "needs download",
    "missing": "not found",
}


def preset_availability() -> dict[str, str]:
    """Each preset's availability (file system and cache only); run it off the GUI thread."""
    from specviz.core.models import preset_availability as probe

    return {name: str(kind) for name, kind in probe().items()}


class DecodeWorker(QObject):
    """Runs decoders on its own thread with the pair each job brings; survives any exception."""

    started = Signal(int)  # a job began (job id)
    yielded = Signal(object)  # one core event: RunStarted, Round or RunFinished
    failed = Signal(object)  # RunFailed: decoding went wrong
    finished = Signal(int)  # a job ended, however it ended (job id)

    def __init__(self) -> None:
        super().__init__()
        self.closing = threading.Event()

    @Slot(object)
    def run(self, job: RunJob) -> None:
        """Run one job to its end, a stop, or a failure; then report ``finished``.

        The job runs on a thread of its own, joined here, so that no thread that outlives a
        job has ever run torch. Torch's OpenMP runtime (libgomp) keeps a team of worker
        threads for every thread that ran parallel work, for that thread's life, and while it
        manages more threads than there are CPUs (any two teams of all-core size) every
        parallel region waits about twice as long: on this project's 2-core machine the target
        step timed while loading a pair after a run (the speed reference that every "measured
        speedup" divides by) read 55.6 ms instead of 28.6. A job's thread ends with the job,
        its team with it.
        """
        body = threading.Thread(target=self._run_here, args=(job,), name="specviz-run",
                                daemon=True)
        body.start()
        body.join()
        self.finished.emit(job.job_id)  # after the join: the job's thread (and team) are gone

    def _run_here(self, job: RunJob) -> None:
        control = job.control or RunControl()
        self.started.emit(job.job_id)
        events: Any = None  # a generator: closed when the job ends, however it ends
        try:
            if control.stopped or self.closing.is_set() or job.models is None:
                return  # superseded before it began
            from specviz.core.run import Request, run

            request = Request(job.prompt, job.settings,
                              "baseline" if job.baseline else "speculative", job.chat)
            events = run(job.models, request, control.stop_event)
            self._pump(events, control)
        except BaseException as exc:  # noqa: BLE001 - report and stay alive
            if isinstance(exc, KeyboardInterrupt | SystemExit):
                raise
            _free_memory()
            self.failed.emit(failure(exc, "decoding"))
        finally:
            if events is not None:
                events.close()

    def _pump(self, events: Any, control: RunControl) -> None:
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
    """GUI-side handle: loads pairs, owns the decoding thread and the current run's control.

    A run whose pair is not loaded waits (state "running") while the pair loads, then starts.
    After a load fails, a run of the same pair shows that failure again instead of retrying:
    a wrong name or an uncached hub id fails the same way every time, and a silent retry
    costs seconds (a minute of hub retries in the worst case) per press of Run. Loading the
    pair explicitly (``load``, the Load pair button) always tries again.
    """

    # The worker's signals, re-emitted on the GUI thread (connect the UI and tests to these).
    progressed = Signal(str)  # a loading message
    loaded = Signal(str)  # a pair is ready (its description)
    load_cancelled = Signal(str)  # a load was abandoned (what it was loading)
    loading_changed = Signal(bool)  # a load began / ended (however it ended)
    availability = Signal(object)  # {preset name: "bundled" | "local" | "cached" | ...}
    started = Signal(int)
    yielded = Signal(object)
    failed = Signal(object)
    finished = Signal(int)
    state_changed = Signal(str)  # "idle", "running", "paused"
    # The target's one-token step, timed on the loading thread right after a load (the speed
    # reference of every "measured speedup vs the step"): target name, device, seconds.
    step_measured = Signal(str, str, float, bool)  # ..., kept from an earlier launch
    _run_requested = Signal(object)
    # From load threads (queued to this object's thread): (task, message) and (task, result).
    _load_progressed = Signal(object, str)
    _load_done = Signal(object, object)
    _probe_done = Signal(object)

    def __init__(self, loader: Loader | None = None, parent: QObject | None = None,
                 measure_at_load: bool = True) -> None:
        super().__init__(parent)
        global _collector
        if _collector is None:
            _collector = _Collector()
        self.loader = loader or _default_loader
        # After each load, on its thread: the step timed (step_measured) and the passes the
        # cost K policy weighs (measure_at_load), so no run pays them on its own clock.
        self.measure_at_load = measure_at_load
        self.decoder_thread = QThread()
        self.decoder_thread.setObjectName("specviz-decoder")
        self.worker = DecodeWorker()
        self.worker.moveToThread(self.decoder_thread)
        self._run_requested.connect(self.worker.run)
        w = self.worker
        # Signal-to-signal connections to an object of this thread are queued: each report
        # is re-emitted here, in order, on the GUI thread.
        for name in ("started", "yielded", "failed"):
            getattr(w, name).connect(getattr(self, name))
        w.finished.connect(self._on_worker_finished)
        self._load_progressed.connect(self._on_load_progressed)
        self._load_done.connect(self._on_load_done)
        self._probe_done.connect(self.availability)
        self.decoder_thread.finished.connect(self.worker.deleteLater)
        self.decoder_thread.start()
        self._next_id = 0
        self.current: RunJob | None = None
        self.state = "idle"
        self.pair: ModelPair | None = None
        self.pair_spec: PairSpec | None = None
        self._loaded_text = ""
        self.load_count = 0  # loader calls (tests: no needless reloads)
        self.failed_spec: PairSpec | None = None  # the last load that failed, and why
        self.last_failure: RunFailed | None = None
        self.closing = False
        self._post_lock = threading.Lock()  # held by _post's check-and-emit and by shutdown
        self._token = 0  # the load whose result is wanted; bumped by every load and cancel
        self._wanted: LoadTask | None = None
        self._tasks: dict[PairSpec, LoadTask] = {}  # threads still running, wanted or not
        self._pending: RunJob | None = None  # a run waiting for its pair

    # -- loading ------------------------------------------------------------------------------

    @property
    def loading(self) -> bool:
        return self._wanted is not None

    @property
    def loading_spec(self) -> PairSpec | None:
        return self._wanted.spec if self._wanted is not None else None

    def load(self, spec: PairSpec) -> None:
        """Load a pair (always tries again, even one that just failed)."""
        if self.closing:
            return
        if self._loaded_serves(spec):
            self.loaded.emit(self._loaded_text)
            return
        self.stop()  # a run's pair is about to be replaced (a run waiting for one ends)
        self._start_load(spec)

    def _start_load(self, spec: PairSpec) -> None:
        if self._wanted is not None and serves(self._wanted.spec, spec):
            return  # already on its way
        self._token += 1
        if self.pair is not None:  # let the old pair go before the new one arrives
            self.pair, self.pair_spec = None, None
            _free_memory()
        task = self._tasks.get(spec)
        if task is not None and task.alive:
            # An abandoned load of this very pair is still running: want its result again
            # rather than start a second one (two first-launch conversions would collide).
            task.token = self._token
        else:
            task = self._spawn_load(spec)
        was_loading = self._wanted is not None
        self._wanted = task
        self.progressed.emit(f"Loading {spec.describe()}…")
        if not was_loading:
            self.loading_changed.emit(True)

    def _spawn_load(self, spec: PairSpec) -> LoadTask:
        task = LoadTask(spec, self._token)
        self._tasks[spec] = task
        self.load_count += 1
        task.thread = _spawn(lambda: self._load_on_thread(task), f"specviz-load-{task.token}")
        return task

    def cancel_load(self) -> bool:
        """Abandon the load in progress (and the run waiting for it); False if none."""
        task = self._wanted
        if task is None:
            return False
        self._token += 1  # its result, when it comes, is dropped
        self._wanted = None
        self._drop_pending()
        self.loading_changed.emit(False)
        self.load_cancelled.emit(task.spec.describe())
        return True

    def _load_on_thread(self, task: LoadTask) -> None:
        """Runs on the load's own thread: load, then post the result (or the failure)."""

        def progress(message: str) -> None:
            if task.token != self._token:
                raise LoadAbandoned  # stop at the next checkpoint; nobody wants this any more
            self._post(self._load_progressed, task, message)

        spec = task.spec
        result: object
        try:
            pair = self.loader(spec.draft, spec.target, spec.device, spec.dtype,
                               progress=progress, cross_tokenizer=spec.cross_tokenizer)
            if self.measure_at_load:
                self._measure(pair, progress)
            result = (pair, f"{spec.describe()} on {pair.device} ({str(pair.dtype)[6:]})"
                            f"{vocab_line(pair)}")
        except LoadAbandoned:
            result = None
        except BaseException as exc:  # noqa: BLE001 - a load thread reports, never raises
            result = failure(exc, f"loading {spec.describe()}")
        self._post(self._load_done, task, result)

    def _measure(self, pair: Any, progress: Callable[[str], None]) -> None:
        """On the loading thread, after a load: the target's one-token step (the speed
        reference, posted as ``step_measured``; kept with the calibration below: a launch
        with one kept takes it at once), then its passes of 1 to 17 tokens for the cost K
        policy (:func:`specviz.core.engine.calibrate`, kept per machine, device and target).
        Neither can fail a load: without a step there is no speedup to show, and without the
        passes the first cost-policy run times them itself."""
        progress("The target's one-token step (the speed reference)…")
        try:
            from specviz.core.speed import target_step

            step, kept = target_step(pair)  # kept from an earlier launch, else timed and kept
        except Exception:  # noqa: BLE001 - no reference, no speedup: never a failed load
            return
        self._post(self.step_measured, str(pair.target_name), str(pair.device), step, kept)
        progress("Timing the target's passes of 1 to 17 tokens (for the cost K policy)…")
        try:
            from specviz.core.engine import calibrate

            calibrate(pair)
        except Exception:  # noqa: BLE001 - the first cost-policy run then times them itself
            pass

    def _post(self, signal: Any, *args: object) -> None:
        """Emit ``signal`` from a load or probe thread, unless the controller is shutting
        down. The check and the emit hold ``_post_lock``, which ``shutdown`` takes to set
        ``closing``: once shutdown returns no thread touches this QObject again, so a window
        destroyed after closing cannot be emitted on mid-destruction (it segfaulted in CI-like
        runs when a load thread still timing the target posted ``step_measured`` while the
        test's teardown collected the window)."""
        with self._post_lock:
            if self.closing:
                return
            try:
                signal.emit(*args)
            except RuntimeError:  # the window is gone (an abandoned load finishing late)
                pass

    @Slot(object, str)
    def _on_load_progressed(self, task: LoadTask, message: str) -> None:
        if task is self._wanted and task.token == self._token:
            self.progressed.emit(message)

    @Slot(object, object)
    def _on_load_done(self, task: LoadTask, result: object) -> None:
        if self._tasks.get(task.spec) is task:
            del self._tasks[task.spec]
        if task is not self._wanted or task.token != self._token or self.closing:
            del result  # superseded, cancelled or closing: drop the models it made
            _free_memory()
            return
        if result is None:  # it gave up as abandoned just before it was wanted again
            self._wanted = self._spawn_load(task.spec)
            return
        self._wanted = None
        self.loading_changed.emit(False)
        if isinstance(result, RunFailed):
            self.failed_spec, self.last_failure = task.spec, result
            self.failed.emit(result)
            self._drop_pending()
            return
        assert isinstance(result, tuple)
        self.pair, self._loaded_text = result
        self.pair_spec = task.spec
        self.failed_spec = self.last_failure = None
        # Collections walk every object they hold: the pair loaded with collection off, so the
        # next ones (gui.startup's timer) walked its ~620k objects on the GUI thread (gen 1:
        # 84-194 ms pauses in a live run; a full one 0.15-0.6 s). Frozen, the pair and the
        # libraries are out of them; reference counting still frees them, and
        # _collect_everything reaches their cycles (the next load, an out-of-memory clean-up).
        gc.freeze()
        self.loaded.emit(self._loaded_text)
        job, self._pending = self._pending, None
        if job is not None and serves(task.spec, job.pair) and not self._stopped(job):
            self._dispatch(job)
        elif job is not None:
            self._end_undispatched(job)

    def probe_availability(self) -> None:
        """Find out, off the GUI thread, which presets load without a network."""

        def probe() -> None:
            try:
                marks = preset_availability()
            except Exception:  # noqa: BLE001 - no marks is better than a crash
                return
            self._post(self._probe_done, marks)

        _spawn(probe, "specviz-availability")

    # -- runs ----------------------------------------------------------------------------------

    def start(self, pair: PairSpec, settings: Settings, prompt: str, chat: bool = True,
              baseline: bool = False, paused: bool = False, steps: int = 0) -> RunJob:
        """Start a run; a run in progress is stopped first (it ends within one round)."""
        self.stop()
        self._next_id += 1
        job = RunJob(self._next_id, pair, settings, prompt, chat, baseline,
                     RunControl(paused=paused, steps=steps))
        self.current = job
        self._set_state("paused" if paused else "running")
        if self.closing:
            self._end_undispatched(job)
        elif self.pair is not None and self.pair_spec is not None and (
                self._loaded_serves(pair) or (pair.draft is None and not baseline
                                              and self._same_target(self.pair_spec, pair))):
            # A lookup run (draft None) reuses a loaded pair's target; its draft stays unused.
            self._dispatch(job)
        elif self.failed_spec == pair and self.last_failure is not None and \
                not (self._wanted is not None and self._wanted.spec == pair):
            # The same pair failed last time: say so again rather than retry in silence.
            last = self.last_failure
            self.failed.emit(RunFailed(f"{last.message} (Not retried: press Load pair to try "
                                       "again.)", last.kind))
            self._end_undispatched(job)
        else:
            self._pending = job
            self._start_load(pair)
        return job

    def _loaded_serves(self, spec: PairSpec) -> bool:
        """Whether the loaded pair serves ``spec``, whatever its tokenizer flag: loaded without
        it, the pair has one tokenizer (the flag changes nothing); loaded with it, a drafter
        that cannot read the draft's own tokenizer is refused by the engine, with a message
        naming the one that can, and the pair stays loaded for the target alone, lookup and
        the cross-tokenizer drafter."""
        loaded = self.pair_spec
        return self.pair is not None and loaded is not None and \
            dataclasses.replace(loaded, cross_tokenizer=spec.cross_tokenizer) == spec

    @staticmethod
    def _same_target(loaded: PairSpec, wanted: PairSpec) -> bool:
        return (loaded.target, loaded.device, loaded.dtype) == \
            (wanted.target, wanted.device, wanted.dtype)

    def _dispatch(self, job: RunJob) -> None:
        job = dataclasses.replace(job, models=self.pair)
        self.current = job
        self._run_requested.emit(job)

    def _drop_pending(self) -> None:
        job, self._pending = self._pending, None
        if job is not None:
            self._end_undispatched(job)

    def _end_undispatched(self, job: RunJob) -> None:
        """A job that never reached the worker ends here, as a finished one would."""
        if self.current is not None and self.current.job_id == job.job_id:
            self.current = None
            self._set_state("idle")
        self.finished.emit(job.job_id)

    @staticmethod
    def _stopped(job: RunJob) -> bool:
        return job.control is not None and job.control.stopped

    def stop(self) -> None:
        if self.current is not None and self.current.control is not None:
            self.current.control.stop()
        if self._pending is not None:  # waiting for its pair: it ends now (the load goes on)
            self._drop_pending()

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

    def shutdown(self, wait_ms: int | None = None) -> bool:
        """Stop the run, abandon any load, end the decoding thread; True if nothing is left.

        ``wait_ms`` bounds the wait for the round in flight (None: wait for it). A load is
        never waited for: its daemon thread is abandoned (see the module docstring). False
        means a round or a load is still running: the caller must end the process without
        tearing those down (``specviz.gui.startup.hard_exit``).
        """
        with self._post_lock:  # after this no load or probe thread emits on this object
            self.closing = True
        self.worker.closing.set()
        self._token += 1
        self._wanted = None
        self._drop_pending()
        self.stop()
        self.decoder_thread.quit()
        done = bool(self.decoder_thread.wait() if wait_ms is None
                    else self.decoder_thread.wait(wait_ms))
        return done and not any(t.alive for t in self._tasks.values())

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

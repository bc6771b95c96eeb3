"""The decoding worker on its thread: event order, Stop, Pause/Step, errors, no needless reloads."""

from __future__ import annotations

import threading

import pytest
import torch
from PySide6.QtCore import Qt

from specviz.core.errors import ModelLoadError
from specviz.core.events import Round, RunFailed, RunFinished, RunStarted
from specviz.gui import worker as worker_mod
from specviz.gui.worker import PairSpec, RunControl
from tests.mutation import mutant
from tests.plain import plain

SPEC = PairSpec("tiny-draft", "tiny-target", "cpu")


def test_events_arrive_in_order(qtbot, tiny_pair, make_controller) -> None:
    controller, got = make_controller(lambda *a, **k: tiny_pair)
    w = controller
    with qtbot.waitSignals([w.loaded, w.started, w.finished], order="strict", timeout=20000):
        controller.start(SPEC, plain(k=3, max_new_tokens=12, seed=1), "the cat")
    assert isinstance(got.events[0], RunStarted)
    assert isinstance(got.events[-1], RunFinished)
    rounds = got.of_type(Round)
    assert rounds and all(isinstance(e, Round) for e in got.events[1:-1])
    assert [r.index for r in rounds] == list(range(len(rounds)))
    assert rounds[-1].n_generated == len(got.events[-1].generated_ids)
    assert controller.state == "idle" and not got.failures


def test_stop_takes_effect_within_one_round(qtbot, endless_pair, make_controller) -> None:
    controller, got = make_controller(lambda *a, **k: endless_pair)
    job_holder: list = []

    def stop_at_third(event: object) -> None:
        # Runs on the worker thread, right after round 3 is emitted.
        if isinstance(event, Round) and event.index == 2:
            job_holder[0].control.stop()

    controller.worker.yielded.connect(stop_at_third, Qt.ConnectionType.DirectConnection)
    with qtbot.waitSignal(controller.finished, timeout=20000):
        job_holder.append(controller.start(SPEC, plain(k=2, max_new_tokens=500), "the"))
    assert len(got.of_type(Round)) == 3
    finished = got.of_type(RunFinished)
    assert len(finished) == 1 and finished[0].stop_reason == "stopped"


def test_pause_then_step_runs_exactly_one_round(qtbot, endless_pair, make_controller) -> None:
    controller, got = make_controller(lambda *a, **k: endless_pair)
    job = controller.start(SPEC, plain(k=2, max_new_tokens=50), "the", paused=True)
    qtbot.waitUntil(lambda: job.control.holding, timeout=20000)  # blocked before round 1
    qtbot.wait(50)  # let any (wrongly) emitted round arrive
    assert [type(e) for e in got.events] == [RunStarted]
    for n in (1, 2):
        assert controller.step()
        qtbot.waitUntil(lambda n=n: len(got.of_type(Round)) == n, timeout=5000)
        qtbot.waitUntil(lambda: job.control.holding, timeout=5000)
        qtbot.wait(50)
        assert len(got.of_type(Round)) == n  # exactly one round per step
    with qtbot.waitSignal(controller.finished, timeout=20000):
        controller.resume()
    assert got.of_type(RunFinished)[0].stop_reason == "max_new_tokens"
    assert got.of_type(Round)[-1].n_generated == 50


def test_stop_while_paused_finishes_the_run(qtbot, endless_pair, make_controller) -> None:
    controller, got = make_controller(lambda *a, **k: endless_pair)
    controller.start(SPEC, plain(k=2, max_new_tokens=50), "the", paused=True, steps=1)
    qtbot.waitUntil(lambda: len(got.of_type(Round)) == 1, timeout=20000)
    with qtbot.waitSignal(controller.finished, timeout=5000):
        controller.stop()
    assert len(got.of_type(Round)) == 1
    assert got.of_type(RunFinished)[0].stop_reason == "stopped"


def test_step_while_running_pauses(qtbot, endless_pair, make_controller) -> None:
    controller, got = make_controller(lambda *a, **k: endless_pair)
    job = controller.start(SPEC, plain(k=1, max_new_tokens=2000), "the")
    qtbot.waitUntil(lambda: len(got.of_type(Round)) >= 2, timeout=20000)
    controller.step()
    assert controller.state == "paused"
    qtbot.waitUntil(lambda: job.control.holding, timeout=5000)
    qtbot.wait(50)
    count = len(got.of_type(Round))
    qtbot.wait(100)
    assert len(got.of_type(Round)) == count and not got.of_type(RunFinished)
    controller.step()
    qtbot.waitUntil(lambda: len(got.of_type(Round)) == count + 1, timeout=5000)


def test_new_run_reuses_the_pair_and_reloads_when_it_changes(qtbot, tiny_pair,
                                                             make_controller) -> None:
    calls: list[tuple] = []

    def loader(draft, target, device, dtype, progress=None, cross_tokenizer=False):
        calls.append((draft, target, device))
        progress("loading weights")
        return tiny_pair

    controller, got = make_controller(loader)
    settings = plain(k=2, max_new_tokens=4)
    for spec in (SPEC, SPEC, PairSpec("tiny-draft", "tiny-target", "auto")):
        with qtbot.waitSignal(controller.finished, timeout=20000):
            controller.start(spec, settings, "the")
    assert calls == [("tiny-draft", "tiny-target", "cpu"), ("tiny-draft", "tiny-target", "auto")]
    assert len(got.of_type(RunFinished)) == 3


def test_load_failure_is_shown_again_not_retried_until_load(qtbot, tiny_pair,
                                                             make_controller) -> None:
    broken = {"yes": True}
    calls: list[int] = []

    def loader(*args, **kwargs):
        calls.append(1)
        if broken["yes"]:
            raise ModelLoadError("Could not load 'nope/nope': not in the local cache.")
        return tiny_pair

    controller, got = make_controller(loader)
    with qtbot.waitSignal(controller.failed, timeout=20000) as blocker:
        controller.start(SPEC, plain(max_new_tokens=4), "the")
    failure = blocker.args[0]
    assert isinstance(failure, RunFailed) and failure.kind == "load"
    assert "nope/nope" in failure.message
    qtbot.waitUntil(lambda: controller.state == "idle", timeout=5000)
    # Run again with the same pair: the failure is shown again at once, the loader not called.
    with qtbot.waitSignals([controller.failed, controller.finished], order="strict",
                           timeout=5000):
        controller.start(SPEC, plain(max_new_tokens=4), "the")
    again = got.failures[-1]
    assert "nope/nope" in again.message and "Load pair" in again.message
    assert len(calls) == 1 and controller.state == "idle"
    broken["yes"] = False
    with qtbot.waitSignal(controller.loaded, timeout=20000):
        controller.load(SPEC)  # an explicit load always tries again
    assert len(calls) == 2
    with qtbot.waitSignal(controller.finished, timeout=20000):
        controller.start(SPEC, plain(max_new_tokens=4), "the")
    assert len(got.of_type(RunFinished)) == 1 and len(calls) == 2


@pytest.mark.parametrize(("exc", "kind"), [(RuntimeError("kaboom"), "decoder"),
                                           (torch.OutOfMemoryError("CUDA out of memory"), "oom")])
def test_exception_inside_the_decoder_is_reported(qtbot, tiny_pair, make_controller,
                                                  monkeypatch, exc, kind) -> None:
    controller, got = make_controller(lambda *a, **k: tiny_pair)
    real_forward = tiny_pair.target.forward
    calls = {"n": 0}

    def flaky_forward(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:  # the third verify pass breaks, after two good rounds
            raise exc
        return real_forward(*args, **kwargs)

    monkeypatch.setattr(tiny_pair.target, "forward", flaky_forward)
    # The target on transformers' forward, where the flaky pass is (FastLlama, the CPU's target
    # path, calls the layers itself).
    monkeypatch.setenv("SPECVIZ_STOCK_TARGET", "1")
    with qtbot.waitSignal(controller.finished, timeout=20000):
        controller.start(SPEC, plain(k=2, max_new_tokens=40, seed=3), "the")
    assert len(got.of_type(Round)) == 2 and not got.of_type(RunFinished)
    assert len(got.failures) == 1 and got.failures[0].kind == kind
    monkeypatch.setattr(tiny_pair.target, "forward", real_forward)
    with qtbot.waitSignal(controller.finished, timeout=20000):
        controller.start(SPEC, plain(k=2, max_new_tokens=5), "the")
    assert len(got.of_type(RunFinished)) == 1 and len(got.failures) == 1


def test_bad_settings_fail_cleanly(qtbot, tiny_pair, make_controller) -> None:
    controller, got = make_controller(lambda *a, **k: tiny_pair)
    with qtbot.waitSignal(controller.failed, timeout=20000) as blocker:
        controller.start(SPEC, plain(k=0), "the")
    assert blocker.args[0].kind == "input" and "K must be" in blocker.args[0].message


def test_shutdown_mid_run_ends_the_thread(qtbot, endless_pair, make_controller) -> None:
    controller, got = make_controller(lambda *a, **k: endless_pair)
    controller.start(SPEC, plain(k=2, max_new_tokens=5000), "the")
    qtbot.waitUntil(lambda: len(got.of_type(Round)) >= 1, timeout=20000)
    controller.shutdown()
    assert controller.decoder_thread.isFinished()


def test_run_control_counts_steps() -> None:
    control = RunControl(paused=True, steps=2)
    control.wait_turn()
    control.wait_turn()  # two steps granted: neither call blocks
    control.stop()
    control.wait_turn()  # a stop always lets the run wind down
    assert control.stopped


def test_memory_is_collected_on_the_gui_thread_only(qtbot, monkeypatch) -> None:
    """A worker's gc.collect() finalised Qt objects off their thread and crashed once.

    Broken variant this catches: ``_free_memory`` calling ``gc.collect()`` directly, which runs
    the collection on the asking (worker) thread: ``threads`` then holds that thread.
    """
    import threading

    from specviz.gui import worker as worker_mod

    controller = worker_mod.DecodeController(loader=lambda *a, **k: None)
    threads: list[threading.Thread] = []
    monkeypatch.setattr(worker_mod.gc, "collect",
                        lambda: threads.append(threading.current_thread()))
    asker = threading.Thread(target=worker_mod._free_memory)
    asker.start()
    asker.join()
    qtbot.waitUntil(lambda: bool(threads), timeout=5000)
    assert threads == [threading.main_thread()]
    controller.shutdown(wait_ms=2000)


def test_automatic_collection_is_off_and_the_event_loop_collects(qtbot) -> None:
    """CI once segfaulted inside ``AxisItem.paint``: an automatic collection, started by an
    allocation in the middle of the paint, freed Qt wrappers under it. Automatic collection
    can also start on the decoder or loader thread. So the app turns it off and collects
    from its event loop on the GUI thread.

    Broken variants this catches: ``make_app`` without ``install_gui_collector`` (collection
    stays automatic: the first assertion fails); a collector whose timer never collects
    (the cycle below is never freed).
    """
    import gc
    import weakref

    from specviz.gui.windows.app import make_app

    make_app()
    assert not gc.isenabled()

    class Node:
        pass

    a, b = Node(), Node()
    a.other, b.other = b, a  # a cycle: reference counting alone never frees it
    gone = weakref.ref(a)
    del a, b
    kept = [Node() for _ in range(1000)]  # alive: past generation 0's threshold  # noqa: F841
    qtbot.waitUntil(lambda: gone() is None, timeout=5000)


# Broken: the job runs on the long-lived QThread itself (what the worker did before).
RunsOnTheQThread = mutant(worker_mod.DecodeWorker, (
    'body = threading.Thread(target=self._run_here, args=(job,), name="specviz-run",\n'
    '                                daemon=True)\n        body.start()\n        body.join()\n',
    "self._run_here(job)\n"))


@pytest.mark.parametrize("broken", [False, True])
def test_each_job_runs_on_a_thread_that_ends_with_it(qtbot, tiny_pair, make_controller,
                                                      monkeypatch, broken: bool) -> None:
    """No thread that outlives a job has run torch: libgomp keeps a thread's OpenMP team for
    the thread's life, and two live teams slow every parallel region about 2x (a step timed
    at load after a run: 55.6 ms instead of 28.6). Seen here as: each job's events come from a
    thread of its own, and that thread has ended once the job's ``finished`` arrived."""
    if broken:
        monkeypatch.setattr(worker_mod, "DecodeWorker", RunsOnTheQThread)
    controller, got = make_controller(lambda *a, **k: tiny_pair)
    ran_on: list[threading.Thread] = []
    controller.worker.yielded.connect(lambda e: ran_on.append(threading.current_thread()),
                                      Qt.ConnectionType.DirectConnection)
    for seed in (1, 2):
        with qtbot.waitSignal(controller.finished, timeout=20000):
            controller.start(SPEC, plain(k=2, max_new_tokens=6, seed=seed), "the cat")
    assert len(got.of_type(RunFinished)) == 2 and not got.failures
    threads = set(ran_on)
    assert (len(threads) == 2 and not any(t.is_alive() for t in threads)) == (not broken)


def _steps_measured(qtbot, tiny_pair, controller_cls: type) -> list[tuple[str, str, float]]:
    controller = controller_cls(lambda *a, **k: tiny_pair)
    got: list[tuple[str, str, float]] = []
    controller.step_measured.connect(lambda *args: got.append(args))
    try:
        with qtbot.waitSignal(controller.loaded, timeout=20000):
            controller.load(SPEC)
        qtbot.wait(50)  # a queued step_measured posted before ``loaded`` has arrived by now
    finally:
        controller.shutdown()
    return got


@pytest.mark.parametrize("broken", [False, True])
def test_the_worker_times_the_step_when_a_pair_loads(qtbot, tiny_pair, broken: bool) -> None:
    """House: the step measured at load (the speed reference) is the worker's job, on the
    loading thread before ``loaded``; the stage no longer wraps the loader. The broken
    variant loads without measuring: no step reaches the window."""
    cls = worker_mod.DecodeController
    if broken:
        cls = mutant(cls, ("            if self.measure_at_load:\n"
                           "                self._measure(pair, progress)\n", ""))
    got = _steps_measured(qtbot, tiny_pair, cls)
    if broken:
        assert got == []
        return
    assert [(name, device) for name, device, *_ in got] == [("tiny-target", "cpu")]
    assert got[0][2] > 0


class PostsAfterShutdown(worker_mod.DecodeController):
    """The broken variant: ``_post`` as it was, emitting from a load thread whatever the
    controller's state (a test's teardown then destroyed a window mid-emit: a segfault)."""

    def _post(self, signal, *args) -> None:  # type: ignore[override]
        try:
            signal.emit(*args)
        except RuntimeError:
            pass


@pytest.mark.parametrize("broken", [False, True])
def test_no_load_thread_emits_once_shutdown_returned(qtbot, broken: bool) -> None:
    """A load still running when the window closes never touches the controller again: its
    result is not emitted (not even to be dropped), so a window destroyed after closing is
    never emitted on while Qt tears it down. The loader here blocks until after shutdown."""
    entered, release = threading.Event(), threading.Event()

    def loader(*_a, **_k):
        entered.set()
        release.wait(10)
        raise ModelLoadError("late")

    cls = PostsAfterShutdown if broken else worker_mod.DecodeController
    controller = cls(loader, measure_at_load=False)
    emitted: list[threading.Thread] = []
    controller._load_done.connect(lambda *_: emitted.append(threading.current_thread()),
                                  Qt.ConnectionType.DirectConnection)
    controller.load(SPEC)
    assert entered.wait(10)
    task = controller._wanted
    controller.shutdown(wait_ms=1000)
    release.set()
    task.thread.join(10)
    assert not task.thread.is_alive()
    assert (emitted == []) == (not broken), emitted

"""Loading as the user sees it, with fake loaders: cancel, close mid-load, banners, Ctrl+C,
imports."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtWidgets import QComboBox

from specviz.core.errors import ModelLoadError
from specviz.core.presets import PRESETS
from specviz.gui.windows.app import CUSTOM, MainWindow
from specviz.gui.windows.presets import mark_presets, preset_mark
from specviz.gui.worker import preset_availability

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support propagateSizeHints")

ROOT = Path(__file__).resolve().parents[2]


class BlockingLoader:
    """A loader that enters, then waits for ``release`` (as from_pretrained would, for long)."""

    def __init__(self, result: object = None, wait_s: float | None = None) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.returned = threading.Event()
        self.calls = 0
        self.result = result
        self.wait_s = wait_s

    def __call__(self, draft, target, device="auto", dtype="auto", progress=None,
                 cross_tokenizer=False):
        self.calls += 1
        self.entered.set()
        self.release.wait(self.wait_s)
        self.returned.set()
        return self.result


@pytest.fixture
def make_window(qtbot, settings_store) -> Iterator:
    made: list[MainWindow] = []
    loaders: list[BlockingLoader] = []

    def make(loader) -> MainWindow:
        if isinstance(loader, BlockingLoader):
            loaders.append(loader)
        window = MainWindow(loader=loader, settings=settings_store, autoload=False)
        qtbot.addWidget(window)
        window._set_preset(CUSTOM)
        window.controls.draft_edit.setText("tiny-draft")
        window.controls.target_edit.setText("tiny-target")
        window.controls.device.setCurrentText("cpu")
        window.controls.max_new.setValue(8)
        window.controls.prompt.setPlainText("the cat")
        made.append(window)
        return window

    yield make
    for loader in loaders:
        loader.release.set()  # let abandoned load threads end
    for window in made:
        window.close()
        window.controller.decoder_thread.wait()


def test_cancel_returns_to_idle_and_drops_the_late_result(qtbot, make_window,
                                                          tiny_pair) -> None:
    loader = BlockingLoader(result=tiny_pair)
    window = make_window(loader)
    loaded: list[str] = []
    window.controller.loaded.connect(loaded.append)
    window.run()  # the run waits for its pair
    assert loader.entered.wait(10)
    assert window.controller.state == "running" and window.cancel_action.isEnabled()
    assert not window.cancel_button.isHidden()
    window.cancel_action.trigger()  # Esc / the status bar's Cancel
    assert window.controller.state == "idle" and not window.controller.loading
    assert window.cancel_button.isHidden() and "Cancelled" in window.status_label.text()
    loader.release.set()  # the abandoned load finishes after all...
    task_threads = [t for t in threading.enumerate() if t.name.startswith("specviz-load")]
    for t in task_threads:
        t.join(10)
    qtbot.wait(50)  # ...and its queued result arrives, to be dropped
    assert loader.returned.is_set() and not loaded
    assert window.controller.pair is None and "Cancelled" in window.status_label.text()
    assert window.run_view.record.started is None


def test_a_new_load_after_cancel_works(qtbot, make_window, tiny_pair) -> None:
    loader = BlockingLoader(result=tiny_pair)
    window = make_window(loader)
    window.load_pair()
    assert loader.entered.wait(10)
    window.cancel_load()
    loader.release.set()
    window.controls.max_new.setValue(4)
    with qtbot.waitSignal(window.controller.finished, timeout=30000):
        window.run()
    window.run_view.flush()
    assert window.run_view.record.finished is not None


def test_closing_during_a_load_does_not_wait_for_it(qtbot, make_window, tiny_pair) -> None:
    # Released only after 60 s: a close that waited for the load would return after it.
    loader = BlockingLoader(result=tiny_pair, wait_s=60)
    window = make_window(loader)
    window.load_pair()
    assert loader.entered.wait(10)
    window.close()
    assert not loader.returned.is_set()  # close came back while the loader was still inside
    assert window.controller.decoder_thread.isFinished()
    assert not window.clean_exit  # main() ends the process rather than wait (hard_exit)


def test_failure_then_success_clears_the_banner(qtbot, make_window, tiny_pair) -> None:
    fail = {"now": True}

    def loader(*args, **kwargs):
        if fail["now"]:
            raise ModelLoadError("Could not load 'nope/nope': not in the local cache.")
        return tiny_pair

    window = make_window(loader)
    with qtbot.waitSignal(window.controller.failed, timeout=30000):
        window.load_pair()
    assert "Could not load" in window.run_view.banner.text()
    assert window.busy.isHidden() and window.cancel_button.isHidden()
    fail["now"] = False
    with qtbot.waitSignal(window.controller.loaded, timeout=30000):
        window.load_pair()
    assert window.run_view.banner.text() == "" and window.run_view.banner.isHidden()
    assert window.status_label.text().startswith("Ready")


def test_unknown_name_fails_once_and_run_does_not_retry(qtbot, make_window) -> None:
    calls: list[str] = []

    def loader(draft, target, *args, **kwargs):
        calls.append(target)
        raise ModelLoadError(f"No model folder, .gguf file or cached hub id named {target!r}.")

    window = make_window(loader)
    window.controls.target_edit.setText("does-not-exist-dir")
    with qtbot.waitSignal(window.controller.finished, timeout=30000):
        window.run()
    assert calls == ["does-not-exist-dir"] and window.controller.state == "idle"
    assert "does-not-exist-dir" in window.run_view.banner.text()
    for _ in range(3):  # pressing Run again shows the failure, it does not load again
        window.run()
        assert window.controller.state == "idle"
    assert calls == ["does-not-exist-dir"] and "Not retried" in window.run_view.banner.text()


def test_empty_prompt_is_refused_and_the_window_stays_usable(qtbot, make_window,
                                                             tiny_pair) -> None:
    calls: list[int] = []

    def loader(*args, **kwargs):
        calls.append(1)
        return tiny_pair

    window = make_window(loader)
    window.controls.prompt.setPlainText("  \n\t ")
    window.run()
    window.step()
    assert window.controller.current is None and window.controller.state == "idle"
    assert "prompt is only whitespace" in window.run_view.banner.text() and not calls
    window.controls.prompt.setPlainText("the cat")
    with qtbot.waitSignal(window.controller.finished, timeout=30000):
        window.run()
    window.run_view.flush()
    assert window.run_view.record.finished is not None and not window.run_view.banner.text()


def test_presets_are_marked(qtbot, make_window, monkeypatch) -> None:
    names = list(PRESETS)
    fake = {names[0]: "bundled", names[1]: "cached", names[2]: "download"}
    monkeypatch.setattr("specviz.gui.worker.preset_availability", lambda: fake)
    window = make_window(lambda *a, **k: None)
    with qtbot.waitSignal(window.controller.availability, timeout=30000):
        window.controller.probe_availability()
    marks = [preset_mark(window.controls.preset, i) for i in range(3)]
    assert marks[0].endswith("— offline") and marks[1].endswith("— in local cache")
    assert marks[2].endswith("— needs download")
    assert window.controls.preset.itemText(0) == names[0]  # the name itself is untouched
    assert "network" in window.controls.preset.itemData(2, 3)  # 3: Qt.ToolTipRole


def test_real_availability_covers_every_preset(qtbot) -> None:
    marks = preset_availability()
    assert set(marks) == set(PRESETS)
    assert marks[next(iter(PRESETS))] in ("bundled", "local")  # the default works offline
    combo = QComboBox()
    qtbot.addWidget(combo)
    combo.addItems(list(PRESETS))
    mark_presets(combo, marks)
    assert all("—" in preset_mark(combo, i) for i in range(combo.count()))


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", PYTHONPATH=str(ROOT),
               XDG_CONFIG_HOME=str(tmp_path / "config"), SPECVIZ_STARTUP_TRACE="1",
               HF_HUB_OFFLINE="1")
    return env


def test_the_window_imports_neither_torch_nor_transformers(tmp_path: Path) -> None:
    code = ("import sys, specviz.gui.windows.app, specviz.gui.startup; "
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], env=_env(tmp_path), capture_output=True,
                         text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def _interrupt_when(what: str, args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    proc = subprocess.Popen(args, env=_env(tmp_path), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith(f"specviz-startup {what}"):
                break
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_ctrl_c_quits_the_app_cleanly(tmp_path: Path) -> None:
    done = _interrupt_when("shown", [sys.executable, "-m", "specviz", "--no-load"], tmp_path)
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stderr and "KeyboardInterrupt" not in done.stderr
    assert list((tmp_path / "config").rglob("*.conf")), "settings were not saved"


BLOCKED_LAUNCH = """
import sys, threading
import specviz.gui.worker as worker
worker._default_loader = lambda *a, **k: threading.Event().wait()  # a load that never ends
from specviz.gui.windows.app import main
sys.exit(main(["--target", "never/loads"]))
"""


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_ctrl_c_during_an_endless_load_exits(tmp_path: Path) -> None:
    done = _interrupt_when("loading", [sys.executable, "-c", BLOCKED_LAUNCH], tmp_path)
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stderr
    assert list((tmp_path / "config").rglob("*.conf")), "settings were not saved"


def test_a_newer_load_wins_and_a_reload_adopts_the_abandoned_one(qtbot, make_controller,
                                                                  tiny_pair) -> None:
    from specviz.gui.worker import PairSpec

    slow = BlockingLoader(result=tiny_pair)
    controller, _ = make_controller(slow)
    loaded: list[str] = []
    controller.loaded.connect(loaded.append)
    a, b = PairSpec("d", "slow-target", "cpu"), PairSpec("d", "other-target", "cpu")
    controller.load(a)
    assert slow.entered.wait(10)
    controller.cancel_load()
    controller.load(a)  # the same pair again while its abandoned load still runs: adopt it
    assert slow.calls == 1 and controller.loading
    controller.load(b)  # a newer request supersedes it
    slow.release.set()
    qtbot.waitUntil(lambda: len(loaded) == 1, timeout=30000)
    assert "other-target" in loaded[0] and controller.pair_spec == b
    for t in [t for t in threading.enumerate() if t.name.startswith("specviz-load")]:
        t.join(10)
    qtbot.wait(50)
    assert len(loaded) == 1 and controller.pair_spec == b  # the late result was dropped
    assert slow.calls == 2  # b's load (same fake loader) plus a's single one


def test_a_calibrated_draft_says_so_where_sampling_is_set(qtbot, make_window,
                                                          tiny_pair) -> None:
    """"Sampling (same for p and q)" would be untrue for a draft drawn at T × its scale."""
    from dataclasses import replace

    from specviz.gui.windows.controls import SAMPLING_TITLE

    window = make_window(lambda *a, **k: replace(tiny_pair, draft_temperature_scale=0.9))
    with qtbot.waitSignal(window.controller.loaded, timeout=30000):
        window.load_pair()
    assert window.controls.sampling_box.title() == "Sampling (q at T×0.9: its calibration)"
    window.controller.pair = None  # the next load is a plain draft
    window.controller.loader = lambda *a, **k: tiny_pair
    window.controls.draft_edit.setText("tiny-draft-2")
    with qtbot.waitSignal(window.controller.loaded, timeout=30000):
        window.load_pair()
    assert window.controls.sampling_box.title() == SAMPLING_TITLE

"""Shared fixtures: tiny random-weight pairs built in-process."""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never download
# engine.warm_widths runs 17 pass widths per new model before a run's clock: for the tiny
# models of hundreds of tests only time; tests/core/test_warm.py turns it on.
os.environ.setdefault("SPECVIZ_WARM", "0")

import pytest  # noqa: E402 - after the environment above
import torch  # noqa: E402

# Tiny models: extra threads only add overhead, and on a busy 2-core machine they
# oversubscribe badly (a tiny run goes from ~15 ms to over a second).
torch.set_num_threads(1)

from specviz.core.models import ModelPair  # noqa: E402
from tests.tiny import tiny_pair as _tiny_pair  # noqa: E402


@pytest.fixture
def tiny_pair() -> ModelPair:
    """Two different tiny random Llamas (float64) sharing a word-level tokenizer."""
    return _tiny_pair(sharpness=8.0)


@pytest.fixture(autouse=True)
def _collect_between_tests() -> Iterator[None]:
    """Collect cycles between tests, where no paint or thread is mid-way.

    The app turns automatic collection off once a QApplication is made
    (``gui.startup.GuiThreadCollector``) and collects from its event loop; tests rarely spin
    that loop, so without this the garbage of hundreds of tests would pile up.
    """
    yield
    gc.unfreeze()  # a pair that loaded froze the heap (gui.worker): its cycles are due too
    if gc.isenabled():
        return
    from PySide6.QtCore import QCoreApplication, QEvent

    from specviz.gui.startup import GuiThreadCollector, collect_due

    app = QCoreApplication.instance()
    if app is not None:  # deleteLater'd widgets go first
        QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
        collector = app.findChild(GuiThreadCollector)
        if collector is not None:
            collect_due(collector.threshold)
            return
    gc.collect()


@pytest.fixture(autouse=True)
def _own_calibration_store(tmp_path_factory: pytest.TempPathFactory,
                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test keeps the cost policy's calibration in a file of its own (core/calibration.py),
    never in the user's cache, and starts with none kept."""
    path = tmp_path_factory.mktemp("calibration") / "calibration.json"
    monkeypatch.setenv("SPECVIZ_CALIBRATION_STORE", str(path))


_EXIT_STATUS: list[int] = []


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _EXIT_STATUS.append(int(exitstatus))


def pytest_unconfigure(config: pytest.Config) -> None:
    """End the process once pytest has reported, skipping the interpreter's teardown.

    With hundreds of Qt windows, pyqtgraph items and worker threads made by the GUI tests,
    CPython's final garbage collection destroyed Qt objects in an order Qt does not survive:
    one clean-clone run ended "544 passed" and then a segmentation fault (exit 139), which CI
    counts as a failure. The app ends the same way (``gui.startup.hard_exit``). The exit
    status is pytest's own.
    """
    if _EXIT_STATUS:
        import sys

        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_EXIT_STATUS[-1])

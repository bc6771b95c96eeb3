"""GUI fixtures: an isolated QSettings file, and a controller whose thread always ends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from PySide6.QtCore import QObject, QSettings, Slot

from specviz.core.events import Event
from specviz.core.models import ModelPair
from specviz.gui.worker import DecodeController
from tests.tiny import tiny_pair as make_tiny_pair
from tests.tiny import word_tokenizer

# Tiny models on a shared 2-core box: one intra-op thread is ~50x faster than two that
# spin against each other (and against the GUI thread).
torch.set_num_threads(1)


@pytest.fixture(autouse=True, scope="session")
def app_font(qapp):  # noqa: ANN001, ANN201 - pytest-qt's fixture
    """Every GUI test sees the app's own (projector-size) font, as a user does: layouts
    checked with Qt's small default font passed, then clipped in the real app."""
    from specviz.gui.windows.app import make_app

    return make_app()


@pytest.fixture
def settings_store(tmp_path: Path) -> QSettings:
    """QSettings in a temp ini file: tests never touch the user's settings."""
    return QSettings(str(tmp_path / "specviz.ini"), QSettings.Format.IniFormat)


@pytest.fixture
def endless_pair() -> ModelPair:
    """A tiny pair whose tokenizer has no EOS: runs last until max_new_tokens or Stop."""
    return make_tiny_pair(tokenizer=word_tokenizer(eos=False), sharpness=8.0)


class Collector(QObject):
    """Receives the worker's signals on the GUI thread, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[Event] = []
        self.failures: list = []

    @Slot(object)
    def on_event(self, event: Event) -> None:
        self.events.append(event)

    @Slot(object)
    def on_failure(self, failure: object) -> None:
        self.failures.append(failure)

    def of_type(self, cls: type) -> list:
        return [e for e in self.events if isinstance(e, cls)]


@pytest.fixture
def make_controller() -> Iterator:
    """Build controllers with a given loader; shut every one down afterwards."""
    made: list[tuple[DecodeController, Collector]] = []

    def make(loader, cls: type[DecodeController] = DecodeController
             ) -> tuple[DecodeController, Collector]:
        # No timing at load (the main window's controller does it; see
        # test_the_worker_times_the_step_when_a_pair_loads): the target's passes here are the
        # runs' own, which some tests count.
        controller = cls(loader, measure_at_load=False)
        collector = Collector()
        controller.yielded.connect(collector.on_event)
        controller.failed.connect(collector.on_failure)
        made.append((controller, collector))
        return controller, collector

    yield make
    for controller, _ in made:
        controller.shutdown()

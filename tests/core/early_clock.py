"""A broken decoder shared by the clock tests (test_engine's calibration, test_warm's warm-up):
its run's clock starts before the calibration and the warm-up, so a one-off run pays them."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import torch

from specviz.core import engine as engine_mod
from specviz.core.engine import SpeculativeDecoder
from specviz.core.events import Event
from tests.mutation import mutant


def clock_started_early() -> type[SpeculativeDecoder]:
    """SpeculativeDecoder with ``_run``'s clock moved before everything it times first."""
    t0 = "    t0 = factory.clock()  # the run's clock starts after the calibration\n"
    broken_run = mutant(engine_mod._run, (t0, ""),
                        ("    costs = None\n", t0 + "    costs = None\n"))

    class Broken(SpeculativeDecoder):
        @torch.inference_mode()
        def run(self, prompt: str, stop: threading.Event | None = None, *,
                rng: object = None) -> Iterator[Event]:
            yield from broken_run(self.pair, self.settings, prompt, stop, rng, self.factory,
                                  True)

    return Broken

"""engine.warm_widths: every pass width a run may take, run once per process before its clock."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from specviz.core import engine as engine_mod
from specviz.core.cached_model import CachedModel
from specviz.core.engine import AutoregressiveDecoder, SpeculativeDecoder, warm_widths
from specviz.core.events import RunFinished, to_json
from specviz.core.models import ModelPair
from specviz.core.options import K_LIMIT
from specviz.core.parts import Factory
from tests.core.early_clock import clock_started_early
from tests.plain import plain
from tests.tiny import tiny_pair


class SlowWarm:
    """A fake clock, and a warm-up that takes 100 of its seconds (and says what it was asked)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.calls: list[tuple[int, bool]] = []

    def clock(self) -> float:
        self.now += 2.0 ** -10
        return self.now

    def warm(self, pair: ModelPair, widest: int, draft: bool) -> None:
        self.calls.append((widest, draft))
        self.now += 100.0


def check_warm_outside_the_clock(decoder: type[SpeculativeDecoder]) -> None:
    """Each run warms once, before its clock: elapsed times and tokens/s do not pay for it."""
    slow = SlowWarm()
    events = list(decoder(tiny_pair(), plain(k=3, max_new_tokens=12, k_policy="fixed"),
                          factory=Factory(clock=slow.clock, warm=slow.warm)).run("the cat"))
    done = events[-1]
    assert isinstance(done, RunFinished)
    assert slow.calls == [(1 + K_LIMIT, True)]  # every K any policy drafts, and the draft
    assert done.summary.wall_time_s < 1.0


def test_the_warm_up_is_outside_the_runs_clock() -> None:
    check_warm_outside_the_clock(SpeculativeDecoder)


def test_the_clock_check_rejects_a_warm_up_inside_the_clock() -> None:
    """Broken: the run's clock starts before the warm-up (a one-off run pays for it)."""
    with pytest.raises(AssertionError):
        check_warm_outside_the_clock(clock_started_early())


def test_the_target_alone_warms_one_width_and_lookup_no_draft() -> None:
    slow = SlowWarm()
    factory = Factory(clock=slow.clock, warm=slow.warm)
    list(AutoregressiveDecoder(tiny_pair(), plain(max_new_tokens=4), factory=factory)
         .run("the cat"))
    list(SpeculativeDecoder(tiny_pair(), plain(max_new_tokens=4, drafter="lookup"),
                            factory=factory).run("the cat"))
    assert slow.calls == [(1, False), (1 + K_LIMIT, False)]


def recording(pair: ModelPair) -> tuple[type[CachedModel], list[tuple[str, int]]]:
    """A model runner whose warm-up passes are listed as (which model, width)."""
    seen: list[tuple[str, int]] = []
    names = {id(pair.target): "target", id(pair.draft): "draft"}

    class Recording(CachedModel):
        def time_pass(self, n: int, token: int) -> float:
            seen.append((names[id(self.model)], n))
            return super().time_pass(n, token)

    return Recording, seen


def test_on_the_cpu_only_the_draft_warms_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CPU target's first passes cost nothing extra: the default warms the draft alone."""
    monkeypatch.setenv("SPECVIZ_WARM", "1")
    pair = tiny_pair()
    runner, seen = recording(pair)
    with torch.inference_mode():
        warm_widths(pair, 3, draft=True, runner=runner)
    assert seen == [("draft", n) for n in (1, 2, 3)]


def test_each_width_runs_once_per_model_and_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECVIZ_WARM", "all")
    pair = tiny_pair()
    runner, seen = recording(pair)
    with torch.inference_mode():
        warm_widths(pair, 4, draft=False, runner=runner)
        assert seen == [("target", n) for n in (1, 2, 3, 4)]
        warm_widths(pair, 6, draft=True, runner=runner)  # the target's new widths; the draft's all
        assert seen[4:] == [("target", 5), ("target", 6)] + [("draft", n) for n in range(1, 7)]
        warm_widths(pair, 6, draft=True, runner=runner)
        assert len(seen) == 12


def test_warming_is_off_with_the_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECVIZ_WARM", "0")
    pair = tiny_pair()
    runner, seen = recording(pair)
    warm_widths(pair, 4, draft=True, runner=runner)
    assert seen == []


def events_json(pair: ModelPair, factory_kw: dict[str, Any], drafter: str, policy: str,
                temperature: float) -> list[str]:
    """A run's events with a counting clock (no wall time in them), as JSON lines."""
    ticks = iter(range(10**6))
    factory = Factory(clock=lambda: float(next(ticks)), **factory_kw)
    s = plain(k=3, max_new_tokens=20, drafter=drafter, k_policy=policy, temperature=temperature,
              seed=5)
    return [to_json(e) for e in SpeculativeDecoder(pair, s, factory=factory).run("the cat")]


@pytest.mark.parametrize(("drafter", "policy", "temperature"),
                         [("model", "fixed", 0.0), ("hybrid", "heuristic", 1.0)])
def test_warming_leaves_the_run_byte_identical(monkeypatch: pytest.MonkeyPatch, drafter: str,
                                               policy: str, temperature: float) -> None:
    """The warm-up's passes run on models of its own: the run's events do not change."""
    monkeypatch.setenv("SPECVIZ_WARM", "all")
    pair = tiny_pair()
    cold = events_json(pair, {"warm": lambda *a: None}, drafter, policy, temperature)
    warmed = events_json(pair, {}, drafter, policy, temperature)  # warms now, first time
    assert engine_mod._WARMED.get(pair.target) == 1 + K_LIMIT
    assert warmed == cold

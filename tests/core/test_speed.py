"""Honest speed maths, by hand-computed numbers; the target step timed on a scripted clock."""

from __future__ import annotations

import sys
from typing import Any

import pytest
import torch

from specviz.core.models import ModelPair
from specviz.core.record import RunRecord
from specviz.core.speed import (
    describe_step,
    expected_speedup,
    expected_tokens_per_round,
    measure_target_step,
    speedup_vs_run,
    speedup_vs_step,
)
from tests.gui.scripted import baseline_events, speculative_events
from tests.mutation import mutant


def test_expected_tokens_per_round() -> None:
    assert expected_tokens_per_round(0.0, 4) == 1.0
    assert expected_tokens_per_round(1.0, 4) == 5.0
    assert expected_tokens_per_round(0.5, 2) == 1.75  # 1 + 0.5 + 0.25


def test_expected_speedup_uses_the_measured_verify_cost() -> None:
    # E = 1.75; K·c + v = 2·0.25 + 1.5 = 2.0
    assert expected_speedup(0.5, 2, 0.25, 1.5) == pytest.approx(0.875)
    # The paper's form: v = 1, so K·c + 1 = 1.5
    assert expected_speedup(0.5, 2, 0.25) == pytest.approx(1.75 / 1.5)
    assert expected_speedup(0.5, 2, 0.0, 0.0) == 0.0  # nothing measured: no figure


def test_measured_speedups() -> None:
    assert speedup_vs_step(10, 0.5, 0.04) == pytest.approx(0.8)  # 10 × 40 ms / 0.5 s
    assert speedup_vs_step(10, 0.5, 0.0) == 0.0
    assert speedup_vs_run(20.0, 10.0) == pytest.approx(2.0)
    assert speedup_vs_run(20.0, 0.0) == 0.0
    assert describe_step(0.0412) == "vs target one-token step measured at load: 41.2 ms"
    assert describe_step(0.0412, kept=True) == \
        "vs target one-token step kept from an earlier launch: 41.2 ms"


def record_of(events: list) -> RunRecord:
    record = RunRecord()
    for e in events:
        record.add(e)
    return record


def test_run_speed_against_the_measured_step() -> None:
    # Scripted run: 10 tokens in 0.5 s; 11 draft passes in 0.11 s (10 ms each), 4 verify
    # passes in 0.2 s (50 ms each); α = 6/9, K = 3. Step measured at 40 ms:
    # c = 10/40 = 0.25, v = 50/40 = 1.25, E = (1 − (2/3)^4) / (1/3) = 195/81.
    stats = record_of(speculative_events()).speed(target_step_s=0.04)
    e = 195 / 81
    assert stats.cost_ratio == pytest.approx(0.25)
    assert stats.verify_cost == pytest.approx(1.25)
    assert stats.expected_speedup == pytest.approx(e / (3 * 0.25 + 1.25))  # 1.204
    assert stats.paper_speedup == pytest.approx(e / (3 * 0.25 + 1.0))  # 1.376
    assert stats.measured_speedup == pytest.approx(10 * 0.04 / 0.5)  # 0.8
    assert stats.measured_against == "vs target one-token step measured at load: 40.0 ms"


def test_run_speed_without_a_reference_shows_no_speedup() -> None:
    stats = record_of(speculative_events()).speed()
    assert stats.measured_speedup == 0.0
    assert stats.expected_speedup == 0.0  # v unknown: no big number
    assert stats.paper_speedup > 0  # only for the tooltip, named as the paper's form
    assert "nothing measured" in stats.measured_against


def test_run_speed_against_a_race_baseline() -> None:
    base = record_of(baseline_events()).speed()
    assert base.tokens_per_s == pytest.approx(10.0)
    stats = record_of(speculative_events()).speed(base.tokens_per_s, 0.04, race=True)
    assert stats.measured_speedup == pytest.approx(2.0)  # 20 tok/s vs 10 tok/s
    assert "race" in stats.measured_against


class ScriptedClock:
    """A clock that a forward pass moves on by the next scripted duration."""

    def __init__(self, durations: list[float]) -> None:
        self.now = 0.0
        self.durations = list(durations)

    def __call__(self) -> float:
        return self.now

    def tick(self) -> None:
        self.now += self.durations.pop(0)


def test_measure_target_step_is_the_median_single_token_cached_pass(
        tiny_pair: ModelPair, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECVIZ_STOCK_TARGET", "1")  # the target on the forward spied below
    inner = tiny_pair.target.forward
    clock = ScriptedClock([0.0, 9.0, 9.0, 0.003, 0.001, 0.002, 0.005, 0.004])
    shapes: list[tuple[int, ...]] = []
    cached: list[int] = []

    def forward(*args: Any, **kw: Any) -> Any:
        ids = kw["input_ids"]
        shapes.append(tuple(ids.shape))
        cache = kw.get("cache", kw.get("past_key_values"))  # its name by transformers version
        cached.append(int(cache.get_seq_length()) if cache is not None else -1)
        clock.tick()
        return inner(*args, **kw)

    monkeypatch.setattr(tiny_pair.target, "forward", forward)  # the model object, not core
    step = measure_target_step(tiny_pair, passes=5, warmup=2, context=8, clock=clock)
    # Warm-up passes (9 s each) are left out; the median of the five timed ones is 3 ms.
    assert step == pytest.approx(0.003)
    assert shapes == [(1, 8)] + [(1, 1)] * 7  # a cached prefix, then one token per step
    assert cached == [0, 8, 9, 10, 11, 12, 13, 14]  # each step reuses the cache


def test_the_step_runs_on_the_engines_target_path(tiny_pair: ModelPair,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The measured step is the target alone's: where FastLlama serves the target (the CPU
    default), the step never calls transformers' forward. Seen failing on the old
    measure_target_step (cached_forward on the model: a step ~1.4x slower than the runs it
    was divided into, so 'measured speedup vs the step' read ~1.4x high)."""
    from specviz.core.fast_llama import serves_target

    monkeypatch.delenv("SPECVIZ_STOCK_TARGET", raising=False)
    assert serves_target(tiny_pair.target)

    def never(*args: Any, **kw: Any) -> Any:
        raise AssertionError("transformers' forward timed, not the engine's target path")

    monkeypatch.setattr(tiny_pair.target, "forward", never)
    assert measure_target_step(tiny_pair, passes=2, warmup=1, context=8) > 0


def test_measure_target_step_stops_at_its_budget(
        tiny_pair: ModelPair, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECVIZ_STOCK_TARGET", "1")  # the target on the forward spied below
    clock = ScriptedClock([0.0, 9.0, 0.6, 0.5, 0.4, 0.1, 0.1])
    inner = tiny_pair.target.forward

    def forward(*args: Any, **kw: Any) -> Any:
        clock.tick()
        return inner(*args, **kw)

    monkeypatch.setattr(tiny_pair.target, "forward", forward)
    step = measure_target_step(tiny_pair, passes=5, warmup=1, context=8, clock=clock,
                               budget_s=1.0)
    # Warm-up 9 s (not counted); timed 0.6, 0.5 (1.1 s ≥ budget): stop; median 0.55.
    assert step == pytest.approx(0.55)
    assert clock.durations == [0.4, 0.1, 0.1]  # three passes never ran


def test_measure_target_step_on_a_real_clock(tiny_pair: ModelPair) -> None:
    torch.set_num_threads(1)
    step = measure_target_step(tiny_pair, passes=3, warmup=1)
    assert 0.0 < step < 60.0  # a positive duration; never a pass/fail on speed


# Each test above, run against a broken copy of what it checks, must fail.
SPEED = sys.modules["specviz.core.speed"]
RECORD = sys.modules["specviz.core.record"]
def _patched() -> pytest.MonkeyPatch:
    """A MonkeyPatch undone at the end of the test that runs the mutant (its env vars too)."""
    mp = pytest.MonkeyPatch()
    _UNDO.append(mp)
    return mp


_UNDO: list[pytest.MonkeyPatch] = []


@pytest.fixture(autouse=True)
def _undo_patches() -> Any:
    yield
    while _UNDO:
        _UNDO.pop().undo()


MUTANTS: dict[str, tuple[Any, Any, str, list[tuple[str, str]]]] = {
    "E without the α^(K+1) term": (
        test_expected_tokens_per_round, SPEED, "expected_tokens_per_round",
        [("(1.0 - alpha ** (k + 1)) / (1.0 - alpha)", "1.0 / (1.0 - alpha)")]),
    "verify cost ignored (the paper's form always)": (
        test_expected_speedup_uses_the_measured_verify_cost, SPEED, "expected_speedup",
        [("k * cost_ratio + verify_cost", "k * cost_ratio + 1.0")]),
    "step speedup inverted": (test_measured_speedups, SPEED, "speedup_vs_step",
                              [("tokens * step_s / elapsed_s", "elapsed_s / (tokens * step_s)")]),
    "c against the verify pass, not the step": (
        test_run_speed_against_the_measured_step, RECORD, "RunRecord",
        [("stats.cost_ratio, stats.verify_cost = c, v",
          "stats.cost_ratio, stats.verify_cost = c / v, v")]),  # c = draft ÷ verify pass
    "the old estimate: one verify pass per token": (
        test_run_speed_without_a_reference_shows_no_speedup, RECORD, "RunRecord",
        [('stats.measured_against = "nothing measured to compare with: run a race"',
          "stats.measured_speedup = n * (self.tally.verify_time_s / last.target_calls)"
          " / elapsed")]),
    "baseline ignored in a race": (
        test_run_speed_against_a_race_baseline, RECORD, "RunRecord",
        [("if baseline_tokens_per_s:", "if False:")]),
    "warm-up passes timed too, mean not median": (
        lambda: test_measure_target_step_is_the_median_single_token_cached_pass(
            _tiny(), _patched()), SPEED, "measure_target_step",
        [("statistics.median(times[warmup:])", "statistics.mean(times)")]),
    "no budget: every pass, however slow": (
        lambda: test_measure_target_step_stops_at_its_budget(_tiny(), _patched()),
        SPEED, "measure_target_step",
        [("if i > warmup and sum(times[warmup:]) >= budget_s:", "if False:")]),
    "a step of nothing": (
        lambda: test_measure_target_step_on_a_real_clock(_tiny()), SPEED, "measure_target_step",
        [("return float(statistics.median(times[warmup:]))", "return 0.0")]),
    "no cache: the whole sequence every step": (
        lambda: test_measure_target_step_is_the_median_single_token_cached_pass(
            _tiny(), _patched()), SPEED, "measure_target_step",
        [("logits = runner.feed([token], keep=1)",
          "logits = runner.feed([i % vocab for i in range(context)] + [token], keep=1)")]),
}


def _tiny() -> ModelPair:
    from tests.tiny import tiny_pair

    return tiny_pair(sharpness=8.0)


@pytest.mark.parametrize("name", list(MUTANTS))
def test_each_test_rejects_its_broken_variant(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    test, module, attr, edits = MUTANTS[name]
    # The tests call these names from this module: the broken copy replaces them here only.
    monkeypatch.setitem(globals(), attr, mutant(getattr(module, attr), *edits))
    with pytest.raises(AssertionError):
        test()


def test_c_and_v_have_one_definition() -> None:
    """c and v once (speed.pass_costs): in one-token steps where the step was measured, else
    in verify passes (v = 1). The tally, the app's record and sweeps all read it; the tally
    once divided by the verify pass while the app divided by the step."""
    assert SPEED.pass_costs(0.2, 4, 0.6, 3, 0.1) == pytest.approx((0.5, 2.0))
    assert SPEED.pass_costs(0.2, 4, 0.6, 3) == pytest.approx((0.25, 1.0))
    assert SPEED.pass_costs(0.0, 0, 0.0, 0) == (0.0, 0.0)
    from specviz.core.events import Round
    from specviz.core.tally import Tally

    events = speculative_events()
    record, tally = RunRecord(), Tally()
    for event in events:
        record.add(event)
        if isinstance(event, Round):
            tally.add_round(event)
    last = [e for e in events if isinstance(e, Round)][-1]
    tally.close(last.elapsed_s, last.target_calls, last.draft_calls, 0.0)
    for step in (0.0, 0.004):
        stats = record.speed(target_step_s=step or None)
        assert tally.cost_ratio(step) == pytest.approx(stats.cost_ratio), step

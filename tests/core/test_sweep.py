"""A sweep: measured speedup and α per K beside E[tokens per round] ÷ (K·c + v(K))."""

from __future__ import annotations

import math
import sys
import threading
from dataclasses import replace

import pytest
import torch

from specviz.core.cached_model import CachedModel
from specviz.core.events import Settings
from specviz.core.models import ModelPair
from specviz.core.options import K_LIMIT
from specviz.core.parts import Factory
from specviz.core.sweep import (
    BASELINE,
    Measured,
    Sample,
    k_points,
    measure,
    planned_runs,
    run_sweep,
    samples_from_json,
    schedule,
    settled,
    spread,
    summarize,
    sweep_factory,
    to_csv,
    to_json,
    warm_up_sweep,
    widest_pass,
)
from tests.gui.scripted import speculative_events
from tests.mutation import mutant
from tests.tiny import tiny_pair as make_pair

BASE = Settings(temperature=0.0, max_new_tokens=8, drafter="model")  # K sweeps draft with q


def run(tokens: int, wall: float, tested: int = 0, accepted: int = 0, draft_s: float = 0.0,
        draft_tokens: int = 0, verify_s: float = 0.0, passes: int = 0) -> Measured:
    return Measured(tokens=tokens, wall_s=wall, rounds=passes + 1, drafted=draft_tokens,
                    tested=tested, accepted=accepted, forward_s=wall / 2, draft_s=draft_s,
                    draft_tokens=draft_tokens, verify_s=verify_s, verify_passes=passes)


def hand_samples() -> list[Sample]:
    """Target alone: 10 tokens in 1 s, 5 later passes of 0.1 s (step 0.1 s). K 2: 6 of 8
    tested kept, 8 drafts in 0.08 s, 5 passes in 0.6 s, 10 tokens in 0.5 s. K 4: 4 of 8 kept,
    16 drafts in 0.16 s, 5 passes in 0.7 s, 10 tokens in 0.4 s."""
    return [Sample(BASELINE, 0, 0, run(10, 1.0, verify_s=0.5, passes=5)),
            Sample(0, 0, 0, run(10, 0.5, 8, 6, 0.08, 8, 0.6, 5)),
            Sample(1, 0, 0, run(10, 0.4, 8, 4, 0.16, 16, 0.7, 5))]


def test_the_prediction_matches_a_hand_computation() -> None:
    result = summarize(k_points(BASE, [2, 4]), hand_samples())
    k2, k4 = result.rows
    assert result.step_s == pytest.approx(0.1)
    # α pooled over both K (10 of 16), c = (0.24 s / 24 drafts) / 0.1 s = 0.1,
    # v(2) = 0.12 s / 0.1 s = 1.2, v(4) = 0.14 s / 0.1 s = 1.4.
    assert (k2.c, k2.v, k4.v) == pytest.approx((0.1, 1.2, 1.4))
    # K 2: (1 + .625 + .390625) / (2·0.1 + 1.2) = 2.015625 / 1.4
    assert k2.predicted == pytest.approx(1.4397321428571428)
    # K 4: (1 + .625 + .390625 + .244140625 + .152587890625) / (4·0.1 + 1.4) = 2.4123535 / 1.8
    assert k4.predicted == pytest.approx(1.3401963975694444)
    # Measured: 20 and 25 tok/s against 10 tok/s.
    assert (k2.speedup, k4.speedup) == pytest.approx((2.0, 2.5))
    assert (k2.alpha, k4.alpha) == pytest.approx((0.75, 0.5))  # each point's own α, shown
    assert k2.gap == pytest.approx(2.0 / 1.4397321428571428 - 1)
    assert (result.best, result.best_predicted) == (1, 0)
    assert result.complete
    csv = to_csv(result).splitlines()
    assert csv[0].startswith("label,k,runs,alpha") and csv[2].endswith(",measured")


def test_c_v_and_the_step_leave_out_the_first_round() -> None:
    m = measure(speculative_events())
    # Rounds 1-3 of the scripted run: drafts 3 + 3 + 2 in 0.03 + 0.03 + 0.02 s, 3 passes.
    assert (m.draft_tokens, m.verify_passes) == (8, 3)
    assert (m.draft_s, m.verify_s) == pytest.approx((0.08, 0.15))
    assert (m.tokens, m.accepted, m.rounds) == (10, 6, 4)


def test_the_schedule_interleaves_and_rotates() -> None:
    order = schedule(2, 2, 2)
    assert sorted(order) == sorted({(j, p, r) for j in (BASELINE, 0, 1) for p in (0, 1)
                                    for r in (0, 1)})
    firsts = [order[i][0] for i in range(0, len(order), 3)]
    assert firsts == [BASELINE, 0, 1, BASELINE]  # no point always runs first


def test_a_sweep_runs_streams_resumes_and_round_trips(tiny_pair: ModelPair) -> None:
    points = k_points(BASE, [1, 3])
    prompts = ["the cat", "a dog ran"]
    samples = list(run_sweep(tiny_pair, points, prompts, repeats=1, warm_up=False))
    assert sorted(s.key for s in samples) == sorted(schedule(2, 2, 1))
    result = summarize(points, samples, n_prompts=2)
    assert result.complete and result.step_s > 0
    assert [r.identical for r in result.rows] == [2, 2]  # T = 0: the target alone's ids
    assert all(r.predicted > 0 and r.speedup > 0 for r in result.rows)
    # Resume: only what is missing runs.
    half = samples[:3]
    rest = list(run_sweep(tiny_pair, points, prompts, done={s.key for s in half},
                          warm_up=False))
    assert sorted(s.key for s in half + rest) == sorted(schedule(2, 2, 1))
    back = samples_from_json(to_json(result))
    assert back == samples
    # A stop ends it after the run in flight, keeping nothing of that run.
    stop = threading.Event()
    stop.set()
    assert list(run_sweep(tiny_pair, points, prompts, stop=stop, warm_up=False)) == []


def test_a_partial_sweep_summarises_what_it_has() -> None:
    result = summarize(k_points(BASE, [2, 4]), hand_samples()[:2], n_prompts=1)
    assert not result.complete and result.rows[1].runs == 0 and result.rows[1].speedup == 0
    assert result.best == 0


def settling_samples() -> list[Sample]:
    """Two prompts, two repeats, the target alone at 10 tok/s throughout (10 tokens in 1 s).
    Point 0: speedups 2.0, 2.04 on prompt 0 and 1.5, 1.53 on prompt 1 (2% apart on each).
    Point 1: 2.0, 2.02 on prompt 0 but 1.5, 1.8 on prompt 1 (20% apart there)."""
    speeds = {0: {0: (2.0, 2.04), 1: (1.5, 1.53)}, 1: {0: (2.0, 2.02), 1: (1.5, 1.8)}}
    out = [Sample(BASELINE, p, r, run(10, 1.0)) for p in (0, 1) for r in (0, 1)]
    out += [Sample(j, p, r, run(10, 1.0 / speeds[j][p][r])) for j in (0, 1) for p in (0, 1)
            for r in (0, 1)]
    return out


def test_a_point_settles_when_its_speedup_varied_little_on_every_prompt() -> None:
    samples = settling_samples()
    # The largest max/min - 1 over prompts: point 0, 2.04/2.0 and 1.53/1.5 both 1.02.
    assert spread(samples, 0, 2, 2) == pytest.approx(0.02)
    assert spread(samples, 1, 2, 2) == pytest.approx(0.2)  # 1.8 / 1.5 on prompt 1
    assert settled(2, samples, 2, 0.05, 2) == {0}
    assert settled(2, samples, 2, 0.25, 2) == {0, 1}
    assert settled(2, samples, 2, None, 2) == set()  # no settle: every point repeats
    # One repeat is no spread: nothing settles before repeat 2 (repeat index 2 is the third).
    assert spread(samples, 0, 1, 2) is None
    assert settled(2, samples, 1, 10.0, 2) == set()
    # Runs planned for 4 repeats at 5%: all 2 × 3 in repeats 0 and 1, then point 1 and the
    # target alone on both prompts in repeats 2 and 3; at 25% nothing after repeat 1.
    assert planned_runs(2, samples, 4, 2, 0.05) == 6 + 6 + 4 + 4
    assert planned_runs(2, samples, 4, 2, 0.25) == 12
    assert planned_runs(2, samples, 4, 2) == 24


def test_a_settled_point_is_not_repeated_and_the_rest_stay_interleaved(
        tiny_pair: ModelPair) -> None:
    points = k_points(BASE, [1, 3])
    earlier = settling_samples()  # repeats 0 and 1 done: point 0 settled at 5%, point 1 not
    rest = list(run_sweep(tiny_pair, points, ["the cat", "a dog ran"], repeats=3,
                          done={s.key for s in earlier}, warm_up=False, settle=0.05,
                          earlier=earlier))
    # Repeat 2 runs point 1 beside the target alone on each prompt, in the rotated order.
    expected = [key for key in schedule(2, 2, 3) if key[2] == 2 and key[0] != 0]
    assert [s.key for s in rest] == expected
    result = summarize(points, earlier + rest, repeats=3, n_prompts=2, settle=0.05)
    assert result.complete and [r.runs for r in result.rows] == [4, 6]
    # Every point settles at an infinite spread: repeat 2 runs nothing, not even the target.
    assert list(run_sweep(tiny_pair, points, ["the cat", "a dog ran"], repeats=3,
                          done={s.key for s in earlier}, warm_up=False, settle=math.inf,
                          earlier=earlier)) == []


class _Recorder(CachedModel):
    """A CachedModel that notes each feed: (which model, how many ids)."""

    feeds: list[tuple[object, int]] = []

    def feed(self, ids: list[int], keep: int, local: bool = False) -> torch.Tensor:
        self.feeds.append((self.model, len(ids)))
        return super().feed(ids, keep, local)


def test_the_warm_up_is_one_short_run_per_group_and_warms_the_draft(
        tiny_pair: ModelPair) -> None:
    _Recorder.feeds = []
    warmed: list[tuple[int, bool]] = []
    factory = Factory(model=_Recorder, warm=lambda pair, widest, draft: warmed.append(
        (widest, draft)))
    points = k_points(replace(BASE, max_new_tokens=12), [1, 3, 8])
    prompt = "the cat sat on a mat"  # 6 ids: longer than any feed of a draft's round
    warm_up_sweep(tiny_pair, points, prompt, factory=factory)
    # One short run of the draft (the largest K), not one per K: one prompt pass of the draft.
    draft_prompt_passes = [n for model, n in _Recorder.feeds if model is tiny_pair.draft and n >= 6]
    assert len(draft_prompt_passes) == 1
    # The target alone's run and the draft's both reached the engine's warm-up of the widths
    # (every width up to 1 + K 8, the draft's too) before any timed run.
    assert (1, False) in warmed and any(w >= 9 and draft for w, draft in warmed)


def test_the_runs_warm_only_the_pass_widths_the_sweep_takes(tiny_pair: ModelPair) -> None:
    warmed: list[tuple[int, bool]] = []
    factory = Factory(warm=lambda pair, widest, draft: warmed.append((widest, draft)))
    points = k_points(BASE, [1, 3])
    # The engine asks for every width a run may take, 1 + K_LIMIT; K 3 verifies 4 ids at most.
    sweep_factory(points, factory).warm(tiny_pair, 1 + K_LIMIT, True)  # type: ignore[misc]
    assert warmed == [(4, True)]
    warmed.clear()
    list(run_sweep(tiny_pair, points, ["the cat"], factory=factory))
    assert warmed and max(w for w, _ in warmed) == 4 and (4, True) in warmed
    # A policy that may grow K, or another drafter, keeps every width.
    assert widest_pass(replace(BASE, k=3, k_policy="heuristic")) == 1 + K_LIMIT
    assert widest_pass(replace(BASE, k=3, drafter="lookup")) == 1 + K_LIMIT


SWEEP = sys.modules["specviz.core.sweep"]
MUTANTS = {
    "α of each point alone, not pooled over K": (
        test_the_prediction_matches_a_hand_computation, "summarize",
        [("pool = groups[_group(point.settings)]", "pool = runs")]),
    "v not in steps": (
        test_the_prediction_matches_a_hand_computation, "summarize",
        [("sum(r.verify_passes for r in runs), step)",
          "sum(r.verify_passes for r in runs))")]),  # v in verify passes: 1 for every K
    "speedup divided the other way": (
        test_the_prediction_matches_a_hand_computation, "summarize",
        [("ratios = [speedup_vs_run(s.run.tokens_per_s, base[(s.prompt, s.repeat)].tokens_per_s)",
          "ratios = [speedup_vs_run(base[(s.prompt, s.repeat)].tokens_per_s, s.run.tokens_per_s)"
          )]),
    "the first round (the prompt pass) counted": (
        test_c_v_and_the_step_leave_out_the_first_round, "measure",
        [("later = rounds[1:]", "later = rounds")]),
    "no rotation": (test_the_schedule_interleaves_and_rotates, "schedule",
                    [("shift = (rep * n_prompts + prompt) % len(jobs)", "shift = 0")]),
    "one repeat counts as a spread (of 0)": (
        test_a_point_settles_when_its_speedup_varied_little_on_every_prompt, "spread",
        [("any(len(r) < MIN_REPEATS for r", "any(len(r) < 1 for r")]),
    "the spread pooled over prompts (a prompt's own speedup differs)": (
        test_a_point_settles_when_its_speedup_varied_little_on_every_prompt, "spread",
        [("return max(max(r) / min(r) - 1.0 for r in ratios.values())",
          "return max(max(r) for r in ratios.values()) / min(min(r) for r in ratios.values())"
          " - 1.0")]),
    "no speculative warm-up run (the draft stays cold)": (
        lambda: test_the_warm_up_is_one_short_run_per_group_and_warms_the_draft(
            make_pair(sharpness=8.0)),
        "warm_up_sweep", [("runs += [(SpeculativeDecoder, s) for s in widest.values()]", "")]),
    "the warm-up of pass widths not capped at the sweep's widest": (
        lambda: test_the_runs_warm_only_the_pass_widths_the_sweep_takes(make_pair(sharpness=8.0)),
        "sweep_factory", [("inner(pair, min(widest, need), draft)", "inner(pair, widest, draft)")]),
    "a warm-up run per K (as before)": (
        lambda: test_the_warm_up_is_one_short_run_per_group_and_warms_the_draft(
            make_pair(sharpness=8.0)),
        "warm_up_sweep", [("group = _group(point.settings)", "group = (point.settings.k,)")]),
}


@pytest.mark.parametrize("name", list(MUTANTS))
def test_each_test_rejects_its_broken_variant(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    test, attr, edits = MUTANTS[name]
    broken = mutant(getattr(SWEEP, attr), *edits)
    monkeypatch.setitem(globals(), attr, broken)
    with pytest.raises(AssertionError):
        test()


@pytest.mark.parametrize("text", ["", "[]", '{"runs": [{"point": 0}]}', '{"runs": 3}'])
def test_a_file_that_is_no_sweep_is_one_value_error(text: str) -> None:
    with pytest.raises(ValueError, match="not a sweep file"):
        samples_from_json(text)

"""A lineup: runs of one prompt under different settings, one after the other, one clock."""

from __future__ import annotations

import sys
import threading
from dataclasses import replace

import pytest

from specviz.core.events import Round, RunFinished, RunStarted, Settings, to_json
from specviz.core.lineup import LaneSpec, as_lineup, run_lineup, split_runs
from specviz.core.models import ModelPair
from specviz.core.race import as_race
from specviz.core.recording import read_lines
from tests.gui.scripted import baseline_events, speculative_events
from tests.mutation import mutant, with_globals

GREEDY = Settings(k=2, temperature=0.0, max_new_tokens=10, seed=3)


def timed(events: list, ends: list[float], wall: float, k: int | None = None) -> list:
    """A run whose rounds end at the hand-set times ``ends`` (its own clock) and whose wall time
    is ``wall``; ``k`` sets its configuration's K (a lane of its own)."""
    out: list = []
    rounds = iter(ends)
    for e in events:
        if isinstance(e, RunStarted) and k is not None:
            e = replace(e, settings=replace(e.settings, k=k))
        elif isinstance(e, Round):
            e = replace(e, elapsed_s=next(rounds))
        elif isinstance(e, RunFinished):
            s = e.summary
            e = replace(e, summary=replace(s, wall_time_s=wall, tokens_per_s=s.tokens / wall))
        out.append(e)
    return out


def three_lanes() -> list:
    """K 3 (rounds end 0.2, 0.3, 0.9, 1.0 s; 10 tokens), K 5 (0.5, 0.6, 0.7, 0.8 s; 10 tokens),
    target alone (0.4, 0.8, 1.2 s; 3 tokens): the times of no real clock."""
    return [*timed(speculative_events(), [0.2, 0.3, 0.9, 1.0], 1.1),
            *timed(speculative_events(), [0.5, 0.6, 0.7, 0.8], 0.8, k=5),
            *timed(baseline_events(), [0.4, 0.8, 1.2], 1.25)]


def test_the_shared_clock_replays_each_lane_at_its_own_recorded_times() -> None:
    lineup = as_lineup(three_lanes())
    assert lineup is not None and lineup.complete
    assert lineup.duration_s == pytest.approx(1.25)  # the slowest lane's own wall time
    # Tokens after rounds: speculative 3, 7, 8, 10; target alone 1, 2, 3.
    expected = {0.1: [0, 0, 0], 0.25: [3, 0, 0], 0.45: [7, 0, 1], 0.65: [7, 7, 1],
                0.85: [7, 10, 2], 0.95: [8, 10, 2], 1.3: [10, 10, 3]}
    for t, tokens in expected.items():
        assert [s.tokens for s in lineup.at(t)] == tokens, t
    at = lineup.at(0.65)
    assert [s.rounds for s in at] == [2, 2, 1]
    assert at[0].tokens_per_s == pytest.approx(7 / 0.65)
    assert at[1].tokens_per_round == pytest.approx(3.5)
    assert [s.done for s in lineup.at(0.85)] == [False, True, False]  # K 5 ended at 0.8 s
    assert lineup.at(0.85)[1].tokens_per_s == pytest.approx(10 / 0.8)  # its final figure
    assert [s.label for s in at] == ["model, K 3, T=1", "model, K 5, T=1", "target alone"]


def test_the_end_card_ranks_by_measured_speed_against_the_target_alone() -> None:
    lineup = as_lineup(three_lanes())
    assert lineup is not None
    ranked = lineup.ranking()
    assert [lane.started.settings.k for lane in ranked[:2]] == [5, 3]
    assert ranked[2] is lineup.baseline
    # 12.5 tok/s and 10/1.1 tok/s against 3/1.25 = 2.4 tok/s.
    assert lineup.speedup(ranked[0]) == pytest.approx(12.5 / 2.4)
    assert lineup.speedup(ranked[1]) == pytest.approx((10 / 1.1) / 2.4)


def test_a_lineup_recording_is_read_by_the_recording_reader() -> None:
    events = three_lanes()
    back = list(read_lines(to_json(e) for e in events))
    assert as_lineup(back) == as_lineup(events)
    assert as_lineup(back).events == events  # type: ignore[union-attr]


def test_what_is_not_a_lineup() -> None:
    spec, base = speculative_events(), baseline_events()
    assert as_lineup(spec) is None  # one run
    other_seed = [replace(base[0], settings=replace(base[0].settings, seed=8)), *base[1:]]
    assert as_lineup([*spec, *other_seed]) is None
    other_prompt = [replace(base[0], prompt_ids=(0, 2)), *base[1:]]
    assert as_lineup([*spec, *other_prompt]) is None
    assert as_lineup([*spec] * 6) is None  # more lanes than a lineup holds
    # Two lanes that differ in K and temperature: a lineup (what it is made to compare).
    hot = [replace(spec[0], settings=replace(spec[0].settings, k=1, temperature=0.5)), *spec[1:]]
    assert as_lineup([*spec, *hot]) is not None
    assert as_race([*spec, *base]) is not None and as_lineup([*spec, *base]) is not None


def test_lanes_run_one_after_the_other_with_one_seed(tiny_pair: ModelPair) -> None:
    lanes = [LaneSpec(replace(GREEDY, k=1)), LaneSpec(replace(GREEDY, k=4, k_policy="heuristic")),
             LaneSpec(replace(GREEDY, seed=None, temperature=1.0)),
             LaneSpec(GREEDY, mode="baseline")]
    lanes[0] = replace(lanes[0], settings=replace(lanes[0].settings, seed=None))
    events = list(run_lineup(tiny_pair, lanes, "the cat"))
    runs = split_runs(events)
    assert [r.started.mode for r in runs] == ["speculative"] * 3 + ["baseline"]
    # One after the other: each run starts right after the previous one finished.
    for i, e in enumerate(events[1:], 1):
        if isinstance(e, RunStarted):
            assert isinstance(events[i - 1], RunFinished)
    seeds = {r.started.settings.seed for r in runs}
    assert len(seeds) == 1 and None not in seeds  # drawn once, for every lane
    lineup = as_lineup(events)
    assert lineup is not None and lineup.complete
    assert [lineup.identical(lane) for lane in lineup.lanes] == [True, True, None, None]
    assert [r.started.settings.k for r in runs[:2]] == [1, 4]


def test_a_stopped_lane_starts_no_further_lane(tiny_pair: ModelPair) -> None:
    stop = threading.Event()
    events = []
    lanes = [LaneSpec(GREEDY), LaneSpec(replace(GREEDY, k=3)), LaneSpec(GREEDY, mode="baseline")]
    for e in run_lineup(tiny_pair, lanes, "the cat", stop):
        events.append(e)
        if isinstance(e, Round):
            stop.set()
    assert len(split_runs(events)) == 1


def test_a_bad_lane_ends_the_lineup_in_one_failed_event(tiny_pair: ModelPair) -> None:
    lanes = [LaneSpec(GREEDY), LaneSpec(replace(GREEDY, k=99)), LaneSpec(GREEDY, mode="baseline")]
    events = list(run_lineup(tiny_pair, lanes, "the cat"))
    assert type(events[-1]).__name__ == "RunFailed" and "K must be" in events[-1].message
    assert sum(isinstance(e, RunStarted) for e in events) == 1


LINEUP = sys.modules["specviz.core.lineup"]
MUTANTS = {
    "a lane replayed on the sequence's wall clock": (
        test_the_shared_clock_replays_each_lane_at_its_own_recorded_times, "Lineup",
        [("return [LaneState(self.label(lane), lane.rounds_at(t), lane.tokens_at(t),",
          "return [LaneState(self.label(lane), lane.rounds_at(t), lane.tokens_at(\n"
          "                          t - sum(x.duration_s for x in self.lanes[:self.lanes.index("
          "lane)])),")]),
    "a round shown before its time": (
        test_the_shared_clock_replays_each_lane_at_its_own_recorded_times, "Side",
        [("if rnd.elapsed_s > t:", "if rnd.elapsed_s > t + 0.1:")]),
    "ranked slowest first": (
        test_the_end_card_ranks_by_measured_speed_against_the_target_alone, "Lineup",
        [("-lane.tokens_per_s))", "lane.tokens_per_s))")]),
    "a seed per lane": (
        lambda: test_lanes_run_one_after_the_other_with_one_seed(_tiny()), "run_lineup",
        [("settings=replace(lane.settings, seed=seed))", "settings=lane.settings)")]),
    "the next lane despite a stop": (
        lambda: test_a_stopped_lane_starts_no_further_lane(_tiny()), "run_lineup",
        [("if not finished or (stop is not None and stop.is_set()):",
          "if stop is None and not finished:")]),
}


def _tiny() -> ModelPair:
    from tests.tiny import tiny_pair

    return tiny_pair(sharpness=8.0)


@pytest.mark.parametrize("name", list(MUTANTS))
def test_each_test_rejects_its_broken_variant(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    test, attr, edits = MUTANTS[name]
    broken = mutant(getattr(LINEUP, attr), *edits)
    # The names the tests call, as copies that read the broken part (core stays as is).
    if attr == "run_lineup":
        monkeypatch.setitem(globals(), attr, broken)
    elif attr == "Lineup":
        monkeypatch.setitem(globals(), "as_lineup", with_globals(as_lineup, Lineup=broken))
    else:  # Side, built by split_runs
        split = with_globals(split_runs, Side=broken)
        monkeypatch.setitem(globals(), "split_runs", split)
        monkeypatch.setitem(globals(), "as_lineup", with_globals(as_lineup, split_runs=split))
    with pytest.raises(AssertionError):
        test()

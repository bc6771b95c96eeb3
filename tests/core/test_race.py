"""A race: the speculative run, then the target alone, same prompt, seed and settings."""

from __future__ import annotations

import sys
import threading
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest

from specviz.core.events import Round, RunFinished, RunStarted, from_json, to_json
from specviz.core.models import ModelPair
from specviz.core.race import as_race, race_so_far, run_race, split_runs
from tests.gui.scripted import baseline_events, speculative_events
from tests.mutation import mutant, with_globals
from tests.plain import plain

GREEDY = plain(k=3, temperature=0.0, max_new_tokens=12, seed=3)


def kinds(events: list) -> list[str]:
    return [type(e).__name__ for e in events]


def test_race_runs_speculative_then_target_alone_with_the_same_seed(tiny_pair: ModelPair) -> None:
    events = list(run_race(tiny_pair, replace(GREEDY, temperature=1.0, seed=None), "the cat"))
    starts = [e for e in events if isinstance(e, RunStarted)]
    assert [s.mode for s in starts] == ["speculative", "baseline"]
    # One after the other: the second run starts only after the first one finished.
    first_end = next(i for i, e in enumerate(events) if isinstance(e, RunFinished))
    assert events.index(starts[1]) == first_end + 1
    assert starts[0].settings.seed is not None
    assert starts[0].settings == starts[1].settings  # a random seed is drawn once, for both
    assert starts[0].prompt_ids == starts[1].prompt_ids
    race = as_race(events)
    assert race is not None and race.complete
    assert race.identical is None  # T > 0: the texts may differ by design


def test_a_greedy_race_shows_identical_text(tiny_pair: ModelPair) -> None:
    race = as_race(list(run_race(tiny_pair, GREEDY, "the cat")))
    assert race is not None
    assert race.identical is True  # exactness at T = 0: the same ids as the target alone
    assert race.first_difference() is None
    assert race.speedup > 0


def test_a_stopped_speculative_run_starts_no_target_run(tiny_pair: ModelPair) -> None:
    stop = threading.Event()
    events = []
    for e in run_race(tiny_pair, GREEDY, "the cat", stop):
        events.append(e)
        if isinstance(e, Round):
            stop.set()
    assert [s.started.mode for s in split_runs(events)] == ["speculative"]
    assert as_race(events) is None


def scripted_race() -> list:
    return [*speculative_events(), *baseline_events()]


def test_race_clock_and_figures_from_each_sides_own_timestamps() -> None:
    race = as_race(scripted_race())
    assert race is not None
    spec, base = race.speculative, race.baseline
    # Scripted rounds end at 0.1, 0.2, 0.3, 0.4 s (speculative) and 0.1, 0.2, 0.3 s (target).
    assert [spec.rounds_at(t) for t in (0.0, 0.15, 0.25, 0.45)] == [0, 1, 2, 4]
    assert [base.tokens_at(t) for t in (0.05, 0.1, 0.35)] == [0, 1, 3]
    assert spec.tokens_at(0.25) == 7
    assert spec.tokens_per_s_at(0.25) == pytest.approx(7 / 0.25)
    assert not spec.done_at(0.45) and spec.done_at(0.5)  # wall time 0.5 s
    assert spec.tokens_per_s_at(0.6) == pytest.approx(20.0)  # the summary's figure
    assert race.duration_s == pytest.approx(0.5)
    assert race.speedup == pytest.approx(2.0)  # 20 tok/s vs 10 tok/s


def test_identity_check_compares_the_ids() -> None:
    events = scripted_race()
    greedy = [replace(e, settings=replace(e.settings, temperature=0.0))
              if isinstance(e, RunStarted) else e for e in events]
    race = as_race(greedy)
    assert race is not None
    assert race.identical is False  # scripted sides generate different tokens
    assert race.first_difference() == 2  # " the cat" then " dog" vs " sat"
    same_ids = [replace(e, generated_ids=greedy[5].generated_ids)
                if isinstance(e, RunFinished) else e for e in greedy]
    race = as_race(same_ids)
    assert race is not None and race.identical is True


def test_a_race_recording_reads_back_as_the_same_race() -> None:
    events = scripted_race()
    text = "\n".join(to_json(e) for e in events) + "\n"
    back = [from_json(line) for line in text.splitlines()]
    assert as_race(back) == as_race(events)
    assert as_race(back).events == events  # type: ignore[union-attr]


def test_what_is_not_a_race() -> None:
    spec, base = speculative_events(), baseline_events()
    assert as_race(spec) is None  # one run
    assert as_race([*base, *spec]) is None  # target alone first
    assert as_race([*spec, *spec]) is None  # two speculative runs
    other_prompt = [replace(base[0], prompt_ids=(0, 2)), *base[1:]]
    assert as_race([*spec, *other_prompt]) is None
    other_seed = [replace(base[0], settings=replace(base[0].settings, seed=8)), *base[1:]]
    assert as_race([*spec, *other_seed]) is None
    # K differs between a speculative run and a baseline by nature: still a race.
    other_k = [replace(base[0], settings=replace(base[0].settings, k=1)), *base[1:]]
    assert as_race([*spec, *other_k]) is not None
    # Half a race, still arriving.
    s, b = race_so_far([*spec, *base[:2]])
    assert s is not None and b is not None and len(b.rounds) == 1
    assert race_so_far(spec[:3]) == (split_runs(spec[:3])[0], None)


RACE = sys.modules["specviz.core.race"]
LINEUP = sys.modules["specviz.core.lineup"]
# The race is the two-lane lineup: its runner and its sides' clock live in core/lineup.py.
MUTANTS = {
    "seed drawn per run": (
        lambda: test_race_runs_speculative_then_target_alone_with_the_same_seed(_tiny()),
        LINEUP, "run_lineup", [("settings=replace(lane.settings, seed=seed))",
                                "settings=lane.settings)")]),
    "target alone despite a stop": (
        lambda: test_a_stopped_speculative_run_starts_no_target_run(_tiny()),
        LINEUP, "run_lineup",
        [("if not finished or (stop is not None and stop.is_set()):", "if False:")]),
    "clock counts a round before its time": (
        test_race_clock_and_figures_from_each_sides_own_timestamps, LINEUP, "Side",
        [("if rnd.elapsed_s > t:", "if rnd.elapsed_s > t + 0.1:")]),
    "identity always ✓": (test_identity_check_compares_the_ids, RACE, "Race",
                          [("return self.speculative.finished.generated_ids == "
                            "self.baseline.finished.generated_ids", "return True")]),
    "seed not compared": (test_what_is_not_a_race, RACE, "SHARED_SETTINGS", None),
    "identity only checked at T > 0": (
        lambda: test_a_greedy_race_shows_identical_text(_tiny()), RACE, "Race",
        [("if not self.greedy or not self.complete:", "if self.greedy or not self.complete:")]),
    "a run's last round lost when split": (
        test_a_race_recording_reads_back_as_the_same_race, RACE, "split_runs",
        [("runs.append(Side(started, tuple(rounds), finished, failed))",
          "runs.append(Side(started, tuple(rounds[:-1]), finished, failed))")]),
}


def _tiny() -> ModelPair:
    from tests.tiny import tiny_pair

    return tiny_pair(sharpness=8.0)


def callers(attr: str, broken: Any) -> dict[str, Any]:
    """The names the tests call, as copies that read the broken ``attr`` (core stays as is)."""
    if attr == "run_lineup":  # run_race reads it through the lineup module
        return {"run_race": with_globals(run_race, _lineup=SimpleNamespace(run_lineup=broken))}
    if attr == "Side":  # built by split_runs
        return {"as_race": with_globals(as_race, split_runs=with_globals(split_runs, Side=broken))}
    if attr == "Race":
        return {"as_race": with_globals(as_race, Race=broken)}
    if attr == "SHARED_SETTINGS":  # read by same_race
        same = with_globals(RACE.same_race, SHARED_SETTINGS=broken)
        return {"as_race": with_globals(as_race, same_race=same),
                "race_so_far": with_globals(race_so_far, same_race=same)}
    assert attr == "split_runs"
    return {"split_runs": broken, "as_race": with_globals(as_race, split_runs=broken),
            "race_so_far": with_globals(race_so_far, split_runs=broken)}


@pytest.mark.parametrize("name", list(MUTANTS))
def test_each_test_rejects_its_broken_variant(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    test, module, attr, edits = MUTANTS[name]
    broken = ("temperature", "top_k", "top_p", "max_new_tokens") if edits is None else \
        mutant(getattr(module, attr), *edits)
    for caller, copy in callers(attr, broken).items():
        monkeypatch.setitem(globals(), caller, copy)
    with pytest.raises(AssertionError):
        test()

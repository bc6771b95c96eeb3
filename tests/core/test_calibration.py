"""The cost policy's calibration kept per machine, device and target (core/calibration.py):
used at once by the next launch, re-measured in the background and blended within bounds,
and a damaged or foreign store is ignored, never an error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from specviz.core import calibration, engine
from specviz.core.drafters import CachedModel
from specviz.core.models import ModelPair
from tests.mutation import mutant
from tests.tiny import tiny_pair

WIDTHS = engine.CALIBRATION_WIDTHS


def costs(scale: float) -> dict[int, float]:
    return {n: scale * (1 + 0.1 * n) for n in WIDTHS}


def counting(monkeypatch: pytest.MonkeyPatch, scale: float) -> list[int]:
    """Replace the timing with a fixed curve; returns the list each measurement appends to."""
    calls: list[int] = []

    def measure(target: CachedModel, token: int) -> dict[int, float]:
        calls.append(token)
        return costs(scale)

    monkeypatch.setattr(engine, "measure_costs", measure)
    return calls


def fresh_pair() -> ModelPair:
    return tiny_pair()  # new model objects: nothing remembered in this process


def test_a_second_launch_takes_the_kept_figures_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = counting(monkeypatch, 1.0)
    assert engine.calibrate(fresh_pair()) == costs(1.0)  # first launch: timed, kept
    assert len(calls) == 1
    calls = counting(monkeypatch, 3.0)  # the machine got slower since
    second = fresh_pair()  # another process, the same target
    assert engine.calibrate(second, refresh=False) == costs(1.0)  # at once, untimed
    assert calls == []
    third = fresh_pair()
    assert engine.calibrate(third, refresh=True) == costs(1.0)  # at once; a refresh behind
    engine.wait_for_refresh(third)
    assert len(calls) == 1  # timed once, in the background
    # Blended: ×3 counts as ×BOUND = ×2, a quarter of the gap: ×1.25, here and on disk.
    assert engine.verify_costs(CachedModel(third.target, third.vocab_size, fast=True), 0) == \
        pytest.approx({n: 1.25 * s for n, s in costs(1.0).items()})
    assert engine.calibrate(fresh_pair(), refresh=False) == \
        pytest.approx({n: 1.25 * s for n, s in costs(1.0).items()})


def test_verify_costs_in_a_run_uses_the_kept_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine's own call (a run with the cost policy and no calibrate before it)."""
    counting(monkeypatch, 2.0)
    engine.calibrate(fresh_pair())
    calls = counting(monkeypatch, 5.0)
    pair = fresh_pair()
    with torch.inference_mode():
        target = CachedModel(pair.target, pair.vocab_size)
        target.feed([3, 4, 5], keep=1)
        # The key follows the target's forward path: the engine's (fast) path was kept.
        fast = CachedModel(pair.target, pair.vocab_size, fast=True)
        assert engine.verify_costs(fast, 5) == costs(2.0)
    assert calls == []
    assert engine.calibration_key(target)[0] != engine.calibration_key(fast)[0]


@pytest.mark.parametrize("text", ["{not json", "\x00\xff", "[]", '{"format": 1, "entries": 7}',
                                  '{"format": 1, "entries": {"K": {"seconds": {"1": -1}}}}',
                                  '{"format": 99, "entries": {}}'])
def test_a_damaged_store_is_ignored_and_rewritten(text: str, monkeypatch: pytest.MonkeyPatch
                                                  ) -> None:
    path = calibration.store_path()
    path.write_bytes(text.encode("utf-8", "surrogateescape") if "\xff" not in text
                     else b"\x00\xff\xfe")
    calls = counting(monkeypatch, 1.0)
    assert engine.calibrate(fresh_pair()) == costs(1.0)  # measured, no error
    assert len(calls) == 1
    data = json.loads(path.read_text())
    assert data["format"] == calibration.FORMAT
    calls = counting(monkeypatch, 2.0)
    assert engine.calibrate(fresh_pair(), refresh=False) == costs(1.0)  # kept this time
    assert calls == []


def test_an_entry_for_another_machine_device_or_model_is_not_used(
        monkeypatch: pytest.MonkeyPatch) -> None:
    counting(monkeypatch, 1.0)
    engine.calibrate(fresh_pair())
    calls = counting(monkeypatch, 2.0)
    with monkeypatch.context() as m:
        m.setattr(calibration, "machine_parts", lambda: {"cpu": "another one"})
        assert engine.calibrate(fresh_pair()) == costs(2.0)  # re-measured
    assert len(calls) == 1
    calls = counting(monkeypatch, 4.0)
    other = tiny_pair(target_seed=2, hidden=48)  # another shape
    assert engine.calibrate(other) == costs(4.0)
    half = fresh_pair()
    half.target.to(torch.float32)  # another dtype
    assert engine.calibrate(half) == costs(4.0)
    assert len(calls) == 2


def test_an_entry_missing_a_width_is_measured_again(monkeypatch: pytest.MonkeyPatch) -> None:
    counting(monkeypatch, 1.0)
    engine.calibrate(fresh_pair())
    path = calibration.store_path()
    data = json.loads(path.read_text())
    for entry in data["entries"].values():
        del entry["seconds"]["17"]
    path.write_text(json.dumps(data))
    calls = counting(monkeypatch, 1.0)
    engine.calibrate(fresh_pair())
    assert len(calls) == 1


def test_an_unwritable_store_costs_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("SPECVIZ_CALIBRATION_STORE", str(blocker / "calibration.json"))
    counting(monkeypatch, 1.0)
    assert engine.calibrate(fresh_pair()) == costs(1.0)
    assert not calibration.save("k", costs(1.0), {})


def blend_is_bounded(blend: object) -> None:
    kept = costs(1.0)
    busy = blend(kept, costs(100.0))  # type: ignore[operator]
    quiet = blend(kept, costs(0.5))  # type: ignore[operator]
    for n in WIDTHS:
        assert kept[n] < busy[n] <= kept[n] * (1 + calibration.UP * (calibration.BOUND - 1))
        assert quiet[n] == pytest.approx(kept[n] * 0.75)  # faster: half the gap
    again = kept
    for _ in range(50):  # a machine busy at every launch: the figure stays within BOUND
        again = blend(again, {n: 100 * s for n, s in costs(1.0).items()})  # type: ignore[operator]
    assert max(again[n] / kept[n] for n in WIDTHS) <= calibration.BOUND ** 50


BROKEN_BLENDS = {
    "the new figure replaces the kept one": [("        elif new <= old:", "        elif True:"),
                                              ("old + DOWN * (new - old)", "new")],
    "slower figures taken unbounded": [("min(new, BOUND * old)", "new")],
    "a plain average": [("        elif new <= old:", "        elif True:"),
                        ("old + DOWN * (new - old)", "(old + new) / 2")],
}


def test_blending_is_bounded() -> None:
    blend_is_bounded(calibration.blend)


@pytest.mark.parametrize("name", list(BROKEN_BLENDS))
def test_broken_blends_are_caught(name: str) -> None:
    broken = mutant(calibration.blend, *BROKEN_BLENDS[name])
    with pytest.raises(AssertionError):
        blend_is_bounded(broken)

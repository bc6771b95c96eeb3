"""Resuming from a work folder never unpickles code: a crafted checkpoint.pt is refused."""

from __future__ import annotations

import builtins
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from specviz.core.errors import SpecvizError
from specviz.distill import train as distill
from tests.mutation import mutant


class _Planted:
    """Unpickling this calls ``open(marker, "w")``: stands in for any command an attacker picks."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return builtins.open, (str(self.marker), "w")


def _plant(work: Path) -> Path:
    """A work folder whose checkpoint.pt would create ``marker`` when fully unpickled."""
    marker = work / "ran-code"
    work.mkdir(parents=True, exist_ok=True)
    torch.save({"model": {}, "opt": {}, "step": 1, "history": [], "x": _Planted(marker)},
               work / distill.CKPT)
    return marker


def _resume(work: Path) -> None:
    """train()'s resume path with a one-layer student; it reads the checkpoint first."""
    args = SimpleNamespace(lr=1e-3)
    distill.train(torch.nn.Linear(2, 2), [], [], torch.zeros(1), 0, args, work)  # type: ignore[arg-type]


def test_a_planted_checkpoint_is_refused_and_runs_nothing(tmp_path: Path) -> None:
    marker = _plant(tmp_path / "work")
    with pytest.raises(SpecvizError) as caught:
        _resume(tmp_path / "work")
    message = str(caught.value)
    assert "could run code" in message and "io.open" in message and "\n" not in message
    assert not marker.exists()


def test_the_full_unpickler_would_have_run_it(tmp_path: Path) -> None:
    """The broken variant (the old weights_only=False) creates the marker: the test above bites."""
    marker = _plant(tmp_path / "work")
    unsafe = mutant(distill.load_checkpoint, ("weights_only=True", "weights_only=False"))
    unsafe(tmp_path / "work" / distill.CKPT)
    assert marker.exists()


@pytest.mark.parametrize("damage", ["cut", "garbage", "list"])
def test_damaged_checkpoints_get_one_line(tmp_path: Path, damage: str) -> None:
    path = tmp_path / distill.CKPT
    torch.save({"model": {"w": torch.ones(3)}, "opt": {}, "step": 4, "history": []}, path)
    if damage == "cut":
        path.write_bytes(path.read_bytes()[:-300])
    elif damage == "garbage":
        path.write_bytes(b"\x00not a checkpoint" * 10)
    else:
        torch.save([1, 2, 3], path)
    with pytest.raises(SpecvizError, match="delete it to train from step 0") as caught:
        distill.load_checkpoint(path)
    assert "\n" not in str(caught.value)


def test_a_real_checkpoint_round_trips(tmp_path: Path) -> None:
    student = torch.nn.Linear(3, 3)
    opt = torch.optim.AdamW(student.parameters(), lr=1e-3, betas=(0.9, 0.98))
    student(torch.randn(2, 3)).sum().backward()
    opt.step()
    distill.save_checkpoint(tmp_path / distill.CKPT, student, opt, 5, [{"step": 5.0}], 1.5)
    state = distill.load_checkpoint(tmp_path / distill.CKPT)
    assert state["step"] == 5 and state["history"] == [{"step": 5.0}]
    assert state["opt"]["param_groups"][0]["betas"] == (0.9, 0.98)

"""`specviz distill calibrate`: the draft's temperature scale, fitted, stored and loaded."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from specviz.core.errors import ModelLoadError
from specviz.core.models import TEMPERATURE_SCALE_KEY, load_pair
from specviz.distill import calibrate
from specviz.distill import train as distill
from specviz.distill.prompts import EVAL_HANDWRITTEN, evaluation_prompts, prompt_key
from tests.mutation import mutant
from tests.tiny import tiny_llama, word_tokenizer

SCALES = (0.25, 0.4, 0.5, 0.6, 0.8, 1.0, 1.5, 2.0, 2.5)
TEMPS = (1.0, 0.7)


def flattened(model: Any, factor: float) -> Any:
    """The same model with its logits multiplied by ``factor`` (the LM head has no bias)."""
    out = copy.deepcopy(model)
    with torch.no_grad():
        out.lm_head.weight.mul_(factor)
    return out


def sequences(vocab: int, n: int = 6, length: int = 10) -> list[tuple[list[int], int]]:
    gen = torch.Generator().manual_seed(0)
    return [(torch.randint(3, vocab, (length,), generator=gen).tolist(), 3) for _ in range(n)]


def check_fit(table_fn: Callable[..., torch.Tensor]) -> None:
    """A draft whose logits are the target's × f, drawn at T × f, is p exactly: the fit must
    find f, and the overlap there must be 1."""
    target = tiny_llama(12, seed=2, hidden=16, layers=1, sharpness=3.0)
    seqs = sequences(12)
    for factor in (0.5, 2.0):
        table = table_fn(target, flattened(target, factor), seqs, TEMPS, SCALES)
        assert calibrate.best_scale(table, SCALES) == factor
        assert table[:, SCALES.index(factor)].tolist() == pytest.approx([1.0, 1.0], abs=1e-9)
        assert float(table[:, SCALES.index(1.0)].max()) < 0.99  # the unscaled draft loses


def test_the_fit_finds_the_scale_that_makes_q_equal_p() -> None:
    check_fit(calibrate.overlap_table)


def test_the_fit_check_rejects_a_scale_applied_the_wrong_way() -> None:
    broken = mutant(calibrate.overlap_table, ("zd / (t * s)", "zd * s / t"))
    with pytest.raises(AssertionError):
        check_fit(broken)


def check_reduced_overlap(table_fn: Callable[..., torch.Tensor]) -> None:
    """With a vocabulary map, q's row j is target id map[j]: one position by hand."""
    target = tiny_llama(12, seed=2, hidden=16, layers=1, sharpness=3.0)
    keep = torch.tensor([0, 1, 2, 5, 7, 8, 11])
    draft = tiny_llama(len(keep), seed=1, hidden=16, layers=1, sharpness=3.0)
    ids = [5, 7, 8, 0]  # all kept: the draft reads them as 3, 4, 5, 0
    table = table_fn(target, draft, [(ids, 3)], (0.7,), (0.8,), vocab_map=keep, oov_id=2)
    with torch.no_grad():
        p = torch.softmax(target(torch.tensor([ids[:3]])).logits[0, -1].double() / 0.7, -1)
        q = torch.softmax(draft(torch.tensor([[3, 4, 5]])).logits[0, -1].double() / 0.56, -1)
    by_hand = sum(min(float(p[int(t)]), float(q[j])) for j, t in enumerate(keep))
    assert float(table[0, 0]) == pytest.approx(by_hand, abs=1e-12)


def test_a_reduced_vocabulary_overlap_pairs_each_draft_row_with_its_target_id() -> None:
    check_reduced_overlap(calibrate.overlap_table)


def test_the_reduced_check_rejects_rows_paired_by_position() -> None:
    broken = mutant(calibrate.overlap_table, ("[:, ids_of]  # (n, V_draft)",
                                              "[:, : len(ids_of)]"))
    with pytest.raises(AssertionError):
        check_reduced_overlap(broken)


def save(folder: Path, model: Any, tok: Any) -> Path:
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def test_a_written_scale_is_what_the_pair_loads(tmp_path: Path) -> None:
    tok = word_tokenizer()
    target = save(tmp_path / "t", tiny_llama(len(tok), seed=2), tok)
    draft = save(tmp_path / "d", tiny_llama(len(tok), seed=1), tok)
    assert load_pair(str(draft), str(target), device="cpu").draft_temperature_scale == 1.0
    calibrate.write_scale(draft, 0.8)
    assert json.loads((draft / "config.json").read_text())[TEMPERATURE_SCALE_KEY] == 0.8
    assert load_pair(str(draft), str(target), device="cpu").draft_temperature_scale == 0.8
    calibrate.write_scale(draft, 1.0)  # 1 removes the key
    assert TEMPERATURE_SCALE_KEY not in json.loads((draft / "config.json").read_text())
    assert load_pair(str(draft), str(target), device="cpu").draft_temperature_scale == 1.0


@pytest.mark.parametrize("value", ["0.8", 0.0, 9, True])
def test_a_bad_scale_is_one_clear_message(tmp_path: Path, value: object) -> None:
    tok = word_tokenizer()
    target = save(tmp_path / "t", tiny_llama(len(tok), seed=2), tok)
    draft = save(tmp_path / "d", tiny_llama(len(tok), seed=1), tok)
    config = json.loads((draft / "config.json").read_text())
    config[TEMPERATURE_SCALE_KEY] = value
    (draft / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match=f"{TEMPERATURE_SCALE_KEY}.*from 0.25 to 4"):
        load_pair(str(draft), str(target), device="cpu")


@pytest.mark.parametrize("measure", ["decoder", "overlap"])
def test_the_command_fits_and_writes(tmp_path: Path, measure: str,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    """End to end through `specviz distill calibrate`: a draft that is the target with its
    logits halved gets the scale 0.5 written, by either measure."""
    tok = word_tokenizer()
    model = tiny_llama(len(tok), seed=2, hidden=16, layers=1, sharpness=3.0,
                       dtype=torch.float32)
    target = save(tmp_path / "t", model, tok)
    draft = save(tmp_path / "d", flattened(model, 0.5), tok)
    code = distill.main(["calibrate", "--draft", str(draft), "--target", str(target),
                         "--measure", measure, "--prompts", "4", "--max-new-tokens", "30",
                         "--temperatures", "1", "--scales", "0.5,1", "--write"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "best scale 0.5" in out
    assert json.loads((draft / "config.json").read_text())[TEMPERATURE_SCALE_KEY] == 0.5


def test_the_command_refuses_to_write_where_there_is_no_folder(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert distill.main(["calibrate", "--draft", "smollm2-135m", "--write"]) == 2
    assert "--write needs a draft folder" in capsys.readouterr().err


def check_no_evaluation_prompt(prompts_fn: Callable[..., list[tuple[str, bool]]]) -> None:
    """Whatever the source, no evaluation prompt reaches the fit (an evaluation file given
    as the source yields nothing)."""
    evaluation = {prompt_key(t) for t in evaluation_prompts()}
    for source in ("handwritten", "training", str(EVAL_HANDWRITTEN)):
        prompts = prompts_fn(10_000, source)
        assert not [t for t, _ in prompts if prompt_key(t) in evaluation], source
    assert len(prompts_fn(10_000, "handwritten")) >= 40


def test_calibration_prompts_are_never_evaluation_prompts() -> None:
    check_no_evaluation_prompt(calibrate.calibration_prompts)


def test_the_prompt_check_rejects_a_calibration_without_the_filter() -> None:
    broken = mutant(calibrate.calibration_prompts, ("if allowed.allows(p[0])", "if p"))
    with pytest.raises(AssertionError):
        check_no_evaluation_prompt(broken)

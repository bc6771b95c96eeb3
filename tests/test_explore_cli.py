"""specviz-explore: lineup, sweep, set and diagnose on tiny models saved to disk."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from PIL import Image

from specviz.core.errors import InputError
from specviz.core.events import Settings
from specviz.core.lineup import as_lineup
from specviz.core.recording import read_recording
from specviz.explore_cli import main, parse_config, parse_lane
from tests.tiny import tiny_llama, word_tokenizer


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("models")
    tok = word_tokenizer()
    folders = []
    for name, seed in (("draft", 1), ("target", 2)):
        model = tiny_llama(len(tok), seed=seed, dtype=torch.float32, sharpness=8.0)
        model.save_pretrained(base / name)
        tok.save_pretrained(base / name)
        folders.append(base / name)
    return folders[0], folders[1]


def models(tiny_models: tuple[Path, Path]) -> list[str]:
    draft, target = tiny_models
    return ["--draft", str(draft), "--target", str(target), "--device", "cpu",
            "--max-new-tokens", "8", "--no-chat"]


def test_configurations_parse_over_the_defaults() -> None:
    base = Settings(k=4, drafter="hybrid", k_policy="cost", temperature=0.0)
    s = parse_config("k=2, policy=fixed drafter=model", base)
    assert (s.k, s.k_policy, s.drafter, s.temperature) == (2, "fixed", "model", 0.0)
    assert parse_config("t=0.7 lenience=0.5", base).lenience == 0.5


@pytest.mark.parametrize("text, message", [
    ("k=", "key=value"), ("kk=3", "no setting 'kk'"), ("k=two", "K must be a whole number"),
    ("t=0.5 k=0", "in 't=0.5 k=0': K must be"),
    ("k=40", "K must be between"), ("seed=3", "shared by every run"),
    ("drafter=magic", "drafter must be one of"), ("", "empty configuration"),
])
def test_a_bad_configuration_is_one_message(text: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        parse_config(text, Settings())


def test_a_lineup_prints_its_ranking_and_saves_a_recording(
        tiny_models: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    saved, html, png = tmp_path / "lineup.jsonl", tmp_path / "l.html", tmp_path / "l.png"
    assert main(["lineup", "k=1 k_policy=fixed drafter=model", "k=3 k_policy=fixed drafter=model",
                 "--prompt", "the cat", "--save", str(saved), "--html", str(html),
                 "--png", str(png), *models(tiny_models)]) == 0
    out = capsys.readouterr().out
    assert "model, K 1, greedy" in out and "model, K 3, greedy" in out and "target alone" in out
    assert out.count("yes") == 2  # T = 0: both lanes give the target alone's ids
    lineup = as_lineup(read_recording(saved))
    assert lineup is not None and len(lineup.lanes) == 3 and lineup.complete
    assert html.read_text("utf-8").count("<h2>") == 3 and Image.open(png).size == (1920, 1080)


def test_a_lane_names_its_own_draft_model() -> None:
    base = Settings(k=4, drafter="hybrid", k_policy="cost")
    assert parse_lane("k=2 draft=/models/b", base) == (parse_config("k=2", base), "/models/b")
    assert parse_lane("draft=b", base) == (base, "b")
    assert parse_lane("k=2", base) == (parse_config("k=2", base), None)
    for text, message in [("k=2 draft=", "write draft=PATH"), ("draft=a draft=b", "one draft="),
                          ("drafter=lookup draft=a", "not lookup"), ("draft=a kk=1", "no setting")]:
        with pytest.raises(InputError, match=message):
            parse_lane(text, base)


def test_a_lineup_with_a_lane_of_another_draft(tiny_models: tuple[Path, Path], tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    draft, target = tiny_models
    assert main(["lineup", "k=2 k_policy=fixed drafter=model",
                 f"k=2 k_policy=fixed drafter=model draft={target}", "--prompt", "the cat",
                 *models(tiny_models)]) == 0
    out = capsys.readouterr().out
    assert "draft draft" in out and "draft target" in out and out.count("yes") == 2
    assert main(["lineup", "k=2 draft=/nonexistent/model", "--prompt", "the cat",
                 *models(tiny_models)]) == 1
    err = capsys.readouterr().err
    assert "error: No model folder or .gguf file at '/nonexistent/model'" in err
    assert "Loading" not in err  # found missing before the pair loads


def test_a_sweep_writes_csv_json_and_png_and_resumes(
        tiny_models: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv, js, png = tmp_path / "s.csv", tmp_path / "s.json", tmp_path / "s.png"
    assert main(["sweep", "--k", "1,2", "--prompt", "the cat", "--csv", str(csv), "--json",
                 str(js), "--png", str(png), *models(tiny_models)]) == 0
    out, err = capsys.readouterr()
    assert "K 1" in out and "K 2" in out and "← best" in out
    assert "warm-up (untimed)" in err and "s in all: loading" in out and "3 runs" in out
    assert csv.read_text().splitlines()[0].startswith("label,k,runs,alpha")
    assert json.loads(js.read_text())["samples"] == 3
    assert Image.open(png).size == (960, 600)
    # Resuming a finished sweep runs nothing more and gives the same table.
    assert main(["sweep", "--k", "1,2", "--prompt", "the cat", "--resume", str(js),
                 *models(tiny_models)]) == 0
    out, err = capsys.readouterr()
    assert "3/3 runs" in out and "warm-up" not in err  # nothing left to run: no warm-up
    # Resumed with 3 repeats and a spread nothing exceeds: repeat 2 settles every point after
    # repeat 1 (3 more runs), so the sweep is complete at 6 runs, not 9.
    assert main(["sweep", "--k", "1,2", "--prompt", "the cat", "--resume", str(js),
                 "--repeats", "3", "--settle", "inf", "--json", str(js),
                 *models(tiny_models)]) == 0
    out = capsys.readouterr().out
    assert "6/6 runs" in out and "partial" not in out
    assert sorted({r["repeat"] for r in json.loads(js.read_text())["runs"]}) == [0, 1]


def test_a_prompt_set_table_and_files(tiny_models: tuple[Path, Path], tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("\n".join(json.dumps({"question_id": i, "category": c, "turns": [t]})
                                 for i, (c, t) in enumerate([("a", "the cat"), ("b", "a dog"),
                                                             ("a", "the sun")])))
    md, png = tmp_path / "t.md", tmp_path / "t.png"
    assert main(["set", str(prompts), "--config", "k=2 drafter=model k_policy=fixed",
                 "--markdown", str(md), "--png", str(png), *models(tiny_models)]) == 0
    out = capsys.readouterr().out
    assert "speedup (geomean)" in out and "2/2" in out and "1/1" in out and "3/3" in out
    assert md.read_text().startswith("| category | configuration |")
    assert Image.open(png).size[1] > 7 * 28  # a title, the header and six rows


def test_a_prompt_set_skips_a_prompt_longer_than_the_context(
        tiny_models: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prompts = tmp_path / "p.txt"
    prompts.write_text("the cat\n" + " ".join(["the"] * 300) + "\nthe sun\n")
    md = tmp_path / "t.md"
    assert main(["set", str(prompts), "--config", "k=2 drafter=model k_policy=fixed",
                 "--markdown", str(md), *models(tiny_models)]) == 0
    out, err = capsys.readouterr()
    assert "p 3 k=2" in err and "p 2: skipped: The prompt is 30" in err  # went on after it
    assert "2/2" in out and "skipped 1: prompt 2: The prompt is 30" in out
    assert "skipped 1: prompt 2:" in md.read_text()


def set_files(tmp_path: Path) -> Path:
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("\n".join(json.dumps({"question_id": i, "category": c, "turns": [t]})
                                 for i, (c, t) in enumerate([("a", "the cat"), ("b", "a dog"),
                                                             ("a", "the sun")])))
    return prompts


def resume_set(tiny_models: tuple[Path, Path], tmp_path: Path,
               capsys: pytest.CaptureFixture[str]) -> None:
    """A set stopped after its first prompt, resumed from the saved file: the prompts done are
    kept (not run again), the rest run, and the table is the uninterrupted run's."""
    prompts, full, part = set_files(tmp_path), tmp_path / "full.jsonl", tmp_path / "part.jsonl"
    config = ["--config", "k=2 drafter=model k_policy=fixed"]
    csv_full, csv_part = tmp_path / "full.csv", tmp_path / "part.csv"
    assert main(["set", str(prompts), *config, "--save", str(full), "--csv", str(csv_full),
                 *models(tiny_models)]) == 0
    lines = full.read_text().splitlines()
    assert len(lines) == 4 and json.loads(lines[0])["format"] == "specviz prompt set"
    # By hand: the header and prompt 0, its figures marked (speedups of 9: no run gives them),
    # then half of prompt 1's line, as a run killed while writing it leaves the file.
    first = json.loads(lines[1])
    for r in first["results"]:
        r["speedup"] = 9.0
    part.write_text(lines[0] + "\n" + json.dumps(first) + "\n" + lines[2][:40])
    capsys.readouterr()
    assert main(["set", str(prompts), *config, "--resume", str(part), "--csv", str(csv_part),
                 *models(tiny_models)]) == 0
    out, err = capsys.readouterr()
    assert "3 prompts × (1 configurations + the target alone), 1 already done" in err
    assert "a 0 " not in err and "b 1 k=2" in err and "a 2 k=2" in err  # prompt 0 not run again
    saved = part.read_text().splitlines()
    assert len(saved) == 4 and json.loads(saved[1]) == first  # kept as it was; 1 and 2 added
    assert [json.loads(x)["id"] for x in saved[1:]] == ["0", "1", "2"]
    assert "9.00x" not in out  # prompt 0's marked speedups sit inside a geomean …
    rows = [x.split(",") for x in csv_part.read_text().splitlines()[1:]]
    same = [x.split(",") for x in csv_full.read_text().splitlines()[1:]]
    # … and everything that does not depend on the clock equals the uninterrupted run's:
    # category, configuration, prompts, α, tokens per round, identical, compared.
    assert [r[:5] + r[-2:] for r in rows] == [r[:5] + r[-2:] for r in same]
    assert [r[2] for r in rows if r[0] == "all"] == ["3", "3"]
    # The target alone's speedup is 1 on every prompt it ran: 9 only on the saved prompt 0.
    alone = {r[0]: float(r[5]) for r in rows if r[1] == "target alone"}
    assert alone == {"a": pytest.approx(3.0, abs=1e-4), "b": 1.0,
                     "all": pytest.approx(9 ** (1 / 3), abs=1e-4)}


def test_a_stopped_prompt_set_resumes_from_its_saved_file(
        tiny_models: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    resume_set(tiny_models, tmp_path, capsys)


@pytest.mark.parametrize("edit", [
    ("done={e.item for e in earlier}", "done=()"),  # the prompts done run again
    ("outcomes = list(earlier)", "outcomes: list[Any] = []"),  # … or drop out of the table
])
def test_the_resume_test_rejects_its_broken_variants(
        edit: tuple[str, str], tiny_models: tuple[Path, Path], tmp_path: Path,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from specviz import explore_cli
    from tests.mutation import mutant

    monkeypatch.setattr(explore_cli, "run_set", mutant(explore_cli.run_set, edit))
    with pytest.raises(AssertionError):
        resume_set(tiny_models, tmp_path, capsys)


def test_a_resume_file_of_other_configurations_is_one_message(
        tiny_models: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prompts, saved = set_files(tmp_path), tmp_path / "s.jsonl"
    saved.write_text('{"format": "specviz prompt set", "configs": [{"label": "k=3"}]}\n')
    assert main(["set", str(prompts), "--config", "k=2", "--resume", str(saved),
                 *models(tiny_models)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "written for other configurations or settings (k=3)" in err[0]
    saved.write_text("the cat\n")
    assert main(["set", str(prompts), "--resume", str(saved), *models(tiny_models)]) == 1
    assert "not a prompt-set results file" in capsys.readouterr().err


def test_diagnose_reads_a_recording(tiny_models: tuple[Path, Path], tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    saved = tmp_path / "l.jsonl"
    assert main(["lineup", "k=4 drafter=model k_policy=fixed t=1", "k=2 drafter=model",
                 "--no-baseline", "--prompt", "the cat", "--save", str(saved),
                 *models(tiny_models)]) == 0
    capsys.readouterr()
    assert main(["diagnose", str(saved)]) == 0
    assert "| position | reached | kept |" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["diagnose", "/nonexistent.jsonl"], "cannot read"),
    (["set", "/nonexistent.jsonl"], "cannot read"),
    (["lineup", "k=2", "--no-baseline"], "A lineup runs 1 to 4 configurations"),
    (["lineup", "k=2", "k=3", "k=4", "k=5", "k=6"], "A lineup runs 1 to 4 configurations"),
    (["sweep", "--k", "1,x"], "--k must be comma-separated numbers"),
    (["sweep", "--k", "1", "--settle", "-0.1"], "--settle must be a spread of 0 or more"),
    (["sweep", "--k", "1", "--settle", "nan"], "--settle must be a spread of 0 or more"),
    (["lineup", "k=2", "bogus=1"], "no setting 'bogus'"),
])
def test_bad_input_is_one_line(argv: list[str], message: str,
                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and err[0].startswith("specviz-explore: error:")

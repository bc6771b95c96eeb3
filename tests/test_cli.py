"""specviz-cli end to end: the bundled SmolLM2 weights; tiny models saved to tmp_path for
failures, Ctrl+C and --device-map (no network)."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from specviz.cli import main
from specviz.core import engine
from specviz.core.models import VOCAB_MAP_FILE
from tests.tiny import tiny_llama, word_tokenizer


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict[str, object]]:
    status = main(["--json", *args])
    lines = capsys.readouterr().out.strip().splitlines()
    events = [json.loads(line) for line in lines]
    assert status == (1 if events[-1]["type"] == "error" else 0)
    return events


@pytest.mark.slow
def test_cli_json_on_bundled_model_matches_target_alone(capsys: pytest.CaptureFixture[str]) -> None:
    common = ["--target", "smollm2-135m", "--prompt", "Name three colours.",
              "--max-new-tokens", "24", "--temperature", "0"]
    # The model drafter at a fixed K (not the default drafting): with draft = target every
    # draft is kept.
    spec = run_json(capsys, "--draft", "smollm2-135m", "--k", "3", "--drafter", "model",
                    "--k-policy", "fixed", *common)
    base = run_json(capsys, "--baseline", *common)
    assert [e["type"] for e in spec][0] == "run_started"
    assert spec[-1]["type"] == "run_finished" and base[-1]["type"] == "run_finished"
    rounds = [e for e in spec if e["type"] == "round"]
    assert rounds and all({"drafted", "n_accepted", "extra", "appended_text"} <= e.keys()
                          for e in rounds)
    done = spec[-1]
    # Greedy speculative output equals the target's own greedy output, token for token.
    assert done["generated_ids"] == base[-1]["generated_ids"]
    assert done["text"] == "".join(e["appended_text"] for e in rounds)  # type: ignore[arg-type]
    assert done["summary"]["acceptance_rate"] == 1.0  # type: ignore[index]  # draft == target
    assert len(done["generated_ids"]) == 24 or done["stop_reason"] == "eos"  # type: ignore[arg-type]


@pytest.mark.slow
def test_cli_text_output_has_summary(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["--draft", "smollm2-135m", "--prompt", "Hi", "--max-new-tokens", "6"])
    out = capsys.readouterr().out
    assert status == 0 and "# α = P(draft kept)" in out and "tokens in" in out


def test_cli_bad_arguments_exit_nonzero_with_one_line() -> None:
    for args in (["--k", "0"], ["--k", "17"], ["--temperature", "-1"], ["--top-p", "0"],
                 ["--k", "three"]):
        proc = subprocess.run([sys.executable, "-m", "specviz.cli", *args], capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode != 0, args
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert "error" in proc.stderr


def test_cli_unknown_model_is_a_json_error(capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    events = run_json(capsys, "--draft", "no-such-org/nothing", "--target", "no-such-org/nothing")
    assert events == [{"type": "error", "message": events[0]["message"], "kind": "load"}]
    assert "no-such-org/nothing" in str(events[0]["message"])


# --- failures on tiny models saved to tmp_path: one line, a JSON error event, no traceback ----


ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(draft, target) folders: tiny Llamas on a word tokenizer without EOS, so runs go on
    until stopped (positions up to 2^20: no context limit ends them either)."""
    base = tmp_path_factory.mktemp("models")
    tok = word_tokenizer(eos=False)
    folders = []
    for name, seed in (("draft", 1), ("target", 2)):
        model = tiny_llama(len(tok), seed=seed, dtype=torch.float32, max_positions=1 << 20)
        model.save_pretrained(base / name)
        tok.save_pretrained(base / name)
        folders.append(base / name)
    return folders[0], folders[1]


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", "specviz.cli", *args], capture_output=True,
                          text=True, timeout=300, env=full_env, cwd=ROOT)


def error_lines(stderr: str) -> list[str]:
    """stderr without the "# Loading…" progress lines."""
    return [line for line in stderr.splitlines() if not line.startswith("# ")]


def copy_of(folder: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(folder, tmp_path / folder.name))


# Broken variant (the CLI before this change): a truncated model.safetensors escaped as a
# SafetensorError traceback (rc 1, "Traceback" on stderr, no JSON line on stdout).
def test_truncated_weights_are_one_line_and_a_json_error(tiny_models: tuple[Path, Path],
                                                         tmp_path: Path) -> None:
    draft, target = tiny_models
    broken = copy_of(target, tmp_path)
    weights = broken / "model.safetensors"
    with weights.open("r+b") as f:
        f.truncate(weights.stat().st_size - 1000)
    proc = cli("--json", "--draft", str(draft), "--target", str(broken))
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    [line] = proc.stderr.splitlines()
    assert line.startswith("specviz-cli: error: Could not load") and "damaged" in line
    [event] = [json.loads(out) for out in proc.stdout.splitlines()]
    assert event["type"] == "error" and event["kind"] == "load"
    assert "damaged or incomplete" in event["message"]


# Broken variant: json.loads on a garbage specviz_vocab.json raised JSONDecodeError after the
# models loaded: a traceback, no error line.
def test_corrupt_vocab_map_is_one_line(tiny_models: tuple[Path, Path], tmp_path: Path) -> None:
    draft, target = tiny_models
    broken = copy_of(draft, tmp_path)
    (broken / VOCAB_MAP_FILE).write_bytes(b'{"target_ids": [0, 1, 2,\x00\xff garbage')
    proc = cli("--draft", str(broken), "--target", str(target), "--max-new-tokens", "4")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    [line] = error_lines(proc.stderr)
    assert line.startswith("specviz-cli: error: The vocabulary map") and "not valid JSON" in line
    assert proc.stdout == ""


# Broken variant: without the hub probe and with HF_HUB_OFFLINE unset this spent about a
# minute in retries; here (HF_HUB_OFFLINE=1) the old message did not say which folder was
# looked for nor how to download.
def test_unknown_draft_name_fails_with_what_to_do(tiny_models: tuple[Path, Path],
                                                 capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tiny_models[1].parent)
    assert main(["--draft", "does-not-exist-dir", "--target", str(tiny_models[1])]) == 1
    [line] = error_lines(capsys.readouterr().err)
    assert line.startswith("specviz-cli: error: Could not load 'does-not-exist-dir'")
    assert f"no model folder at {tiny_models[1].parent / 'does-not-exist-dir'}" in line
    assert "`hf download does-not-exist-dir`" in line


# Broken variant (no SIGINT handling): KeyboardInterrupt traceback on stderr, return code -2
# (Python re-raises SIGINT), no final event, possibly half a JSON line.
def test_ctrl_c_stops_the_run_cleanly(tiny_models: tuple[Path, Path]) -> None:
    draft, target = tiny_models
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "specviz.cli", "--json", "--draft", str(draft), "--target",
         str(target), "--temperature", "1", "--max-new-tokens", "1000000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:  # mid-run: after the first round is out
        lines.append(line)
        if json.loads(line)["type"] == "round":
            break
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    lines += out.splitlines()
    events = [json.loads(line) for line in lines]  # every line is whole JSON
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert err.strip().splitlines()[-1] == "specviz-cli: stopped by Ctrl+C"
    # The first Ctrl+C ends the run after the round in flight, with its summary.
    assert events[-1]["type"] == "run_finished" and events[-1]["stop_reason"] == "stopped"
    assert [e["type"] for e in events].count("run_finished") == 1


def main_caught(argv: list[str]) -> int:
    """main(), with a KeyboardInterrupt escaping it a test failure, not the end of pytest."""
    try:
        return main(argv)
    except KeyboardInterrupt:
        pytest.fail("KeyboardInterrupt escaped main()")


# Broken variant: without the KeyboardInterrupt handler in main() these raise out of main().
def test_a_second_ctrl_c_or_one_while_loading_ends_with_a_stopped_event(
        tiny_models: tuple[Path, Path], capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    draft, target = tiny_models
    real_run = engine.SpeculativeDecoder.run

    def run(self: Any, prompt: str, *a: Any, **kw: Any) -> Iterator[Any]:
        for i, event in enumerate(real_run(self, prompt, *a, **kw)):
            if i == 2:
                raise KeyboardInterrupt  # as a Ctrl+C during a round's forward pass would
            yield event

    monkeypatch.setattr(engine.SpeculativeDecoder, "run", run)
    assert main_caught(["--json", "--draft", str(draft), "--target", str(target)]) == 130
    captured = capsys.readouterr()
    events = [json.loads(line) for line in captured.out.splitlines()]
    assert [e["type"] for e in events] == ["run_started", "round", "error"]
    assert events[-1]["kind"] == "stopped"
    assert captured.err == "specviz-cli: stopped by Ctrl+C\n"

    def interrupted_load(*a: Any, **kw: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("specviz.cli.load_pair", interrupted_load)
    assert main_caught(["--json", "--draft", str(draft), "--target", str(target)]) == 130
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert events == [{"type": "error", "message": "Stopped by Ctrl+C.", "kind": "stopped"}]
    assert main_caught(["--draft", str(draft), "--target", str(target)]) == 130
    assert capsys.readouterr().err == "specviz-cli: stopped by Ctrl+C\n"


# Broken variant: main() without its last `except Exception` lets this escape as a traceback.
def test_an_unexpected_error_is_still_one_line(tiny_models: tuple[Path, Path],
                                               capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    def broken_load(*a: Any, **kw: Any) -> None:
        raise RuntimeError("something deep\nbroke " + "x" * 5000)

    monkeypatch.setattr("specviz.cli.load_pair", broken_load)
    draft, target = map(str, tiny_models)
    assert main(["--json", "--draft", draft, "--target", target]) == 1
    captured = capsys.readouterr()
    [event] = [json.loads(line) for line in captured.out.splitlines()]
    assert event["kind"] == "internal" and "RuntimeError: something deep broke" in event["message"]
    [line] = captured.err.splitlines()
    assert len(line) <= len("specviz-cli: error: ") + 600  # one_line caps a message at 600


# --- --device-map: accelerate's dispatch, greedy-identical to the plain load -----------------

# Broken variant: main() not passing args.device_map to load_pair: the hf_device_map check fails.
def test_device_map_auto_decodes_the_same(tiny_models: tuple[Path, Path],
                                          capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    draft, target = tiny_models
    seen: list[Any] = []
    real_load_pair = sys.modules["specviz.cli"].load_pair

    def spy(*a: Any, **kw: Any) -> Any:
        pair = real_load_pair(*a, **kw)
        seen.append((kw.get("device_map"), getattr(pair.target, "hf_device_map", None)))
        return pair

    monkeypatch.setattr("specviz.cli.load_pair", spy)
    common = ["--draft", str(draft), "--target", str(target), "--temperature", "0",
              "--max-new-tokens", "12", "--device", "cpu"]
    plain = run_json(capsys, *common)
    spread = run_json(capsys, *common, "--device-map", "auto")
    assert seen[0][0] is None and seen[1][0] == "auto"
    assert spread[-1]["type"] == "run_finished"
    assert spread[-1]["generated_ids"] == plain[-1]["generated_ids"]
    assert len(plain[-1]["generated_ids"]) == 12


# Broken variant: looking for the models after `from .core.engine import ...` (torch, several
# seconds on a busy machine) or after loading the target: torch is in sys.modules at the error.
def test_a_wrong_name_fails_before_torch_is_imported(tiny_models: tuple[Path, Path]) -> None:
    code = ("import sys; from specviz.cli import main; "
            "status = main(['--json', '--draft', 'does-not-exist-dir', '--target', sys.argv[1]]); "
            "print(status, 'torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code, str(tiny_models[1])], capture_output=True,
                          text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"})
    *events, last = proc.stdout.splitlines()
    assert last == "1 False", proc.stderr
    assert [json.loads(e)["kind"] for e in events] == ["load"]


# --- --race: the speculative run, then the target alone, one after the other ------------------


def race_args(tiny_models: tuple[Path, Path], *extra: str) -> list[str]:
    draft, target = tiny_models
    return ["--race", "--draft", str(draft), "--target", str(target), "--device", "cpu",
            "--prompt", "the cat", "--max-new-tokens", "12", "--seed", "5", *extra]


def race_of(out: str) -> Any:
    from specviz.core.events import from_json
    from specviz.core.race import as_race

    return as_race([from_json(line) for line in out.splitlines()])


# Broken variants: the target-alone run with another seed (run_race), or the runs in the other
# order: the stream is no race (as_race refuses it).
def test_race_json_is_a_race_recording(tiny_models: tuple[Path, Path],
                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--json", *race_args(tiny_models, "--temperature", "1")]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""  # --json: nothing but the events
    race = race_of(captured.out)
    assert race is not None and race.complete
    spec, base = race.speculative.started, race.baseline.started
    assert (spec.mode, base.mode) == ("speculative", "baseline")
    assert spec.settings.seed == base.settings.seed == 5
    assert spec.settings.temperature == base.settings.temperature == 1.0
    assert race.identical is None  # T > 0: not compared


# Broken variant: no warm-up, so the speculative run (first) alone pays a fresh process's
# one-off costs.
def test_race_warms_both_up_untimed_first(tiny_models: tuple[Path, Path],
                                          capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = sys.modules["specviz.core.race"].run_race

    def spy(pair: Any, settings: Any, *a: Any, **kw: Any) -> Iterator[Any]:
        calls.append(settings.max_new_tokens)
        return real(pair, settings, *a, **kw)

    monkeypatch.setattr("specviz.core.race.run_race", spy)  # core/run.py's race
    assert main(["--json", *race_args(tiny_models)]) == 0
    assert calls == [2, 12]
    assert race_of(capsys.readouterr().out) is not None  # the warm-up's events are not out


# Broken variants: the speedup divided the other way, or the identity read from the lengths of
# the two outputs (or not at all): the verdict lines below change.
def test_race_prints_both_speeds_the_speedup_and_identity(
        tiny_models: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(race_args(tiny_models, "--temperature", "0")) == 0
    out = capsys.readouterr().out
    assert out.count(", speculative, ") == 1 and out.count(" alone, baseline, ") == 1
    assert "# identical: yes (T = 0: the same 12 token ids as the target alone)" in out
    assert "#   speculative:  12 tokens in " in out and "#   target alone: 12 tokens in " in out
    assert "# measured speedup " in out
    assert "target alone's wall time per token ÷ speculative's" in out


def timed(race: Any, spec_s: float, base_s: float) -> Any:
    """The race with its two wall times (and tokens/s) set: the arithmetic, not the clock."""
    from dataclasses import replace

    from specviz.core.race import Race

    def side(s: Any, wall: float) -> Any:
        summary = replace(s.finished.summary, wall_time_s=wall,
                          tokens_per_s=s.finished.summary.tokens / wall)
        return replace(s, finished=replace(s.finished, summary=summary))

    return Race(side(race.speculative, spec_s), side(race.baseline, base_s))


def test_race_summary_divides_per_token_times_and_names_a_difference(
        tiny_models: tuple[Path, Path], capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    from specviz.cli import race_summary

    assert main(["--json", *race_args(tiny_models, "--temperature", "0")]) == 0
    race = timed(race_of(capsys.readouterr().out), spec_s=0.5, base_s=1.5)
    text = race_summary(race)
    assert "12 tokens in 0.500 s = 24.0 tok/s (41.67 ms/token)" in text
    assert "12 tokens in 1.500 s = 8.0 tok/s (125.00 ms/token)" in text
    assert "# measured speedup 3.00× = target alone's wall time per token ÷ speculative's = " \
           "125.00 ms ÷ 41.67 ms" in text
    assert "# identical: yes" in text
    # The target alone ending on another token (as a wrong comparison would not notice).
    fin = race.baseline.finished
    ids = (*fin.generated_ids[:-1], fin.generated_ids[-1] + 1)
    other = replace(race, baseline=replace(race.baseline, finished=replace(
        fin, generated_ids=ids)))
    assert "# identical: no (T = 0: the texts first differ at output token 11)" in \
        race_summary(other)


def test_race_with_baseline_is_refused_in_one_line(tiny_models: tuple[Path, Path],
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--json", *race_args(tiny_models), "--baseline"]) == 2  # bad input: 2
    captured = capsys.readouterr()
    [event] = [json.loads(line) for line in captured.out.splitlines()]
    assert event["type"] == "error" and event["kind"] == "input"
    [line] = captured.err.splitlines()
    assert line.startswith("specviz-cli: error: --race runs the target alone itself")


def test_a_failing_target_alone_run_is_one_line(tiny_models: tuple[Path, Path],
                                                capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: Any, prompt: str, *a: Any, **kw: Any) -> Iterator[Any]:
        raise RuntimeError("the target broke")
        yield  # a generator, as run() is

    monkeypatch.setattr(engine.AutoregressiveDecoder, "run", broken)
    assert main(["--json", *race_args(tiny_models)]) == 1
    captured = capsys.readouterr()
    events = [json.loads(line) for line in captured.out.splitlines()]
    assert [e["type"] for e in events].count("run_finished") == 1  # the speculative run
    assert events[-1]["type"] == "error" and "the target broke" in events[-1]["message"]
    [line] = captured.err.splitlines()
    assert line.startswith("specviz-cli: error: The decoder failed: RuntimeError")


RACE = sys.modules["specviz.core.race"]
LINEUP = sys.modules["specviz.core.lineup"]
CLI = sys.modules["specviz.cli"]
RACE_MUTANTS = {
    # The race runs as the two-lane lineup (core/lineup.py's run_lineup).
    "the target alone with another seed": (
        test_race_json_is_a_race_recording, LINEUP, "run_lineup",
        [("settings=replace(lane.settings, seed=seed))",
          "settings=replace(lane.settings, seed=seed + (lane.mode == 'baseline')))")]),
    "the target alone first": (
        test_race_json_is_a_race_recording, LINEUP, "run_lineup",
        [("for lane in lanes:", "for lane in reversed(lanes):")]),
    "the speedup divided the other way": (
        test_race_summary_divides_per_token_times_and_names_a_difference, RACE, "Race",
        [("return speedup_vs_run(self.speculative.finished.summary.tokens_per_s,\n"
          "                              self.baseline.finished.summary.tokens_per_s)",
          "return speedup_vs_run(self.baseline.finished.summary.tokens_per_s,\n"
          "                              self.speculative.finished.summary.tokens_per_s)")]),
    "the texts compared by length": (
        test_race_summary_divides_per_token_times_and_names_a_difference, RACE, "Race",
        [("return self.speculative.finished.generated_ids == self.baseline.finished.generated_ids",
          "return len(self.speculative.finished.generated_ids) == "
          "len(self.baseline.finished.generated_ids)")]),
    "no verdict printed": (
        test_race_prints_both_speeds_the_speedup_and_identity, CLI, "_Cli",
        [("if race is not None and race.complete and not args.json:",
          "if False:")]),
    "no warm-up": (
        test_race_warms_both_up_untimed_first, CLI, "_Cli",
        [("            _warm_up(pair, request)\n", "            pass\n")]),
    "--race beside --baseline let through": (
        test_race_with_baseline_is_refused_in_one_line, CLI, "_Cli",
        [("if args.race and args.baseline:", "if False:")]),
}


@pytest.mark.parametrize("name", list(RACE_MUTANTS))
def test_each_race_test_rejects_its_broken_variant(name: str, tiny_models: tuple[Path, Path],
                                                   capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.mutation import mutant

    test, module, attr, edits = RACE_MUTANTS[name]
    broken = mutant(getattr(module, attr), *edits)
    monkeypatch.setattr(module, attr, broken)
    if module is RACE and hasattr(CLI, attr):  # the name the CLI imported
        monkeypatch.setattr(CLI, attr, broken)
    with pytest.raises(AssertionError):
        if test in (test_race_summary_divides_per_token_times_and_names_a_difference,
                    test_race_warms_both_up_untimed_first):
            test(tiny_models, capsys, monkeypatch)
        else:
            test(tiny_models, capsys)


# -- refusals before anything loads, and prompts from files (issue 26, item 19) -------------

def _main_out(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        rc = main(argv)
    except SystemExit as exc:  # argparse's refusals leave through SystemExit
        rc = int(exc.code or 0)
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def test_argument_errors_are_an_error_event_under_json_and_exit_2(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Seen failing on the old _Parser.error (self.exit(2, ...)): no event on stdout, so a
    program reading --json saw nothing at all."""
    rc, out, err = _main_out(["--json", "--dtype", "nonsense"], capsys)
    assert rc == 2
    [event] = [json.loads(line) for line in out.splitlines()]
    assert event["type"] == "error" and event["kind"] == "input"
    assert "invalid choice: 'nonsense'" in event["message"]
    [line] = err.splitlines()
    assert line.startswith("specviz-cli: error: argument --dtype")
    rc, out, err = _main_out(["--k", "0"], capsys)  # a range error: the same exit code
    assert rc == 2 and out == "" and "K must be between 1 and 16, got 0." in err


def test_the_old_parser_would_send_no_event(capsys: pytest.CaptureFixture[str]) -> None:
    from specviz import cli as cli_module
    from tests.mutation import mutant

    old = mutant(cli_module._Parser, ('        _refuse(f"{message} (see --help)", '
                                      'json_out=self.json_out)',
                                      '        self.exit(2, f"{self.prog}: error: {message} '
                                      '(see --help)\\n")'))
    parser = old(prog="specviz-cli")
    parser.json_out = True
    parser.add_argument("--dtype", choices=["auto"])
    with pytest.raises(SystemExit):
        parser.parse_args(["--dtype", "nonsense"])
    assert capsys.readouterr().out == ""  # what the test above rejects


def test_prompt_from_a_file_or_standard_input(tiny_models: tuple[Path, Path], tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A prompt past the 128 KiB argument limit could not be given at all; now a file or '-'.
    A byte-order mark is dropped; the text reaches the run as written."""
    draft, target = map(str, tiny_models)
    text = "the cat sat on the mat " * 10
    path = tmp_path / "prompt.txt"
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    args = ["--json", "--no-chat", "--draft", draft, "--target", target, "--max-new-tokens",
            "2", "--drafter", "model"]
    assert main([*args, "--prompt-file", str(path)]) == 0
    first = json.loads(capsys.readouterr().out.splitlines()[0])
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    assert main([*args, "--prompt", "-"]) == 0
    second = json.loads(capsys.readouterr().out.splitlines()[0])
    assert first["prompt_ids"] == second["prompt_ids"] and len(first["prompt_ids"]) >= 60


def test_a_drafter_without_a_draft_model_loads_none(tiny_models: tuple[Path, Path],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI asks the registry whether the drafter needs a draft model (lookup-tree does not),
    not the name "lookup": seen failing on `args.drafter == "lookup"` (it loaded the draft)."""
    from specviz import cli

    loaded: list[object] = []
    real = cli.load_pair

    def spy(draft: Any, target: Any, *a: Any, **kw: Any) -> Any:
        loaded.append(draft)
        return real(draft, target, *a, **kw)

    monkeypatch.setattr(cli, "load_pair", spy)
    draft, target = map(str, tiny_models)
    assert cli.main(["--draft", draft, "--target", target, "--drafter", "lookup-tree",
                     "--max-new-tokens", "4", "--prompt", "the cat the cat"]) == 0
    assert loaded == [None]


def test_a_tree_run_says_how_many_siblings_were_tested_and_kept(
        tiny_models: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """The closing α line of a run with tree rounds names the siblings tested and kept, the
    counts the run's summary (its JSON line) carries. Seen failing on the old line (tested
    only) and on one that printed the tested count as the kept."""
    import re

    draft, target = map(str, tiny_models)
    args = ["--no-chat", "--draft", draft, "--target", target, "--drafter", "model-tree",
            "--k-policy", "fixed", "--k", "6", "--temperature", "0.5", "--seed", "4",
            "--max-new-tokens", "40", "--prompt",
            "the cat sat on the mat the cat ran on the dog the cat"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert main(["--json", *args]) == 0
    summary = [json.loads(line) for line in capsys.readouterr().out.splitlines()
               if line.startswith("{")][-1]
    summary = summary.get("summary", summary)
    said = re.search(r"\((\d+) siblings tested beside, (\d+) kept", text)
    # This seed tests siblings and keeps some (else the check below could not tell them apart).
    assert summary["siblings"] > summary["siblings_kept"] > 0 and said is not None, text[-400:]
    assert (int(said[1]), int(said[2])) == (summary["siblings"], summary["siblings_kept"])

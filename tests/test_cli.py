"""specviz-cli end to end: the bundled SmolLM2 weights; tiny models saved to tmp_path for
failures, Ctrl+C and --device-map (no network)."""

from __future__ import annotations

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

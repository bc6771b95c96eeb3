"""specviz-cli end to end on the bundled SmolLM2 weights (no network)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from specviz.cli import main


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
    spec = run_json(capsys, "--draft", "smollm2-135m", "--k", "3", *common)
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

"""specviz-cli's drafting flags (--drafter, --ngram-min/max, --k-policy, --lenience)."""

from __future__ import annotations

import json

import pytest

from specviz.cli import _settings, build_parser, main
from specviz.core.events import FORMAT_VERSION
from specviz.core.options import DEFAULTS

DEFAULT_DRAFTER, DEFAULT_K_POLICY = DEFAULTS["drafter"], DEFAULTS["k_policy"]
DEFAULT_LOOKUP_K = DEFAULTS["lookup_k"]


def test_flags_reach_the_settings() -> None:
    args = build_parser().parse_args(["--drafter", "hybrid", "--ngram-min", "2", "--ngram-max",
                                      "4", "--k-policy", "cost", "--lenience", "0.5"])
    s = _settings(args)
    assert (s.drafter, s.ngram_min, s.ngram_max, s.k_policy, s.lenience) == (
        "hybrid", 2, 4, "cost", 0.5)
    defaults = _settings(build_parser().parse_args([]))
    assert (defaults.drafter, defaults.k_policy, defaults.lenience, defaults.lookup_k) == (
        DEFAULT_DRAFTER, DEFAULT_K_POLICY, 1.0, DEFAULT_LOOKUP_K)
    assert _settings(build_parser().parse_args(["--lookup-k", "6"])).lookup_k == 6


@pytest.mark.parametrize("args", [["--drafter", "medusa"], ["--k-policy", "dynamic"],
                                  ["--lenience", "0"], ["--ngram-min", "3", "--ngram-max", "2"],
                                  ["--temperature", "inf"]])
def test_bad_drafting_flags_are_one_line(args: list[str], capsys: pytest.CaptureFixture[str]
                                         ) -> None:
    with pytest.raises(SystemExit) if args[0] in ("--drafter", "--k-policy") else _no_raise():
        status = main(["--json", *args])
        assert status != 0
    captured = capsys.readouterr()
    # One line per stream (with --json the error is also a JSON event on stdout).
    assert len(captured.out.strip().splitlines()) <= 1
    assert len(captured.err.strip().splitlines()) <= 1
    assert (captured.out + captured.err).strip()


class _no_raise:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return False


@pytest.mark.slow
def test_lookup_runs_without_a_draft_and_lenience_says_not_exact(
        capsys: pytest.CaptureFixture[str]) -> None:
    common = ["--target", "smollm2-135m", "--prompt", "Repeat: red green blue red green blue",
              "--max-new-tokens", "12", "--temperature", "0"]
    assert main(["--json", "--drafter", "lookup", *common]) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert events[0]["pair"]["draft"] == "prompt lookup" and events[0]["format"] == FORMAT_VERSION
    assert all(d["drafter"] == "lookup" for e in events if e["type"] == "round"
               for d in e["drafted"])
    assert main(["--drafter", "lookup", "--lenience", "0.5", "--temperature", "1",
                 *common[:-2]]) == 0
    out = capsys.readouterr().out
    assert "NOT EXACT" in out

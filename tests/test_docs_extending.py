"""docs/extending.md's walkthrough runs as written: its drafter file, its registry line and its
tests, taken from the page's code blocks, so the page cannot drift from the engine; and the
drafter, registered from here alone, runs through specviz-cli on tiny models.

The broken variants: the page's drafter with its q row swapped for a uniform one it did not
draw from (the page's own law test then fails), and the drafter file without its registry line
(the CLI then refuses the name).
"""

from __future__ import annotations

import json
import linecache
import re
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from specviz.cli import main
from specviz.core import registry
from tests.tiny import tiny_llama, word_tokenizer

DOC = Path(__file__).resolve().parents[1] / "docs" / "extending.md"
MODULE = "specviz.core.unigram_drafter"  # where the page puts the drafter's file


def block(marker: str) -> str:
    """The page's one Python code block that contains ``marker``."""
    found = [b for b in re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
             if marker in b]
    assert len(found) == 1, f"{marker!r} in {len(found)} code blocks of {DOC.name}"
    return found[0]


def load(drafter_source: str, register: bool = True) -> dict[str, Callable[[], None]]:
    """Install the drafter file as MODULE, run the registry line, return the page's tests."""
    module = types.ModuleType(MODULE)
    module.__package__ = "specviz.core"
    # A file name inspect can read the source back from (tests.mutation.mutant needs it).
    module.__file__ = filename = f"<{DOC.name}: the drafter file>"
    linecache.cache[filename] = (len(drafter_source), None, drafter_source.splitlines(True),
                                 filename)
    sys.modules[MODULE] = module
    exec(compile(drafter_source, filename, "exec"), vars(module))  # noqa: S102
    # The registry line runs where the page puts it: at the end of registry.py.
    line = block('"(no draft model)", "specviz.core.unigram_drafter:build"')
    if register:
        exec(compile(line, f"{DOC.name}: the registry line", "exec"), dict(vars(registry)))  # noqa: S102
    tests: dict[str, Callable[[], None]] = {}
    exec(compile(block("def test_unigram_keeps_the_targets_law"), f"{DOC.name}: the tests",  # noqa: S102
                 "exec"), tests)
    return {name: fn for name, fn in tests.items() if name.startswith("test_")}


@pytest.fixture
def cleanup() -> Iterator[None]:
    yield
    registry.unregister("unigram")
    sys.modules.pop(MODULE, None)
    linecache.cache.pop(f"<{DOC.name}: the drafter file>", None)


def test_the_walkthrough_runs_as_written(cleanup: None) -> None:
    tests = load(block("class UnigramDrafter(DrafterBase)"))
    assert "unigram" in registry.drafter_names()
    assert len(tests) == 2, sorted(tests)
    for test in tests.values():
        test()


def test_the_pages_law_test_rejects_a_drafter_reporting_another_q(cleanup: None) -> None:
    source = block("class UnigramDrafter(DrafterBase)")
    old = "return Proposal(tokens, q.expand(len(tokens), -1)"
    assert source.count(old) == 1
    broken = source.replace(old, "return Proposal(tokens, torch.full_like(q, 1 / q.numel())"
                                 ".expand(len(tokens), -1)")
    tests = load(broken)
    with pytest.raises(AssertionError):
        tests["test_unigram_keeps_the_targets_law"]()


def run_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[dict[str, Any]]]:
    """specviz-cli --drafter unigram on tiny models saved to ``tmp_path``: status, JSON events."""
    tok = word_tokenizer()
    folders = []
    for name, seed in (("draft", 1), ("target", 2)):
        tiny_llama(len(tok), seed=seed, dtype=torch.float32).save_pretrained(tmp_path / name)
        tok.save_pretrained(tmp_path / name)
        folders.append(str(tmp_path / name))
    status = main(["--json", "--no-chat", "--drafter", "unigram", "--k-policy", "fixed", "--k", "3",
                   "--draft", folders[0], "--target", folders[1], "--prompt", "a b c a b",
                   "--max-new-tokens", "8", "--seed", "1"])
    return status, [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def check_cli_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, events = run_cli(tmp_path, capsys)
    assert status == 0, events[-1] if events else status
    assert events[0]["type"] == "run_started" and events[-1]["type"] == "run_finished"
    assert events[0]["pair"]["draft"] == "context unigram"
    drafted = [d for e in events if e["type"] == "round" for d in e["drafted"]]
    assert drafted and {d["drafter"] for d in drafted} == {"unigram"}


def test_the_registered_drafter_runs_through_the_cli(cleanup: None, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    load(block("class UnigramDrafter(DrafterBase)"))
    check_cli_run(tmp_path, capsys)


def test_without_its_registry_line_the_cli_refuses_the_drafter(
        cleanup: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    load(block("class UnigramDrafter(DrafterBase)"), register=False)
    with pytest.raises(SystemExit) as refused:  # argparse: invalid choice 'unigram'
        check_cli_run(tmp_path, capsys)
    assert refused.value.code == 2
    assert "invalid choice: 'unigram'" in capsys.readouterr().err

"""docs/extending.md's walkthrough runs as written: its drafter file, its registry line and its
tests, taken from the page's code blocks, so the page cannot drift from the engine.

The broken variant: the page's drafter with its q row swapped for a uniform one it did not
draw from; the page's own law test then fails.
"""

from __future__ import annotations

import linecache
import re
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from specviz.core import registry

DOC = Path(__file__).resolve().parents[1] / "docs" / "extending.md"
MODULE = "specviz.core.unigram_drafter"  # where the page puts the drafter's file


def block(marker: str) -> str:
    """The page's one Python code block that contains ``marker``."""
    found = [b for b in re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
             if marker in b]
    assert len(found) == 1, f"{marker!r} in {len(found)} code blocks of {DOC.name}"
    return found[0]


def load(drafter_source: str) -> dict[str, Callable[[], None]]:
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

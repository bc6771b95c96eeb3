"""Broken copies of a function or class, to show a test rejects the bug it is written for."""

from __future__ import annotations

import inspect
import sys
from typing import Any


def mutant(obj: Any, *edits: tuple[str, str]) -> Any:
    """``obj`` (a function or class) recompiled from its source with each (old, new) edit.

    Each ``old`` must occur exactly once, so a refactor that moves the line fails loudly here
    instead of silently testing an unbroken copy.
    """
    source = inspect.getsource(obj)
    for old, new in edits:
        assert source.count(old) == 1, f"mutation site {old!r} not found once: update the test"
        source = source.replace(old, new)
    namespace = dict(vars(sys.modules[obj.__module__]))
    exec(compile(source, inspect.getsourcefile(obj) or "<mutant>", "exec"), namespace)  # noqa: S102
    return namespace[obj.__name__]

"""Broken copies of a function or class, to show a test rejects the bug it is written for."""

from __future__ import annotations

import inspect
import sys
from typing import Any


class MutationSiteError(Exception):
    """An edit that would leave the copy unbroken (its text not found exactly once, or no change).

    Deliberately not an AssertionError: a mutant built inside ``pytest.raises(AssertionError)``
    would otherwise pass on a missing site without testing anything.
    """


def mutant(obj: Any, *edits: tuple[str, str]) -> Any:
    """``obj`` (a function or class) recompiled from its source with each (old, new) edit.

    Each ``old`` must occur exactly once and differ from its ``new``, so a refactor that moves
    the line fails loudly here instead of silently testing an unbroken copy.
    """
    if not edits:
        raise MutationSiteError(f"no edits to {obj.__qualname__}: the copy would be the original")
    source = inspect.getsource(obj)
    for old, new in edits:
        if old == new:
            raise MutationSiteError(f"edit {old!r} -> {new!r} changes nothing: update the test")
        count = source.count(old)
        if count != 1:
            raise MutationSiteError(f"mutation site {old!r} found {count} times in "
                                    f"{obj.__qualname__}, not once: update the test")
        source = source.replace(old, new)
    namespace = dict(vars(sys.modules[obj.__module__]))
    exec(compile(source, inspect.getsourcefile(obj) or "<mutant>", "exec"), namespace)  # noqa: S102
    return namespace[obj.__name__]

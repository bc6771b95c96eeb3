"""Broken copies of a function or class, to show a test rejects the bug it is written for."""

from __future__ import annotations

import inspect
import sys
import types
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


def with_globals(fn: Any, **names: Any) -> Any:
    """A copy of function ``fn`` that reads ``names`` in place of its module's globals of those
    names: a caller of a broken part, built without patching the module (which stays as it is).

    Each name must be one ``fn`` reads, so a refactor that stops reading it fails loudly here.
    """
    if not isinstance(fn, types.FunctionType):
        raise TypeError(f"{fn!r} is not a plain function")
    unread = set(names) - _names_read(fn.__code__)
    if unread:
        raise MutationSiteError(f"{fn.__qualname__} reads no global {sorted(unread)}: "
                                "update the test")
    copy = types.FunctionType(fn.__code__, {**fn.__globals__, **names}, fn.__name__,
                              fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    copy.__qualname__ = fn.__qualname__
    copy.__doc__ = fn.__doc__
    return copy


def reads(fn: Any, name: str) -> bool:
    """Whether function ``fn`` refers to the global ``name``."""
    return name in _names_read(fn.__code__)


def _names_read(code: types.CodeType) -> set[str]:
    """The global (and attribute) names ``code`` and the code nested in it refer to."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names_read(const)
    return names

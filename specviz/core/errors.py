"""Errors with messages meant for a person, not a traceback."""

from __future__ import annotations


class SpecvizError(Exception):
    """Base class: ``str(error)`` is a complete one-line explanation."""

    kind = "error"


class InputError(SpecvizError, ValueError):
    """A bad setting or prompt."""

    kind = "input"


class ModelLoadError(SpecvizError):
    """A model could not be found or loaded."""

    kind = "load"


class TokenizerMismatchError(SpecvizError):
    """Draft and target do not share a tokenizer."""

    kind = "tokenizer"


def one_line(text: str, limit: int = 600) -> str:
    """``text`` as one line of at most ``limit`` characters (messages go into a status bar)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"

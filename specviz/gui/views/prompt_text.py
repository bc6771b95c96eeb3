"""The user's words inside a chat-templated prompt: the stream shows them, not the template."""

from __future__ import annotations

import re

# Where the app does not know the text it sent (a replayed recording): the last user turn of
# the common templates (ChatML as in SmolLM2/Qwen, Llama 3, Gemma).
_USER_TURNS = (
    re.compile(r"<\|im_start\|>user\n(.*?)<\|im_end\|>", re.S),
    re.compile(r"<\|start_header_id\|>user<\|end_header_id\|>\n\n(.*?)<\|eot_id\|>", re.S),
    re.compile(r"<start_of_turn>user\n(.*?)<end_of_turn>", re.S),
)


def find_user(full: str, user: str | None = None) -> tuple[int, int] | None:
    """(start, end) of the user's text within the templated prompt ``full``; None: not found.

    ``user`` is the prompt the app sent, when it knows it; the template may strip it, so the
    stripped text is looked for (the last occurrence: a system prompt may quote it).
    """
    if user is not None and user.strip():
        needle = user.strip()
        at = full.rfind(needle)
        if at >= 0:
            return at, at + len(needle)
    for pattern in _USER_TURNS:
        matches = list(pattern.finditer(full))
        if matches:
            m = matches[-1]
            return m.start(1), m.end(1)
    return None


def visible_prompt(full: str, user: str | None, show_template: bool) -> str:
    """What the stream shows before the answer: the whole prompt, or the user's words alone.

    With the template hidden the answer starts on a line of its own, as the template made it.
    """
    if show_template:
        return full
    span = find_user(full, user)
    if span is None or span == (0, len(full)):
        return full
    return full[span[0]:span[1]] + "\n"

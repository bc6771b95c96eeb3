"""One way to run a prompt: the CLI, the app's worker, lineups, benchmarks and scripts call this.

A :class:`Request` is what a person asks for (a prompt, its settings, speculative / target
alone / race, the chat template or not). :func:`check` refuses a bad one before anything
heavy loads (torch-free, milliseconds); :func:`run` applies the chat template, picks the
decoder and turns every failure into a final ``RunFailed`` event, so a caller only reads
events.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from . import options, registry
from .errors import InputError, SpecvizError
from .events import Event, RunFailed, Settings

if TYPE_CHECKING:
    from .models import ModelPair
    from .rng import Random

Mode = Literal["speculative", "baseline", "race"]
MODES: tuple[Mode, ...] = ("speculative", "baseline", "race")
# Past this a prompt is not a prompt (any model's context is far shorter); refusing it here
# keeps a pasted file from reaching the tokenizer.
PROMPT_LIMIT_CHARS = 4 * 1024 * 1024


@dataclass(frozen=True)
class Request:
    """One prompt to run, and how."""

    prompt: str
    settings: Settings = field(default_factory=Settings)
    mode: Mode = "speculative"
    chat: bool = True  # wrap the prompt in the model's chat template, if it has one

    @property
    def speculative(self) -> bool:
        return self.mode != "baseline"


def needs_draft_model(request: Request) -> bool:
    """Whether this request's drafter needs a draft model (lookup needs none)."""
    if not request.speculative:
        return False
    entry = registry.DRAFTERS.get(request.settings.drafter)
    return entry is None or entry.needs_draft_model


def cross_tokenizer(request: Request) -> bool:
    """Whether this request's drafter drafts with a tokenizer of its own (the pair is then
    loaded accepting a draft whose tokenizer differs from the target's)."""
    if not request.speculative:
        return False
    entry = registry.DRAFTERS.get(request.settings.drafter)
    return entry is not None and entry.cross_tokenizer


def check(request: Request, has_draft: bool | None = None, *, has_target: bool = True,
          allow_empty: bool = True) -> None:
    """Raise InputError (one line) for a request that cannot run; ``has_draft`` None = not
    known yet (before the pair loads). The app passes ``allow_empty=False``: there an empty
    box is a prompt nobody typed, not a wish to start from BOS."""
    if request.mode not in MODES:
        raise InputError(f"The mode must be one of {', '.join(MODES)}, got {request.mode!r}.")
    if not has_target:
        raise InputError("Choose a target model (p) first.")
    options.validate(request.settings, speculative=request.speculative)
    check_prompt(request.prompt, allow_empty)
    if has_draft is False and needs_draft_model(request):
        raise InputError(f"The {request.settings.drafter} drafter needs a draft model (q); "
                         f"this pair has none (the lookup drafter needs none).")


def check_prompt(prompt: str, allow_empty: bool = True) -> None:
    """An empty prompt starts from BOS; one of whitespace alone, or not text, is refused."""
    if not isinstance(prompt, str):
        raise InputError(f"The prompt must be text, got {type(prompt).__name__}.")
    if not prompt and not allow_empty:
        raise InputError("The prompt is empty: type a prompt, then press Run.")
    if prompt and not prompt.strip():
        raise InputError("The prompt is only whitespace: type a prompt (or give an empty one "
                         "to start from the model's first token).")
    if len(prompt) > PROMPT_LIMIT_CHARS:
        raise InputError(f"The prompt is {len(prompt):,} characters; the most specviz takes is "
                         f"{PROMPT_LIMIT_CHARS:,} (any model's context is far shorter).")
    try:
        prompt.encode("utf-8")
    except UnicodeEncodeError as exc:  # argv's undecodable bytes arrive as lone surrogates
        raise InputError(f"The prompt is not valid UTF-8 text (at character {exc.start}).") \
            from None


def prepare(pair: ModelPair, request: Request) -> str:
    """The text the decoder sees: the prompt, in the chat template if asked and it has one."""
    from .engine import chat_prompt

    if request.chat and request.prompt:
        return chat_prompt(pair.tokenizer, request.prompt)
    return request.prompt


def run(pair: ModelPair, request: Request, stop: threading.Event | None = None, *,
        rng: Random | None = None) -> Iterator[Event]:
    """The request's events: ``RunStarted, Round*, RunFinished`` (a race: both runs, the
    speculative first), or a final ``RunFailed`` for whatever went wrong, never an exception."""
    from .engine import AutoregressiveDecoder, SpeculativeDecoder, guarded
    from .race import run_race

    try:
        check(request, has_draft=pair.draft is not None)
        prompt = prepare(pair, request)
    except SpecvizError as exc:
        yield RunFailed(message=str(exc), kind=exc.kind)
        return
    except Exception as exc:  # noqa: BLE001 - a chat template can fail in any way
        yield RunFailed(message=f"The chat template failed: {type(exc).__name__}: {exc}",
                        kind="input")
        return
    if request.mode == "race":
        yield from run_race(pair, request.settings, prompt, stop)
        return
    decoder: Any
    try:
        decoder = (SpeculativeDecoder(pair, request.settings) if request.speculative
                   else AutoregressiveDecoder(pair, request.settings))
    except SpecvizError as exc:
        yield RunFailed(message=str(exc), kind=exc.kind)
        return
    yield from guarded(decoder.run(prompt, stop, rng=rng))


__all__ = ["MODES", "Mode", "Request", "check", "check_prompt", "cross_tokenizer",
           "needs_draft_model", "prepare", "run"]

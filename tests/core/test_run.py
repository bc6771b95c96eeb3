"""core/run.py: the one way a prompt runs (CLI, worker, race, benchmarks call it)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from specviz.core import run as run_mod
from specviz.core.errors import InputError
from specviz.core.events import Round, RunFailed, RunFinished, RunStarted
from specviz.core.models import ModelPair
from specviz.core.run import Request, check, run
from tests.mutation import mutant
from tests.plain import plain


def _ids(events: list[Any]) -> list[tuple[int, ...]]:
    return [e.generated_ids for e in events if isinstance(e, RunFinished)]


@pytest.mark.parametrize("prompt, fragment", [
    ("   \n\t", "only whitespace"),
    ("ab\udcffc", "not valid UTF-8"),  # argv's undecodable byte, as Python hands it over
    ("x" * (run_mod.PROMPT_LIMIT_CHARS + 1), "characters"),
])
def test_bad_prompts_are_refused_before_anything_loads(prompt: str, fragment: str) -> None:
    with pytest.raises(InputError, match=fragment):
        check(Request(prompt, plain()))


def test_empty_prompt_starts_from_bos_except_where_the_app_says_otherwise() -> None:
    check(Request("", plain()))
    with pytest.raises(InputError, match="The prompt is empty"):
        check(Request("", plain()), allow_empty=False)


def test_a_drafter_that_needs_a_draft_model_is_refused_without_one() -> None:
    with pytest.raises(InputError, match="model drafter needs a draft model"):
        check(Request("hi", plain(drafter="model")), has_draft=False)
    check(Request("hi", plain(drafter="lookup")), has_draft=False)
    check(Request("hi", plain(drafter="model"), mode="baseline"), has_draft=False)
    check(Request("hi", plain(drafter="model")), has_draft=None)  # not known yet: not refused


def test_run_never_raises_it_ends_with_one_error_event(tiny_pair: ModelPair) -> None:
    events = list(run(tiny_pair, Request("  ", plain())))
    assert len(events) == 1 and isinstance(events[0], RunFailed)
    assert events[0].kind == "input" and "whitespace" in events[0].message
    events = list(run(tiny_pair, Request("the cat", plain(k=99))))
    assert isinstance(events[-1], RunFailed) and "K must be between" in events[-1].message


def test_modes_pick_the_decoder(tiny_pair: ModelPair) -> None:
    s = plain(k=3, temperature=0.0, max_new_tokens=8, seed=1)
    spec = list(run(tiny_pair, Request("the cat", s)))
    base = list(run(tiny_pair, Request("the cat", s, mode="baseline")))
    race = list(run(tiny_pair, Request("the cat", s, mode="race")))
    assert [e.mode for e in spec if isinstance(e, RunStarted)] == ["speculative"]
    assert [e.mode for e in base if isinstance(e, RunStarted)] == ["baseline"]
    assert [e.mode for e in race if isinstance(e, RunStarted)] == ["speculative", "baseline"]
    assert all(r.k == 0 for r in base if isinstance(r, Round))
    # T = 0: all three give the target's greedy text.
    assert _ids(spec) == _ids(base) and _ids(race) == _ids(spec) * 2


def test_the_chat_template_is_applied_once_and_only_when_asked(tiny_pair: ModelPair) -> None:
    tok = tiny_pair.tokenizer
    tok.chat_template = "{% for m in messages %}big dog {{ m['content'] }} sun{% endfor %}"
    s = plain(max_new_tokens=2)
    with_chat = next(iter(run(tiny_pair, Request("the cat", s, chat=True))))
    without = next(iter(run(tiny_pair, Request("the cat", s, chat=False))))
    assert isinstance(with_chat, RunStarted) and isinstance(without, RunStarted)
    assert "big dog" in with_chat.prompt and "big dog" not in without.prompt
    # The broken variant: a run that forgets the template (as a caller re-implementing "run a
    # prompt" could) shows the bare prompt.
    forgetful = mutant(run_mod.prepare, ("if request.chat and request.prompt:",
                                         "if False:"))
    assert "big dog" not in forgetful(tiny_pair, Request("the cat", s, chat=True))


def test_the_cli_and_the_worker_run_through_it() -> None:
    """One entry point: neither builds a decoder or applies the template itself any more."""
    import inspect

    from specviz import cli
    from specviz.gui import worker

    for module in (cli, worker):
        source = inspect.getsource(module)
        assert "SpeculativeDecoder(" not in source and "chat_prompt(" not in source, module
        assert "run(" in source


def test_settings_seed_none_races_on_one_drawn_seed(tiny_pair: ModelPair) -> None:
    s = dataclasses.replace(plain(k=2, max_new_tokens=4), seed=None)
    starts = [e for e in run(tiny_pair, Request("the cat", s, mode="race"))
              if isinstance(e, RunStarted)]
    assert len(starts) == 2 and starts[0].settings.seed == starts[1].settings.seed is not None

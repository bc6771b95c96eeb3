"""The hand-written evaluation set (issue 11) exists, is varied, and no training source holds it."""

from __future__ import annotations

from specviz.distill.prompts import (
    FREE_PROMPTS,
    GENERAL,
    EvalFilter,
    all_prompts,
    handwritten_prompts,
    prompt_key,
    read_lines,
    train_prompts,
)


def test_handwritten_set_is_large_distinct_and_mixed() -> None:
    texts = [t for t, _ in handwritten_prompts()]
    assert len(texts) >= 40
    assert len({prompt_key(t) for t in texts}) == len(texts)
    assert sum(any("\u4e00" <= c <= "\u9fff" for c in t) for t in texts) >= 4  # Chinese
    assert sum("Python" in t or "SQL" in t or "JavaScript" in t for t in texts) >= 4  # code
    assert not {prompt_key(t) for t in texts} & {prompt_key(t) for t in FREE_PROMPTS}


def test_no_listed_training_source_holds_an_evaluation_prompt() -> None:
    keep = EvalFilter()
    hand = {prompt_key(t) for t, _ in handwritten_prompts()}
    sources = {
        "general.txt": read_lines(GENERAL),
        "templates": [t for t, _ in all_prompts()],  # every filling, held out or not
    }
    for name, texts in sources.items():
        assert texts, name
        # Neither equal to nor containing a hand-written evaluation prompt, up to case/punctuation.
        assert not [t for t in texts if not EvalFilter(
            [h for h, _ in handwritten_prompts()]).allows(t)], name
        assert not {prompt_key(t) for t in texts} & hand, name
    # Only a handful of training-template fillings contain a held-out one ("... Answer
    # briefly."); the teacher drops them.
    assert 0 < sum(not keep.allows(t) for t, _ in train_prompts()) <= 8
    assert not keep.allows("  WHY does ice float on water ")  # FREE_PROMPTS, other case
    assert not keep.allows("Why do onions make you cry when you cut them? Be brief.")  # contains
    assert keep.allows("Why do onions make bread taste sweet?")

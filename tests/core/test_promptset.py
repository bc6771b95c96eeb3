"""Prompt sets: reading prompt files (plain or Spec-Bench JSON lines) and the table by category."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from specviz.core.events import Settings
from specviz.core.models import ModelPair
from specviz.core.promptset import (
    PromptItem,
    PromptResult,
    PromptSetError,
    header_line,
    outcome_line,
    parse_prompts,
    pick,
    read_outcomes,
    read_prompts,
    results_of,
    run_prompt_set,
    skipped_line,
    table,
    to_csv,
    to_markdown,
    to_text,
)
from specviz.core.sweep import Measured
from tests.mutation import mutant, with_globals


def specbench_like(tmp_path: Path) -> Path:
    """A tiny file in Spec-Bench's form, written here (the real one is never copied)."""
    rows = [{"question_id": 1, "category": "writing", "turns": ["the cat", "and then?"]},
            {"question_id": 2, "category": "writing", "turns": ["a dog ran"]},
            {"question_id": 3, "category": "math_reasoning", "turns": ["the sun"]}]
    path = tmp_path / "q.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n", encoding="utf-8")
    return path


def test_reads_spec_bench_json_lines_and_plain_prompt_files(tmp_path: Path) -> None:
    items = read_prompts(specbench_like(tmp_path))
    assert items == [PromptItem("1", "writing", "the cat"), PromptItem("2", "writing", "a dog ran"),
                     PromptItem("3", "math_reasoning", "the sun")]  # the first turn
    assert pick(items, per_category=1) == [items[0], items[2]]
    assert pick(items, categories=["math_reasoning"]) == [items[2]]
    plain = parse_prompts("# a comment\nthe cat\n\n  a dog ran  \n", "mine")
    assert plain == [PromptItem("2", "mine", "the cat"), PromptItem("4", "mine", "a dog ran")]


@pytest.mark.parametrize("text, message", [
    ("", "no prompts"),
    ('{"turns": ["a"]}\n{"turns": []}\n', "line 2: \"turns\" must be a list"),
    ('{"turns": ["a"]}\nnot json\n', "line 2: not a JSON object"),
    ('{"turns": ["a"], "category": 3}\n', "line 1: \"category\" must be"),
])
def test_a_bad_prompt_file_is_one_message(text: str, message: str) -> None:
    with pytest.raises(PromptSetError, match=message):
        parse_prompts(text)


def test_an_unknown_category_or_missing_file_is_one_message(tmp_path: Path) -> None:
    items = read_prompts(specbench_like(tmp_path))
    with pytest.raises(PromptSetError, match="no category coding in the file .it has: "
                       "math_reasoning, writing"):
        pick(items, categories=["coding"])
    with pytest.raises(PromptSetError, match="cannot read"):
        read_prompts(tmp_path / "absent.jsonl")


def run(tokens: int, wall: float, tested: int, accepted: int, rounds: int,
        forward: float) -> Measured:
    return Measured(tokens=tokens, wall_s=wall, rounds=rounds, drafted=tested, tested=tested,
                    accepted=accepted, forward_s=forward)


def hand_results() -> list[PromptResult]:
    a, b, c = (PromptItem("1", "writing", "x"), PromptItem("2", "writing", "y"),
               PromptItem("3", "math", "z"))
    return [
        PromptResult(a, "K 4", run(20, 1.0, 10, 5, 8, 0.9), 2.0, True),
        PromptResult(b, "K 4", run(20, 2.0, 20, 18, 4, 1.0), 0.5, False),
        PromptResult(c, "K 4", run(10, 1.0, 4, 4, 2, 0.5), 4.0, True),
        PromptResult(a, "target alone", run(20, 2.0, 0, 0, 20, 1.8), 1.0, None),
    ]


def test_the_table_by_category_matches_a_hand_computation() -> None:
    rows = {(r.category, r.config): r for r in table(hand_results())}
    w = rows[("writing", "K 4")]
    assert w.prompts == 2
    assert w.alpha == pytest.approx(23 / 30)  # Σkept ÷ Σtested, not the mean of ratios (.7)
    assert w.tokens_per_round == pytest.approx(40 / 12)
    assert w.speedup == pytest.approx(1.0)  # geometric mean of 2.0 and 0.5
    assert (w.worst, w.worst_prompt) == (0.5, "2")
    assert w.overhead == pytest.approx(1 - 1.9 / 3.0)
    assert w.identical == (1, 2)
    everything = rows[("all", "K 4")]
    assert everything.speedup == pytest.approx(4.0 ** (1 / 3))
    assert everything.identical == (2, 3)
    base = rows[("writing", "target alone")]
    assert base.alpha is None and base.tokens_per_round is None and base.identical is None
    md = to_markdown(table(hand_results()))
    assert "| writing | K 4 | 2 | 0.77 | 3.33 | 1.00x | 0.50x (2) | 36.7% | 1/2 |" in md
    assert to_csv(table(hand_results())).splitlines()[1] == \
        "writing,K 4,2,0.7667,3.3333,1.0,0.5,2,0.3667,1,2"
    assert "writing" in to_text(table(hand_results()))


def test_a_prompt_set_runs_beside_the_target_alone(tiny_pair: ModelPair, tmp_path: Path) -> None:
    items = read_prompts(specbench_like(tmp_path))
    greedy = Settings(k=3, temperature=0.0, max_new_tokens=8)
    outcomes = list(run_prompt_set(tiny_pair, items, [("K 3", greedy)], chat=False))
    assert [o.item for o in outcomes] == items and not skipped_line(outcomes)
    results = results_of(outcomes)
    assert [(r.item.id, r.config) for r in results] == [
        (i, c) for i in ("1", "2", "3") for c in ("target alone", "K 3")]
    assert all(r.identical for r in results if r.config == "K 3")  # T = 0: exact
    assert all(r.speedup == 1.0 for r in results if r.config == "target alone")
    rows = table(results)
    assert [r.category for r in rows] == ["writing", "writing", "math_reasoning",
                                          "math_reasoning", "all", "all"]


def test_a_prompt_longer_than_the_context_is_skipped_and_the_set_goes_on(
        tiny_pair: ModelPair) -> None:
    long = " ".join(["the"] * 300)  # the tiny models' context is 256 positions
    items = [PromptItem("1", "a", "the cat"), PromptItem("242", "a", long),
             PromptItem("3", "b", "a dog ran")]
    greedy = Settings(k=2, temperature=0.0, max_new_tokens=4)
    outcomes = list(run_prompt_set(tiny_pair, items, [("K 2", greedy)], chat=False))
    assert [o.item.id for o in outcomes] == ["1", "242", "3"]  # the one after it ran too
    assert [o.skipped is None for o in outcomes] == [True, False, True]
    assert outcomes[1].results == () and "context is 256" in (outcomes[1].skipped or "")
    assert skipped_line(outcomes).startswith("skipped 1: prompt 242: The prompt is 30")
    rows = {(r.category, r.config): r for r in table(results_of(outcomes))}
    assert rows[("a", "K 2")].prompts == 1 and rows[("all", "K 2")].prompts == 2
    md = to_markdown(table(results_of(outcomes)), skipped_line(outcomes))
    assert md.endswith(f"\n\n{skipped_line(outcomes)}\n")


def test_outcomes_saved_as_json_lines_read_back_equal(tiny_pair: ModelPair) -> None:
    items = [PromptItem("1", "a", "the cat"), PromptItem("2", "a", " ".join(["the"] * 300))]
    configs = [("K 2", Settings(k=2, temperature=0.0, max_new_tokens=4))]
    outcomes = list(run_prompt_set(tiny_pair, items, configs, chat=False))
    text = header_line(configs) + "\n" + "".join(outcome_line(o) + "\n" for o in outcomes)
    assert read_outcomes(text, configs) == outcomes  # figures, ids and the skip reason
    assert read_outcomes(text + '{"id": "3", "cat', configs) == outcomes  # a line cut short
    # Resumed: the prompts done are passed over, the rest run.
    assert [o.item for o in run_prompt_set(tiny_pair, items, configs, chat=False,
                                           done={items[0]})] == [items[1]]
    with pytest.raises(PromptSetError, match="other configurations"):
        read_outcomes(text, [("K 3", replace(configs[0][1], k=3))])
    with pytest.raises(PromptSetError, match="line 2: not a prompt's outcome"):
        read_outcomes(header_line(configs) + "\n{}\n", configs)


PROMPTSET = sys.modules["specviz.core.promptset"]


def test_the_skip_test_rejects_stopping_at_the_first_failure(
        tiny_pair: ModelPair, monkeypatch: pytest.MonkeyPatch) -> None:
    broken = mutant(PROMPTSET.run_prompt_set,
                    ("skipped = one_line(str(exc), 200)", "return"))  # ends the set there
    monkeypatch.setitem(globals(), "run_prompt_set", broken)
    with pytest.raises(AssertionError):
        test_a_prompt_longer_than_the_context_is_skipped_and_the_set_goes_on(tiny_pair)
MUTANTS = {
    "arithmetic mean": (test_the_table_by_category_matches_a_hand_computation, "_row",
                        [("speedup=geomean(ratios)",
                          "speedup=sum(ratios) / len(ratios)")]),
    "α as the mean of per-prompt α": (
        test_the_table_by_category_matches_a_hand_computation, "_row",
        [("alpha=sum(r.run.accepted for r in rs) / tested if tested else None",
          "alpha=sum(r.run.accepted / r.run.tested for r in rs) / len(rs) if tested else None")]),
    "worst is the best": (test_the_table_by_category_matches_a_hand_computation, "_row",
                          [("worst = min(rs, key=lambda r: r.speedup)",
                            "worst = max(rs, key=lambda r: r.speedup)")]),
    "the second turn read": (lambda: test_reads_spec_bench_json_lines_and_plain_prompt_files(
        Path(__import__("tempfile").mkdtemp())), "_jsonl_item",
        [("return PromptItem(str(qid), category, turns[0])",
          "return PromptItem(str(qid), category, turns[-1])")]),
}


@pytest.mark.parametrize("name", list(MUTANTS))
def test_each_test_rejects_its_broken_variant(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    test, attr, edits = MUTANTS[name]
    broken = mutant(getattr(PROMPTSET, attr), *edits)
    # The tests call table and read_prompts: copies of them that read the broken part.
    if attr == "_row":
        monkeypatch.setitem(globals(), "table", with_globals(table, _row=broken))
    else:
        parse = with_globals(PROMPTSET.parse_prompts, _jsonl_item=broken)
        monkeypatch.setitem(globals(), "read_prompts",
                            with_globals(read_prompts, parse_prompts=parse))
    with pytest.raises(AssertionError):
        test()

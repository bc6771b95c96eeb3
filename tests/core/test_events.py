"""Events survive a JSON round trip (the CLI's --json output can drive replays)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from specviz.core.engine import SpeculativeDecoder
from specviz.core.events import (
    FORMAT_VERSION,
    DrafterTally,
    DraftPosition,
    Round,
    RunFinished,
    RunStarted,
    Settings,
    Summary,
    from_json,
    to_json,
)
from specviz.core.models import ModelPair
from tests.plain import plain


def test_json_round_trip_is_lossless(tiny_pair: ModelPair) -> None:
    events = list(SpeculativeDecoder(tiny_pair, plain(k=3, max_new_tokens=20, seed=1))
                  .run("the cat"))
    lines = [to_json(e) for e in events]
    types = [json.loads(line)["type"] for line in lines]
    assert types[0] == "run_started" and types[-1] == "run_finished"
    assert set(types[1:-1]) == {"round"}
    assert [from_json(line) for line in lines] == events
    assert isinstance(from_json(lines[1]), Round) and isinstance(from_json(lines[-1]), RunFinished)


def test_new_fields_round_trip(tiny_pair: ModelPair) -> None:
    events = list(SpeculativeDecoder(tiny_pair, plain(
        k=3, max_new_tokens=30, seed=1, drafter="hybrid", k_policy="heuristic", lenience=0.8,
        ngram_min=2, ngram_max=4)).run("the cat sat on the mat the cat sat"))
    assert [from_json(to_json(e)) for e in events] == events
    started, done = events[0], events[-1]
    assert isinstance(started, RunStarted) and started.format == FORMAT_VERSION == 3
    assert isinstance(done, RunFinished) and not done.summary.exact
    assert all(isinstance(d, DrafterTally) for d in done.summary.by_drafter)
    rounds = [e for e in events if isinstance(e, Round)]
    assert all(r.policy_reason and not r.exact for r in rounds)
    assert {d.drafter for r in rounds for d in r.drafted} <= {"model", "lookup"}


# A recording written before drafters existed (format 1: no ``format``, ``drafter``,
# ``policy_reason``, ``exact``, ngram or lenience fields, and a Summary without counts).
OLD_LINES = [
    '{"type": "run_started", "mode": "speculative", "prompt": "the cat", "prompt_ids": [3, 4],'
    ' "pair": {"draft": "d", "target": "t", "device": "cpu", "dtype": "float32",'
    ' "vocab_size": 15}, "settings": {"k": 2, "temperature": 1.0, "top_k": 0, "top_p": 1.0,'
    ' "max_new_tokens": 3, "seed": 0, "top_n": 1}}',
    '{"type": "round", "index": 0, "k": 2, "drafted": [{"index": 0, "token_id": 5, "text": "sat",'
    ' "q": 0.5, "p": 0.25, "ratio": 0.5, "r": 0.7, "status": "rejected", "q_top": {"ids": [5],'
    ' "probs": [0.5], "texts": ["sat"]}, "p_top": {"ids": [6], "probs": [0.5], "texts": ["on"]}},'
    ' {"index": 1, "token_id": 6, "text": "on", "q": 0.5, "p": 0.5, "ratio": 1.0, "r": null,'
    ' "status": "discarded", "q_top": {"ids": [6], "probs": [0.5], "texts": ["on"]},'
    ' "p_top": {"ids": [6], "probs": [0.5], "texts": ["on"]}}], "n_accepted": 0,'
    ' "extra": {"kind": "resampled", "token_id": 6, "text": "on", "prob": 1.0, "p": 0.5,'
    ' "dist_top": {"ids": [6], "probs": [1.0], "texts": ["on"]}}, "bonus_top": {"ids": [6],'
    ' "probs": [0.5], "texts": ["on"]}, "appended_ids": [6], "appended_text": "on",'
    ' "appended_texts": ["on"], "draft_time_s": 0.01, "verify_time_s": 0.02, "n_generated": 1,'
    ' "target_calls": 1, "draft_calls": 2, "elapsed_s": 0.05, "final": false}',
    '{"type": "run_finished", "generated_ids": [6], "text": "on", "stop_reason": "stopped",'
    ' "summary": {"tokens": 1, "rounds": 1, "drafted": 2, "accepted": 0, "acceptance_rate": 0.0,'
    ' "mean_tokens_per_round": 1.0, "acceptance_by_position": [0.0, 0.0], "target_calls": 1,'
    ' "draft_calls": 2, "draft_time_s": 0.01, "verify_time_s": 0.02, "wall_time_s": 0.06,'
    ' "tokens_per_s": 16.0, "alpha": 0.0, "tested": 1}}',
]


def test_a_format_1_recording_still_parses() -> None:
    started, rnd, done = (from_json(line) for line in OLD_LINES)
    assert isinstance(started, RunStarted) and started.format == 1
    assert started.settings.drafter == "model" and started.settings.lenience == 1.0
    assert isinstance(rnd, Round) and rnd.policy_reason == "" and rnd.exact
    assert [d.drafter for d in rnd.drafted] == ["model", "model"]
    assert isinstance(done, RunFinished) and done.summary.exact and done.summary.by_drafter == ()


V1_FIELDS = {
    "Settings": {"k", "temperature", "top_k", "top_p", "max_new_tokens", "seed", "top_n"},
    "DraftPosition": {"index", "token_id", "text", "q", "p", "ratio", "r", "status", "q_top",
                      "p_top"},
    "Round": {"index", "k", "drafted", "n_accepted", "extra", "bonus_top", "appended_ids",
              "appended_text", "appended_texts", "draft_time_s", "verify_time_s",
              "n_generated", "target_calls", "draft_calls", "elapsed_s", "final"},
    "RunStarted": {"mode", "prompt", "prompt_ids", "pair", "settings"},
    "Summary": {"tokens", "rounds", "drafted", "accepted", "acceptance_rate",
                "mean_tokens_per_round", "acceptance_by_position", "target_calls",
                "draft_calls", "draft_time_s", "verify_time_s", "wall_time_s", "tokens_per_s",
                "alpha", "tested"},
}


def fields_without_default(cls: type) -> set[str]:
    missing = dataclasses.MISSING
    return {f.name for f in dataclasses.fields(cls)
            if f.default is missing and f.default_factory is missing}


@dataclasses.dataclass(frozen=True)
class BrokenRound(Round):
    """Broken: a field added without a default, so a format-1 line no longer builds."""

    drafter_name: str = dataclasses.field(kw_only=True)


@pytest.mark.parametrize(("name", "cls", "correct"), [
    ("Settings", Settings, True), ("DraftPosition", DraftPosition, True),
    ("Round", Round, True), ("RunStarted", RunStarted, True), ("Summary", Summary, True),
    ("Round", BrokenRound, False)])
def test_every_field_added_since_format_1_has_a_default(name: str, cls: type,
                                                        correct: bool) -> None:
    assert (fields_without_default(cls) <= V1_FIELDS[name]) == correct


def test_the_broken_variant_really_breaks_old_lines() -> None:
    from specviz.core import events as events_mod

    data = json.loads(OLD_LINES[1])
    del data["type"]
    with pytest.raises(TypeError, match="drafter_name"):
        events_mod._build(BrokenRound, data)

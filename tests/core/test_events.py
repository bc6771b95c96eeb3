"""Events survive a JSON round trip (the CLI's --json output can drive replays)."""

from __future__ import annotations

import json

from specviz.core.engine import SpeculativeDecoder
from specviz.core.events import Round, RunFinished, Settings, from_json, to_json
from specviz.core.models import ModelPair


def test_json_round_trip_is_lossless(tiny_pair: ModelPair) -> None:
    events = list(SpeculativeDecoder(tiny_pair, Settings(k=3, max_new_tokens=20, seed=1))
                  .run("the cat"))
    lines = [to_json(e) for e in events]
    types = [json.loads(line)["type"] for line in lines]
    assert types[0] == "run_started" and types[-1] == "run_finished"
    assert set(types[1:-1]) == {"round"}
    assert [from_json(line) for line in lines] == events
    assert isinstance(from_json(lines[1]), Round) and isinstance(from_json(lines[-1]), RunFinished)

"""The options table is the one place a default, a range or a name is written.

Each test compares a reader (Settings, the CLI's parser, the recording reader, validation)
with the table; the controls table is compared in tests/gui/test_controls.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from typing import Any

import pytest

from specviz import cli
from specviz.core import options, registry
from specviz.core.errors import InputError
from specviz.core.events import Settings
from specviz.core.options import OPTIONS, validate
from specviz.core.recording import RecordingError, RecordingReader
from tests.mutation import mutant


def test_settings_fields_are_exactly_the_options_with_their_defaults() -> None:
    assert options.setting_names() == tuple(o.name for o in OPTIONS)
    assert dataclasses.asdict(Settings()) == options.DEFAULTS


def _parser_defaults(parser: argparse.ArgumentParser) -> dict[str, Any]:
    return {a.dest: (a.default, a.choices) for a in parser._actions}


def test_cli_parser_reads_every_default_range_and_name_from_the_table() -> None:
    found = _parser_defaults(cli.build_parser())
    for opt in OPTIONS:
        default, choices = found[opt.name]
        assert default == opt.default, opt.name
        assert (list(choices) if choices else []) == list(opt.names()), opt.name
    assert found["drafter"][1] == list(registry.drafter_names())
    assert found["k_policy"][1] == list(registry.policy_names())


def test_a_cli_with_its_own_default_is_caught() -> None:
    """Seen failing on: the CLI writing T 0.0 itself (it did, beside Settings' 1.0)."""
    broken = mutant(cli._add_option, ("default=opt.default,", "default=0.5 if "
                                      "opt.name == 'temperature' else opt.default,"))
    parser = argparse.ArgumentParser()
    for opt in OPTIONS:
        broken(parser, opt)
    assert _parser_defaults(parser)["temperature"][0] != options.DEFAULTS["temperature"]


@pytest.mark.parametrize("opt", [o for o in OPTIONS if o.choices is None], ids=lambda o: o.name)
def test_each_bound_is_enforced_and_nothing_inside_is_refused(opt: options.Option) -> None:
    base = Settings(ngram_min=1, ngram_max=options.NGRAM_LIMIT)  # their order is its own rule
    if opt.low is not None:
        lowest = opt.low if not opt.low_open else opt.low + (1 if opt.type is int else 1e-9)
        validate(dataclasses.replace(base, **{opt.name: opt.type(lowest)}))
        below = opt.low - 1 if opt.type is int else (opt.low if opt.low_open else opt.low - 0.5)
        if opt.name != "temperature" or below < 0:
            with pytest.raises(InputError, match=opt.label.split()[0]):
                validate(dataclasses.replace(base, **{opt.name: opt.type(below)}))
    if opt.high is not None:
        validate(dataclasses.replace(base, **{opt.name: opt.type(opt.high)}))
        with pytest.raises(InputError):
            validate(dataclasses.replace(base, **{opt.name: opt.type(opt.high + 1)}))
    if opt.type is float:
        with pytest.raises(InputError):
            validate(dataclasses.replace(base, **{opt.name: math.nan}))


def test_names_come_from_the_registry() -> None:
    with pytest.raises(InputError, match="drafter must be one of model, lookup, hybrid"):
        validate(Settings(drafter="tree"))
    registry.register_drafter(registry.Entry("toy", "a test drafter", lambda: None))
    try:
        validate(Settings(drafter="toy"))
        assert "toy" in dict(_parser_defaults(cli.build_parser()))["drafter"][1]
    finally:
        registry.unregister("toy")


def test_ngram_sizes_keep_their_order() -> None:
    with pytest.raises(InputError, match="min <= max"):
        validate(Settings(ngram_min=5, ngram_max=3))


def test_seed_beyond_what_torch_takes_is_refused_before_anything_loads() -> None:
    """The rehearsal's --seed 99999999999999999999999 failed after the models loaded."""
    with pytest.raises(InputError, match="seed|Seed"):
        validate(Settings(seed=99999999999999999999999))
    validate(Settings(seed=None))  # None: draw one


def test_profiles_only_depart_from_the_defaults_by_name() -> None:
    for name, changes in options.PROFILES.items():
        assert set(changes) <= set(options.DEFAULTS), name
        validate(Settings(**options.profile(name)))
    assert options.profile("presentation")["temperature"] == 0.7


def test_parse_assignment() -> None:
    base = Settings()
    assert options.parse_assignment("k=8", base).k == 8
    assert options.parse_assignment("k-policy=fixed", base).k_policy == "fixed"
    assert options.parse_assignment("temperature=0.7", base).temperature == 0.7
    for bad in ("k=99", "k=two", "colour=blue", "k", "drafter=tree"):
        with pytest.raises(InputError):
            options.parse_assignment(bad, base)


def _recording(settings: dict[str, Any], fmt: int | None) -> str:
    started: dict[str, Any] = {
        "type": "run_started", "mode": "speculative", "prompt": "hi", "prompt_ids": [1],
        "pair": {"draft": "d", "target": "t", "device": "cpu", "dtype": "float32",
                 "vocab_size": 10},
        "settings": settings}
    if fmt is not None:
        started["format"] = fmt
    return json.dumps(started)


def test_a_recording_without_newer_fields_reads_as_what_it_was_made_with() -> None:
    """Format 1 predates drafters and K policies: the model drafted at a fixed K, lookup
    copied up to 10. Today's defaults (hybrid, cost, 16) would misdescribe it."""
    old = {"k": 4, "temperature": 1.0, "top_k": 0, "top_p": 1.0, "max_new_tokens": 8,
           "seed": 0, "top_n": 10}
    reader = RecordingReader()
    event = reader.feed_line(_recording(old, None))
    s = event.settings  # type: ignore[union-attr]
    assert (s.drafter, s.k_policy, s.lookup_k) == ("model", "fixed", 10)
    assert options.RECORDED.keys() <= set(options.DEFAULTS)
    assert any(options.RECORDED[k] != options.DEFAULTS[k] for k in options.RECORDED)


def test_a_recording_is_held_to_the_tables_ranges() -> None:
    settings = {**options.DEFAULTS, "ngram_max": 12}
    with pytest.raises(RecordingError, match="n-gram max"):
        RecordingReader().feed_line(_recording(settings, 2))
    plugin = {**options.DEFAULTS, "drafter": "made-elsewhere"}  # names are not checked there
    RecordingReader().feed_line(_recording(plugin, 2))

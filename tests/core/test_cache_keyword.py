"""The KV cache goes to the models under the name the installed transformers takes.

transformers 5.24 renamed the forward's ``past_key_values`` to ``cache`` (outputs too); the old
name warns and is to go in 5.40, which ``pyproject.toml`` allows. A Llama subclass that knows
only the new name stands in for 5.40 here, whatever version is installed.
"""

from __future__ import annotations

import inspect
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from transformers import LlamaForCausalLM

from specviz.core import speed
from specviz.core.cached_model import CachedModel
from specviz.core.engine import SpeculativeDecoder
from specviz.core.events import RunFailed, RunFinished
from specviz.core.models import ModelPair, cache_keyword, cached_forward
from specviz.core.parts import Factory
from specviz.distill.data import sample_batch
from tests.mutation import mutant
from tests.plain import plain
from tests.tiny import tiny_pair

# The name the installed transformers' Llama takes (past_key_values before 5.24).
INSTALLED = ("cache" if "cache" in inspect.signature(LlamaForCausalLM.forward).parameters
             else "past_key_values")


class CacheOnlyLlama(LlamaForCausalLM):
    """A Llama as transformers 5.40 will have it: the cache goes in and comes out as ``cache``."""

    def forward(self, input_ids: Any = None, cache: Any = None,  # type: ignore[override]
                use_cache: bool | None = None, **kwargs: Any) -> Any:
        if "past_key_values" in kwargs:
            raise TypeError("forward() got an unexpected keyword argument 'past_key_values'")
        inner = {INSTALLED: cache}
        out = LlamaForCausalLM.forward(self, input_ids=input_ids, use_cache=use_cache,
                                       **inner, **kwargs)
        after = getattr(out, "cache", None)
        return SimpleNamespace(logits=out.logits,
                               cache=after if after is not None else out.past_key_values)


def as_cache_only(pair: ModelPair) -> ModelPair:
    for model in (pair.target, pair.draft):
        model.__class__ = CacheOnlyLlama
    return pair


def greedy_tokens(pair: ModelPair, factory: Factory | None = None) -> list[int]:
    events = list(SpeculativeDecoder(pair, plain(k=3, temperature=0.0, max_new_tokens=24,
                                                    seed=0), factory=factory).run("the cat"))
    assert not [e for e in events if isinstance(e, RunFailed)], events[-1]
    done = [e for e in events if isinstance(e, RunFinished)]
    assert done
    return list(done[0].generated_ids)


def test_the_keyword_follows_the_forward_signature() -> None:
    new = as_cache_only(tiny_pair()).target
    assert cache_keyword(new) == "cache"
    assert cache_keyword(tiny_pair().target) == INSTALLED


def test_decoding_and_timing_work_with_a_cache_only_model() -> None:
    expected = greedy_tokens(tiny_pair())
    pair = as_cache_only(tiny_pair())
    assert greedy_tokens(pair) == expected
    assert speed.measure_target_step(pair, passes=2, warmup=1) > 0
    lm = CachedModel(pair.target, pair.vocab_size)
    lm.feed([0, 3, 4], keep=1)
    assert lm.time_pass(3, 5) > 0 and lm.cache.get_seq_length() == 3


def test_teacher_sampling_works_with_a_cache_only_model() -> None:
    def rows(pair: ModelPair) -> list[list[int]]:
        seqs = sample_batch(pair.target, [[0, 3, 4], [0, 5]], [0.0, 0.0], 6, 4, {1}, 2,
                            torch.Generator().manual_seed(0))
        return [s.ids.tolist() for s in seqs]

    assert rows(as_cache_only(tiny_pair())) == rows(tiny_pair())


@pytest.mark.parametrize("edit", [
    ("cache_keyword(model)", '"past_key_values"'),  # the old name, always
    ('after = getattr(out, "cache", None)', "after = None"),  # the old output field, always
])
def test_broken_variants_fail_on_a_cache_only_model(edit: tuple[str, str]) -> None:
    broken = Factory(forward=mutant(cached_forward, edit))  # the models' call with a cache
    # The old keyword: TypeError; the old output field: AttributeError (or a failed run).
    with pytest.raises((TypeError, AttributeError, AssertionError)):
        greedy_tokens(as_cache_only(tiny_pair()), broken)

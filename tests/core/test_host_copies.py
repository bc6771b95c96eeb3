"""The draft model's per-token host copies: q and its confidence in one copy from the device,
ids mapped on the host; the events are byte for byte those of one copy each (the old path)."""

from __future__ import annotations

import functools
import itertools

import pytest
import torch

from specviz.core.drafters import ModelDrafter, build_hybrid_drafter, build_model_drafter
from specviz.core.engine import CALIBRATION_WIDTHS, SpeculativeDecoder
from specviz.core.events import to_json
from specviz.core.models import ModelPair
from specviz.core.parts import Factory
from specviz.core.registry import Entry
from tests.plain import plain
from tests.tiny import tiny_llama, word_tokenizer


class SeparateCopies(ModelDrafter):
    """The path before: q copied, then the confidence read on its own, ids mapped on the
    device (a sync per read on a GPU)."""

    def _to_host(self, logits: torch.Tensor) -> tuple[torch.Tensor, float | None]:
        q = self.probs(logits).cpu()
        sure = float(torch.softmax(logits.detach().float(), -1).max()) if self.greedy else None
        return q, sure


class SureOfQ(ModelDrafter):
    """Broken: the greedy confidence read from q, which is one-hot (always 1.0)."""

    def _to_host(self, logits: torch.Tensor) -> tuple[torch.Tensor, float | None]:
        q = self.probs(logits).cpu()
        return q, float(q.max()) if self.greedy else None


def reduced_pair() -> ModelPair:
    """A draft over a subset of the target's ids (an increasing map: drafts are local)."""
    tok = word_tokenizer(eos=False)
    keep = torch.tensor([0, 1, 3, 4, 5, 7, 9])
    return ModelPair(target=tiny_llama(len(tok), seed=2, sharpness=3.0),
                     draft=tiny_llama(len(keep), seed=1, sharpness=3.0), tokenizer=tok,
                     draft_vocab_map=keep, draft_oov_id=2)


def events(pair: ModelPair, cls: type[ModelDrafter] | None) -> list[str]:
    """Every combination's events with a counting clock, as JSON lines."""
    lines: list[str] = []
    for drafter, policy, temperature in itertools.product(
            ("model", "hybrid"), ("fixed", "cost"), (0.0, 0.8)):
        ticks = itertools.count()
        factory = Factory(clock=functools.partial(lambda t: float(next(t)), ticks),
                          calibrate=lambda p: {n: 1 + 0.1 * n for n in CALIBRATION_WIDTHS})
        if cls is not None:
            factory = factory.with_drafters(
                Entry("model", "", functools.partial(build_model_drafter, cls=cls), True),
                Entry("hybrid", "", functools.partial(build_hybrid_drafter, cls=cls), True))
        s = plain(k=3, max_new_tokens=30, drafter=drafter, k_policy=policy,
                  temperature=temperature, seed=7)
        lines += [to_json(e) for e in SpeculativeDecoder(pair, s, factory=factory)
                  .run("the cat sat on the mat the cat")]
    return lines


def test_one_copy_per_draft_gives_the_same_events() -> None:
    pair = reduced_pair()
    assert events(pair, None) == events(pair, SeparateCopies)


def test_the_comparison_rejects_a_wrong_confidence() -> None:
    pair = reduced_pair()
    with pytest.raises(AssertionError):
        assert events(pair, SureOfQ) == events(pair, SeparateCopies)

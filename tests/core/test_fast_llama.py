"""FastLlama computes transformers' Llama forward: same logits through feeds, crops and growth."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM

from specviz.core import fast_llama
from specviz.core.drafters import CachedModel
from tests.mutation import mutant
from tests.tiny import tiny_llama

V = 40


Pairs = list[tuple[torch.Tensor, torch.Tensor]]


def script(model: Any, runner: type = fast_llama.FastLlama) -> Pairs:
    """(transformers' logits, the runner's) after each step of a draft-like session: a prompt,
    one-token feeds, a rollback, a multi-token catch-up feed, and growth past the buffers."""
    torch.manual_seed(0)
    ids = torch.randint(3, V, (80,)).tolist()
    fast = runner(model, capacity=8)  # small: the buffers grow several times
    held: list[int] = []
    pairs = []

    def step(new: list[int], keep: int) -> None:
        held.extend(new)
        want = model(torch.tensor([held])).logits[0, -keep:]
        got = fast.feed(torch.tensor(new), keep)
        pairs.append((want, got))

    step(ids[:12], 3)  # prompt
    for i in range(12, 16):
        step([ids[i]], 1)
    del held[-3:]  # reject three: roll back
    fast.crop(len(held))
    step(ids[20:25], 5)  # a verify-like pass over five
    step(ids[25:26], 1)
    del held[-4:]
    fast.crop(len(held))
    step(ids[30:75], 2)  # past the buffers and the first rotary table
    return pairs


def assert_same(pairs: Pairs) -> None:
    for i, (want, got) in enumerate(pairs):
        assert got.shape == want.shape, (i, got.shape, want.shape)
        assert torch.allclose(got, want, atol=1e-9, rtol=1e-9), (i, float((got - want).abs().max()))


@pytest.mark.parametrize("kv_heads", [2, 4])
def test_logits_equal_transformers(kv_heads: int) -> None:
    model = tiny_llama(V, seed=3, layers=3)
    if kv_heads != model.config.num_key_value_heads:  # plain multi-head attention too
        cfg = LlamaConfig(**{**model.config.to_dict(), "num_key_value_heads": kv_heads})
        torch.manual_seed(3)
        model = LlamaForCausalLM(cfg).to(torch.float64)
    assert fast_llama.unsupported(model) is None
    with torch.no_grad():
        assert_same(script(model))


BROKEN = {
    "rotary from position 0 each feed": [
        ("cos, sin = self.cos[start:end], self.sin[start:end]",
         "cos, sin = self.cos[:t], self.sin[:t]")],
    "new tokens see each other unmasked": [
        ("tril(diagonal=start)", "tril(diagonal=end)")],
    "a rollback that forgets nothing": [
        ("self.length = min(self.length, length)", "pass")],
    "growth that drops the held keys": [
        ("new[:, :, :self.length] = old[:, :, :self.length]", "pass")],
}


@pytest.mark.parametrize("name", list(BROKEN))
def test_broken_runners_are_caught(name: str) -> None:
    model = tiny_llama(V, seed=3, layers=3)
    broken = mutant(fast_llama.FastLlama, *BROKEN[name])
    with torch.no_grad(), pytest.raises(AssertionError):
        assert_same(script(model, broken))


def test_cached_model_takes_the_runner_only_where_it_reproduces_the_model() -> None:
    llama = tiny_llama(V, seed=3)
    assert CachedModel(llama, V, fast=True).fast is not None
    assert CachedModel(llama, V).fast is None  # the target keeps transformers' forward
    torch.manual_seed(0)
    mistral = MistralForCausalLM(MistralConfig(
        vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2, sliding_window=8))
    assert CachedModel(mistral, V, fast=True).fast is None
    biased = LlamaForCausalLM(LlamaConfig(
        vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2, attention_bias=True))
    assert "biases" in str(fast_llama.unsupported(biased))
    assert "not fp32" in str(fast_llama.unsupported(llama.to(torch.bfloat16)))


def test_stock_forward_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECVIZ_STOCK_FORWARD", "1")
    assert CachedModel(tiny_llama(V, seed=3), V, fast=True).fast is None


def test_cached_model_feeds_crops_and_times_through_the_runner() -> None:
    """The draft's CachedModel on the runner gives the logits of the stock one, rollbacks and
    calibration passes included."""
    model = tiny_llama(V, seed=5)
    stock, fast = CachedModel(model, V), CachedModel(model, V, fast=True)
    with torch.no_grad():
        for lm in (stock, fast):
            lm.feed([4, 5, 6, 7], keep=1)
            assert lm.time_pass(3, 9) > 0  # left as it was
            lm.feed([8, 9], keep=2)
            lm.crop(5)
        a, b = stock.feed([10, 11], keep=2), fast.feed([10, 11], keep=2)
    assert stock.ids == fast.ids == [4, 5, 6, 7, 8, 10, 11]
    assert torch.allclose(a, b, atol=1e-9)

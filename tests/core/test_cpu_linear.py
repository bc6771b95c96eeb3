"""The fast CPU linear path: the same products as F.linear, only where it is safe, chosen once.

Each check runs on the real :func:`small_product` and on broken copies of it (a padded row
left in the output, the bias dropped, the rows read in the wrong order), which it must reject.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from specviz.core import cpu_linear
from specviz.core.cpu_linear import DecodeLinear, small_product, use_fast_linears
from specviz.core.engine import AutoregressiveDecoder, SpeculativeDecoder
from specviz.core.events import RunFinished, Settings
from specviz.core.models import ModelPair
from tests.mutation import mutant
from tests.tiny import byte_tokenizer, tiny_llama


def check_matches_linear(product: Any) -> None:
    """Every shape decoding makes (1 to MAX_ROWS rows, with and without batch and bias)."""
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(48, 24, generator=gen)
    bias = torch.randn(48, generator=gen)
    for shape in [(1, 24), (1, 1, 24), (1, 5, 24), (2, 3, 24), (cpu_linear.MAX_ROWS, 24)]:
        x = torch.randn(*shape, generator=gen)
        for b in (None, bias):
            got = product(x, weight, b)
            want = F.linear(x.double(), weight.double(), None if b is None else b.double())
            assert got.shape == want.shape, (shape, got.shape)
            torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)


BROKEN = {
    "padded row kept": ("out = torch.mm(weight, flat.t()).t()[:rows].contiguous()",
                        "out = torch.mm(weight, flat.t()).t().contiguous()"),
    "bias dropped": ("out += bias", "out = out"),
    "rows transposed": ("flat = x.reshape(rows, weight.shape[1])",
                        "flat = x.reshape(weight.shape[1], rows).t()"),
}


def test_small_product_is_f_linear() -> None:
    check_matches_linear(small_product)


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_check_rejects_broken_small_product(name: str) -> None:
    broken = mutant(small_product, BROKEN[name])
    with pytest.raises((AssertionError, RuntimeError)):
        check_matches_linear(broken)


def test_output_is_contiguous() -> None:
    # A strided output sends the attention that reads it to SDPA's slow kernel (measured:
    # the 2-token pass took 45 ms instead of 33 ms on the bundled target).
    out = small_product(torch.randn(1, 3, 16), torch.randn(32, 16), None)
    assert out.is_contiguous()


def test_decode_linear_falls_back_where_it_must() -> None:
    layer = nn.Linear(16, 8)
    layer.__class__ = DecodeLinear
    calls: list[int] = []
    real = cpu_linear.small_product

    def counting(*args: Any) -> torch.Tensor:
        calls.append(1)
        return real(*args)

    cpu_linear.small_product = counting  # type: ignore[assignment]
    try:
        x = torch.randn(1, 2, 16)
        y = layer(x)  # gradients on: F.linear, and the gradient reaches the weight
        y.sum().backward()
        assert layer.weight.grad is not None and not calls
        with torch.inference_mode():
            layer(torch.randn(1, cpu_linear.MAX_ROWS + 1, 16))  # prefill: F.linear
            layer.double()
            layer(torch.randn(1, 2, 16, dtype=torch.float64))  # not float32: F.linear
            assert not calls
            layer.float()
            layer(x)
            assert calls == [1]
    finally:
        cpu_linear.small_product = real  # type: ignore[assignment]


def test_force_switches_and_restores_only_plain_linears() -> None:
    class Custom(nn.Linear):
        pass

    model = nn.Sequential(nn.Linear(8, 8), Custom(8, 8), nn.Linear(8, 4))
    keys = list(model.state_dict())
    on = use_fast_linears(model, force=True)
    assert on.fast and on.layers == 2
    assert [type(m) for m in model] == [DecodeLinear, Custom, DecodeLinear]
    assert list(model.state_dict()) == keys
    off = use_fast_linears(model, force=False)
    assert not off.fast and [type(m) for m in model] == [nn.Linear, Custom, nn.Linear]


def test_not_float32_cpu_is_left_alone() -> None:
    model = nn.Sequential(nn.Linear(8, 8)).double()
    choice = use_fast_linears(model)
    assert not choice.fast and type(model[0]) is nn.Linear


def test_decision_is_timed_once_then_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    memo = tmp_path / "cpu_linear.json"
    model = nn.Sequential(nn.Linear(64, 256), nn.Linear(256, 64))
    first = use_fast_linears(model, memo=memo)
    assert "timed before" not in first.why and first.stock_ms > 0 and first.fast_ms > 0
    data = json.loads(memo.read_text())
    (key,) = data
    data[key]["fast"] = not first.fast  # what the file says is what the second load does
    memo.write_text(json.dumps(data))
    second = use_fast_linears(model, memo=memo)
    assert "timed before" in second.why and second.fast is (not first.fast)
    monkeypatch.setenv("SPECVIZ_STOCK_LINEAR", "1")
    assert not use_fast_linears(model, memo=memo).fast
    assert type(model[0]) is nn.Linear


def test_a_corrupt_memo_is_timed_again(tmp_path: Path) -> None:
    memo = tmp_path / "cpu_linear.json"
    memo.write_text("{not json")
    choice = use_fast_linears(nn.Sequential(nn.Linear(8, 8)), memo=memo)
    assert "timed before" not in choice.why
    assert json.loads(memo.read_text())  # rewritten


def _greedy(pair: ModelPair, prompt: str, speculative: bool) -> list[int]:
    settings = Settings(k=3, temperature=0.0, max_new_tokens=24, seed=0)
    decoder = (SpeculativeDecoder(pair, settings) if speculative
               else AutoregressiveDecoder(pair, settings))
    finished = [e for e in decoder.run(prompt) if isinstance(e, RunFinished)]
    return list(finished[0].generated_ids)


def test_float32_pair_on_the_fast_path_keeps_greedy_identity() -> None:
    tok = byte_tokenizer()
    vocab = len(tok)
    target = tiny_llama(vocab, seed=1, sharpness=4.0, dtype=torch.float32)
    draft = tiny_llama(vocab, seed=2, sharpness=4.0, dtype=torch.float32)
    ids = torch.tensor([[5, 9, 17, 3, 40, 2]])
    with torch.inference_mode():
        stock, stock_one = target(ids).logits, target(ids[:, :1]).logits
        for model in (target, draft):
            assert use_fast_linears(model, force=True).fast
        assert type(target.lm_head) is DecodeLinear
        torch.testing.assert_close(target(ids).logits, stock, rtol=1e-5, atol=1e-5)
        # one row: the padded product
        torch.testing.assert_close(target(ids[:, :1]).logits, stock_one, rtol=1e-5, atol=1e-5)
    pair = ModelPair(target=target, tokenizer=tok, draft=draft)
    prompt = "speculative decoding"
    assert _greedy(pair, prompt, True) == _greedy(pair, prompt, False)

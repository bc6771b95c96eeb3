"""The fast CPU linear forms: the same products as F.linear, only where safe, chosen per width.

Each check runs on the real forms and on broken copies of them (a padded row left in the
output, the bias dropped, the rows read in the wrong order; oneDNN without the bias), which it
must reject; the plan rule and the routing by width are checked against broken copies too.
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
from specviz.core.cpu_linear import (
    WIDTHS,
    DecodeLinear,
    choose_plan,
    describe,
    onednn_product,
    small_product,
    use_fast_linears,
)
from specviz.core.engine import AutoregressiveDecoder, SpeculativeDecoder
from specviz.core.events import RunFinished
from specviz.core.models import ModelPair
from tests.mutation import mutant
from tests.plain import plain
from tests.tiny import byte_tokenizer, tiny_llama

needs_onednn = pytest.mark.skipif(not torch.backends.mkldnn.is_available(),
                                  reason="torch built without oneDNN")


def check_matches_linear(product: Any) -> None:
    """Every shape decoding makes (1 to 40 rows, with and without batch and bias)."""
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(48, 24, generator=gen)
    bias = torch.randn(48, generator=gen)
    for shape in [(1, 24), (1, 1, 24), (1, 5, 24), (2, 3, 24), (11, 24), (1, 40, 24)]:
        x = torch.randn(*shape, generator=gen)
        for b in (None, bias):
            got = product(x, weight, b)
            want = F.linear(x.double(), weight.double(), None if b is None else b.double())
            assert got.shape == want.shape, (shape, got.shape)
            torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)


BROKEN = {
    "padded row kept": (small_product, (
        "out = torch.mm(weight, flat.t()).t()[:rows].contiguous()",
        "out = torch.mm(weight, flat.t()).t().contiguous()")),
    "bias dropped": (small_product, ("out += bias", "out = out")),
    "rows transposed": (small_product, ("flat = x.reshape(rows, weight.shape[1])",
                                        "flat = x.reshape(weight.shape[1], rows).t()")),
    "oneDNN without bias": (onednn_product, ("(flat, weight, bias,", "(flat, weight, None,")),
}


def test_small_product_is_f_linear() -> None:
    check_matches_linear(small_product)


@needs_onednn
def test_onednn_product_is_f_linear() -> None:
    check_matches_linear(onednn_product)


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_check_rejects_broken_products(name: str) -> None:
    if name.startswith("oneDNN") and not torch.backends.mkldnn.is_available():
        pytest.skip("torch built without oneDNN")
    real, edit = BROKEN[name]
    broken = mutant(real, edit)  # outside pytest.raises: a vanished site must fail, not pass
    with pytest.raises((AssertionError, RuntimeError)):
        check_matches_linear(broken)


def test_output_is_contiguous() -> None:
    # A strided output sends the attention that reads it to SDPA's slow kernel (measured:
    # the 2-token pass took 45 ms instead of 33 ms on the bundled target).
    out = small_product(torch.randn(1, 3, 16), torch.randn(32, 16), None)
    assert out.is_contiguous()


def check_plan_rule(rule: Any) -> None:
    # F.linear unless another form is more than 10% faster; then the fastest of the others.
    ms = {"linear": [100.0, 100.0, 100.0], "wxt": [95.0, 50.0, 60.0], "onednn": [99.0, 70.0, 40.0]}
    assert rule(ms) == ("linear", "wxt", "onednn")
    assert rule({"linear": [1.0, 1.0, 1.0]}) == ("linear",) * 3  # nothing else ran


def test_plan_rule() -> None:
    check_plan_rule(choose_plan)


@pytest.mark.parametrize("edit", [
    ("others[name] < 0.9 * stock", "others[name] < stock"),  # no margin: flaps on noise
    ("min(others, key=lambda n: others[n])", "max(others, key=lambda n: others[n])"),
])
def test_plan_rule_check_rejects_broken_rules(edit: tuple[str, str]) -> None:
    broken = mutant(choose_plan, edit)  # outside pytest.raises, as above
    with pytest.raises(AssertionError):
        check_plan_rule(broken)


def _routed(layer: DecodeLinear, rows: int, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The forms a product of ``rows`` rows went through."""
    calls: list[str] = []
    originals = dict(cpu_linear.FORMS)
    for name, product in originals.items():
        def counting(*args: Any, _name: str = name, _product: Any = product) -> torch.Tensor:
            calls.append(_name)
            return _product(*args)  # type: ignore[no-any-return]
        monkeypatch.setitem(cpu_linear.FORMS, name, counting)
    with torch.inference_mode():
        layer(torch.randn(1, rows, layer.in_features))
    for name, product in originals.items():
        monkeypatch.setitem(cpu_linear.FORMS, name, product)
    return calls


def test_each_width_takes_its_planned_form(monkeypatch: pytest.MonkeyPatch) -> None:
    assert WIDTHS == (1, 3, 5, 8, 11, 32)  # the expectations below are written for these
    layer = nn.Linear(16, 8)
    layer.__class__ = DecodeLinear
    layer.plan = ("wxt", "linear", "onednn", "linear", "wxt", "onednn")  # type: ignore
    expected = {1: "wxt", 2: "linear", 3: "linear", 4: "onednn", 5: "onednn", 8: "linear",
                9: "wxt", 11: "wxt", 12: "onednn", 200: "onednn"}
    for rows, form in expected.items():
        if form == "onednn" and not torch.backends.mkldnn.is_available():
            continue
        assert _routed(layer, rows, monkeypatch) == [form], rows


def test_decode_linear_falls_back_where_it_must(monkeypatch: pytest.MonkeyPatch) -> None:
    layer = nn.Linear(16, 8)
    layer.__class__ = DecodeLinear
    layer.plan = ("wxt",) * len(WIDTHS)  # type: ignore
    calls: list[int] = []
    real = cpu_linear.FORMS["wxt"]

    def counting(*args: Any) -> torch.Tensor:
        calls.append(1)
        return real(*args)

    monkeypatch.setitem(cpu_linear.FORMS, "wxt", counting)
    x = torch.randn(1, 2, 16)
    y = layer(x)  # gradients on: F.linear, and the gradient reaches the weight
    y.sum().backward()
    assert layer.weight.grad is not None and not calls
    with torch.inference_mode():
        layer.double()
        layer(torch.randn(1, 2, 16, dtype=torch.float64))  # not float32: F.linear
        assert not calls
        layer.float()
        layer(x)
        assert calls == [1]


def test_describe_reads_the_plan() -> None:
    assert describe(("wxt", "wxt", "wxt", "onednn", "onednn", "onednn")) == \
        "1–5 rows W·xᵀ, 6–11 rows oneDNN, 12+ rows oneDNN"
    assert describe(("wxt", "linear", "linear", "linear", "linear", "linear")) == \
        "1 row W·xᵀ, 2–11 rows F.linear, 12+ rows F.linear"


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


def test_plan_is_timed_once_then_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    memo = tmp_path / "cpu_linear.json"
    model = nn.Sequential(nn.Linear(64, 256), nn.Linear(256, 64))
    said: list[str] = []
    first = use_fast_linears(model, memo=memo, announce=said.append)
    assert "timed over 2 layers" in first.why and len(said) == 1  # the pause is explained
    assert set(first.ms) >= {"linear", "wxt"} and all(len(t) == len(WIDTHS)
                                                      for t in first.ms.values())
    data = json.loads(memo.read_text())
    (key,) = data
    wanted = ["onednn" if torch.backends.mkldnn.is_available() else "wxt"] * len(WIDTHS)
    data[key]["plan"] = wanted  # what the file says is what the second load does
    memo.write_text(json.dumps(data))
    second = use_fast_linears(model, memo=memo, announce=said.append)
    assert "timed before" in second.why and list(second.plan) == wanted and len(said) == 1
    assert type(model[0]) is DecodeLinear and list(model[0].plan) == wanted
    monkeypatch.setenv("SPECVIZ_STOCK_LINEAR", "1")
    assert not use_fast_linears(model, memo=memo).fast
    assert type(model[0]) is nn.Linear


@pytest.mark.parametrize("text", ["{not json", '{"k": 1}', "[]"])
def test_a_corrupt_memo_is_timed_again(tmp_path: Path, text: str) -> None:
    memo = tmp_path / "cpu_linear.json"
    memo.write_text(text)
    model = nn.Sequential(nn.Linear(8, 8))
    key = cpu_linear._machine_key(cpu_linear._linears(model))
    if text.startswith('{"k"'):
        memo.write_text(json.dumps({key: {"plan": ["bogus"] * len(WIDTHS)}}))
    choice = use_fast_linears(model, memo=memo)
    assert "timed over" in choice.why
    assert json.loads(memo.read_text())[key]["plan"] == list(choice.plan)  # rewritten


def _greedy(pair: ModelPair, prompt: str, speculative: bool) -> list[int]:
    settings = plain(k=3, temperature=0.0, max_new_tokens=24, seed=0)
    decoder = (SpeculativeDecoder(pair, settings) if speculative
               else AutoregressiveDecoder(pair, settings))
    finished = [e for e in decoder.run(prompt) if isinstance(e, RunFinished)]
    return list(finished[0].generated_ids)


def test_float32_pair_on_the_fast_forms_keeps_greedy_identity() -> None:
    tok = byte_tokenizer()
    vocab = len(tok)
    target = tiny_llama(vocab, seed=1, sharpness=4.0, dtype=torch.float32)
    draft = tiny_llama(vocab, seed=2, sharpness=4.0, dtype=torch.float32)
    ids = torch.randint(3, vocab, (1, 40), generator=torch.Generator().manual_seed(3))
    lengths = (1, 2, 4, 7, 10, 40)  # a step, verify passes of every band, a prefill
    other = "onednn" if torch.backends.mkldnn.is_available() else "wxt"
    mixed = ("wxt", other, "linear", other, "wxt", other)  # every form somewhere
    with torch.inference_mode():
        stock = {n: target(ids[:, :n]).logits for n in lengths}
        for model in (target, draft):
            assert use_fast_linears(model, force=True).fast
            for layer in model.modules():
                if isinstance(layer, DecodeLinear):
                    layer.plan = mixed  # type: ignore[attr-defined]
        assert type(target.lm_head) is DecodeLinear
        for n in lengths:
            torch.testing.assert_close(target(ids[:, :n]).logits, stock[n], rtol=1e-5, atol=1e-5)
    pair = ModelPair(target=target, tokenizer=tok, draft=draft)
    prompt = "speculative decoding"
    assert _greedy(pair, prompt, True) == _greedy(pair, prompt, False)

"""The fast CPU linear forms: the same products as F.linear, only where safe, chosen per width.

Each check runs on the real forms and on broken copies of them (a padded row left in the
output, the bias dropped, the rows read in the wrong order; oneDNN without the bias), which it
must reject; the plan rule and the routing by width are checked against broken copies too.
Every form is checked on row-major weights, column-major ones and a column-major stack's
slice; the layout rule (column-major only when clearly faster) against broken rules, and
the layout's conversion (a tied embedding follows, the values stay) against a broken one.
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
    choose_layout,
    choose_plan,
    describe,
    layout_of,
    onednn_product,
    set_layout,
    set_linears,
    small_product,
    use_fast_linears,
)
from specviz.core.engine import AutoregressiveDecoder, SpeculativeDecoder
from specviz.core.events import RunFinished
from specviz.core.models import ModelPair
from tests.mutation import mutant, with_globals
from tests.plain import plain
from tests.tiny import byte_tokenizer, tiny_llama

needs_onednn = pytest.mark.skipif(not torch.backends.mkldnn.is_available(),
                                  reason="torch built without oneDNN")


LAYOUTS = ("row", "col", "col slice")


def _laid_out(weight: torch.Tensor, layout: str) -> torch.Tensor:
    """``weight`` row-major, column-major, or as rows 8... of a column-major stack (strides
    (1, rows of the stack): what a linear of FastLlama's q/k/v stack multiplies by)."""
    if layout == "row":
        return weight
    if layout == "col":
        return weight.t().contiguous().t()
    above = torch.randn(8, weight.shape[1])
    stack = torch.cat((above, weight)).t().contiguous().t()
    return stack[8:]


def check_matches_linear(product: Any, layout: str = "row") -> None:
    """Every shape decoding makes (1 to 40 rows, with and without batch and bias)."""
    gen = torch.Generator().manual_seed(0)
    weight = _laid_out(torch.randn(48, 24, generator=gen), layout)
    assert layout_of(weight) == layout.split()[0]
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


@pytest.mark.parametrize("layout", LAYOUTS)
def test_small_product_is_f_linear(layout: str) -> None:
    check_matches_linear(small_product, layout)


@needs_onednn
@pytest.mark.parametrize("layout", LAYOUTS)
def test_onednn_product_is_f_linear(layout: str) -> None:
    check_matches_linear(onednn_product, layout)


@pytest.mark.parametrize("layout", LAYOUTS[1:])
def test_f_linear_on_column_major_weights(layout: str) -> None:
    check_matches_linear(cpu_linear.FORMS["linear"], layout)


@pytest.mark.parametrize("layout", ["row", "col"])
@pytest.mark.parametrize("name", sorted(BROKEN))
def test_check_rejects_broken_products(name: str, layout: str) -> None:
    if name.startswith("oneDNN") and not torch.backends.mkldnn.is_available():
        pytest.skip("torch built without oneDNN")
    real, edit = BROKEN[name]
    broken = mutant(real, edit)  # outside pytest.raises: a vanished site must fail, not pass
    with pytest.raises((AssertionError, RuntimeError)):
        check_matches_linear(broken, layout)


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
        "row-major weights; 1–5 rows W·xᵀ, 6–11 rows oneDNN, 12+ rows oneDNN"
    assert describe(("wxt", "linear", "linear", "linear", "linear", "linear"), "col") == \
        "column-major weights; 1 row W·xᵀ, 2–11 rows F.linear, 12+ rows F.linear"


def _ms(row: list[float], col: list[float]) -> dict[str, dict[str, list[float]]]:
    """Timings where F.linear is each layout's plan at every width (others 2x slower)."""
    return {"row": {"linear": row, "wxt": [2 * t for t in row]},
            "col": {"linear": col, "onednn": [2 * t for t in col]}}


def check_layout_rule(rule: Any) -> None:
    # Column-major when its sweeps sum to < 95% of row-major's and width 1 is not slower
    # beyond 3%; each layout judged by its own plan's forms.
    row = [50.0, 60.0, 70.0, 80.0, 90.0, 100.0]
    assert rule(_ms(row, [50.0, 50.0, 55.0, 60.0, 70.0, 90.0])) == "col"  # 16% less
    assert rule(_ms(row, [51.0, 45.0, 60.0, 70.0, 80.0, 100.0])) == "col"  # width 1: +2%
    assert rule(_ms(row, [49.0, 58.0, 68.0, 77.0, 86.0, 97.0])) == "row"  # only 4% less
    assert rule(_ms(row, [60.0, 40.0, 50.0, 60.0, 70.0, 80.0])) == "row"  # width 1: +20%
    assert rule(_ms(row, [60.0, 70.0, 80.0, 90.0, 100.0, 110.0])) == "row"  # slower
    assert rule(_ms([60.0, 70.0, 80.0, 90.0, 100.0, 110.0], row)) == "col"
    # A form col's plan does not take (within 10% of F.linear) does not count for it: what
    # runs is compared (col's best sums to 7% less than row's, its plan's to 2% more).
    near = _ms(row, [50.0, 62.0, 72.0, 82.0, 92.0, 102.0])
    near["col"]["onednn"] = [49.0, 56.0, 65.0, 74.0, 83.0, 92.0]
    assert rule(near) == "row"
    assert rule({"row": {"linear": row}}) == "row"  # column-major not timed
    assert rule({"row": {"linear": row}, "col": {}}) == "row"  # nothing ran in it


def test_layout_rule() -> None:
    check_layout_rule(choose_layout)


@pytest.mark.parametrize("edit", [
    ("sum(col) < LAYOUT_MARGIN * sum(row)", "sum(col) < sum(row)"),  # no margin
    ("col[0] <= NOISE_1 * row[0]", "col[0] <= 2 * row[0]"),  # a slower single row let in
    ("sum(col) < LAYOUT_MARGIN * sum(row)", "sum(col) > LAYOUT_MARGIN * sum(row)"),  # slower
    ("row, col = planned_ms(ms[\"row\"]), planned_ms(ms[\"col\"])",
     "row, col = ([min(t) for t in zip(*m.values())] for m in (ms[\"row\"], ms[\"col\"]))"),
])
def test_layout_rule_check_rejects_broken_rules(edit: tuple[str, str]) -> None:
    broken = mutant(choose_layout, edit)  # outside pytest.raises, as above
    with pytest.raises(AssertionError):
        check_layout_rule(broken)


def tied_llama() -> Any:
    """A tiny fp32 Llama whose head is its embedding (one Parameter), as SmolLM2's."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(7)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True))
    return model.eval()


def check_layout_conversion(convert: Any) -> None:
    """Column-major and back: every linear's weight (the tied head and embedding one
    Parameter still), embedding lookups and logits as before; back to row-major: exactly."""
    model = tied_llama()
    head = model.lm_head.weight
    assert head is model.model.embed_tokens.weight
    ids = torch.tensor([[3, 9, 4, 17, 4]])
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        before = model(ids).logits
        layers = cpu_linear._linears(model)
        convert(layers, "col")
        assert model.lm_head.weight is head is model.model.embed_tokens.weight
        for lin in layers:
            assert lin.weight.stride() == (1, lin.weight.shape[0]), lin
        assert torch.equal(model.model.embed_tokens(ids), saved["model.embed_tokens.weight"][ids])
        for k, v in model.state_dict().items():
            assert torch.equal(v, saved[k]), k
        torch.testing.assert_close(model(ids).logits, before, rtol=1e-5, atol=1e-5)
        convert(layers, "row")
        assert all(lin.weight.is_contiguous() for lin in layers)
        assert model.lm_head.weight is model.model.embed_tokens.weight
        assert torch.equal(model(ids).logits, before)


def test_layout_conversion_keeps_values_and_ties() -> None:
    check_layout_conversion(set_layout)


def test_layout_conversion_check_rejects_a_new_parameter() -> None:
    # A conversion that gives each linear a new Parameter cuts the head from the embedding.
    broken = mutant(set_layout, ("lin.weight.data = new", "lin.weight = nn.Parameter(new)"))
    with pytest.raises(AssertionError):
        check_layout_conversion(broken)


def test_layout_conversion_check_rejects_a_column_major_that_is_not() -> None:
    arranged = mutant(cpu_linear._arranged, ("t.t().contiguous().t() if", "t.contiguous() if"))
    with pytest.raises(AssertionError):
        check_layout_conversion(with_globals(set_layout, _arranged=arranged))


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
    first = use_fast_linears(model, memo=memo, announce=said.append, layouts=("row", "col"))
    assert "timed over 2 layers" in first.why and len(said) == 1  # the pause is explained
    assert set(first.ms) == {"row", "col"}  # both layouts timed, each with every form
    assert all(set(forms) >= {"linear", "wxt"} and all(len(t) == len(WIDTHS)
                                                       for t in forms.values())
               for forms in first.ms.values())
    assert first.layout == choose_layout(first.ms) == layout_of(model[0].weight)
    assert "sweeps" in first.why and describe(first.plan, first.layout) in first.why
    data = json.loads(memo.read_text())
    (key,) = data
    assert data[key]["layout"] == first.layout
    wanted = ["onednn" if torch.backends.mkldnn.is_available() else "wxt"] * len(WIDTHS)
    for layout in ("col", "row"):  # what the file says is what the next load does
        data[key].update(plan=wanted, layout=layout)
        memo.write_text(json.dumps(data))
        again = use_fast_linears(model, memo=memo, announce=said.append, layouts=("row", "col"))
        assert "timed before" in again.why and list(again.plan) == wanted and len(said) == 1
        assert again.layout == layout and again.fast
        assert f"{cpu_linear.LAYOUT_LABELS[layout]} weights" in again.why
        assert type(model[0]) is DecodeLinear and list(model[0].plan) == wanted
        assert all(layout_of(m.weight) == layout for m in model)
    data[key].update(plan=["linear"] * len(WIDTHS), layout="col")
    memo.write_text(json.dumps(data))
    col = use_fast_linears(model, memo=memo, layouts=("row", "col"))
    assert col.fast and type(model[0]) is nn.Linear and layout_of(model[0].weight) == "col"
    monkeypatch.setenv("SPECVIZ_STOCK_LINEAR", "1")  # row-major and F.linear
    stock = use_fast_linears(model, memo=memo, layouts=("row", "col"))
    assert not stock.fast and stock.layout == "row"
    assert type(model[0]) is nn.Linear and all(m.weight.is_contiguous() for m in model)


def test_a_memo_entry_from_before_layouts_is_timed_again_once(tmp_path: Path) -> None:
    memo = tmp_path / "cpu_linear.json"
    model = nn.Sequential(nn.Linear(16, 32))
    both = ("row", "col")
    key = cpu_linear._machine_key(cpu_linear._linears(model), both)
    old = {"plan": ["wxt"] * len(WIDTHS), "ms": {"linear": [1.0] * len(WIDTHS)}}
    memo.write_text(json.dumps({key: old}))
    said: list[str] = []
    assert "timed over" in use_fast_linears(model, memo=memo, announce=said.append,
                                            layouts=both).why
    entry = json.loads(memo.read_text())[key]
    assert entry["layout"] in ("row", "col") and set(entry["ms"]) == {"row", "col"}
    assert "timed before" in use_fast_linears(model, memo=memo, announce=said.append,
                                              layouts=both).why
    assert len(said) == 1


def test_by_default_only_row_major_is_timed_and_taken(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Column-major is asked for, never taken unasked: whole runs of the default were 12%
    slower in it on hand-written prompts (cpu_linear.timed_layouts). A memo entry timed with
    both layouts is not read for the default, nor one of the default for both."""
    memo = tmp_path / "cpu_linear.json"
    model = nn.Sequential(nn.Linear(64, 256), nn.Linear(256, 64))
    monkeypatch.delenv("SPECVIZ_LINEAR_LAYOUTS", raising=False)
    assert cpu_linear.timed_layouts() == ("row",)
    data = {cpu_linear._machine_key(cpu_linear._linears(model), ("row", "col")):
            {"layout": "col", "plan": ["linear"] * len(WIDTHS), "ms": {}}}
    memo.write_text(json.dumps(data))
    plain_choice = use_fast_linears(model, memo=memo)
    assert "timed over" in plain_choice.why and set(plain_choice.ms) == {"row"}
    assert plain_choice.layout == "row" and all(m.weight.is_contiguous() for m in model)
    monkeypatch.setenv("SPECVIZ_LINEAR_LAYOUTS", "row,col")
    assert cpu_linear.timed_layouts() == ("row", "col")
    asked = use_fast_linears(model, memo=memo)
    assert "timed before" in asked.why and asked.layout == "col"  # the entry made for both
    assert all(layout_of(m.weight) == "col" for m in model)
    monkeypatch.setenv("SPECVIZ_LINEAR_LAYOUTS", "diagonal")
    assert cpu_linear.timed_layouts() == ("row",)


@pytest.mark.parametrize("text", ["{not json", '{"k": 1}', "[]", "diagonal"])
def test_a_corrupt_memo_is_timed_again(tmp_path: Path, text: str) -> None:
    memo = tmp_path / "cpu_linear.json"
    memo.write_text(text)
    model = nn.Sequential(nn.Linear(8, 8))
    key = cpu_linear._machine_key(cpu_linear._linears(model))
    if text.startswith('{"k"'):
        memo.write_text(json.dumps({key: {"plan": ["bogus"] * len(WIDTHS), "layout": "row"}}))
    if text == "diagonal":  # a layout this version does not know
        memo.write_text(json.dumps({key: {"plan": ["linear"] * len(WIDTHS), "layout": text}}))
    choice = use_fast_linears(model, memo=memo)
    assert "timed over" in choice.why
    entry = json.loads(memo.read_text())[key]
    assert entry["plan"] == list(choice.plan) and entry["layout"] == choice.layout  # rewritten


def _greedy(pair: ModelPair, prompt: str, speculative: bool) -> list[int]:
    settings = plain(k=3, temperature=0.0, max_new_tokens=24, seed=0)
    decoder = (SpeculativeDecoder(pair, settings) if speculative
               else AutoregressiveDecoder(pair, settings))
    finished = [e for e in decoder.run(prompt) if isinstance(e, RunFinished)]
    return list(finished[0].generated_ids)


@pytest.mark.parametrize("layout", ["row", "col"])
def test_float32_pair_on_the_fast_forms_keeps_greedy_identity(layout: str) -> None:
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
            set_linears(model, mixed, layout)
        assert type(target.lm_head) is DecodeLinear and target.lm_head.plan == mixed
        assert layout_of(target.lm_head.weight) == layout
        for n in lengths:
            torch.testing.assert_close(target(ids[:, :n]).logits, stock[n], rtol=1e-5, atol=1e-5)
    pair = ModelPair(target=target, tokenizer=tok, draft=draft)
    prompt = "speculative decoding"
    assert _greedy(pair, prompt, True) == _greedy(pair, prompt, False)

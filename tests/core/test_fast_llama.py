"""FastLlama computes transformers' Llama forward: same logits through feeds, crops and growth,
on row-major and column-major weights (``cpu_linear``'s layouts); its stacked weights keep the
layout and stay the model's own (views), also when the layout changes after they were made."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM

from specviz.core import cpu_linear, fast_llama
from specviz.core.cpu_linear import layout_of, set_layout, set_linears, stack_weights
from specviz.core.drafters import CachedModel
from tests.mutation import mutant, with_globals
from tests.tiny import tiny_llama

V = 40


Pairs = list[tuple[torch.Tensor, torch.Tensor]]


def script(model: Any, runner: type = fast_llama.FastLlama, fixed: bool = False,
           graphs: bool = False) -> Pairs:
    """(transformers' logits, the runner's) after each step of a draft-like session: a prompt,
    one-token feeds, a rollback, a multi-token catch-up feed, and growth past the buffers.
    ``fixed``: the fixed-shape path (CUDA's) for every feed up to FIXED_WIDTHS; ``graphs``: its
    steps captured as CUDA graphs (on CUDA)."""
    torch.manual_seed(0)
    ids = torch.randint(3, V, (80,)).tolist()
    dev = next(model.parameters()).device
    fast = runner(model, capacity=8, fixed=fixed, graphs=graphs)  # small: the buffers grow
    held: list[int] = []
    pairs = []

    def step(new: list[int], keep: int) -> None:
        held.extend(new)
        want = model(torch.tensor([held], device=dev)).logits[0, -keep:]
        got = fast.feed(torch.tensor(new, device=dev), keep)
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
    step(ids[30:75], 2)  # past the buffers and the first rotary table (sliced: 45 > 17)
    for i in range(75, 80):  # one-token steps after a long feed; then a rollback into it
        step([ids[i]], 1)
    del held[-6:]
    fast.crop(len(held))
    step(ids[40:43], 3)
    return pairs


def assert_same(pairs: Pairs) -> None:
    for i, (want, got) in enumerate(pairs):
        assert got.shape == want.shape, (i, got.shape, want.shape)
        assert torch.allclose(got, want, atol=1e-9, rtol=1e-9), (i, float((got - want).abs().max()))


@pytest.mark.parametrize("fixed", [False, True], ids=["sliced", "fixed"])
@pytest.mark.parametrize("kv_heads", [2, 4])
def test_logits_equal_transformers(kv_heads: int, fixed: bool) -> None:
    model = tiny_llama(V, seed=3, layers=3)
    if kv_heads != model.config.num_key_value_heads:  # plain multi-head attention too
        cfg = LlamaConfig(**{**model.config.to_dict(), "num_key_value_heads": kv_heads})
        torch.manual_seed(3)
        model = LlamaForCausalLM(cfg).to(torch.float64)
    assert fast_llama.unsupported(model) is None
    with torch.no_grad():
        assert_same(script(model, fixed=fixed))


def test_fp32_logits_equal_transformers_to_1e_5() -> None:
    """The bundled models' dtype: both paths within 1e-5 of transformers' fp32 forward."""
    model = tiny_llama(V, seed=4, layers=3, dtype=torch.float32)
    with torch.no_grad():
        for fixed in (False, True):
            for i, (want, got) in enumerate(script(model, fixed=fixed)):
                assert float((got - want).abs().max()) < 1e-5, (fixed, i)


def tied_llama(seed: int) -> Any:
    """A tiny fp32 Llama whose head is its embedding (one Parameter), as SmolLM2's."""
    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(
        vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)).eval()


@pytest.mark.parametrize("tied", [False, True], ids=["own head", "tied head"])
def test_column_major_fp32_logits_equal_transformers(tied: bool) -> None:
    """Column-major weights with every product form: FastLlama (sliced and fixed) within 1e-5
    of transformers' forward, which itself stays within 1e-5 of the row-major model's."""
    model = tied_llama(4) if tied else tiny_llama(V, seed=4, layers=3, dtype=torch.float32)
    ids = torch.randint(3, V, (1, 30), generator=torch.Generator().manual_seed(1))
    other = "onednn" if torch.backends.mkldnn.is_available() else "wxt"
    with torch.no_grad():
        row = model(ids).logits
        set_linears(model, ("linear", "wxt", other, "linear", other, "wxt"), "col")
        assert all(layout_of(m.weight) == "col" for m in cpu_linear._linears(model))
        torch.testing.assert_close(model(ids).logits, row, rtol=1e-5, atol=1e-5)
        for fixed in (False, True):
            for i, (want, got) in enumerate(script(model, fixed=fixed)):
                assert float((got - want).abs().max()) < 1e-5, (fixed, i)
    w = fast_llama._FUSED[model]
    assert layout_of(w.layers[0][2]) == layout_of(w.head) == "col"
    assert (w.embed is w.head) == tied


def check_stack(stack: Any) -> None:
    """In each layout: the stacked q/k/v hold the weights' values, laid out whole in the
    linears' layout, and each linear's weight is a view of its rows (no second copy)."""
    for layout in ("row", "col"):
        model = tiny_llama(V, seed=6, dtype=torch.float32)
        set_layout(cpu_linear._linears(model), layout)
        attn = model.model.layers[0].self_attn
        linears = (attn.q_proj, attn.k_proj, attn.v_proj)
        values = torch.cat([lin.weight.detach().clone() for lin in linears])
        stacked = stack(*linears)
        rows, cols = stacked.shape
        assert torch.equal(stacked, values)
        assert stacked.stride() == ((1, rows) if layout == "col" else (cols, 1)), layout
        at = 0
        for lin in linears:
            w = lin.weight
            assert w.untyped_storage().data_ptr() == stacked.untyped_storage().data_ptr()
            assert w.data_ptr() == stacked[at].data_ptr() and layout_of(w) == layout
            at += w.shape[0]


def test_stack_keeps_the_layout_and_shares_the_storage() -> None:
    check_stack(fast_llama._stack)


@pytest.mark.parametrize("edit", [
    ('if layout == "col":', "if False:"),  # silently row-major again
    ("lin.weight.data = stacked[at:at + rows]",  # a second copy
     "lin.weight.data = stacked[at:at + rows].clone()"),
])
def test_stack_check_rejects_broken_stacks(edit: tuple[str, str]) -> None:
    broken = with_globals(fast_llama._stack, stack_weights=mutant(stack_weights, edit))
    with pytest.raises(AssertionError):
        check_stack(broken)


def check_layout_change_follows(relayout: Any) -> None:
    """A runner made on row-major weights, then the layout changed (``use_fast_linears`` may
    run again, the benchmark switches): the runner's stacks move with the model, still its own
    weights, and its logits stay transformers'."""
    model = tiny_llama(V, seed=7, layers=2, dtype=torch.float32)
    fast_llama.FastLlama(model)
    w = fast_llama._FUSED[model]
    qkv, gu = w.layers[0][2], w.layers[0][6]
    for layout in ("col", "row", "col"):
        relayout(cpu_linear._linears(model), layout)
        assert w.layers[0][2] is qkv and layout_of(qkv) == layout_of(gu) == layout
        attn, mlp = model.model.layers[0].self_attn, model.model.layers[0].mlp
        for lin, stacked in ((attn.v_proj, qkv), (mlp.up_proj, gu)):
            assert lin.weight.untyped_storage().data_ptr() == stacked.untyped_storage().data_ptr()
            assert layout_of(lin.weight) == layout
        with torch.no_grad():
            for i, (want, got) in enumerate(script(model)):
                assert float((got - want).abs().max()) < 1e-5, (layout, i)


def test_a_layout_change_moves_the_runners_stacks() -> None:
    check_layout_change_follows(set_layout)


def test_layout_change_check_rejects_stacks_left_behind() -> None:
    # Stacked weights converted one by one: each linear gets a copy, the runner keeps the old.
    broken = mutant(set_layout, ("held = _stack_of(lin)", "held = None"))
    with pytest.raises(AssertionError):
        check_layout_change_follows(broken)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_follows_transformers(dtype: torch.dtype) -> None:
    """fp16/bf16 (a GPU's usual dtypes) on the CPU: within a few rounding steps of
    transformers' forward in the same dtype, and far closer than a wrong model."""
    model = tiny_llama(V, seed=4, layers=2, dtype=torch.float32).to(dtype)
    assert fast_llama.unsupported(model) is None
    with torch.no_grad():
        for fixed in (False, True):
            for i, (want, got) in enumerate(script(model, fixed=fixed)):
                scale = float(want.float().abs().max())
                assert float((got.float() - want.float()).abs().max()) < 0.05 * scale, (fixed, i)


SLICED = {
    "rotary from position 0 each feed": [
        ("cos, sin = s.cos[start:end], s.sin[start:end]",
         "cos, sin = s.cos[:t], s.sin[:t]")],
    "new tokens see each other unmasked": [
        ("tril(diagonal=start)", "tril(diagonal=end)")],
    "a rollback that forgets nothing": [
        ("self.length = min(self.length, length)", "pass")],
    "growth that drops the held keys": [
        ("new[:, :, :self.length] = old[:, :, :self.length]", "pass")],
}
# The fixed path's plumbing, as CUDA graphs replay it (run eagerly here; on CUDA below).
FIXED = {
    "a stale start after a rollback (the device's length not refreshed)": [
        ("self.s.start.fill_(self.length)  # a rollback", "pass  #")],
    "a step replayed at another width": [
        ("step = self.s.steps.get(t)", "step = next(iter(self.s.steps.values()), None)")],
    "the new tokens see each other unmasked": [
        ("mask = cols[None] <= pos[:, None]", "mask = cols[None] < s.start + t")],
    "keys written at the prefix's start": [
        ("s.keys[li].index_copy_(1, pos, qk[nq:])",
         "s.keys[li].index_copy_(1, pos - s.start, qk[nq:])")],
}
BROKEN = {**{("sliced", k): v for k, v in SLICED.items()},
          **{("fixed", k): v for k, v in FIXED.items()}}


@pytest.mark.parametrize("name", list(BROKEN), ids=[f"{p}: {k}" for p, k in BROKEN])
def test_broken_runners_are_caught(name: tuple[str, str]) -> None:
    model = tiny_llama(V, seed=3, layers=3)
    broken = mutant(fast_llama.FastLlama, *BROKEN[name])
    # A step at the wrong width may also fail loudly (ids of another shape): rejected too.
    with torch.no_grad(), pytest.raises((AssertionError, RuntimeError, IndexError)):
        assert_same(script(model, broken, fixed=name[0] == "fixed"))


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
    assert fast_llama.unsupported(tiny_llama(V, seed=3).to(torch.bfloat16)) is None
    spread = tiny_llama(V, seed=3)
    spread.hf_device_map = {"model.layers.0": 0, "model.layers.1": "cpu"}
    assert "device_map" in str(fast_llama.unsupported(spread))


def test_the_target_takes_the_runner_where_it_is_measured_faster(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """CPU and CUDA: the target (alone and verifying) on the runner; a Mistral, the switch
    SPECVIZ_STOCK_TARGET=1 and a device nobody measured keep transformers' forward."""
    llama = tiny_llama(V, seed=3)
    assert fast_llama.serves_target(llama)
    assert not fast_llama.serves_target(MistralForCausalLM(MistralConfig(
        vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2)))
    meta = tiny_llama(V, seed=3).to("meta")  # a device nobody measured (as MPS)
    assert not fast_llama.serves_target(meta)
    assert "not measured" in str(fast_llama.unsupported(meta))
    monkeypatch.setenv("SPECVIZ_STOCK_TARGET", "1")
    assert not fast_llama.serves_target(llama)


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


@pytest.mark.parametrize("layout", ["row", "col"])
def test_stacked_weights_are_shared_not_copied(layout: str, tmp_path: Any) -> None:
    """The runner's stacked q/k/v and gate/up are the model's own weights (views, no second
    copy); the model's forward, its training and its saving are as before, also when the
    runner was made under inference mode, in either layout."""
    model = tiny_llama(V, seed=6)
    ids = torch.tensor([[3, 4, 5, 6]])
    set_layout(cpu_linear._linears(model), layout)
    with torch.no_grad():
        before = model(ids).logits
    with torch.inference_mode():
        fast = fast_llama.FastLlama(model)
    attn = model.model.layers[0].self_attn
    stacked = fast.w.layers[0][2]
    assert attn.k_proj.weight.data_ptr() == stacked[attn.q_proj.weight.shape[0]:].data_ptr()
    with torch.no_grad():
        assert torch.equal(model(ids).logits, before)
    # Saved as models.py does (contiguous copies, safetensors) and as distill's checkpoints
    # do (torch.save of the state dict): both read back to the same logits.
    save_file({k: v.detach().contiguous().clone() for k, v in model.state_dict().items()},
              str(tmp_path / "model.safetensors"))
    torch.save(model.state_dict(), tmp_path / "ckpt.pt")
    for state in (load_file(str(tmp_path / "model.safetensors")),
                  torch.load(tmp_path / "ckpt.pt", weights_only=True)):
        again = tiny_llama(V, seed=99)
        again.load_state_dict(state)
        with torch.no_grad():
            assert torch.equal(again(ids).logits, before)
    # transformers' save_pretrained views shared tensors flat, which column-major ones are
    # not: back to row-major first (the stacks stay shared).
    set_layout(cpu_linear._linears(model), "row")
    model.save_pretrained(tmp_path / "folder")
    again = LlamaForCausalLM.from_pretrained(tmp_path / "folder", dtype=torch.float64).eval()
    with torch.no_grad():
        assert torch.equal(again(ids).logits, before)
    assert attn.k_proj.weight.data_ptr() == stacked[attn.q_proj.weight.shape[0]:].data_ptr()
    model.train()
    loss = model(ids, labels=ids).loss
    loss.backward()  # no "inference tensor" error
    assert attn.q_proj.weight.grad is not None
    torch.optim.SGD(model.parameters(), lr=0.1).step()  # the stack's views move with it
    assert attn.k_proj.weight.data_ptr() == stacked[attn.q_proj.weight.shape[0]:].data_ptr()
    with torch.no_grad():
        assert float(model(ids, labels=ids).loss) < float(loss)


def test_the_runner_takes_the_plan_the_linears_have_now() -> None:
    """A runner made before ``use_fast_linears`` (or the benchmark's switch) multiplies in the
    forms the linears have at each feed; back to F.linear, it takes F.linear again."""
    model = tiny_llama(V, seed=8, dtype=torch.float32)
    runner = fast_llama.FastLlama(model)
    stock = ("linear",) * len(cpu_linear.WIDTHS)
    assert runner.w.plan == stock
    set_linears(model, ("wxt",) * len(cpu_linear.WIDTHS), "col")
    assert runner.w.plan == ("wxt",) * len(cpu_linear.WIDTHS)
    set_linears(model, stock, "row")  # the stale plan attribute goes with DecodeLinear
    assert runner.w.plan == stock and "plan" not in vars(model.model.layers[0].self_attn.q_proj)

"""FastLlama on CUDA: the graph-replayed fixed path gives transformers' logits (fp32 closely,
fp16 within its rounding), and the broken replays a graph invites are caught. Skipped without
CUDA (run them with benchmarks/device_check.sh on a GPU machine)."""

from __future__ import annotations

import pytest
import torch

from specviz.core import fast_llama
from specviz.core.drafters import CachedModel
from tests.core.test_fast_llama import V, script
from tests.mutation import mutant
from tests.tiny import tiny_llama

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def worst(pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> float:
    """Largest |difference| over every step, relative to the step's largest logit."""
    return max(float((g.float() - w.float()).abs().max() / w.float().abs().max())
               for w, g in pairs)


def test_graphs_give_transformers_logits_in_fp32() -> None:
    model = tiny_llama(V, seed=4, layers=3, dtype=torch.float32).cuda()
    with torch.inference_mode():
        assert worst(script(model, fixed=True, graphs=True)) < 1e-5


def test_graphs_in_fp16_stay_within_its_rounding() -> None:
    """fp16 through the graphs against transformers' fp16 forward, both against fp32."""
    ref = tiny_llama(V, seed=4, layers=3, dtype=torch.float32).cuda()
    half = tiny_llama(V, seed=4, layers=3, dtype=torch.float32).cuda().half()
    with torch.inference_mode():
        exact = script(ref)
        ours = script(half, fixed=True, graphs=True)
        theirs = [(w, w) for w, _ in script(half)]  # transformers' fp16 logits
    assert worst(ours) < 2e-2  # against transformers' fp16
    drift = worst([(e, g) for (e, _), (_, g) in zip(exact, ours, strict=True)])
    theirs_drift = worst([(e, g) for (e, _), (g, _) in zip(exact, theirs, strict=True)])
    assert drift < 2 * theirs_drift + 1e-3  # no further from fp32 than fp16 itself is


GRAPH_BROKEN = {
    "a stale start after a rollback": [
        ("self.s.start.fill_(self.length)  # a rollback", "pass  #")],
    "a graph captured at one width replayed at another": [
        ("step = self.s.steps.get(t)", "step = next(iter(self.s.steps.values()), None)")],
    "growth that keeps the graphs of the old buffers": [
        ("            s.steps.clear()  # the graphs read the old buffers: capture again\n", "")],
}


@pytest.mark.parametrize("name", list(GRAPH_BROKEN))
def test_broken_graph_replays_are_caught(name: str) -> None:
    model = tiny_llama(V, seed=3, layers=3, dtype=torch.float32).cuda()
    broken = mutant(fast_llama.FastLlama, *GRAPH_BROKEN[name])
    with torch.inference_mode(), pytest.raises((AssertionError, RuntimeError, IndexError)):
        assert worst(script(model, broken, fixed=True, graphs=True)) < 1e-5


def test_the_target_runs_on_graphs_and_spares_them_for_the_next_run() -> None:
    model = tiny_llama(V, seed=3, dtype=torch.float32).cuda()
    assert fast_llama.serves_target(model)
    with torch.inference_mode():
        first = CachedModel(model, V, fast=True)
        assert first.fast is not None and first.fast.graphs
        first.fast.warm(range(1, 6))
        state = first.fast.s
        a = first.feed([4, 5, 6], keep=3)
        del first  # its state (buffers and graphs) goes back to the spare list
        second = CachedModel(model, V, fast=True)
        assert second.fast is not None and second.fast.s is state
        assert torch.allclose(second.feed([4, 5, 6], keep=3), a, atol=1e-6)


@pytest.mark.parametrize("k_policy", ["fixed", "cost"])
def test_speculation_on_graphs_reads_identical_at_t0(k_policy: str) -> None:
    """fp32 on CUDA (the bundled pair's dtype there): the speculative run, its target and
    draft on graphs, gives the target alone's greedy text token for token."""
    from specviz.core.engine import AutoregressiveDecoder, SpeculativeDecoder
    from specviz.core.events import RunFinished, Settings
    from tests.tiny import tiny_pair

    pair = tiny_pair(sharpness=8.0, dtype=torch.float32)
    pair.target.cuda()
    assert pair.draft is not None
    pair.draft.cuda()
    s = Settings(k=4, temperature=0.0, max_new_tokens=40, seed=0, k_policy=k_policy)
    alone = list(AutoregressiveDecoder(pair, s).run("the cat"))[-1]
    spec = list(SpeculativeDecoder(pair, s).run("the cat"))[-1]
    assert isinstance(alone, RunFinished) and isinstance(spec, RunFinished)
    assert spec.generated_ids == alone.generated_ids

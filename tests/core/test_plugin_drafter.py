"""A drafter added from this file alone: registered by name, run through SpeculativeDecoder and
through the exact enumeration; and a drafter that asks for the target's outputs of the verify
pass (logits, hidden states of chosen layers), which reach it exactly and cost nothing when no
drafter asks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace

import pytest
import torch

from specviz.core import engine as engine_mod
from specviz.core import registry
from specviz.core.cached_model import CachedModel
from specviz.core.drafters import Drafter, DrafterBase, DraftTools
from specviz.core.engine import AutoregressiveDecoder, SpeculativeDecoder
from specviz.core.events import Event, Round, RunFinished, RunStarted, Settings, to_json
from specviz.core.models import ModelPair
from specviz.core.parts import Factory
from specviz.core.plans import GoOn, Plan, Proposal, TargetOutputs, TargetRequest
from specviz.core.rng import Random
from tests.core.test_enumeration import REPEATS, TV_BOUND, Case, distance, settings
from tests.mutation import mutant
from tests.tiny import tiny_pair, word_tokenizer

# ---------------------------------------------------------------------------------------------
# The toy drafter: q(x | last id) ∝ 1 + how often x followed that id so far (a bigram count
# model of the context, Laplace-smoothed). x is drawn from q, so q is a real distribution and
# the enumeration forces every draft as a random choice.


class BigramDrafter(DrafterBase):
    name = "bigram"

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size

    def plan(self, context: Sequence[int]) -> Plan:
        return Plan("bigram", "bigram", prior=0.3)

    def q(self, context: Sequence[int]) -> torch.Tensor:
        counts = torch.ones(self.vocab_size, dtype=torch.float64)  # (V,)
        for a, b in zip(context, context[1:], strict=False):
            if a == context[-1]:
                counts[b] += 1.0
        return counts / counts.sum()

    def propose(self, context: Sequence[int], k: int, rng: Random,
                go_on: GoOn | None = None) -> Proposal:
        seq, rows, tokens = list(context), [], []
        for _ in range(k):
            q = self.q(seq)
            x = rng.draw(q)
            rows.append(q)
            tokens.append(x)
            seq.append(x)
        q_rows = torch.stack(rows).float() if rows else torch.zeros(0, self.vocab_size)
        return Proposal(tuple(tokens), q_rows, "bigram")


def build_bigram(pair: ModelPair, s: Settings, tools: DraftTools) -> tuple[Drafter, str]:
    return BigramDrafter(pair.vocab_size), "bigram counts"


# The one registry line (here in a fixture, so that it is undone after each test).
ENTRY = registry.Entry("bigram", "a toy: bigram counts of the text so far", build_bigram)


@pytest.fixture
def bigram() -> Iterator[registry.Entry]:
    registry.register_drafter(ENTRY)
    yield ENTRY
    registry.unregister("bigram")


def test_a_registered_drafter_runs_through_the_decoder(bigram: registry.Entry) -> None:
    assert "bigram" in registry.drafter_names()
    pair = tiny_pair(word_tokenizer(eos=False), sharpness=3.0)
    prompt = "the cat sat on the mat the cat sat on the"
    fixed = Settings(k=3, temperature=0.0, max_new_tokens=30, drafter="bigram", k_policy="fixed")
    events = list(SpeculativeDecoder(pair, fixed).run(prompt))
    started, done = events[0], events[-1]
    assert isinstance(started, RunStarted) and started.pair.draft == "bigram counts"
    assert started.pair.draft_temperature_scale == 1.0  # it draws no draft model
    assert isinstance(done, RunFinished)
    baseline = list(AutoregressiveDecoder(pair, Settings(temperature=0.0, max_new_tokens=30))
                    .run(prompt))[-1]
    assert isinstance(baseline, RunFinished) and done.generated_ids == baseline.generated_ids
    drafted = [d for e in events if isinstance(e, Round) for d in e.drafted]
    assert {d.drafter for d in drafted} == {"bigram"}
    assert {"accepted", "rejected"} <= {d.status for d in drafted}


def test_an_unregistered_drafter_is_refused_in_one_line() -> None:
    from specviz.core.errors import InputError

    with pytest.raises(InputError, match="drafter must be one of"):
        SpeculativeDecoder(tiny_pair(), Settings(drafter="bigram"))


BIGRAM_CASES = {
    "K 2, T 1, top-k 3": Case("plain", settings(2, 1.0, top_k=3, drafter="bigram"), REPEATS),
    "K 3, T 0.6, EOS": Case("eos", settings(3, 0.6, drafter="bigram"), REPEATS),
}


@pytest.mark.parametrize("name", list(BIGRAM_CASES))
def test_a_registered_drafter_keeps_the_targets_law(bigram: registry.Entry, name: str) -> None:
    tv = distance(BIGRAM_CASES[name])
    assert tv < TV_BOUND, f"{name}: total variation {tv:.2e}"


def test_the_enumeration_catches_a_broken_registered_drafter(bigram: registry.Entry) -> None:
    """Broken: the toy hands verify a q it did not draw from (the unsmoothed counts)."""
    broken = mutant(BigramDrafter, ("            rows.append(q)\n",
                                    "            rows.append((q - 1 / q.numel()).clamp(min=1e-3)"
                                    " / (q - 1 / q.numel()).clamp(min=1e-3).sum())\n"))
    factory = Factory().with_drafters(replace(ENTRY, factory=lambda pair, s, tools: (
        broken(pair.vocab_size), "broken")))
    tv = distance(BIGRAM_CASES["K 2, T 1, top-k 3"], factory)
    assert tv > 1e3 * TV_BOUND, f"the wrong q went unnoticed: total variation {tv:.2e}"


# ---------------------------------------------------------------------------------------------
# The target's outputs of the verify pass, for a drafter that asks (EAGLE-style heads read
# the target's hidden states; transformers' requires_model_outputs).

LAYERS = (0, 2)  # the embeddings and the last of the tiny Llama's 2 layers


class Watching(BigramDrafter):
    """The toy, asking for the verify pass's logits and hidden states, and keeping them."""

    target_request = TargetRequest(logits=True, hidden_layers=LAYERS)

    def __init__(self, vocab_size: int) -> None:
        super().__init__(vocab_size)
        self.seen: list[TargetOutputs] = []

    def see_target(self, outputs: TargetOutputs) -> None:
        self.seen.append(outputs)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 2.0 ** -10
        return self.now


RunFn = Callable[[ModelPair, Settings, Factory, str], Iterator[Event]]


def decoder_run(pair: ModelPair, s: Settings, factory: Factory, prompt: str) -> Iterator[Event]:
    return SpeculativeDecoder(pair, s, factory=factory).run(prompt)


def engine_with_loop(*edits: tuple[str, str]) -> RunFn:
    """The engine with ``edits`` made to its loop (a broken variant)."""
    loop = mutant(engine_mod._loop, *edits)
    run = mutant(engine_mod._run, ("yield from _loop(", "yield from broken_loop("))
    run.__globals__["broken_loop"] = loop  # the mutant's own copy of the namespace

    @torch.inference_mode()
    def start(pair: ModelPair, s: Settings, factory: Factory, prompt: str) -> Iterator[Event]:
        yield from run(pair, s, prompt, None, None, factory, True)

    return start


REPEATS_LONG = "the cat sat on the mat the cat sat on a red mat the dog"


def watched_run(pair: ModelPair, watching: bool, model: type[CachedModel] = CachedModel,
                start: RunFn = decoder_run) -> tuple[list[str], list[TargetOutputs], list[int]]:
    """The run's events (as JSON), what the drafter saw, and prompt + generated ids."""
    drafters: list[Watching] = []

    def build(pair: ModelPair, s: Settings, tools: DraftTools) -> tuple[Drafter, str]:
        drafter = Watching(pair.vocab_size) if watching else BigramDrafter(pair.vocab_size)
        if isinstance(drafter, Watching):
            drafters.append(drafter)
        return drafter, "bigram counts"

    factory = Factory(clock=Clock(), model=model).with_drafters(replace(ENTRY, factory=build))
    s = Settings(k=3, temperature=1.0, max_new_tokens=40, seed=2, drafter="bigram",
                 k_policy="fixed")
    events = list(start(pair, s, factory, REPEATS_LONG))
    started, done = events[0], events[-1]
    assert isinstance(started, RunStarted) and isinstance(done, RunFinished)
    seq = list(started.prompt_ids) + list(done.generated_ids)
    return [to_json(e) for e in events], drafters[0].seen if drafters else [], seq


def check_target_outputs(model: type[CachedModel] = CachedModel,
                         start: RunFn = decoder_run) -> None:
    """Each round the drafter gets exactly what a from-scratch forward over the fed ids gives,
    knows which of them stay in the text, and the run is the same as without asking."""
    pair = tiny_pair(word_tokenizer(eos=False), sharpness=3.0)
    events, seen, seq = watched_run(pair, True, model, start)
    plain, _, _ = watched_run(pair, False)
    assert events == plain  # asking changes nothing else, timings included
    rejections = 0
    for out in seen:
        with torch.no_grad():
            full = pair.target(torch.tensor([seq[:out.start] + list(out.ids)]),
                               output_hidden_states=True)
        assert out.logits is not None
        rows, vocab = out.logits.shape  # K + 1 rows: verify's
        assert torch.allclose(out.logits, full.logits[0, -rows:, :vocab], atol=1e-9)
        assert set(out.hidden) == set(LAYERS)
        for layer in LAYERS:
            assert torch.allclose(out.hidden[layer], full.hidden_states[layer][0, out.start:],
                                  atol=1e-9)
        assert tuple(seq[out.start:out.start + out.committed]) == out.ids[:out.committed]
        if out.committed < len(out.ids) and out.start + out.committed < len(seq):
            rejections += 1  # a rejected draft: the text went on with another token
            assert out.ids[out.committed] != seq[out.start + out.committed]
    assert len(seen) >= 5 and rejections >= 2


def test_a_drafter_gets_the_target_outputs_it_asks_for() -> None:
    check_target_outputs()


def test_the_outputs_check_rejects_hidden_states_of_the_wrong_layer() -> None:
    broken = mutant(CachedModel, ("hidden = {n: out.hidden_states[n][0] for n in layers}",
                                  "hidden = {n: out.hidden_states[min(n + 1, 2)][0] "
                                  "for n in layers}"))
    with pytest.raises(AssertionError):
        check_target_outputs(broken)


def test_the_outputs_check_rejects_a_wrong_count_of_kept_ids() -> None:
    """Broken: the drafter is told the first rejected draft stays too."""
    with pytest.raises(AssertionError):
        check_target_outputs(start=engine_with_loop(("len(fed) - k + n_acc",
                                                     "len(fed) - k + n_acc + 1")))


class NoHidden(CachedModel):
    """Refuses to return hidden states: any run that asks the target for them fails."""

    def feed_with_hidden(self, ids: list[int], keep: int, layers: Sequence[int]
                         ) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
        raise AssertionError("hidden states were computed")


@pytest.mark.parametrize("drafter", ["model", "lookup", "hybrid"])
def test_no_built_in_drafter_pays_for_the_target_outputs(drafter: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # The target on transformers' forward, whose calls the spy sees (FastLlama, the CPU's
    # target path, computes no hidden states at all).
    monkeypatch.setenv("SPECVIZ_STOCK_TARGET", "1")
    pair = tiny_pair(word_tokenizer(eos=False), sharpness=3.0)
    calls: list[dict[str, object]] = []

    def forward(model: object, cache: object, **kw: object) -> tuple[object, object]:
        from specviz.core.models import cached_forward

        calls.append(kw)
        return cached_forward(model, cache, **kw)

    events = list(SpeculativeDecoder(pair, Settings(k=3, max_new_tokens=20, drafter=drafter,
                                                                  k_policy="fixed"),
                                     factory=Factory(model=NoHidden, forward=forward))
                  .run(REPEATS_LONG))
    assert isinstance(events[-1], RunFinished)
    assert calls and not any("output_hidden_states" in kw for kw in calls)


def test_the_cost_check_sees_a_drafter_that_asks() -> None:
    """The check above can fail: a drafter that asks makes the target compute them."""
    factory = Factory(model=NoHidden).with_drafters(replace(ENTRY, factory=lambda pair, s, t: (
        Watching(pair.vocab_size), "bigram counts")))
    with pytest.raises(AssertionError, match="hidden states were computed"):
        list(SpeculativeDecoder(tiny_pair(), Settings(k=3, max_new_tokens=20, drafter="bigram"),
                                factory=factory).run(REPEATS_LONG))

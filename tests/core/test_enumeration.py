"""Exact enumeration of the engine's output law, compared with the target's own law.

On a tiny pair (6 ids) the engine generates N = K + 1 tokens while an injected ``Random``
forces every branch of every random choice it makes: each draft draw, each accept/reject test,
each residual or bonus draw. The weights of all paths add up to the exact law of the output,
which must equal the target's law (direct forwards, an independent float64 warper) within a
total variation of 1e-6.

The uniform is symbolic: ``uniform()`` returns a variable on an interval, and each comparison
``r < t`` (``r = b * u`` under lenience) splits that interval and branches with weights
proportional to the two lengths. A fresh draw per test is the right law; an engine that reuses
one r across a round compares the same, already narrowed variable again, and its (correlated)
law comes out, wrong, and is caught.

Speed: the models are wrapped so that each distinct prefix is run once, without a cache; the
engine's own DynamicCache holds the token ids themselves, so its cache bookkeeping (feed, crop,
roll back) still decides what the model sees. Paths that reach a committed prefix already solved
at a round boundary reuse its law (for a correct engine the law of the rest depends only on the
committed ids); ``test_merging_changes_nothing`` checks that against the unmerged tree.
"""

from __future__ import annotations

import inspect
import math
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from specviz.core import engine as engine_mod
from specviz.core.engine import SpeculativeDecoder, encode_prompt
from specviz.core.events import Event, Round, RunFailed, RunFinished, Settings
from specviz.core.models import ModelPair
from tests.tiny import tiny_llama, word_tokenizer

Law = dict[tuple[int, ...], float]
PROMPT = "a b"
TV_BOUND = 1e-6


# ---------------------------------------------------------------------------------------------
# Models: the real tiny Llamas, run once per distinct prefix.


class PrefixLM(torch.nn.Module):
    """A causal LM whose forward is the wrapped model's on the full prefix, memoised.

    The engine's DynamicCache stores the token ids (as keys) instead of attention states, so the
    prefix the model scores is exactly what the engine's cache holds after its feeds and crops.
    """

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.inner = model
        self.config = model.config
        self.generation_config = model.generation_config
        self.memo: dict[tuple[int, ...], torch.Tensor] = {}

    def get_output_embeddings(self) -> Any:
        return self.inner.get_output_embeddings()

    def logits(self, prefix: tuple[int, ...]) -> torch.Tensor:
        """(V,) next-token logits after ``prefix``, by one uncached forward of the real model."""
        if prefix not in self.memo:
            with torch.no_grad():
                out = self.inner(torch.tensor([list(prefix)])).logits[0]  # (L, V)
            for n in range(1, len(prefix) + 1):
                self.memo.setdefault(prefix[:n], out[n - 1])
        return self.memo[prefix]

    def forward(self, input_ids: torch.Tensor, past_key_values: Any = None,
                logits_to_keep: int = 0, **_: Any) -> SimpleNamespace:
        ids = input_ids.to(torch.float64)[:, None, :, None]  # (1, 1, T, 1): ids as keys
        cache = past_key_values
        for layer in range(len(cache.layers)):
            keys, _values = cache.update(ids, ids, layer)
        held = [int(i) for i in keys[0, 0, :, 0]]  # the whole prefix the cache now holds
        keep = logits_to_keep or input_ids.shape[1]
        rows = [self.logits(tuple(held[:n])) for n in range(len(held) - keep + 1, len(held) + 1)]
        return SimpleNamespace(logits=torch.stack(rows)[None], past_key_values=cache)


# ---------------------------------------------------------------------------------------------
# The forcing Random: depth-first over every choice, by re-running the engine.


@dataclass
class Forcing:
    """Replays ``script`` choices, then takes the first branch of each new choice."""

    script: list[tuple[int, int]]  # (chosen branch, number of branches) per choice so far
    trace: list[tuple[int, int]] = field(default_factory=list)
    weight: float = 1.0

    def choose(self, weights: list[float]) -> int:
        j = len(self.trace)
        branch = 0
        if j < len(self.script):
            branch, n = self.script[j]
            assert n == len(weights), "the engine is not deterministic given its random choices"
        self.trace.append((branch, len(weights)))
        self.weight *= weights[branch]
        return branch

    def uniform(self) -> float:
        return Uniform(self, _Interval())  # type: ignore[return-value]

    def draw(self, probs: torch.Tensor) -> int:
        p = probs.double()
        p = p / p.sum()  # as torch.multinomial does
        support = [int(i) for i in (p > 0).nonzero().flatten()]
        return support[self.choose([float(p[i]) for i in support])]


@dataclass
class _Interval:
    lo: float = 0.0
    hi: float = 1.0


class Uniform:
    """A symbolic u ~ U[0, 1) (times ``scale``): comparing it splits its interval and branches."""

    def __init__(self, forcing: Forcing, interval: _Interval, scale: float = 1.0) -> None:
        self.forcing, self.interval, self.scale = forcing, interval, scale

    def __rmul__(self, b: float) -> Uniform:
        return Uniform(self.forcing, self.interval, self.scale * float(b))  # same u, scaled

    __mul__ = __rmul__

    def __lt__(self, t: float) -> bool:
        tau = float(t) / self.scale  # scale * u < t  <=>  u < t / scale
        iv = self.interval
        if tau <= iv.lo:
            return False
        if tau >= iv.hi:
            return True
        below = (tau - iv.lo) / (iv.hi - iv.lo)
        if self.forcing.choose([below, 1.0 - below]) == 0:
            iv.hi = tau
            return True
        iv.lo = tau
        return False

    __le__ = __lt__  # equality has probability 0

    def __gt__(self, t: float) -> bool:
        return not self < t

    __ge__ = __gt__

    def __float__(self) -> float:
        return self.scale * (self.interval.lo + self.interval.hi) / 2


@dataclass
class _Frame:
    state: tuple[int, ...]  # committed ids at a round boundary
    depth: int  # choices made before it
    weight: float  # the path's weight there
    law: Law = field(default_factory=lambda: defaultdict(float))  # suffix -> conditional prob


def enumerate_law(start: Callable[[Forcing], Iterator[Event]], merge: bool = True) -> Law:
    """The exact law of RunFinished.generated_ids over every branch of every choice."""
    root = _Frame((), 0, 1.0)
    frames = [root]  # the open frames: ancestors of the current path
    solved: dict[tuple[int, ...], Law] = {}
    script: list[tuple[int, int]] = []
    while True:
        rng = Forcing(script)
        committed: tuple[int, ...] = ()
        level = 0  # frames[level] is the deepest open frame this run has passed through
        outcome: Law = {}
        events = start(rng)
        for event in events:
            if isinstance(event, RunFailed):
                raise AssertionError(f"the run failed: {event.message}")
            if isinstance(event, RunFinished):
                outcome = {tuple(event.generated_ids): 1.0}
            elif isinstance(event, Round) and merge and not event.final:
                committed += tuple(event.appended_ids)
                if committed in solved:  # the rest of this path's law is known
                    outcome = {committed + s: pr for s, pr in solved[committed].items()}
                    break
                if level + 1 < len(frames):  # replaying the way down to the open frames
                    assert frames[level + 1].state == committed
                    assert frames[level + 1].depth == len(rng.trace)
                else:
                    frames.append(_Frame(committed, len(rng.trace), rng.weight))
                level += 1
        events.close()  # type: ignore[attr-defined]
        assert outcome, "the run ended without RunFinished"
        for out, pr in outcome.items():
            for f in frames:
                f.law[out[len(f.state):]] += rng.weight * pr / f.weight
        # Next path: bump the deepest choice that has a branch left; close finished subtrees.
        j = len(rng.trace) - 1
        while j >= 0 and rng.trace[j][0] + 1 >= rng.trace[j][1]:
            j -= 1
        while len(frames) > 1 and frames[-1].depth > j:
            done = frames.pop()
            solved[done.state] = dict(done.law)
        if j < 0:
            return dict(root.law)
        script = rng.trace[:j] + [(rng.trace[j][0] + 1, rng.trace[j][1])]


# ---------------------------------------------------------------------------------------------
# The target's own law, with an independent reference warper (float64, plain Python).


def reference_probs(logits: torch.Tensor, s: Settings) -> list[float]:
    """Temperature, then top-k, then top-p (ties: lower id first), in float64."""
    z = [float(v) for v in logits]
    v = len(z)
    if s.temperature == 0:
        best = max(range(v), key=lambda i: (z[i], -i))
        return [1.0 if i == best else 0.0 for i in range(v)]
    z = [x / s.temperature for x in z]
    order = sorted(range(v), key=lambda i: (-z[i], i))
    kept = set(range(v))
    if s.top_k and s.top_k < v:
        kth = z[order[s.top_k - 1]]
        kept = {i for i in kept if z[i] >= kth}
    m = max(z)
    w = {i: math.exp(z[i] - m) for i in kept}
    if s.top_p < 1.0:
        total = sum(w.values())
        mass, nucleus = 0.0, set()
        for i in (i for i in order if i in kept):
            if nucleus and mass >= s.top_p - 1e-9:
                break
            nucleus.add(i)
            mass += w[i] / total
        kept = nucleus
    total = sum(w[i] for i in kept)
    return [w[i] / total if i in kept else 0.0 for i in range(v)]


def target_law(pair: ModelPair, s: Settings, n: int, eos: set[int]) -> Law:
    """P(x_1..x_n) (or up to EOS) under the target, by direct forwards."""
    target: PrefixLM = pair.target
    prompt = tuple(encode_prompt(pair.tokenizer, PROMPT))
    law: Law = {}

    def walk(prefix: tuple[int, ...], weight: float) -> None:
        if len(prefix) == n or (prefix and prefix[-1] in eos):
            law[prefix] = law.get(prefix, 0.0) + weight
            return
        probs = reference_probs(target.logits(prompt + prefix)[: pair.vocab_size], s)
        for x, px in enumerate(probs):
            if px > 0:
                walk(prefix + (x,), weight * px)

    walk((), 1.0)
    return law


def total_variation(a: Law, b: Law) -> float:
    return 0.5 * sum(abs(a.get(key, 0.0) - b.get(key, 0.0)) for key in set(a) | set(b))


# ---------------------------------------------------------------------------------------------
# Running the engine with an injected Random.


def start_run(pair: ModelPair, s: Settings, rng: Forcing) -> Iterator[Event]:
    """One engine run on PROMPT with ``rng`` deciding every random choice."""
    decoder = SpeculativeDecoder(pair, s)
    if "rng" in inspect.signature(decoder.run).parameters:
        return decoder.run(PROMPT, rng=rng)  # type: ignore[call-arg]
    return _patched_run(decoder, s, rng)  # TODO: remove once the engine takes rng=


def _patched_run(decoder: SpeculativeDecoder, s: Settings, rng: Forcing) -> Iterator[Event]:
    run_cls = engine_mod._Run
    old_rand, old_draw = run_cls.rand, run_cls.draw

    def draw(self: Any, probs: torch.Tensor) -> int:
        return int(probs.argmax()) if s.temperature == 0 else rng.draw(probs)

    run_cls.rand = lambda self: rng.uniform()  # type: ignore[method-assign]
    run_cls.draw = draw  # type: ignore[method-assign]
    try:
        yield from decoder.run(PROMPT)
    finally:
        run_cls.rand, run_cls.draw = old_rand, old_draw  # type: ignore[method-assign]


def engine_law(pair: ModelPair, s: Settings, merge: bool = True) -> Law:
    return enumerate_law(lambda rng: start_run(pair, s, rng), merge=merge)


def eos_ids(pair: ModelPair) -> set[int]:
    return engine_mod._eos_ids(pair)


# ---------------------------------------------------------------------------------------------
# Pairs.


def make_pair(eos: bool = False, reduced: bool = False) -> ModelPair:
    tok = word_tokenizer(["a", "b", "c"], eos=eos)  # <s> </s> <unk> a b c: 6 ids
    v = len(tok)
    target = PrefixLM(tiny_llama(v, seed=2, hidden=16, layers=1, sharpness=3.0))
    if not reduced:
        draft = PrefixLM(tiny_llama(v, seed=1, hidden=16, layers=1, sharpness=3.0))
        return ModelPair(target=target, draft=draft, tokenizer=tok)
    keep = torch.tensor([0, 1, 3, 5])  # the draft never proposes ids 2 and 4
    draft = PrefixLM(tiny_llama(len(keep), seed=1, hidden=16, layers=1, sharpness=3.0))
    return ModelPair(target=target, draft=draft, tokenizer=tok, draft_vocab_map=keep,
                     draft_oov_id=2)


@pytest.fixture(scope="module")
def pairs() -> dict[str, ModelPair]:
    torch.set_num_threads(1)
    return {"plain": make_pair(), "eos": make_pair(eos=True), "reduced": make_pair(reduced=True)}


def settings(k: int, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
             **kw: Any) -> Settings:
    return Settings(k=k, temperature=temperature, top_k=top_k, top_p=top_p,
                    max_new_tokens=k + 1, top_n=1, seed=0, **kw)


CASES: dict[str, tuple[str, Settings]] = {
    "K 1, T 1": ("plain", settings(1)),
    "K 2, T 1": ("plain", settings(2)),
    "K 2, T 0.6": ("plain", settings(2, 0.6)),
    "K 3, T 0.6, top-k 3": ("plain", settings(3, 0.6, top_k=3)),
    "K 3, T 1, top-p 0.7": ("plain", settings(3, 1.0, top_p=0.7)),
    "K 2, T 1.5, top-k 4, top-p 0.8": ("plain", settings(2, 1.5, top_k=4, top_p=0.8)),
    "K 3, T 0 (greedy)": ("plain", settings(3, 0.0)),
    "reduced-vocab draft, K 2, T 1": ("reduced", settings(2)),
    "reduced-vocab draft, K 3, T 0.6, top-k 3": ("reduced", settings(3, 0.6, top_k=3)),
    "EOS inside a round, K 3, T 1, top-k 3": ("eos", settings(3, 1.0, top_k=3)),
}


def law_distance(pair: ModelPair, s: Settings) -> float:
    return total_variation(engine_law(pair, s), target_law(pair, s, s.max_new_tokens,
                                                             eos_ids(pair)))


@pytest.mark.parametrize("name", list(CASES))
def test_output_law_is_the_targets(pairs: dict[str, ModelPair], name: str) -> None:
    which, s = CASES[name]
    tv = law_distance(pairs[which], s)
    assert tv < TV_BOUND, f"{name}: total variation {tv:.2e}"


def test_cases_are_not_trivial(pairs: dict[str, ModelPair]) -> None:
    """q really differs from p, EOS really ends runs inside a round, every K is reached."""
    s = settings(3, 1.0, top_k=3)
    law = target_law(pairs["eos"], s, 4, eos_ids(pairs["eos"]))
    assert sum(pr for out, pr in law.items() if len(out) < 4) > 0.05  # EOS before the end
    prompt = tuple(encode_prompt(pairs["plain"].tokenizer, PROMPT))
    p = torch.tensor(reference_probs(pairs["plain"].target.logits(prompt)[:6], settings(1)))
    q = torch.tensor(reference_probs(pairs["plain"].draft.logits(prompt)[:6], settings(1)))
    assert 0.5 * float((p - q).abs().sum()) > 0.1  # many rejections


def test_merging_changes_nothing(pairs: dict[str, ModelPair]) -> None:
    """Reusing a solved prefix's law equals forcing every branch of the whole tree."""
    s = settings(2, 1.0, top_k=3)
    merged = engine_law(pairs["plain"], s)
    full = engine_law(pairs["plain"], s, merge=False)
    assert total_variation(merged, full) < 1e-12

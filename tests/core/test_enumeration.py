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

Speed (about 10 s of CPU for the file): the models are wrapped so that each distinct prefix
is run once, without a cache; the engine's own DynamicCache holds the token ids themselves, so
its cache bookkeeping (feed, crop, roll back) still decides what the model sees. One case runs
the real models with their real KV caches instead. Paths that reach a committed prefix already
solved at a round boundary reuse its law: for a correct engine the law of the rest depends only
on the committed ids, whatever the history (any K policy included). The cases named "whole
tree" reuse nothing and force every branch of the whole run.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from specviz.core import drafters as drafters_mod
from specviz.core import engine as engine_mod
from specviz.core import policy as policy_mod
from specviz.core import registry, sampling
from specviz.core import verify as verify_mod
from specviz.core.engine import AutoregressiveDecoder, SpeculativeDecoder, encode_prompt
from specviz.core.events import Event, Round, RunFailed, RunFinished, Settings
from specviz.core.models import ModelPair, draft_id_table
from specviz.core.parts import Factory
from specviz.core.plans import Plan
from specviz.core.policy import CostPolicy, FixedPolicy
from specviz.core.registry import Entry
from specviz.core.rng import TorchRandom
from tests.mutation import mutant
from tests.plain import plain
from tests.tiny import tiny_llama, word_tokenizer

Law = dict[tuple[int, ...], float]
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
        p = probs.double().tolist()
        total = sum(p)  # torch.multinomial normalises too
        support = [i for i, pi in enumerate(p) if pi > 0]
        return support[self.choose([p[i] / total for i in support])]


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
        j = _deepest_open_choice(rng.trace)
        while len(frames) > 1 and frames[-1].depth > j:
            done = frames.pop()
            solved[done.state] = dict(done.law)
        if j < 0:
            return dict(root.law)
        script = rng.trace[:j] + [(rng.trace[j][0] + 1, rng.trace[j][1])]


def _deepest_open_choice(trace: list[tuple[int, int]]) -> int:
    """Index of the last choice with an untried branch; -1 when the tree is exhausted."""
    j = len(trace) - 1
    while j >= 0 and trace[j][0] + 1 >= trace[j][1]:
        j -= 1
    return j


def enumerate_function(fn: Callable[[Forcing], Any]) -> dict[Any, float]:
    """The exact law of ``fn(rng)`` over every branch (no merging): for testing the harness."""
    law: dict[Any, float] = defaultdict(float)
    script: list[tuple[int, int]] = []
    while True:
        rng = Forcing(script)
        law[fn(rng)] += rng.weight
        j = _deepest_open_choice(rng.trace)
        if j < 0:
            return dict(law)
        script = rng.trace[:j] + [(rng.trace[j][0] + 1, rng.trace[j][1])]


def check_symbolic_uniform(uniform_cls: type) -> None:
    """Fresh draws are independent; one draw compared twice is correlated; b * u scales."""

    def fresh(rng: Forcing) -> tuple[bool, bool]:
        return rng.uniform() < 0.3, rng.uniform() < 0.6

    def shared(rng: Forcing) -> tuple[bool, bool]:
        u = uniform_cls(rng, _Interval())
        return u < 0.3, u < 0.6

    def scaled(rng: Forcing) -> bool:
        return 0.5 * uniform_cls(rng, _Interval()) < 0.3  # u < 0.6

    def drawn(rng: Forcing) -> int:
        return rng.draw(torch.tensor([0.2, 0.0, 0.8]))

    law = enumerate_function(fresh)
    assert law == pytest.approx({(True, True): 0.18, (True, False): 0.12,
                                 (False, True): 0.42, (False, False): 0.28})
    # The same u: u < 0.3 implies u < 0.6, and (True, False) is impossible.
    assert enumerate_function(shared) == pytest.approx({(True, True): 0.3, (False, True): 0.3,
                                                        (False, False): 0.4})
    assert enumerate_function(scaled) == pytest.approx({True: 0.6, False: 0.4})
    assert enumerate_function(drawn) == pytest.approx({0: 0.2, 2: 0.8})


def test_symbolic_uniform() -> None:
    check_symbolic_uniform(Uniform)


def test_symbolic_uniform_check_catches_a_memoryless_variable() -> None:
    """A variable that forgot earlier comparisons would miss the shared-r bug."""
    forgetful = mutant(Uniform, ("            iv.hi = tau\n", ""), ("        iv.lo = tau\n", ""))
    with pytest.raises(AssertionError):
        check_symbolic_uniform(forgetful)


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


def target_law(target: PrefixLM, prompt: tuple[int, ...], vocab: int, s: Settings,
               eos: set[int]) -> Law:
    """P(x_1..x_n) (or up to EOS), n = max_new_tokens, under the target by direct forwards."""
    law: Law = {}

    def walk(prefix: tuple[int, ...], weight: float) -> None:
        if len(prefix) == s.max_new_tokens or (prefix and prefix[-1] in eos):
            law[prefix] = law.get(prefix, 0.0) + weight
            return
        probs = reference_probs(target.logits(prompt + prefix)[:vocab], s)
        for x, px in enumerate(probs):
            if px > 0:
                walk(prefix + (x,), weight * px)

    walk((), 1.0)
    return law


def total_variation(a: Law, b: Law) -> float:
    return 0.5 * sum(abs(a.get(key, 0.0) - b.get(key, 0.0)) for key in set(a) | set(b))


# ---------------------------------------------------------------------------------------------
# Pairs and cases.


def make_pair(eos: bool = False, reduced: bool = False, memo: bool = True) -> ModelPair:
    """Target and draft: different random Llamas over 6 ids (<s> </s> <unk> a b c)."""
    tok = word_tokenizer(["a", "b", "c"], eos=eos)
    v = len(tok)
    wrap = PrefixLM if memo else (lambda m: m)
    target = wrap(tiny_llama(v, seed=2, hidden=16, layers=1, sharpness=3.0))
    if not reduced:
        draft = wrap(tiny_llama(v, seed=1, hidden=16, layers=1, sharpness=3.0))
        return ModelPair(target=target, draft=draft, tokenizer=tok)
    keep = torch.tensor([0, 1, 3, 5])  # the draft never proposes ids 2 and 4
    draft = wrap(tiny_llama(len(keep), seed=1, hidden=16, layers=1, sharpness=3.0))
    return ModelPair(target=target, draft=draft, tokenizer=tok, draft_vocab_map=keep,
                     draft_oov_id=2)


PAIRS: dict[str, ModelPair] = {}


def pair_for(name: str) -> ModelPair:
    if name not in PAIRS:
        PAIRS[name] = {"plain": lambda: make_pair(), "eos": lambda: make_pair(eos=True),
                       "reduced": lambda: make_pair(reduced=True),
                       "real caches": lambda: make_pair(memo=False),
                       # a calibrated draft: q drawn at T × 0.6 (models.TEMPERATURE_SCALE_KEY)
                       "scaled": lambda: replace(make_pair(), draft_temperature_scale=0.6),
                       "scaled reduced": lambda: replace(make_pair(reduced=True),
                                                         draft_temperature_scale=1.5),
                       }[name]()
    return PAIRS[name]


@dataclass(frozen=True)
class Case:
    pair: str
    s: Settings
    prompt: str = "a b"
    merge: bool = True  # False: every branch of the whole tree, no solved prefix reused
    baseline: bool = False  # the target-alone decoder instead of the speculative one


def settings(k: int, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
             n: int | None = None, **kw: Any) -> Settings:
    """N = K + 1 new tokens unless ``n`` says otherwise."""
    return plain(k=k, temperature=temperature, top_k=top_k, top_p=top_p,
                    max_new_tokens=n or k + 1, top_n=1, seed=0, **kw)


REPEATS = "a b c a b"  # lookup finds "a b" (and "b") earlier: it proposes "c a b"
CASES: dict[str, Case] = {
    "K 1, T 1, whole tree": Case("plain", settings(1), merge=False),
    "K 2, T 0.6, top-k 4": Case("plain", settings(2, 0.6, top_k=4)),
    "K 3, T 1, top-k 3": Case("plain", settings(3, 1.0, top_k=3)),
    "K 3, T 0.6, top-p 0.6": Case("plain", settings(3, 0.6, top_p=0.6)),
    "K 2, T 1.5, top-k 4, top-p 0.8": Case("plain", settings(2, 1.5, top_k=4, top_p=0.8)),
    "K 3, T 0": Case("plain", settings(3, 0.0)),
    "reduced-vocab draft, K 2, T 1": Case("reduced", settings(2)),
    "reduced-vocab draft, K 3, T 0.6, top-k 3": Case("reduced", settings(3, 0.6, top_k=3)),
    "EOS inside a round, K 3, T 1, top-k 3": Case("eos", settings(3, 1.0, top_k=3)),
    "real KV caches, K 2, T 1, top-k 2, whole tree": Case("real caches",
                                                          settings(2, 1.0, top_k=2), merge=False),
    "real KV caches, hybrid, K 2, T 1, top-k 2, whole tree": Case(
        "real caches", settings(2, 1.0, top_k=2, drafter="hybrid"), REPEATS, merge=False),
    "lookup, K 3, T 1, top-k 3": Case("plain", settings(3, top_k=3, drafter="lookup"), REPEATS),
    "lookup, K 2, T 0.6, top-p 0.8, EOS": Case("eos", settings(2, 0.6, top_p=0.8,
                                                                drafter="lookup"), REPEATS),
    "lookup, K 3, T 0": Case("plain", settings(3, 0.0, drafter="lookup"), REPEATS),
    "hybrid, K 3, T 1, top-k 3": Case("plain", settings(3, 1.0, top_k=3, drafter="hybrid"),
                                      REPEATS),
    "hybrid, K 2, T 0.6, reduced-vocab draft": Case("reduced", settings(2, 0.6, drafter="hybrid"),
                                                    REPEATS),
    "hybrid, K 3, T 0": Case("plain", settings(3, 0.0, drafter="hybrid"), REPEATS),
    "draft at T x 0.6, K 2, T 1": Case("scaled", settings(2)),
    "draft at T x 0.6, K 3, T 0.6, top-p 0.8": Case("scaled", settings(3, 0.6, top_p=0.8)),
    "draft at T x 1.5, reduced-vocab, hybrid, K 2, T 1, top-k 3": Case(
        "scaled reduced", settings(2, 1.0, top_k=3, drafter="hybrid"), REPEATS),
    "draft at T x 0.6, K 3, T 0": Case("scaled", settings(3, 0.0)),
    "target alone, 3 tokens, T 0.6, top-k 3": Case("plain", settings(1, 0.6, top_k=3, n=3),
                                                   baseline=True),
    # K policies: more tokens than K + 1, so K can change between rounds.
    "heuristic K, from 2, 5 tokens, top-k 2": Case("plain", settings(2, 1.0, top_k=2, n=5,
                                                                    k_policy="heuristic")),
    "heuristic K, hybrid, from 1, 4 tokens, top-k 2, whole tree": Case(
        "plain", settings(1, 1.0, top_k=2, n=4, k_policy="heuristic", drafter="hybrid"),
        REPEATS, merge=False),
    "cost K, K 2, 4 tokens, top-k 2": Case("plain", settings(2, 1.0, top_k=2, n=4,
                                                            k_policy="cost")),
    "cost K, lookup, K 2, 4 tokens, T 0.6, top-k 3, whole tree": Case(
        "plain", settings(2, 0.6, top_k=3, n=4, k_policy="cost", drafter="lookup"), REPEATS,
        merge=False),
    # Lookup's own budget (lookup_k) against the policy's K: a lookup round drafts up to
    # lookup_k tokens of the copy, more or fewer than the model drafter's K.
    "lookup_k 3 > K 1, lookup, T 1, top-k 3": Case(
        "plain", settings(1, top_k=3, n=4, drafter="lookup", lookup_k=3), REPEATS),
    "lookup_k 1 < K 3, hybrid, T 0.6, top-k 3, whole tree": Case(
        "plain", settings(3, 0.6, top_k=3, drafter="hybrid", lookup_k=1), REPEATS, merge=False),
    "lookup_k 3, heuristic K from 1, hybrid, 4 tokens, top-k 2": Case(
        "plain", settings(1, 1.0, top_k=2, n=4, k_policy="heuristic", drafter="hybrid",
                          lookup_k=3), REPEATS),
    "lookup_k 3, cost K, hybrid, K 1, 5 tokens, top-k 2, whole tree": Case(
        "plain", settings(1, 1.0, top_k=2, n=5, k_policy="cost", drafter="hybrid",
                          lookup_k=3), REPEATS, merge=False),
    "cost K, hybrid, K 3, 4 tokens, top-k 2, whole tree": Case(
        "plain", settings(3, 1.0, top_k=2, n=4, k_policy="cost", drafter="hybrid"), REPEATS,
        merge=False),
}


# ---------------------------------------------------------------------------------------------
# Running the engine with an injected Random (and the clock below).


class _Clock:
    """A perf_counter that advances ~1 ms per call: round timings (the cost policy reads them)
    become a function of the path, so re-running a path replays it exactly."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        # A power of two: every difference of two readings is exact in floating point, so a
        # duration never depends on how far the clock had run (a cached calibration skips
        # readings on later paths, and 1e-3 steps would give 1e-3 ± 1 ulp there).
        self.now += 2.0 ** -10
        return self.now


def flat_calibration(pair: ModelPair) -> dict[int, float]:
    """What timing the target's passes with the clock above reads: one tick per width."""
    return {n: 2.0 ** -10 for n in engine_mod.CALIBRATION_WIDTHS}


def deterministic(factory: Factory | None = None) -> Factory:
    """``factory`` (the real parts by default) on the clock above, calibrated on it."""
    return replace(factory or Factory(), clock=_Clock().perf_counter,
                   calibrate=flat_calibration)


def engine_law(case: Case, factory: Factory | None = None) -> Law:
    """The exact law of the engine's output on ``case``, every random choice forced."""
    pair = pair_for(case.pair)
    parts = deterministic(factory)
    decoder = AutoregressiveDecoder if case.baseline else SpeculativeDecoder

    def start(rng: Forcing) -> Iterator[Event]:
        return decoder(pair, case.s, factory=parts).run(case.prompt,
                                                        rng=rng)  # type: ignore[arg-type]

    return enumerate_law(start, merge=case.merge)


def reference_law(case: Case) -> Law:
    pair = pair_for(case.pair)
    target = pair.target if isinstance(pair.target, PrefixLM) else PrefixLM(pair.target)
    prompt = tuple(encode_prompt(pair.tokenizer, case.prompt))
    return target_law(target, prompt, pair.vocab_size, case.s, engine_mod._eos_ids(pair))


def distance(case: Case, factory: Factory | None = None) -> float:
    return total_variation(engine_law(case, factory), reference_law(case))


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


@pytest.mark.parametrize("name", list(CASES))
def test_output_law_is_the_targets(name: str) -> None:
    tv = distance(CASES[name])
    assert tv < TV_BOUND, f"{name}: total variation {tv:.2e}"


# ---------------------------------------------------------------------------------------------
# The same test on broken engines: each must be caught.


def with_verifier(broken: Callable[..., Any]) -> Factory:
    return Factory(verifier=broken)


def with_warp(broken: Callable[..., Any]) -> Factory:
    """The warper of p and of q (the factory hands the drafters the same one)."""
    return Factory(warp=broken)


def with_model_drafter(cls: type) -> Factory:
    """The model and hybrid drafters built with ``cls`` in place of ModelDrafter."""
    return Factory().with_drafters(
        Entry("model", "", lambda pair, s, tools: drafters_mod.build_model_drafter(
            pair, s, tools, cls), needs_draft_model=True),
        Entry("hybrid", "", lambda pair, s, tools: drafters_mod.build_hybrid_drafter(
            pair, s, tools, cls), needs_draft_model=True))


BROKEN: dict[str, tuple[Callable[..., Any], list[tuple[str, str]], Callable[..., Factory],
                        str]] = {
    "bonus from the row before": (
        verify_mod.verify, [("dist = p_rows[k]", "dist = p_rows[k - 1]")], with_verifier,
        "K 1, T 1, whole tree"),
    "one uniform r for a whole round": (
        verify_mod.verify, [("    for i, x in enumerate(drafts):",
                             "    shared = rng.uniform() if k else 0.0\n"
                             "    for i, x in enumerate(drafts):"),
                            ("u = rng.uniform()", "u = shared")], with_verifier,
        "K 2, T 0.6, top-k 4"),
    "top-p before temperature": (
        sampling.logits_to_probs, [("    logits = logits / temperature\n", ""),
                                   ("    return logits.softmax(dim=-1)",
                                    "    return (logits / temperature).softmax(dim=-1)")],
        with_warp, "lookup, K 2, T 0.6, top-p 0.8, EOS"),
    "residual is p": (
        verify_mod.verify, [("dist = residual(p_rows[n_accepted], q_rows[n_accepted])",
                             "dist = p_rows[n_accepted]")], with_verifier,
        "K 2, T 1.5, top-k 4, top-p 0.8"),
}


@pytest.mark.parametrize("name", list(BROKEN))
def test_broken_engines_are_caught(name: str) -> None:
    original, edits, install, case = BROKEN[name]
    tv = distance(CASES[case], install(mutant(original, *edits)))
    assert tv > 1e3 * TV_BOUND, f"{name} went unnoticed on {case!r}: total variation {tv:.2e}"


def test_a_q_not_the_one_drawn_from_is_caught_where_the_draft_is_scaled() -> None:
    """Broken: the draft draws at T × scale but hands verify q at T (a q recomputed for
    display or verify without the calibration). Only the scaled case can see it: at T = 1
    with scale 1 the two q are the same, and the plain case passes the same mutant."""
    broken = with_model_drafter(mutant(drafters_mod.ModelDrafter, (
        "            rows.append(q)\n",
        "            rows.append(torch.softmax(logits.float(), -1).cpu())\n")))
    assert distance(CASES["K 1, T 1, whole tree"], broken) < TV_BOUND
    tv = distance(CASES["draft at T x 0.6, K 2, T 1"], broken)
    assert tv > 1e3 * TV_BOUND, f"the unscaled q went unnoticed: total variation {tv:.2e}"


# ---------------------------------------------------------------------------------------------
# Drafting that stops by the draft's confidence (the cost policy's stop rule): K becomes a
# stopping time of the draft's own draws, which leaves the law exact. A plain threshold rule
# forces both branches often (the cost rule's own choices ride on the cases above).


class ThresholdStop:
    """Draft on while the last draft's confidence is at least ``threshold``."""

    def __init__(self, threshold: float, seen: set[str]) -> None:
        self.threshold = threshold
        self.seen = seen
        self.stopped = False

    def __call__(self, drafted: int, confidence: float) -> bool:
        self.stopped = confidence < self.threshold
        self.seen.add("stopped" if self.stopped else "went on")
        return not self.stopped

    def reason(self, k: int) -> str:
        return f"threshold stop → K {k}"


STOPPING = {  # case, the rule's threshold (where both branches happen)
    "T 1, top-k 3": (Case("plain", settings(3, 1.0, top_k=3, n=5, k_policy="cost")), 0.4),
    "T 0.6, top-p 0.8, EOS": (Case("eos", settings(3, 0.6, top_p=0.8, n=5,
                                                   k_policy="cost")), 0.2),
    "hybrid, reduced-vocab draft, T 0.6": (Case(
        "reduced", settings(3, 0.6, n=5, k_policy="cost", drafter="hybrid"), REPEATS), 0.4),
}


def stopping_distance(case: Case, threshold: float, factory: Factory | None = None
                      ) -> tuple[float, set[str]]:
    seen: set[str] = set()

    class ThresholdPolicy(CostPolicy):
        """The cost policy with a threshold stop; every round of model drafts may go on
        (the rates' K only says whether to draft at all)."""

        def stop_rule(self, plan: Plan, k: int) -> ThresholdStop | None:
            return ThresholdStop(threshold, seen) if plan.confident and k > 1 else None

        def choose(self, plan: Plan, cap: int) -> policy_mod.Choice:
            choice = super().choose(plan, cap)
            return replace(choice, stop_cap=cap if choice.k and cap > 1 else 0)

    parts = (factory or Factory()).with_policies(Entry("cost", "", ThresholdPolicy))
    return distance(case, parts), seen


@pytest.mark.parametrize("name", list(STOPPING))
def test_confidence_stops_keep_the_law(name: str) -> None:
    tv, seen = stopping_distance(*STOPPING[name])
    assert seen == {"stopped", "went on"}, seen  # both branches of the rule were taken
    assert tv < TV_BOUND, f"{name}: total variation {tv:.2e}"


def test_stopping_check_catches_a_redrawn_unconfident_draft() -> None:
    """Broken: an unconfident draft is drawn again (a filter on x, not a stop): x no longer
    follows the q it is verified against. (Dropping the last draft and stopping, a bug one
    might expect here, is exact: the dropped x is never used; the test passes it, rightly.)"""
    draw = "j = int(q.argmax()) if self.greedy else rng.draw(q)\n"
    broken = with_model_drafter(mutant(drafters_mod.ModelDrafter, (draw, draw + (
        "            if go_on is not None and not self.greedy and not go_on(i + 1, float(q[j])):\n"
        "                j = rng.draw(q)\n"))))
    tv, seen = stopping_distance(*STOPPING["T 1, top-k 3"], broken)
    assert "stopped" in seen
    assert tv > 1e3 * TV_BOUND, f"a redrawn draft went unnoticed: total variation {tv:.2e}"


# ---------------------------------------------------------------------------------------------
# Lenience: r = b * u keeps drafts more often, and the output drifts from the target's.


LENIENT = Case("plain", settings(1))
LENIENCES = (1.0, 0.9, 0.8, 0.7, 0.6)


def lenience_distances(factory: Factory | None = None) -> list[float]:
    return [distance(Case(LENIENT.pair, replace(LENIENT.s, lenience=b)), factory)
            for b in LENIENCES]


def check_lenience_drifts(tvs: list[float]) -> None:
    assert tvs[0] < TV_BOUND, "b = 1 is exact"
    assert all(a < b for a, b in zip(tvs, tvs[1:], strict=False)), f"TV must grow as b falls: {tvs}"
    assert tvs[-1] > 0.05, f"b = {LENIENCES[-1]} should move the law visibly: {tvs}"


def test_lenience_distance_grows_as_b_falls() -> None:
    tvs = lenience_distances()
    print("lenience b", LENIENCES, "-> total variation", ", ".join(f"{t:.2e}" for t in tvs))
    check_lenience_drifts(tvs)


def test_lenience_check_catches_an_ignored_b() -> None:
    broken = with_verifier(mutant(verify_mod.verify,
                                  ("r = u if lenience == 1.0 else lenience * u", "r = u")))
    with pytest.raises(AssertionError):
        check_lenience_drifts(lenience_distances(broken))


# ---------------------------------------------------------------------------------------------
# The cases test something: q differs from p, EOS ends runs early, the drafters and policies
# really take the paths they are named for.


def check_not_trivial(pair: ModelPair) -> None:
    prompt = tuple(encode_prompt(pair.tokenizer, "a b"))
    p = torch.tensor(reference_probs(pair.target.logits(prompt)[:6], settings(1)))
    if pair.draft_vocab_map is None:
        q_logits = pair.draft.logits(prompt)
    else:  # the draft reads and scores its own ids
        table = draft_id_table(pair.draft_vocab_map, 6, pair.draft_oov_id)
        local = pair.draft.logits(tuple(int(table[i]) for i in prompt))
        q_logits = torch.full((6,), float("-inf"), dtype=local.dtype)
        q_logits[pair.draft_vocab_map] = local
    q = torch.tensor(reference_probs(q_logits[:6], settings(1)))
    assert 0.5 * float((p - q).abs().sum()) > 0.1, "q is close to p: few rejections to test"


def test_cases_are_not_trivial() -> None:
    for name in ("plain", "reduced"):
        check_not_trivial(pair_for(name))
    eos_case = CASES["EOS inside a round, K 3, T 1, top-k 3"]
    law = reference_law(eos_case)
    assert sum(pr for out, pr in law.items() if len(out) < 4) > 0.05  # EOS before the end


def test_triviality_check_catches_a_draft_equal_to_the_target() -> None:
    plain = pair_for("plain")
    with pytest.raises(AssertionError):
        check_not_trivial(ModelPair(target=plain.target, draft=plain.target,
                                    tokenizer=plain.tokenizer))


def round_stats(case: Case, factory: Factory | None = None) -> tuple[set[str], set[int]]:
    """Over every path of ``case``: which drafters proposed, and the rounds' K - min(k, cap)
    (nonzero where the policy chose other than the fixed K the budget allows)."""
    parts = deterministic(factory)
    pair = pair_for(case.pair)
    drafters: set[str] = set()
    moves: set[int] = set()

    def start(rng: Forcing) -> Iterator[Event]:
        run = SpeculativeDecoder(pair, case.s, factory=parts).run(
            case.prompt, rng=rng)  # type: ignore[arg-type]
        for event in run:
            if isinstance(event, Round):
                before = event.n_generated - len(event.appended_ids)
                cap = case.s.max_new_tokens - before - 1
                moves.add(event.k - min(case.s.k, cap))
                drafters.update(d.drafter for d in event.drafted)
            yield event

    enumerate_law(start, merge=case.merge)
    return drafters, moves


def check_paths(factory: Factory | None = None) -> None:
    drafters, _ = round_stats(CASES["hybrid, K 3, T 1, top-k 3"], factory)
    assert drafters == {"model", "lookup"}, drafters
    _, moves = round_stats(CASES["heuristic K, from 2, 5 tokens, top-k 2"], factory)
    assert moves - {0}, "the heuristic never moved K"
    _, moves = round_stats(CASES["cost K, K 2, 4 tokens, top-k 2"], factory)
    assert moves - {0}, "the cost policy never moved K"
    _, moves = round_stats(CASES["lookup_k 3 > K 1, lookup, T 1, top-k 3"], factory)
    assert max(moves) > 0, "lookup never drafted past the model's K"


def test_drafters_and_policies_take_their_paths() -> None:
    """The hybrid cases see both drafters; the policy cases see K move off the fixed K."""
    check_paths()


def never_looks_up(pair: ModelPair, s: Settings, tools: drafters_mod.DraftTools
                   ) -> tuple[drafters_mod.Drafter, str]:
    hybrid, name = drafters_mod.build_hybrid_drafter(pair, s, tools)
    assert isinstance(hybrid, drafters_mod.HybridDrafter)
    model = hybrid.model
    hybrid._choose = lambda context: (model, model.plan(context))  # type: ignore[method-assign]
    return hybrid, name


# Broken: lookup drafts the fixed K, not its own budget (lookup_k).
FixedKForLookup = mutant(FixedPolicy, ("want = _wanted(plan, self.k)", "want = self.k"))

INERT: dict[str, Factory] = {
    "hybrid never looks up": Factory().with_drafters(
        Entry("hybrid", "", never_looks_up, needs_draft_model=True)),
    "policies keep K fixed": Factory().with_policies(
        *(Entry(name, "", FixedPolicy) for name in registry.policy_names())),
    "lookup drafts the policy's K": Factory().with_policies(Entry("fixed", "", FixedKForLookup)),
}


@pytest.mark.parametrize("broken", list(INERT))
def test_path_check_catches_inert_drafters_and_policies(broken: str) -> None:
    with pytest.raises(AssertionError):
        check_paths(INERT[broken])


# ---------------------------------------------------------------------------------------------
# Without rng=, a run draws from TorchRandom(settings.seed): the stream the tests above replace.


def check_default_random(decoder_cls: type = SpeculativeDecoder,
                         factory: Factory | None = None) -> None:
    pair = pair_for("plain")
    for seed in range(8):
        s = replace(settings(3, 1.0, n=12), seed=seed)
        default = list(decoder_cls(pair, s, factory=factory).run("a b"))[-1]
        injected = list(decoder_cls(pair, s, factory=factory).run("a b",
                                                                  rng=TorchRandom(seed)))[-1]
        assert isinstance(default, RunFinished) and isinstance(injected, RunFinished)
        assert default.generated_ids == injected.generated_ids, f"seed {seed}"


def test_default_random_is_the_seeded_torch_random() -> None:
    check_default_random()
    check_default_random(AutoregressiveDecoder)


def test_default_random_check_catches_another_stream() -> None:
    class Reseeded(TorchRandom):
        def __init__(self, seed: int) -> None:
            super().__init__(seed + 1)

    with pytest.raises(AssertionError):
        check_default_random(factory=Factory(random=Reseeded))

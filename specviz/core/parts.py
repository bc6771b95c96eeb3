"""The parts a run is made of, passed to the engine's loop rather than reached for.

A :class:`Factory` supplies them: the target runner (and the draft model's: one model class),
the drafter and the K policy (by name, from ``registry.py``), the verifier, the target's tree
pass, the warper (logits -> probabilities), the model call, the clock, the random source and
the text stream. Every field defaults to the real one, so a test replaces one part
(``Factory(clock=fake)``, ``Factory(verifier=broken)``) instead of patching a module.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol

import torch

from .cached_model import CachedModel, Clock, Forward
from .drafters import Drafter, DraftTools, Warp
from .fast_llama import serves_target
from .models import cached_forward
from .policy import KPolicy
from .registry import DRAFTERS, K_POLICIES, Entry
from .rng import Random, TorchRandom
from .sampling import logits_to_probs
from .text import IncrementalDetokenizer
from .tree_attention import TreePass
from .verify import Verdict, verify

if TYPE_CHECKING:
    from .events import Settings
    from .models import ModelPair

# verify(p_rows, q_rows, drafts, rng, *, greedy, lenience) -> Verdict (verify.verify)
Verifier = Callable[..., Verdict]
# A pair -> the target's pass costs, width -> seconds (engine.calibrate, once per pair)
Calibration = Callable[["ModelPair"], dict[int, float]]
# (pair, widest, draft) -> None: every pass width 1 ... widest run once, before a run's clock
# (engine.warm_widths: a fresh process's first calls at each width stay out of it)
Warmer = Callable[["ModelPair", int, bool], None]


class TargetRunner(Protocol):
    """The target model with its KV cache, as the loop drives it (cached_model.CachedModel)."""

    calls: int
    forward_time_s: float

    @property
    def length(self) -> int:
        ...

    def feed(self, ids: list[int], keep: int, local: bool = False) -> torch.Tensor:
        """Run ``ids`` after the cached prefix; logits of the last ``keep`` positions."""
        ...

    def feed_with_hidden(self, ids: list[int], keep: int, layers: Sequence[int]
                         ) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
        """:meth:`feed`, and the hidden states of ``ids`` after each of ``layers``."""
        ...

    def crop(self, length: int) -> None:
        ...


@dataclass
class Parts:
    """One run's parts."""

    target: TargetRunner
    drafter: Drafter
    draft_name: str | None  # the drafter's name in RunStarted (None: the target alone)
    policy: KPolicy
    verifier: Verifier
    warp: Warp
    clock: Clock
    rng: Random
    tree: TreePass  # the target's tree pass and path-keeping, for a drafter that proposes trees


@dataclass(frozen=True)
class Factory:
    """Where a run's parts come from; each field defaults to the real part."""

    warp: Warp = logits_to_probs
    verifier: Verifier = verify
    tree: TreePass = TreePass()  # the target's tree pass and cache step (tree_attention.py)
    clock: Clock = time.perf_counter
    forward: Forward = cached_forward
    random: Callable[[int], Random] = TorchRandom  # seed -> source, when run() gets no rng
    # The target's pass costs for a policy that wants them; None: engine.calibrate.
    calibrate: Calibration | None = None
    # Each width the run's passes may take, run once before its clock; None: engine.warm_widths.
    warm: Warmer | None = None
    # name -> entry (registry.py): a drafter's factory is (pair, settings, tools) -> (drafter,
    # its name in the events); a policy's is (k) -> the policy
    drafters: Mapping[str, Entry] = field(default_factory=lambda: DRAFTERS)  # the registry's
    policies: Mapping[str, Entry] = field(default_factory=lambda: K_POLICIES)
    # The class each model runs in with its KV cache (target and draft), given the model call
    # and the clock above.
    model: type[CachedModel] = CachedModel
    # The run's text stream: (tokenizer, prompt ids) -> pieces of text per id
    detokenizer: type[IncrementalDetokenizer] = IncrementalDetokenizer

    def with_drafters(self, *entries: Entry) -> Factory:
        """This factory with ``entries`` in place of the drafters of their names (nothing
        registered changes)."""
        return replace(self, drafters={**self.drafters, **{e.name: e for e in entries}})

    def with_policies(self, *entries: Entry) -> Factory:
        """This factory with ``entries`` in place of the K policies of their names."""
        return replace(self, policies={**self.policies, **{e.name: e for e in entries}})

    def runner(self) -> Callable[..., CachedModel]:
        """(model, vocab_size, vocab_map, oov_id, fast=...) -> the model with its KV cache."""
        return functools.partial(self.model, forward=self.forward, clock=self.clock)

    def tools(self) -> DraftTools:
        return DraftTools(warp=self.warp, runner=self.runner(), clock=self.clock)

    def target(self, pair: ModelPair, hidden_states: bool = False) -> TargetRunner:
        # The target alone and the verifying target take one path: FastLlama where
        # fast_llama.serves_target measured it faster, so a speedup comes from drafting alone.
        # A drafter that reads the target's hidden states needs transformers' forward, which
        # returns them (FastLlama does not): that run's target takes it.
        fast = serves_target(pair.target) and not hidden_states
        return self.runner()(pair.target, pair.vocab_size, fast=fast)

    def drafter(self, pair: ModelPair, settings: Settings) -> tuple[Drafter, str]:
        built: tuple[Drafter, str] = self.drafters[settings.drafter].load()(
            pair, settings, self.tools())
        return built

    def policy(self, settings: Settings) -> KPolicy:
        policy: KPolicy = self.policies[settings.k_policy].load()(settings.k)
        return policy

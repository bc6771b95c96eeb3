"""Speculative and plain autoregressive decoding, as generators of events.

p = target, q = draft. One ``next()`` on a run is one round, so a caller can pause,
step or stop between rounds simply by how it pulls. The loop is handed its parts (target
runner, drafter, K policy, verifier, warper, clock, random source: ``parts.Factory``) and an
event builder (``run_events.py``); it holds the algorithm alone.
"""

from __future__ import annotations

import math
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import torch

from . import registry, tree_verify
from .cached_model import CachedModel as CachedModel  # re-exported: tests and tools use it
from .drafters import NoDrafter
from .errors import InputError
from .events import Event, RunFailed, Settings, StopReason
from .models import ModelPair
from .options import (
    K_LIMIT,
    validate,  # one table of ranges (re-exported: callers import it here)
)
from .parts import Calibration, Factory, Parts, TargetRunner, Warmer
from .plans import Outcome, TargetOutputs, TargetRequest
from .policy import FixedPolicy
from .rng import Random
from .run_events import EventBuilder
from .tally import Tally

# The built-in names (the registry may hold more: registry.drafter_names()).
DRAFTERS = registry.drafter_names()
K_POLICIES = registry.policy_names()


class _Run:
    """State shared by both decoders: prompt, text stream, budget and stop conditions."""

    def __init__(self, pair: ModelPair, settings: Settings, prompt: str, speculative: bool,
                 factory: Factory) -> None:
        validate(settings, speculative, drafters=factory.drafters, policies=factory.policies)
        seed = settings.seed
        if seed is None:
            seed = int.from_bytes(os.urandom(4), "little")
        self.settings = replace(settings, seed=seed)
        self.pair = pair
        self.tok = pair.tokenizer
        self.prompt_ids = encode_prompt(self.tok, prompt, settings)
        context = _context_length(pair)
        if len(self.prompt_ids) >= context:
            raise InputError(
                f"The prompt is {len(self.prompt_ids)} tokens; the model's context is {context}. "
                f"Shorten the prompt."
            )
        self.budget = min(settings.max_new_tokens, context - len(self.prompt_ids))
        self.context_limited = self.budget < settings.max_new_tokens
        self.eos = _eos_ids(pair)
        self.detok = factory.detokenizer(self.tok, self.prompt_ids)
        self.generated: list[int] = []
        self.stop_reason: StopReason | None = None
        self.tally = Tally()
        self.events = EventBuilder(pair, self.settings, self.prompt_ids)

    def commit(self, new_ids: list[int]) -> tuple[list[int], list[str]]:
        """Append ids up to EOS or the budget; return what was kept and each one's text."""
        kept: list[int] = []
        pieces: list[str] = []
        for tid in new_ids:
            if len(self.generated) >= self.budget:
                break
            self.generated.append(tid)
            kept.append(tid)
            pieces.append("" if tid in self.eos else self.detok.push(tid))
            if tid in self.eos:
                self.stop_reason = "eos"
                break
        if self.stop_reason is None and len(self.generated) >= self.budget:
            self.stop_reason = "context" if self.context_limited else "max_new_tokens"
        if self.stop_reason is not None and pieces:
            # The last round: bytes held back for a character that never completed reach the
            # stream with it (a stop request between rounds leaves them out of the text).
            pieces[-1] += self.detok.flush()
        return kept, pieces


def _verify_pass(target: TargetRunner, fed: list[int], keep: int,
                 request: TargetRequest | None) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
    """The target's logits of the last ``keep`` positions of ``fed`` (and the hidden states a
    drafter asked for: only then does the pass return them)."""
    if request is None or not request.hidden_layers:
        return target.feed(fed, keep=keep), {}
    return target.feed_with_hidden(fed, keep, request.hidden_layers)


def _loop(run: _Run, parts: Parts, mode: str, draws_scaled: bool, t0: float,
          costs: dict[int, float] | None, stop: threading.Event | None) -> Iterator[Event]:
    """The one round loop: plan, choose K, draft, verify with one target pass, commit.

    ``t0`` is the run's time origin; ``costs``, the target's pass costs for a policy that
    wants them (timed before ``t0``), reach it from round 2 on, as they always did.
    """
    s, tally, clock = run.settings, run.tally, parts.clock
    target, drafter, policy, rng = parts.target, parts.drafter, parts.policy, parts.rng
    vocab = run.pair.vocab_size
    greedy = s.temperature == 0
    exact = s.lenience >= 1.0
    request = drafter.target_request  # None for every built-in drafter: nothing extra
    if mode == "speculative":
        tally.reached, tally.kept = [0] * s.k, [0] * s.k
    yield run.events.started(mode, parts.draft_name, draws_scaled)
    seq = list(run.prompt_ids)  # committed ids: prompt + generated

    while run.stop_reason is None:
        if _stopped(stop):
            run.stop_reason = "stopped"
            break
        if costs is not None and tally.rounds == 1:  # round 1 also prefills the prompt
            policy.calibrate(costs)
        t_round = clock()
        # Never draft past the budget: the round's extra token is the last one allowed.
        plan, choice = policy.pick(drafter.options(seq), run.budget - len(run.generated) - 1)
        drafter.follow(plan)

        t_draft = clock()
        # A stop cap: draft up to it while the policy's rule, asked after each draft, says go.
        stop_rule = policy.stop_rule(plan, choice.stop_cap) if choice.stop_cap > 0 else None
        most = choice.stop_cap if stop_rule is not None else choice.k
        proposal = drafter.propose(seq, most, rng, stop_rule) if choice.k > 0 else None
        drafts = list(proposal.tokens) if proposal is not None else []
        q_rows = proposal.q_rows if proposal is not None else torch.zeros(0, vocab)
        source = proposal.source if proposal is not None else plan.source
        k = len(drafts)

        # Verify: one target pass over the uncached tail + K drafts gives K+1 rows of p.
        t_verify = clock()
        start = target.length
        fed = seq[start:] + drafts
        tree = proposal.tree if proposal is not None else None
        hidden: dict[int, torch.Tensor] = {}
        if tree is not None:  # a tree: one pass through the tree mask, kept path only
            logits = parts.tree.score(target, seq[start:], tree)
        else:
            logits, hidden = _verify_pass(target, fed, k + 1, request)
        p_rows = parts.warp(logits, s.temperature, s.top_k, s.top_p).cpu()  # (K+1, V)
        t_done = clock()
        extra_p = None  # a tree's extra comes after its kept path, not after draft n_acc
        if tree is not None:
            q_context = tree_verify.context_rows(tree, q_rows)  # (N+1, V)
            walk = tree_verify.verify_tree(tree, p_rows, q_context, rng, greedy=greedy,
                                           lenience=s.lenience)
            verdict = tree_verify.as_verdict(walk, tree, p_rows, q_context)
            parts.tree.keep_path(target, len(seq), walk.path)
            drafter.kept_path(walk.path)  # a model tree's cache keeps the same path
            drafts_kept = list(walk.accepted_ids)
            extra_p, p_rows = p_rows[walk.extra_context], p_rows[[c + 1 for c in tree.parents]
                                                                 + [walk.extra_context]]
        else:
            verdict = parts.verifier(p_rows, q_rows, drafts, rng, greedy=greedy,
                                     lenience=s.lenience)
            drafts_kept = drafts[:verdict.n_accepted]
        n_acc = verdict.n_accepted

        # Roll the target and the drafter back to the committed prefix (the extra token is
        # fed with the next round's pass).
        target.crop(len(seq) + n_acc)
        drafter.update(n_acc)
        if request is not None:
            drafter.see_target(TargetOutputs(start, tuple(fed), len(fed) - k + n_acc,
                                             logits if request.logits else None, hidden))
        new_ids = drafts_kept + [verdict.extra_id]
        kept, pieces = run.commit(new_ids)
        seq.extend(kept)

        rnd = run.events.round(
            index=tally.rounds, drafts=drafts, source=source, q_rows=q_rows, p_rows=p_rows,
            verdict=verdict, kept=kept, pieces=pieces, extra_kept=len(kept) == len(new_ids),
            draft_time_s=t_verify - t_draft, verify_time_s=t_done - t_verify,
            n_generated=len(run.generated), target_calls=target.calls,
            draft_calls=drafter.calls, elapsed_s=clock() - t0,
            final=run.stop_reason is not None,
            reason=choice.reason if stop_rule is None else stop_rule.reason(k), exact=exact,
            parents=tree.parents if tree is not None else None, extra_p=extra_p)
        tally.add_round(rnd)
        policy.observe(Outcome(plan, k, n_acc, t_verify - t_draft, t_done - t_verify, len(fed),
                               clock() - t_round,
                               proposal.confidence if proposal is not None else (),
                               tree.parents if tree is not None else None,
                               verdict.statuses if tree is not None else ()))
        yield rnd
    tally.close(clock() - t0, target.calls, drafter.calls,
                target.forward_time_s + drafter.forward_time_s)
    yield run.events.finished(run.generated, run.detok.text, run.stop_reason, tally.summary())


# Widths of the target passes timed once per pair for the cost policy (1 + K drafts: K up to
# 16 for either drafter); widths between are interpolated.
CALIBRATION_WIDTHS = (1, 2, 3, 5, 8, 11, 17)
CALIBRATION_SWEEPS = 2
# More sweeps while the fastest times per width are not yet calibration.plausible (a burst of
# load landed on some width in every sweep so far); a curve still implausible is used by this
# process (the run's own passes rescale it) but not kept.
CALIBRATION_EXTRA_SWEEPS = 3
_VERIFY_COSTS: weakref.WeakKeyDictionary[Any, dict[int, float]] = weakref.WeakKeyDictionary()
_REFRESHING: weakref.WeakKeyDictionary[Any, threading.Thread] = weakref.WeakKeyDictionary()


def _sync(device: torch.device) -> None:
    """Wait for the device's queued work (a pass on CUDA returns before it has run)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def measure_costs(target: CachedModel, token: int,
                  clock: Callable[[], float] = time.perf_counter) -> dict[int, float]:
    """Seconds of a target pass per width, timed now: the fastest of CALIBRATION_SWEEPS
    sweeps per width (a burst of load from elsewhere lands on one sweep's width, not on all),
    and up to CALIBRATION_EXTRA_SWEEPS more while the curve is not plausible."""
    from .calibration import plausible

    best = dict.fromkeys(CALIBRATION_WIDTHS, math.inf)
    for sweep in range(CALIBRATION_SWEEPS + CALIBRATION_EXTRA_SWEEPS):
        if sweep >= CALIBRATION_SWEEPS and plausible(best):
            break
        for n in CALIBRATION_WIDTHS:
            _sync(target.device)
            t0 = clock()
            target.time_pass(n, token)
            _sync(target.device)
            best[n] = min(best[n], clock() - t0)
    return best


# (target, last token) -> seconds of a target pass per width, timed now (measure_costs)
MeasureCosts = Callable[[CachedModel, int], dict[int, float]]
# () -> what names this machine in the store's key (None: calibration.machine_parts)
MachineParts = Callable[[], dict[str, Any]]


def calibration_key(target: CachedModel, machine: MachineParts | None = None
                    ) -> tuple[str, dict[str, Any]]:
    """The store's key for ``target``'s passes here: machine, device, model and its path."""
    from . import calibration

    fast = target.fast
    path = "transformers" if fast is None else "fast graphs" if fast.graphs else \
        "fast fixed" if fast.fixed else "fast sliced"
    here = (machine or calibration.machine_parts)()
    parts = {**here, **calibration.device_parts(target.device),
             **calibration.model_parts(target.model, path), "widths": list(CALIBRATION_WIDTHS)}
    return calibration.fingerprint(parts), parts


def verify_costs(target: CachedModel, token: int, measure: MeasureCosts = measure_costs
                 ) -> dict[int, float]:
    """Seconds of a target pass per width: remembered per target model in this process, else
    kept from an earlier launch on this machine and device (core/calibration.py), else timed
    now and kept.

    On a CPU v(n) is far from flat (SmolLM2-135M, 2 cores, 300-token context: ~83 ms for one
    token, ~105 ms for 5, ~220 ms for 11): the cost policy needs it before it may size a long
    lookup draft. Each width is one extra pass, cropped away; ~1 s once per pair.
    """
    known = _VERIFY_COSTS.get(target.model)
    if known is None:
        known = _kept_or_measured(target, token, measure)[0]
        _VERIFY_COSTS[target.model] = known
    return known


def _kept_or_measured(target: CachedModel, token: int, measure: MeasureCosts,
                      machine: MachineParts | None = None
                      ) -> tuple[dict[int, float], str, dict[str, Any], bool]:
    """(costs, store key, key parts, whether they were kept): the figures an earlier launch
    kept for this machine, device and target, else timed now by ``measure`` and kept."""
    from . import calibration

    key, parts = calibration_key(target, machine)
    kept = calibration.load(key, CALIBRATION_WIDTHS)
    if kept is not None:
        return kept, key, parts, True
    measured = measure(target, token)
    if calibration.plausible(measured):
        calibration.save(key, measured, parts)
    return measured, key, parts, False


def _target_runner(pair: ModelPair, runner: type[CachedModel] = CachedModel) -> CachedModel:
    """The target on the engine's path (fast_llama.serves_target), nothing fed yet."""
    from .fast_llama import serves_target

    return runner(pair.target, pair.vocab_size, fast=serves_target(pair.target))


def _prime(pair: ModelPair, target: CachedModel, context: int) -> int:
    """Feed ``target`` a ``context``-token prefix; the last token of it. On the fixed path
    (CUDA) every step width 1 + K is captured here, the draft's few too: their graphs go to the
    next run (a spare state), so no run's clock pays a capture."""
    from .fast_llama import FIXED_WIDTHS, FastLlama, graphs_wanted, unsupported

    if target.fast is not None:
        target.fast.warm(range(1, FIXED_WIDTHS + 1))
    draft = pair.draft
    if draft is not None and unsupported(draft) is None and \
            graphs_wanted(next(draft.parameters()).device):
        FastLlama(pair.draft).warm(range(1, 4))  # a draft feeds 1 token, 2-3 after a rollback
    ids = [i % pair.vocab_size for i in range(context)]
    target.feed(ids, keep=1)
    return ids[-1]


def _primed(pair: ModelPair, context: int) -> tuple[CachedModel, int]:
    """The target on the engine's path after a ``context``-token prefix (:func:`_prime`), and
    the last token of it."""
    target = _target_runner(pair)
    return target, _prime(pair, target, context)


# The widest pass each model has run in this process (warm_widths runs each width once).
_WARMED: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def warm_widths(pair: ModelPair, widest: int, draft: bool, context: int = 32, *,
                runner: type[CachedModel] = CachedModel) -> None:
    """Run a pass of every width 1 ... ``widest`` once per process through the draft model
    (with ``draft``) and, off the CPU, the target, each on the path a run takes, after a
    ``context``-token prefix.

    A fresh process's first pass at a new width may pay one-off costs (a CUDA graph captured,
    kernels loaded, a oneDNN primitive built for the shape); a run timed from its first round
    would count them, so a one-off CLI run's speed, and any speedup taken from it, would read
    lower than a warm process's. On the CPU the target's passes showed none (first ÷ later
    pass at widths 2-17: median 1.04 on the bundled target, 1.9 on its draft) and 17 of them
    cost a one-off run seconds, so there only the draft's (a few ms each) run unless
    ``SPECVIZ_WARM=all``. Later calls return at once. ``SPECVIZ_WARM=0`` turns it all off
    (benchmarks/oneoff.py --compare-warm measures the three).
    """
    mode = os.environ.get("SPECVIZ_WARM", "")
    if mode == "0":
        return
    from .fast_llama import serves_target

    models: list[tuple[Any, CachedModel]] = []
    if _WARMED.get(pair.target, 0) < widest:
        target = runner(pair.target, pair.vocab_size, fast=serves_target(pair.target))
        if mode == "all" or target.device.type != "cpu":
            models.append((pair.target, target))
    if draft and pair.draft is not None and _WARMED.get(pair.draft, 0) < widest:
        lm = runner(pair.draft, pair.vocab_size, pair.draft_vocab_map, pair.draft_oov_id,
                    fast=True)
        if lm.fast is None or not lm.fast.graphs:  # graphs: _primed captures the draft's few
            models.append((pair.draft, lm))
    ids = [i % pair.vocab_size for i in range(context)]
    for model, lm in models:
        lm.feed(ids, keep=1)
        for n in range(_WARMED.get(model, 0) + 1, widest + 1):
            lm.time_pass(n, ids[-1])
        _WARMED[model] = widest


def calibrate(pair: ModelPair, context: int = 32, refresh: bool = False, *,
              measure: MeasureCosts = measure_costs, machine: MachineParts | None = None,
              runner: type[CachedModel] = CachedModel) -> dict[int, float]:
    """:func:`verify_costs` for ``pair``'s target now, after a ``context``-token prefix, so
    that the first run with the cost policy does not pay for it inside its own clock (the app
    calls this while loading; a race's first speculative run lost ~1 s to it otherwise).

    Remembered per target model in this process (a later call returns at once). Figures kept
    from an earlier launch on this machine and device return at once too; with ``refresh`` (the
    app, after loading: not a one-off run, whose passes a second thread would slow) a thread
    then times the passes again and blends the result into the kept figures and this
    process's (:func:`calibration.blend`: bounded, so a busy moment cannot wreck them). Join
    it with :func:`wait_for_refresh`. ``measure`` times the passes and ``machine`` names this
    machine in the store's key (the real ones by default; the tests pass a fixed curve);
    ``runner`` is the target's model class (CachedModel).

    With figures kept and no graphs to capture, the target runs no pass here: the key needs
    its path, not a prefix (a launch saves a 32-token pass).
    """
    from . import calibration

    known = _VERIFY_COSTS.get(pair.target)
    if known is not None:
        return known
    with torch.inference_mode():
        target = _target_runner(pair, runner)
        key, parts = calibration_key(target, machine)
        kept = calibration.load(key, CALIBRATION_WIDTHS)
        graphs = target.fast is not None and target.fast.graphs
        token = _prime(pair, target, context) if kept is None or graphs else 0
        if kept is None:  # timed now and kept (if plausible): nothing to re-measure
            kept = measure(target, token)
            if calibration.plausible(kept):
                calibration.save(key, kept, parts)
            _VERIFY_COSTS[pair.target] = kept
            return kept
        if refresh and graphs:
            # On graphs a sweep takes milliseconds, and a capture beside another thread's
            # kernels would fail: re-measured here, not behind.
            again = measure(target, token)
            if calibration.plausible(again):
                kept = calibration.blend(kept, again)
                calibration.save(key, kept, parts)
            refresh = False
    _VERIFY_COSTS[pair.target] = kept
    if refresh and pair.target not in _REFRESHING:
        model = pair.target

        def remeasure() -> None:
            try:
                with torch.inference_mode():
                    again, tok = _primed(pair, context)
                    measured = measure(again, tok)
                if calibration.plausible(measured):  # a busy moment's curve: not blended in
                    blended = calibration.blend(kept, measured)
                    calibration.save(key, blended, parts)
                    _VERIFY_COSTS[model] = blended
            except Exception:  # noqa: BLE001, S110 - the kept figures stand; nothing to tell
                pass
            finally:
                _REFRESHING.pop(model, None)

        thread = threading.Thread(target=remeasure, name="specviz-calibration", daemon=True)
        _REFRESHING[model] = thread
        thread.start()
    return kept


def wait_for_refresh(pair: ModelPair, timeout: float | None = None) -> None:
    """Wait for :func:`calibrate`'s background re-measurement of ``pair``'s target, if any."""
    thread = _REFRESHING.get(pair.target)
    if thread is not None:
        thread.join(timeout)


def encode_prompt(tokenizer: Any, prompt: str, settings: Settings | None = None) -> list[int]:
    """Prompt -> ids; an empty prompt starts from BOS, or is refused when there is none."""
    if not prompt:
        bos = getattr(tokenizer, "bos_token_id", None)
        if bos is None:
            raise InputError("The prompt is empty and this tokenizer has no BOS token to start "
                             "from: type a prompt.")
        return [int(bos)]
    ids = [int(i) for i in tokenizer(prompt, add_special_tokens=True)["input_ids"]]
    if not ids:
        bos = getattr(tokenizer, "bos_token_id", None)
        if bos is None:
            raise InputError("The prompt encodes to no tokens and there is no BOS token.")
        ids = [int(bos)]
    return ids


def chat_prompt(tokenizer: Any, user_text: str) -> str:
    """Wrap a user message in the model's chat template (instruct models expect it)."""
    if not getattr(tokenizer, "chat_template", None):
        return user_text
    messages = [{"role": "user", "content": user_text}]
    return str(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))


def _context_length(pair: ModelPair) -> int:
    limits = [getattr(m.config, "max_position_embeddings", None) or
              getattr(m.config, "n_positions", None) or 1 << 30
              for m in (pair.target, pair.draft) if m is not None]
    return int(min(limits))


def _eos_ids(pair: ModelPair) -> set[int]:
    ids: set[int] = set()
    tok_eos = getattr(pair.tokenizer, "eos_token_id", None)
    if tok_eos is not None:
        ids.add(int(tok_eos))
    gen = getattr(pair.target, "generation_config", None)
    gen_eos = getattr(gen, "eos_token_id", None) if gen is not None else None
    if isinstance(gen_eos, int):
        ids.add(gen_eos)
    elif isinstance(gen_eos, list | tuple):
        ids.update(int(i) for i in gen_eos)
    return ids


def _stopped(stop: threading.Event | None) -> bool:
    return stop is not None and stop.is_set()


def _run(pair: ModelPair, settings: Settings, prompt: str, stop: threading.Event | None,
         rng: Random | None, factory: Factory, speculative: bool,
         default_calibration: Calibration = calibrate,
         default_warm: Warmer = warm_widths) -> Iterator[Event]:
    """Build the run's parts, time the target's passes if the policy wants them and run each
    pass width the run may take once (both before the run's clock starts, so a one-off run's
    tokens/s pays for neither), and loop."""
    run = _Run(pair, settings, prompt, speculative, factory)
    s = run.settings
    assert s.seed is not None
    random = rng if rng is not None else factory.random(s.seed)
    if speculative:
        drafter, draft_name = factory.drafter(pair, s)
        policy = factory.policy(s)
        draws_scaled = factory.drafters[s.drafter].needs_draft_model
    else:
        drafter, draft_name = NoDrafter(pair.vocab_size), None
        policy, draws_scaled = FixedPolicy(0), False
    request = drafter.target_request
    target = factory.target(pair, hidden_states=request is not None
                            and bool(request.hidden_layers))
    costs = None
    if policy.wants_verify_costs:
        costs = (factory.calibrate or default_calibration)(pair)
    # 1 + K drafts, K up to K_LIMIT (any policy, lookup's budget; the draft model catches up
    # as many after a round that kept them all); the target alone feeds one token.
    (factory.warm or default_warm)(pair, 1 + K_LIMIT if speculative else 1,
                                   speculative and draws_scaled)
    t0 = factory.clock()  # the run's clock starts after the calibration
    parts = Parts(target=target, drafter=drafter, draft_name=draft_name, policy=policy,
                  verifier=factory.verifier, warp=factory.warp, clock=factory.clock, rng=random,
                  tree=factory.tree)
    yield from _loop(run, parts, "speculative" if speculative else "baseline", draws_scaled,
                     t0, costs, stop)


class SpeculativeDecoder:
    """Draft up to K tokens (model, lookup or both), verify them with one pass of p, keep the
    exact prefix. ``factory`` supplies the run's parts (the real ones by default)."""

    def __init__(self, pair: ModelPair, settings: Settings, *,
                 factory: Factory | None = None) -> None:
        self.factory = factory or Factory()
        validate(settings, speculative=True, drafters=self.factory.drafters,
                 policies=self.factory.policies)
        entry = self.factory.drafters[settings.drafter]
        if pair.draft is None and entry.needs_draft_model:
            free = [e.name for e in self.factory.drafters.values() if not e.needs_draft_model]
            raise InputError(f"The {settings.drafter} drafter needs a draft model; this pair has "
                             f"none (the {' or '.join(free)} drafter needs none).")
        if pair.cross_tokenizer and entry.needs_draft_model and not entry.cross_tokenizer:
            across = [e.name for e in self.factory.drafters.values() if e.cross_tokenizer]
            raise InputError(f"This pair's draft has a tokenizer of its own: the "
                             f"{settings.drafter} drafter cannot use it (the "
                             f"{' or '.join(across)} drafter can).")
        self.pair = pair
        self.settings = settings

    @torch.inference_mode()
    def run(self, prompt: str, stop: threading.Event | None = None, *,
            rng: Random | None = None) -> Iterator[Event]:
        """Yield RunStarted, one Round per round, then RunFinished."""
        yield from _run(self.pair, self.settings, prompt, stop, rng, self.factory, True)


class AutoregressiveDecoder:
    """The target alone, one token per forward pass: the baseline (the same loop, no drafts)."""

    def __init__(self, pair: ModelPair, settings: Settings, *,
                 factory: Factory | None = None) -> None:
        self.factory = factory or Factory()
        validate(settings, speculative=False, drafters=self.factory.drafters,
                 policies=self.factory.policies)
        self.pair = pair
        self.settings = settings

    @torch.inference_mode()
    def run(self, prompt: str, stop: threading.Event | None = None, *,
            rng: Random | None = None) -> Iterator[Event]:
        """Yield RunStarted, one Round per token (k = 0), then RunFinished."""
        yield from _run(self.pair, self.settings, prompt, stop, rng, self.factory, False)


def guarded(events: Iterator[Event]) -> Iterator[Event]:
    """Pass events through; turn an exception into a final RunFailed with a readable message."""
    from .errors import SpecvizError

    try:
        yield from events
    except SpecvizError as exc:
        yield RunFailed(message=str(exc), kind=exc.kind)
    except torch.OutOfMemoryError:
        yield RunFailed(message="Out of memory while decoding: try a smaller pair, fewer new "
                        "tokens, a smaller K, or the CPU.", kind="oom")
    except Exception as exc:  # noqa: BLE001 - the run must end with an event, whatever broke
        yield RunFailed(message=f"The decoder failed: {type(exc).__name__}: {exc}", kind="decoder")

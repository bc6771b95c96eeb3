"""Speculative and plain autoregressive decoding, as generators of events.

p = target, q = draft. One ``next()`` on a run is one round, so a caller can pause,
step or stop between rounds simply by how it pulls.
"""

from __future__ import annotations

import math
import os
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

import torch

from .drafters import (
    DRAFTERS,
    CachedModel,
    Drafter,
    HybridDrafter,
    LookupDrafter,
    ModelDrafter,
    NoDrafter,
)
from .errors import InputError
from .events import (
    FORMAT_VERSION,
    DraftPosition,
    Event,
    ExtraKind,
    ExtraToken,
    PairInfo,
    Round,
    RunFailed,
    RunFinished,
    RunStarted,
    Settings,
    StopReason,
    TopN,
)
from .models import ModelPair
from .policy import K_LIMIT, K_POLICIES, FixedPolicy, KPolicy, Outcome, make_policy
from .rng import Random, TorchRandom
from .sampling import logits_to_probs
from .tally import Tally
from .text import IncrementalDetokenizer, TokenTexts
from .verify import verify

K_MIN, K_MAX = 1, K_LIMIT
# Below this, logits / T overflows float32 (|logit| ~ 30 gives 3e31 and more) and softmax
# turns to NaN; a user meaning "greedy" should type 0.
TEMPERATURE_MIN = 1e-30
NGRAM_LIMIT = 8

_Model = CachedModel  # the engine's view of one model + KV cache (tests patch its feed)


def validate(settings: Settings, speculative: bool = True) -> None:
    """Raise InputError with a one-line reason for any setting out of range."""
    s = settings
    if speculative and not K_MIN <= s.k <= K_MAX:
        raise InputError(f"K must be between {K_MIN} and {K_MAX}, got {s.k}.")
    t = s.temperature
    if not (t == 0 or TEMPERATURE_MIN <= t < math.inf):  # also refuses NaN
        raise InputError(f"Temperature must be 0 (greedy) or a finite number from "
                         f"{TEMPERATURE_MIN:g}, got {t}.")
    if not 0.0 < s.top_p <= 1.0:
        raise InputError(f"top-p must be in (0, 1], got {s.top_p}.")
    if s.top_k < 0:
        raise InputError(f"top-k must be 0 (off) or positive, got {s.top_k}.")
    if s.max_new_tokens < 1:
        raise InputError(f"max new tokens must be at least 1, got {s.max_new_tokens}.")
    if s.top_n < 1:
        raise InputError(f"top-N must be at least 1, got {s.top_n}.")
    if s.drafter not in DRAFTERS:
        raise InputError(f"The drafter must be one of {', '.join(DRAFTERS)}, got {s.drafter!r}.")
    if not 1 <= s.ngram_min <= s.ngram_max <= NGRAM_LIMIT:
        raise InputError(f"n-gram sizes need 1 <= min <= max <= {NGRAM_LIMIT}, got min "
                         f"{s.ngram_min}, max {s.ngram_max}.")
    if not 1 <= s.lookup_k <= K_MAX:
        raise InputError(f"The lookup budget must be between 1 and {K_MAX}, got {s.lookup_k}.")
    if s.k_policy not in K_POLICIES:
        raise InputError(f"The K policy must be one of {', '.join(K_POLICIES)}, got "
                         f"{s.k_policy!r}.")
    if not 0.0 < s.lenience <= 1.0:  # also refuses NaN
        raise InputError(f"Lenience must be in (0, 1] (1 = exact), got {s.lenience}.")


class _Run:
    """State shared by both decoders: prompt, randomness, text stream, stop conditions."""

    def __init__(self, pair: ModelPair, settings: Settings, prompt: str,
                 speculative: bool, rng: Random | None) -> None:
        validate(settings, speculative)
        seed = settings.seed
        if seed is None:
            seed = int.from_bytes(os.urandom(4), "little")
        self.settings = replace(settings, seed=seed)
        self.rng: Random = rng if rng is not None else TorchRandom(seed)
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
        self.texts = TokenTexts(self.tok)
        self.detok = IncrementalDetokenizer(self.tok, self.prompt_ids)
        self.generated: list[int] = []
        self.stop_reason: StopReason | None = None
        self.tally = Tally()
        self.t0 = time.perf_counter()

    def top(self, probs: torch.Tensor, extra_id: int | None = None) -> TopN:
        """Top-N of a 1-D distribution, plus ``extra_id`` if it lies outside the top-N."""
        return self.tops(probs[None], [extra_id])[0]

    def tops(self, rows: torch.Tensor, extra_ids: Sequence[int | None]) -> list[TopN]:
        """:meth:`top` of each of the first ``len(extra_ids)`` rows, in one ``topk`` call (a
        call per row cost ~2% of a run's wall time once the forward passes got faster)."""
        rows = rows[:len(extra_ids)]
        n = min(self.settings.top_n, rows.shape[-1])
        values, ids = torch.topk(rows, n, dim=-1)
        out = []
        for r, (id_list, prob_list) in enumerate(zip(ids.tolist(), values.tolist(), strict=True)):
            extra_id = extra_ids[r]
            if extra_id is not None and extra_id not in id_list:
                id_list.append(extra_id)
                prob_list.append(float(rows[r, extra_id]))
            out.append(TopN(tuple(id_list), tuple(prob_list),
                            tuple(self.texts(i) for i in id_list)))
        return out

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

    def started(self, mode: str, draft_name: str | None) -> RunStarted:
        pair = self.pair
        info = PairInfo(draft=draft_name, target=pair.target_name, device=str(pair.device),
                        dtype=str(pair.dtype).removeprefix("torch."), vocab_size=pair.vocab_size,
                        draft_temperature_scale=(pair.draft_temperature_scale
                                                 if mode == "speculative"
                                                 and self.settings.drafter != "lookup"
                                                 else 1.0))
        return RunStarted(mode=mode, prompt=self.tok.decode(self.prompt_ids),  # type: ignore[arg-type]
                          prompt_ids=tuple(self.prompt_ids), pair=info, settings=self.settings,
                          format=FORMAT_VERSION)

    def finished(self, target: CachedModel, drafter: Drafter) -> RunFinished:
        self.tally.close(time.perf_counter() - self.t0, target.calls, drafter.calls,
                         target.forward_time_s + drafter.forward_time_s)
        return RunFinished(generated_ids=tuple(self.generated), text=self.detok.text,
                           stop_reason=self.stop_reason or "stopped", summary=self.tally.summary())


def _loop(run: _Run, drafter: Drafter, policy: KPolicy, mode: str, draft_name: str | None,
          stop: threading.Event | None) -> Iterator[Event]:
    """The one round loop: plan, choose K, draft, verify with one target pass, commit."""
    pair, s = run.pair, run.settings
    target = CachedModel(pair.target, pair.vocab_size)
    greedy = s.temperature == 0
    exact = s.lenience >= 1.0
    tally = run.tally
    calibrate = getattr(policy, "calibrate", None)  # the cost policy wants v(n) up front
    if mode == "speculative":
        tally.reached, tally.kept = [0] * s.k, [0] * s.k
    yield run.started(mode, draft_name)
    seq = list(run.prompt_ids)  # committed ids: prompt + generated

    while run.stop_reason is None:
        if _stopped(stop):
            run.stop_reason = "stopped"
            break
        if calibrate is not None and tally.rounds == 1:  # the prompt is in the cache now
            calibrate(verify_costs(target, seq[-1]))
        t_round = time.perf_counter()
        # Never draft past the budget: the round's extra token is the last one allowed.
        plan, choice = policy.pick(drafter.options(seq), run.budget - len(run.generated) - 1)
        drafter.follow(plan)

        t_draft = time.perf_counter()
        # A stop cap: draft up to it while the policy's rule, asked after each draft, says go.
        stop_rule = policy.stop_rule(plan, choice.stop_cap) if choice.stop_cap > 1 else None
        most = choice.stop_cap if stop_rule is not None else choice.k
        proposal = drafter.propose(seq, most, run.rng, stop_rule) if choice.k > 0 else None
        drafts = list(proposal.tokens) if proposal is not None else []
        q_rows = proposal.q_rows if proposal is not None else torch.zeros(0, pair.vocab_size)
        source = proposal.source if proposal is not None else plan.source
        k = len(drafts)

        # Verify: one target pass over the uncached tail + K drafts gives K+1 rows of p.
        t_verify = time.perf_counter()
        fed = seq[target.length:] + drafts
        p_rows = logits_to_probs(target.feed(fed, keep=k + 1), s.temperature, s.top_k,
                                 s.top_p).cpu()  # (K+1, V)
        t_done = time.perf_counter()
        verdict = verify(p_rows, q_rows, drafts, run.rng, greedy=greedy, lenience=s.lenience)
        n_acc = verdict.n_accepted

        # Roll the target and the drafter back to the committed prefix (the extra token is
        # fed with the next round's pass).
        target.crop(len(seq) + n_acc)
        drafter.update(n_acc)
        new_ids = drafts[:n_acc] + [verdict.extra_id]
        kept, pieces = run.commit(new_ids)
        seq.extend(kept)

        q_tops = run.tops(q_rows, drafts) if drafts else []
        p_tops = run.tops(p_rows, drafts) if drafts else []
        drafted = tuple(
            DraftPosition(
                index=i, token_id=x, text=run.texts(x), q=float(q_rows[i, x]),
                p=float(p_rows[i, x]), ratio=verdict.ratios[i], r=verdict.rs[i],
                status=verdict.statuses[i], q_top=q_tops[i],
                p_top=p_tops[i], drafter=source,
            )
            for i, x in enumerate(drafts)
        )
        extra_event = None
        if len(kept) == len(new_ids):  # the extra token survived EOS/budget trimming
            dist, extra_id = verdict.extra_dist, verdict.extra_id
            kind: ExtraKind = "target" if k == 0 else verdict.extra_kind  # K = 0: a plain step
            extra_event = ExtraToken(
                kind=kind,
                token_id=extra_id, text=run.texts(extra_id), prob=float(dist[extra_id]),
                p=float(p_rows[n_acc, extra_id]), dist_top=run.top(dist, extra_id),
            )
        rnd = Round(
            index=tally.rounds,
            k=k,
            drafted=drafted,
            n_accepted=n_acc,
            extra=extra_event,
            bonus_top=run.top(p_rows[k]) if k else None,
            appended_ids=tuple(kept),
            appended_text="".join(pieces),
            appended_texts=tuple(pieces),
            draft_time_s=t_verify - t_draft,
            verify_time_s=t_done - t_verify,
            n_generated=len(run.generated),
            target_calls=target.calls,
            draft_calls=drafter.calls,
            elapsed_s=time.perf_counter() - run.t0,
            final=run.stop_reason is not None,
            policy_reason=choice.reason if stop_rule is None else stop_rule.reason(k),
            exact=exact,
        )
        tally.add_round(rnd)
        policy.observe(Outcome(plan, k, n_acc, t_verify - t_draft, t_done - t_verify, len(fed),
                               time.perf_counter() - t_round,
                               proposal.confidence if proposal is not None else ()))
        yield rnd
    yield run.finished(target, drafter)


# Widths of the target passes timed once per pair for the cost policy (1 + K drafts: K up to
# 16 for either drafter); widths between are interpolated.
CALIBRATION_WIDTHS = (1, 2, 3, 5, 8, 11, 17)
CALIBRATION_SWEEPS = 2
_VERIFY_COSTS: weakref.WeakKeyDictionary[Any, dict[int, float]] = weakref.WeakKeyDictionary()


def verify_costs(target: CachedModel, token: int) -> dict[int, float]:
    """Seconds of a target pass per width, timed once per target model (then remembered).

    On a CPU v(n) is far from flat (SmolLM2-135M, 2 cores, 300-token context: ~83 ms for one
    token, ~105 ms for 5, ~220 ms for 11): the cost policy needs it before it may size a long
    lookup draft. Each width is one extra pass, cropped away; ~1 s once per pair.
    """
    known = _VERIFY_COSTS.get(target.model)
    if known is None:
        # Two sweeps, the faster of each width's two passes: a burst of load from elsewhere
        # lands on one sweep's width, not on both.
        sweeps = [{n: target.time_pass(n, token) for n in CALIBRATION_WIDTHS}
                  for _ in range(CALIBRATION_SWEEPS)]
        known = {n: min(sweep[n] for sweep in sweeps) for n in CALIBRATION_WIDTHS}
        _VERIFY_COSTS[target.model] = known
    return known


def calibrate(pair: ModelPair, context: int = 32) -> dict[int, float]:
    """:func:`verify_costs` for ``pair``'s target now, after a ``context``-token prefix, so
    that the first run with the cost policy does not pay for it inside its own clock (the app
    calls this while loading; a race's first speculative run lost ~1 s to it otherwise)."""
    with torch.inference_mode():
        target = CachedModel(pair.target, pair.vocab_size)
        ids = [i % pair.vocab_size for i in range(context)]
        target.feed(ids, keep=1)
        return verify_costs(target, ids[-1])


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


class SpeculativeDecoder:
    """Draft up to K tokens (model, lookup or both), verify them with one pass of p, keep the
    exact prefix."""

    def __init__(self, pair: ModelPair, settings: Settings) -> None:
        validate(settings, speculative=True)
        if pair.draft is None and settings.drafter != "lookup":
            raise InputError(f"The {settings.drafter} drafter needs a draft model; this pair has "
                             f"none (the lookup drafter needs none).")
        self.pair = pair
        self.settings = settings

    def _drafter(self, s: Settings) -> tuple[Drafter, str]:
        pair = self.pair
        if s.drafter == "lookup":
            return (LookupDrafter(pair.vocab_size, s.ngram_min, s.ngram_max, s.lookup_k),
                    "prompt lookup")

        # The draft may be calibrated to draw at T × scale (models.TEMPERATURE_SCALE_KEY):
        # q is whatever it draws from, and verify tests against that same q, so exactness
        # holds for any scale; T = 0 stays greedy.
        t_draft = s.temperature * pair.draft_temperature_scale

        def probs(logits: torch.Tensor) -> torch.Tensor:
            return logits_to_probs(logits, t_draft, s.top_k, s.top_p)

        model = ModelDrafter(pair.draft, pair.vocab_size, probs, s.temperature == 0,
                             pair.draft_vocab_map, pair.draft_oov_id)
        name = pair.draft_name or "draft"
        if s.drafter == "model":
            return model, name
        lookup = LookupDrafter(pair.vocab_size, s.ngram_min, s.ngram_max, s.lookup_k)
        return HybridDrafter(model, lookup), f"{name} + prompt lookup"

    @torch.inference_mode()
    def run(self, prompt: str, stop: threading.Event | None = None, *,
            rng: Random | None = None) -> Iterator[Event]:
        """Yield RunStarted, one Round per round, then RunFinished."""
        run = _Run(self.pair, self.settings, prompt, speculative=True, rng=rng)
        s = run.settings
        drafter, name = self._drafter(s)
        yield from _loop(run, drafter, make_policy(s.k_policy, s.k), "speculative", name, stop)


class AutoregressiveDecoder:
    """The target alone, one token per forward pass: the baseline (the same loop, no drafts)."""

    def __init__(self, pair: ModelPair, settings: Settings) -> None:
        validate(settings, speculative=False)
        self.pair = pair
        self.settings = settings

    @torch.inference_mode()
    def run(self, prompt: str, stop: threading.Event | None = None, *,
            rng: Random | None = None) -> Iterator[Event]:
        """Yield RunStarted, one Round per token (k = 0), then RunFinished."""
        run = _Run(self.pair, self.settings, prompt, speculative=False, rng=rng)
        yield from _loop(run, NoDrafter(self.pair.vocab_size), FixedPolicy(0), "baseline", None,
                         stop)


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

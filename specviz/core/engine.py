"""Speculative and plain autoregressive decoding, as generators of events.

p = target, q = draft. One ``next()`` on a run is one round, so a caller can pause,
step or stop between rounds simply by how it pulls.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import torch

from .errors import InputError
from .events import (
    DraftPosition,
    Event,
    ExtraToken,
    PairInfo,
    Round,
    RunFailed,
    RunFinished,
    RunStarted,
    Settings,
    StopReason,
    Summary,
    TopN,
)
from .models import ModelPair, draft_id_table, model_device
from .sampling import acceptance_ratio, logits_to_probs, residual, sample
from .text import IncrementalDetokenizer, TokenTexts

K_MIN, K_MAX = 1, 16


def validate(settings: Settings, speculative: bool = True) -> None:
    """Raise InputError with a one-line reason for any setting out of range."""
    s = settings
    if speculative and not K_MIN <= s.k <= K_MAX:
        raise InputError(f"K must be between {K_MIN} and {K_MAX}, got {s.k}.")
    if not s.temperature >= 0 or s.temperature != s.temperature:
        raise InputError(f"Temperature must be 0 (greedy) or positive, got {s.temperature}.")
    if not 0.0 < s.top_p <= 1.0:
        raise InputError(f"top-p must be in (0, 1], got {s.top_p}.")
    if s.top_k < 0:
        raise InputError(f"top-k must be 0 (off) or positive, got {s.top_k}.")
    if s.max_new_tokens < 1:
        raise InputError(f"max new tokens must be at least 1, got {s.max_new_tokens}.")
    if s.top_n < 1:
        raise InputError(f"top-N must be at least 1, got {s.top_n}.")


class _Model:
    """One causal LM with its own KV cache; ``feed`` runs only the ids the cache lacks."""

    def __init__(self, model: Any, vocab_size: int, vocab_map: torch.Tensor | None = None,
                 oov_id: int = 0) -> None:
        from transformers import DynamicCache

        self.model = model
        self.device = model_device(model)  # parameters may span devices (device_map)
        self.vocab_size = vocab_size
        self.cache = DynamicCache(config=model.config)
        self.ids: list[int] = []  # what the cache holds, for checks and debugging
        self.calls = 0
        # Reduced-vocabulary draft: target id -> draft id on the way in, scatter on the way out.
        self.vocab_map = vocab_map.to(self.device) if vocab_map is not None else None
        self.to_local: torch.Tensor | None = None
        if vocab_map is not None:
            self.to_local = draft_id_table(vocab_map, vocab_size, oov_id).to(self.device)

    @property
    def length(self) -> int:
        return int(self.cache.get_seq_length())

    def feed(self, ids: list[int], keep: int) -> torch.Tensor:
        """Run ``ids`` after the cached prefix; logits of the last ``keep`` positions, (keep, V)."""
        inp = torch.tensor([ids], dtype=torch.long, device=self.device)  # (1, T)
        if self.to_local is not None:
            inp = self.to_local[inp]
        out = self.model(input_ids=inp, past_key_values=self.cache, use_cache=True,
                         logits_to_keep=keep)
        self.cache = out.past_key_values
        self.ids.extend(ids)
        self.calls += 1
        logits = out.logits[0, -keep:].to(self.device)  # (keep, V_model)
        if self.vocab_map is not None:
            full: torch.Tensor = logits.new_full((keep, self.vocab_size), float("-inf"))
            full[:, self.vocab_map] = logits
            return full
        shared: torch.Tensor = logits[:, : self.vocab_size]
        return shared

    def crop(self, length: int) -> None:
        """Forget everything after the first ``length`` cached tokens."""
        extra = self.length - length
        if extra > 0:
            self.cache.crop(-extra)  # transformers 5: a negative count of tokens to remove
            del self.ids[length:]


@dataclass
class _Stats:
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    draft_time: float = 0.0
    verify_time: float = 0.0
    reached: list[int] | None = None
    kept: list[int] | None = None


class _Run:
    """State shared by both decoders: prompt, RNG, text stream, stop conditions."""

    def __init__(self, pair: ModelPair, settings: Settings, prompt: str,
                 speculative: bool) -> None:
        validate(settings, speculative)
        seed = settings.seed
        if seed is None:
            seed = int.from_bytes(os.urandom(4), "little")
        self.settings = replace(settings, seed=seed)
        self.generator = torch.Generator().manual_seed(seed)
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
        self.t0 = time.perf_counter()

    def rand(self) -> float:
        return float(torch.rand((), generator=self.generator))

    def draw(self, probs: torch.Tensor) -> int:
        if self.settings.temperature == 0:
            return int(probs.argmax())
        return sample(probs, self.generator)

    def top(self, probs: torch.Tensor, extra_id: int | None = None) -> TopN:
        """Top-N of a 1-D distribution, plus ``extra_id`` if it lies outside the top-N."""
        n = min(self.settings.top_n, probs.shape[-1])
        values, ids = torch.topk(probs, n)
        id_list = [int(i) for i in ids]
        prob_list = [float(v) for v in values]
        if extra_id is not None and extra_id not in id_list:
            id_list.append(extra_id)
            prob_list.append(float(probs[extra_id]))
        return TopN(tuple(id_list), tuple(prob_list), tuple(self.texts(i) for i in id_list))

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
        return kept, pieces

    def started(self, mode: str, draft_name: str | None) -> RunStarted:
        pair = self.pair
        info = PairInfo(draft=draft_name, target=pair.target_name, device=str(pair.device),
                        dtype=str(pair.dtype).removeprefix("torch."), vocab_size=pair.vocab_size)
        return RunStarted(mode=mode, prompt=self.tok.decode(self.prompt_ids),  # type: ignore[arg-type]
                          prompt_ids=tuple(self.prompt_ids), pair=info, settings=self.settings)

    def finished(self, stats: _Stats, target_calls: int, draft_calls: int) -> RunFinished:
        tail = self.detok.flush()
        del tail  # already part of detok.text
        wall = time.perf_counter() - self.t0
        n = len(self.generated)
        reached = stats.reached or []
        kept = stats.kept or []
        tested = sum(reached)
        summary = Summary(
            tokens=n,
            rounds=stats.rounds,
            drafted=stats.drafted,
            accepted=stats.accepted,
            acceptance_rate=stats.accepted / stats.drafted if stats.drafted else 0.0,
            mean_tokens_per_round=n / stats.rounds if stats.rounds else 0.0,
            acceptance_by_position=tuple(k / r if r else 0.0 for k, r in zip(kept, reached,
                                                                              strict=True)),
            target_calls=target_calls,
            draft_calls=draft_calls,
            draft_time_s=stats.draft_time,
            verify_time_s=stats.verify_time,
            wall_time_s=wall,
            tokens_per_s=n / wall if wall > 0 else 0.0,
            alpha=sum(kept) / tested if tested else 0.0,
            tested=tested,
        )
        return RunFinished(generated_ids=tuple(self.generated), text=self.detok.text,
                           stop_reason=self.stop_reason or "stopped", summary=summary)


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
    """Draft K tokens with q, verify them with one pass of p, keep the exact prefix."""

    def __init__(self, pair: ModelPair, settings: Settings) -> None:
        if pair.draft is None:
            raise InputError("Speculative decoding needs a draft model; this pair has none.")
        validate(settings, speculative=True)
        self.pair = pair
        self.settings = settings

    @torch.inference_mode()
    def run(self, prompt: str, stop: threading.Event | None = None) -> Iterator[Event]:
        """Yield RunStarted, one Round per round, then RunFinished."""
        pair = self.pair
        run = _Run(pair, self.settings, prompt, speculative=True)
        s = run.settings
        target = _Model(pair.target, pair.vocab_size)
        draft = _Model(pair.draft, pair.vocab_size, pair.draft_vocab_map, pair.draft_oov_id)
        stats = _Stats(reached=[0] * s.k, kept=[0] * s.k)
        assert stats.reached is not None and stats.kept is not None
        yield run.started("speculative", pair.draft_name)
        seq = list(run.prompt_ids)  # committed ids: prompt + generated

        def probs(logits: torch.Tensor) -> torch.Tensor:
            return logits_to_probs(logits, s.temperature, s.top_k, s.top_p)

        while run.stop_reason is None:
            if _stopped(stop):
                run.stop_reason = "stopped"
                break
            remaining = run.budget - len(run.generated)
            k = min(s.k, max(1, remaining - 1))  # no point drafting past the budget

            # Draft: K tokens one by one from q; the cache gets x_1..x_{K-1} (x_K is never fed).
            t_draft = time.perf_counter()
            feed = seq[draft.length:]
            q_rows: list[torch.Tensor] = []
            drafts: list[int] = []
            for _ in range(k):
                q = probs(draft.feed(feed, keep=1)[0]).cpu()  # (V,)
                x = run.draw(q)
                q_rows.append(q)
                drafts.append(x)
                feed = [x]
            t_verify = time.perf_counter()

            # Verify: one target pass over the uncached tail + K drafts gives K+1 rows of p.
            p_rows = probs(target.feed(seq[target.length:] + drafts, keep=k + 1)).cpu()  # (K+1, V)
            t_done = time.perf_counter()

            # Accept x_i with probability min(1, p(x_i)/q(x_i)); stop at the first rejection.
            positions: list[tuple[int, float, float, float, float | None, str]] = []
            n_acc = 0
            rejected = False
            for i, x in enumerate(drafts):
                p_x, q_x = float(p_rows[i, x]), float(q_rows[i][x])
                ratio = acceptance_ratio(p_x, q_x)
                if rejected:
                    positions.append((x, q_x, p_x, ratio, None, "discarded"))
                    continue
                r = run.rand()
                stats.reached[i] += 1
                if r < ratio:
                    n_acc += 1
                    stats.kept[i] += 1
                    positions.append((x, q_x, p_x, ratio, r, "accepted"))
                else:
                    rejected = True
                    positions.append((x, q_x, p_x, ratio, r, "rejected"))

            if rejected:
                dist = residual(p_rows[n_acc], q_rows[n_acc])  # norm(max(0, p - q))
                kind = "resampled"
            else:
                dist = p_rows[k]  # all K kept: the target's next distribution is free
                kind = "bonus"
            extra_id = run.draw(dist)
            new_ids = drafts[:n_acc] + [extra_id]

            # Roll both caches back to the committed prefix (the new token is fed next round).
            committed = len(seq) + n_acc
            target.crop(committed)
            draft.crop(min(draft.length, committed))

            stats.rounds += 1
            stats.drafted += k
            stats.accepted += n_acc
            stats.draft_time += t_verify - t_draft
            stats.verify_time += t_done - t_verify
            kept, pieces = run.commit(new_ids)
            seq.extend(kept)

            drafted = tuple(
                DraftPosition(
                    index=i, token_id=x, text=run.texts(x), q=q_x, p=p_x, ratio=ratio, r=r,
                    status=status,  # type: ignore[arg-type]
                    q_top=run.top(q_rows[i], x), p_top=run.top(p_rows[i], x),
                )
                for i, (x, q_x, p_x, ratio, r, status) in enumerate(positions)
            )
            extra_event = None
            if len(kept) == len(new_ids):  # the extra token survived EOS/budget trimming
                extra_event = ExtraToken(
                    kind=kind,  # type: ignore[arg-type]
                    token_id=extra_id, text=run.texts(extra_id), prob=float(dist[extra_id]),
                    p=float(p_rows[n_acc, extra_id]), dist_top=run.top(dist, extra_id),
                )
            yield Round(
                index=stats.rounds - 1,
                k=k,
                drafted=drafted,
                n_accepted=n_acc,
                extra=extra_event,
                bonus_top=run.top(p_rows[k]),
                appended_ids=tuple(kept),
                appended_text="".join(pieces),
                appended_texts=tuple(pieces),
                draft_time_s=t_verify - t_draft,
                verify_time_s=t_done - t_verify,
                n_generated=len(run.generated),
                target_calls=target.calls,
                draft_calls=draft.calls,
                elapsed_s=time.perf_counter() - run.t0,
                final=run.stop_reason is not None,
            )
        yield run.finished(stats, target.calls, draft.calls)


class AutoregressiveDecoder:
    """The target alone, one token per forward pass: the baseline."""

    def __init__(self, pair: ModelPair, settings: Settings) -> None:
        validate(settings, speculative=False)
        self.pair = pair
        self.settings = settings

    @torch.inference_mode()
    def run(self, prompt: str, stop: threading.Event | None = None) -> Iterator[Event]:
        """Yield RunStarted, one Round per token (k = 0), then RunFinished."""
        pair = self.pair
        run = _Run(pair, self.settings, prompt, speculative=False)
        s = run.settings
        target = _Model(pair.target, pair.vocab_size)
        stats = _Stats(reached=[], kept=[])
        yield run.started("baseline", None)
        seq = list(run.prompt_ids)
        while run.stop_reason is None:
            if _stopped(stop):
                run.stop_reason = "stopped"
                break
            t0 = time.perf_counter()
            p = logits_to_probs(target.feed(seq[target.length:], keep=1)[0],
                                s.temperature, s.top_k, s.top_p).cpu()  # (V,)
            token = run.draw(p)
            t1 = time.perf_counter()
            stats.rounds += 1
            stats.verify_time += t1 - t0
            kept, pieces = run.commit([token])
            seq.extend(kept)
            yield Round(
                index=stats.rounds - 1, k=0, drafted=(), n_accepted=0,
                extra=ExtraToken(kind="target", token_id=token, text=run.texts(token),
                                 prob=float(p[token]), p=float(p[token]),
                                 dist_top=run.top(p, token)),
                bonus_top=None, appended_ids=tuple(kept), appended_text="".join(pieces),
                appended_texts=tuple(pieces), draft_time_s=0.0, verify_time_s=t1 - t0,
                n_generated=len(run.generated), target_calls=target.calls, draft_calls=0,
                elapsed_s=time.perf_counter() - run.t0,
                final=run.stop_reason is not None,
            )
        yield run.finished(stats, target.calls, 0)


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

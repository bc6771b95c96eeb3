"""One causal LM with its own KV cache: the engine's target runner and the draft model's.

``feed`` runs only the ids the cache lacks and ``crop`` rolls back; the model call
(``models.cached_forward``) and the clock its forward time is read from are passed in.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from .fast_llama import FastLlama, unsupported
from .models import cached_forward, draft_id_table, model_device

Clock = Callable[[], float]  # seconds, monotonic (time.perf_counter)
Forward = Callable[..., tuple[Any, Any]]  # (model, cache, **kwargs) -> (output, cache after)
# (model, vocab_size, vocab_map=None, oov_id=0, fast=False) -> a CachedModel (or a variant)
ModelRunner = Callable[..., "CachedModel"]


class CachedModel:
    """One causal LM with its own KV cache; ``feed`` runs only the ids the cache lacks."""

    def __init__(self, model: Any, vocab_size: int, vocab_map: torch.Tensor | None = None,
                 oov_id: int = 0, fast: bool = False, *, forward: Forward = cached_forward,
                 clock: Clock = time.perf_counter) -> None:
        from transformers import DynamicCache

        self.model = model
        self.forward = forward  # model call with the cache (models.cached_forward)
        self.clock = clock
        # fast: a plain Llama runs through FastLlama (the draft: its per-token cost is mostly
        # framework); anything FastLlama cannot reproduce keeps transformers' forward.
        self.fast = FastLlama(model) if fast and unsupported(model) is None else None
        self.device = model_device(model)  # parameters may span devices (device_map)
        self.vocab_size = vocab_size
        self.cache = DynamicCache(config=model.config)
        # Sliding-window (and linear-attention) layers drop old states as they go, and a
        # later rollback can then no longer crop. Recording the past keeps them until the next
        # crop, as transformers' own assisted generation does; crop() then trims to the window.
        self.cache.activate_past_recording()  # type: ignore[no-untyped-call]
        self.ids: list[int] = []  # what the cache holds, for checks and debugging
        self.calls = 0
        self.forward_time_s = 0.0
        # Reduced-vocabulary draft: target id -> draft id on the way in, scatter on the way out.
        self.vocab_map = vocab_map.to(self.device) if vocab_map is not None else None
        self.to_local: torch.Tensor | None = None
        if vocab_map is not None:
            self.to_local = draft_id_table(vocab_map, vocab_size, oov_id).to(self.device)
        # An increasing map keeps the target's id order among the model's own ids, so a
        # distribution computed over those ids and widened afterwards (``widen``) is the one
        # computed over the widened logits, ties included (they resolve by id either way); a
        # draw by inverse CDF picks the same id. The draft then samples over its 16,384 ids,
        # not the target's 49,152 (~0.05 ms a token instead of ~0.29 ms here).
        self.local = vocab_map is not None and bool((vocab_map[1:] > vocab_map[:-1]).all())
        # The map on the host too: global_id per drafted token reads it without a device sync.
        self.global_ids: list[int] | None = (None if vocab_map is None
                                             else [int(i) for i in vocab_map.tolist()])

    @property
    def length(self) -> int:
        return len(self.ids)

    def feed(self, ids: list[int], keep: int, local: bool = False) -> torch.Tensor:
        """Run ``ids`` after the cached prefix; logits of the last ``keep`` positions, (keep, V)
        (with ``local`` and an increasing map: over the model's own ids, (keep, len(map)))."""
        inp = torch.tensor([ids], dtype=torch.long, device=self.device)  # (1, T)
        if self.to_local is not None:
            inp = self.to_local[inp]
        t0 = self.clock()
        if self.fast is not None:
            logits = self.fast.feed(inp[0], keep)  # (keep, V_model)
        else:
            out, self.cache = self.forward(self.model, self.cache, input_ids=inp,
                                           logits_to_keep=keep)
            logits = out.logits[0, -keep:].to(self.device)  # (keep, V_model)
        self.forward_time_s += self.clock() - t0
        return self._finish(ids, keep, logits, local)

    def feed_with_hidden(self, ids: list[int], keep: int, layers: Sequence[int]
                         ) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
        """:meth:`feed`, and the hidden states of ``ids`` after each of ``layers`` (0 = the
        embeddings), each (len(ids), H): transformers' forward, which returns them."""
        if self.fast is not None:
            raise ValueError("hidden states need transformers' forward, not the fast path")
        inp = torch.tensor([ids], dtype=torch.long, device=self.device)  # (1, T)
        if self.to_local is not None:
            inp = self.to_local[inp]
        t0 = self.clock()
        out, self.cache = self.forward(self.model, self.cache, input_ids=inp,
                                       logits_to_keep=keep, output_hidden_states=True)
        logits = out.logits[0, -keep:].to(self.device)  # (keep, V_model)
        self.forward_time_s += self.clock() - t0
        hidden = {n: out.hidden_states[n][0] for n in layers}  # (T, H) each
        return self._finish(ids, keep, logits, False), hidden

    def _finish(self, ids: list[int], keep: int, logits: torch.Tensor,
                local: bool) -> torch.Tensor:
        self.ids.extend(ids)
        self.calls += 1
        if self.vocab_map is not None:
            if local and self.local:
                return logits
            full: torch.Tensor = logits.new_full((keep, self.vocab_size), float("-inf"))
            full[:, self.vocab_map] = logits
            return full
        shared: torch.Tensor = logits[:, : self.vocab_size]
        return shared

    def widen(self, rows: torch.Tensor) -> torch.Tensor:
        """Probability rows over the model's own ids (``feed(local=True)``) -> (n, V)."""
        if not self.local:
            return rows
        assert self.vocab_map is not None
        full = rows.new_zeros((rows.shape[0], self.vocab_size))
        full[:, self.vocab_map] = rows
        return full

    def global_id(self, i: int) -> int:
        """The target's id of row position ``i`` of ``feed(local=True)``."""
        return self.global_ids[i] if self.local and self.global_ids is not None else i

    def time_pass(self, n: int, token: int) -> float:
        """Seconds of one pass over ``n`` copies of ``token`` after the cached prefix, which is
        left as it was (a calibration: not counted in ``calls`` or ``forward_time_s``)."""
        inp = torch.full((1, n), token, dtype=torch.long, device=self.device)  # (1, n)
        if self.to_local is not None:
            inp = self.to_local[inp]
        t0 = self.clock()
        if self.fast is not None:
            self.fast.feed(inp[0], n)
            seconds = self.clock() - t0
            self.fast.crop(self.length)
            return seconds
        _, self.cache = self.forward(self.model, self.cache, input_ids=inp,
                                     logits_to_keep=n)
        seconds = self.clock() - t0
        self.cache.crop(-n)
        return seconds

    def crop(self, length: int) -> None:
        """Forget everything after the first ``length`` cached tokens (and trim window layers)."""
        extra = max(0, self.length - length)
        if self.fast is not None:
            self.fast.crop(self.length - extra)
        else:  # transformers 5: a negative count to remove; crop(0) trims sliding layers
            self.cache.crop(-extra)
        del self.ids[len(self.ids) - extra:]

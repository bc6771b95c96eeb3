"""The target scores a whole token tree in one pass; its cache then keeps only the accepted path.

One pass feeds the uncached tail of the committed text (T_0 >= 1 ids, causal among themselves)
and the tree's N nodes. Each node attends to the cached prefix, the tail, its ancestors and
itself, through a 4D attention mask (transformers passes a 4D mask to Llama-family attention
as it is), and sits at the position its path gives it: past + T_0 - 1 + depth. The last tail
row is p at the root and row 1 + i is p after node i: the (N+1, V) rows ``verify_tree`` reads.

After verification the cache holds every node; ``keep_path`` moves the accepted nodes' keys
and values into place after the tail (they are already rotated for the positions they keep)
and drops the rest, so the cache is the one a plain pass over the accepted text would leave.
``FastLlama`` (the static-buffer forward) gets the same two operations as separate functions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from .fast_llama import FastLlama, _rms
from .models import cached_forward
from .tree_verify import ROOT, DraftTree


def tree_layout(parents: Sequence[int], n_tail: int, past: int,
                fed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions (Tq,) and which keys each query sees, (Tq, past + n_tail + N) bool.

    ``parents[i]`` is node i's parent node (ROOT for the root's children), parents first. The
    queries are the ``n_tail`` tail ids then nodes ``fed`` .. N-1: a tree grown level by level
    (the draft's) has nodes [0, fed) in the cache already, right after the ``past`` committed
    ids, and feeds no tail then. The first node sits at cache index past + n_tail. Without a
    tail there is no row for p at the root (the verifying pass needs one: n_tail >= 1).
    """
    if fed and n_tail:
        raise ValueError("a pass that continues a tree (fed > 0) feeds no tail")
    n = len(parents)
    t = n_tail + n
    allowed = torch.zeros(t, past + t, dtype=torch.bool)
    allowed[:, :past] = True  # everyone sees the committed prefix
    allowed[:n_tail, past:past + n_tail] = torch.ones(n_tail, n_tail, dtype=torch.bool).tril()
    allowed[n_tail:, past:past + n_tail] = True  # every node sees the whole tail
    depth = [0] * n
    for i, parent in enumerate(parents):
        if not ROOT <= parent < i:
            raise ValueError(f"node {i}'s parent {parent} must come before it")
        row = n_tail + i
        if parent != ROOT:
            allowed[row] = allowed[n_tail + parent]  # its parent's ancestors ...
            depth[i] = depth[parent] + 1
        allowed[row, past + row] = True  # ... and itself
    positions = torch.cat([torch.arange(past, past + n_tail),
                           torch.tensor(depth, dtype=torch.long) + past + n_tail])
    queries = list(range(n_tail)) + list(range(n_tail + fed, t))
    return positions[queries], allowed[queries]


# (parents, n_tail, past, fed) -> (positions, allowed): tree_layout
Layout = Callable[[Sequence[int], int, int, int], tuple[torch.Tensor, torch.Tensor]]


def additive_mask(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(T, K) bool -> (1, 1, T, K) float: 0 where a key is seen, the dtype's minimum elsewhere
    (the form transformers' eager and SDPA attention both add to their scores)."""
    mask = torch.zeros(allowed.shape, dtype=dtype)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[None, None]


def score_tree(model: Any, cache: Any, tail: Sequence[int], tokens: Sequence[int],
               parents: Sequence[int], fed: int = 0, layout: Layout = tree_layout
               ) -> tuple[torch.Tensor, Any]:
    """One pass over ``tail`` + the tree's nodes from ``fed`` on; logits (rows, V): at the
    last tail id (when there is a tail) and after each node fed. Nodes [0, fed) must be the
    last ``fed`` entries of ``cache`` (an earlier pass of the same tree, ``tail`` empty now).
    ``layout`` places the nodes and masks them (tree_layout; a test passes a broken one)."""
    past = cache.get_seq_length() - fed
    positions, allowed = layout(parents, len(tail), past, fed)
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    ids = torch.tensor([list(tail) + list(tokens[fed:])], dtype=torch.long,
                       device=device)  # (1, Tq)
    keep = len(tokens) - fed + (1 if tail else 0)
    out, cache = cached_forward(model, cache, input_ids=ids,
                                attention_mask=additive_mask(allowed, dtype).to(device),
                                position_ids=positions[None].to(device), logits_to_keep=keep)
    return out.logits[0, -keep:], cache


def keep_path(cache: Any, first: int, path: Sequence[int]) -> None:
    """Keep cache positions [0, first) and then the nodes ``path`` (root's child first); the
    nodes were fed from position ``first`` on. Drops every other node."""
    index = torch.cat([torch.arange(first), first + torch.tensor(list(path), dtype=torch.long)])
    for layer in cache.layers:
        if getattr(layer, "is_sliding", False) or type(layer).__name__ != "DynamicLayer":
            raise ValueError(f"trees need a plain dynamic cache, not {type(layer).__name__}")
        if not getattr(layer, "is_initialized", True):
            continue
        at = index.to(layer.keys.device)
        layer.keys = layer.keys.index_select(-2, at)  # (B, H, first + len(path), D)
        layer.values = layer.values.index_select(-2, at)


def fast_score_tree(fast: FastLlama, ids: torch.Tensor, parents: Sequence[int],
                    fed: int = 0, layout: Layout = tree_layout) -> torch.Tensor:
    """``score_tree`` on FastLlama's buffers: ``ids`` (Tq,) = the tail then nodes fed on;
    logits (rows, V_model) as ``score_tree`` returns them. The buffers hold all Tq after it."""
    w = fast.w
    t, start = ids.shape[0], fast.length
    n = len(parents)
    end = start + t
    n_tail = t - (n - fed)
    positions, allowed = layout(parents, n_tail, start - fed, fed)
    fast._ensure(end)  # buffers and rotary tables; a node's position is below end
    device = fast.keys.device
    ids, positions, allowed = ids.to(device), positions.to(device), allowed.to(device)
    cos, sin = fast.cos[positions], fast.sin[positions]  # (Tq, D)
    half = w.head_dim // 2
    nq, nkv, d = w.heads, w.kv_heads, w.head_dim
    x = w.embed[ids]  # (T, H)
    for li, (n1, e1, qkv_w, o_w, n2, e2, gu_w, down_w) in enumerate(w.layers):
        h = _rms(x, n1, e1)
        qkv = fast._mm(h, qkv_w).view(t, nq + 2 * nkv, d).transpose(0, 1)  # (heads, T, D)
        qk = qkv[:nq + nkv]
        rot = torch.cat((-qk[..., half:], qk[..., :half]), dim=-1)
        qk = qk * cos + rot * sin
        fast.keys[li, :, start:end] = qk[nq:]
        fast.values[li, :, start:end] = qkv[nq + nkv:]
        attn = F.scaled_dot_product_attention(
            qk[:nq][None], fast.keys[li, :, :end][None], fast.values[li, :, :end][None],
            attn_mask=allowed, scale=w.scale, enable_gqa=nq != nkv)  # (1, heads, T, D)
        x = x + fast._mm(attn[0].transpose(0, 1).reshape(t, nq * d), o_w)
        h = _rms(x, n2, e2)
        gu = fast._mm(h, gu_w)
        x = x + fast._mm(F.silu(gu[:, :w.intermediate]) * gu[:, w.intermediate:], down_w)
    fast.length = end
    keep = n - fed + (1 if n_tail else 0)
    logits: torch.Tensor = fast._mm(_rms(x[t - keep:], w.norm, w.norm_eps), w.head)
    return logits  # (keep, V_model)


def fast_keep_path(fast: FastLlama, first: int, path: Sequence[int]) -> None:
    """``keep_path`` for FastLlama's buffers: the path's nodes move to ``first`` on."""
    src = (first + torch.tensor(list(path), dtype=torch.long)).to(fast.keys.device)
    k = len(path)
    fast.keys[:, :, first:first + k] = fast.keys[:, :, src]  # gathered (a copy), then written
    fast.values[:, :, first:first + k] = fast.values[:, :, src]
    fast.length = first + k


@dataclass(frozen=True)
class TreePass:
    """The target's tree steps as the engine runs them on its runner (``CachedModel``): the
    node layout of the scoring pass and the path-keeping cache step, per form of the target's
    cache (transformers' or FastLlama's). The real ones by default (a test passes broken ones
    through ``parts.Factory``)."""

    layout: Layout = tree_layout
    keep: Callable[[Any, int, Sequence[int]], None] = keep_path
    fast_keep: Callable[[FastLlama, int, Sequence[int]], None] = fast_keep_path

    def score(self, runner: Any, tail: Sequence[int], tree: DraftTree) -> torch.Tensor:
        """``score_tree`` through the runner: logits (N+1, V) at the root and after each node;
        the runner's cache then holds the tail and every node (``keep_path`` keeps the
        accepted ones)."""
        if getattr(runner, "to_local", None) is not None:
            raise ValueError("a tree pass runs on the target (no reduced vocabulary)")
        t0 = runner.clock()
        if runner.fast is not None:
            ids = torch.tensor(list(tail) + list(tree.tokens), dtype=torch.long)
            logits = fast_score_tree(runner.fast, ids, tree.parents, layout=self.layout)
        else:
            logits, runner.cache = score_tree(runner.model, runner.cache, tail, tree.tokens,
                                              tree.parents, layout=self.layout)
        runner.forward_time_s += runner.clock() - t0
        runner.ids.extend(list(tail) + list(tree.tokens))
        runner.calls += 1
        shared: torch.Tensor = logits[:, :runner.vocab_size].to(runner.device)
        return shared

    def keep_path(self, runner: Any, first: int, path: Sequence[int]) -> None:
        """Keep the runner's positions [0, first), then the nodes of ``path``."""
        if runner.fast is not None:
            self.fast_keep(runner.fast, first, path)
        else:
            self.keep(runner.cache, first, path)
        runner.ids[first:] = [runner.ids[first + i] for i in path]


def runner_score_level(runner: Any, tokens: Sequence[int], parents: Sequence[int],
                       fed: int, layout: Layout = tree_layout) -> torch.Tensor:
    """A draft's level pass through its runner (``cached_model.CachedModel``): nodes ``fed``
    on, after the committed prefix and nodes [0, fed) in its cache (no tail); logits
    (N - fed, V) over the target's ids (a reduced-vocabulary draft's widened, -inf off its
    map). The runner's cache then holds every node fed so far (``TreePass.keep_path`` keeps
    the accepted ones)."""
    new = [int(x) for x in tokens[fed:]]
    ids = torch.tensor([int(x) for x in tokens], dtype=torch.long, device=runner.device)
    if runner.to_local is not None:
        ids = runner.to_local[ids]  # the draft's own ids
    t0 = runner.clock()
    if runner.fast is not None:
        logits = fast_score_tree(runner.fast, ids[fed:], parents, fed, layout=layout)
    else:
        logits, runner.cache = score_tree(runner.model, runner.cache, [], ids.tolist(),
                                          parents, fed, layout=layout)
    runner.forward_time_s += runner.clock() - t0
    rows: torch.Tensor = runner._finish(new, len(new), logits.to(runner.device), False)
    return rows  # (N - fed, V)

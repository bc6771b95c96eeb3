"""A decode-only forward for small Llama models on the CPU: the draft's per-token cost, halved.

A draft token of the bundled draft (4 layers, hidden 384) took ~3.6 ms through transformers'
``LlamaForCausalLM`` on this project's 2-core machine, of which the matrix products were
~1.5 ms: the rest was the framework around them (the cache's concatenations, masks, rotary
tables, ~45 small tensors per layer). The draft is paid for per drafted token, so that share
sets how long the cost policy can afford to draft. This runner computes the same function
with the same weights and less around them:

- q, k and v come from one product with the three weights stacked, gate and up from another
  (per layer 4 products instead of 7), each in the form ``cpu_linear`` chose for the model;
- keys and values go into buffers allocated once (grown by doubling), so a rollback only moves
  a length and nothing is concatenated;
- the rotary cos/sin come from the model's own rotary module, once per position.

Only what it can reproduce is taken: a ``LlamaForCausalLM`` in fp32 (or fp64, the tests' tiny
models) on the CPU, no biases, SiLU,
a static rotary type, no sliding window, no gradients. Anything else (and
``SPECVIZ_STOCK_FORWARD=1``) keeps transformers' forward. Logits agree with transformers' to
float rounding (``tests/core/test_fast_llama.py``); the output law does not depend on them (q
is whatever the draft gives, verified against p), and the target alone is never run here.
"""

from __future__ import annotations

import os
import weakref
from typing import Any

import torch
import torch.nn.functional as F

from .cpu_linear import FORMS, WIDTHS, _band

STATIC_ROPE = ("default", "linear", "llama3")
_FUSED: weakref.WeakKeyDictionary[Any, _Weights] = weakref.WeakKeyDictionary()


def unsupported(model: Any) -> str | None:
    """Why ``model`` must keep transformers' forward (None: the fast runner reproduces it)."""
    if os.environ.get("SPECVIZ_STOCK_FORWARD") == "1":
        return "SPECVIZ_STOCK_FORWARD=1"
    if type(model).__name__ != "LlamaForCausalLM":
        return f"{type(model).__name__} is not a LlamaForCausalLM"
    cfg = model.config
    params = list(model.parameters())
    if any(p.device.type != "cpu" or p.dtype not in (torch.float32, torch.float64)
           for p in params):
        return "not fp32 (or the tests' fp64) on the CPU"
    if getattr(cfg, "attention_bias", False) or getattr(cfg, "mlp_bias", False):
        return "biases"
    if getattr(cfg, "hidden_act", "silu") != "silu" or getattr(cfg, "pretraining_tp", 1) != 1:
        return "activation or tensor-parallel split"
    if getattr(cfg, "sliding_window", None):
        return "sliding window"
    rope = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
    if rope.get("rope_type", rope.get("type", "default")) not in STATIC_ROPE:
        return f"rotary type {rope.get('rope_type')!r}"
    return None


class _Weights:
    """The model's weights as the runner multiplies them (q/k/v and gate/up stacked)."""

    def __init__(self, model: Any) -> None:
        cfg = model.config
        inner = model.model
        self.embed = inner.embed_tokens.weight
        self.layers = []
        for layer in inner.layers:
            a, m = layer.self_attn, layer.mlp
            self.layers.append((
                layer.input_layernorm.weight, layer.input_layernorm.variance_epsilon,
                torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]).contiguous(),
                a.o_proj.weight,
                layer.post_attention_layernorm.weight,
                layer.post_attention_layernorm.variance_epsilon,
                torch.cat([m.gate_proj.weight, m.up_proj.weight]).contiguous(),
                m.down_proj.weight,
            ))
        self.norm = inner.norm.weight
        self.norm_eps = inner.norm.variance_epsilon
        self.head = model.lm_head.weight
        self.rotary = inner.rotary_emb
        self.heads = cfg.num_attention_heads
        self.kv_heads = cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads
        self.scale = self.head_dim ** -0.5
        self.intermediate = cfg.intermediate_size
        # The product form cpu_linear chose for this model's linears, per width (else F.linear).
        self.plan = getattr(inner.layers[0].self_attn.q_proj, "plan", ("linear",) * len(WIDTHS))


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """LlamaRMSNorm, in fp32 as transformers computes it (a no-op cast for fp32 models)."""
    h = x.float()
    return weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


class FastLlama:
    """One sequence's decode state over a supported Llama: ``feed`` ids, ``crop`` back."""

    def __init__(self, model: Any, capacity: int = 256) -> None:
        w = _FUSED.get(model)
        if w is None:
            w = _FUSED[model] = _Weights(model)
        self.w = w
        self.length = 0
        shape = (len(w.layers), w.kv_heads, capacity, w.head_dim)
        dtype = w.embed.dtype
        self.keys = torch.empty(shape, dtype=dtype)
        self.values = torch.empty(shape, dtype=dtype)
        self.cos = torch.empty(0, w.head_dim, dtype=dtype)
        self.sin = torch.empty(0, w.head_dim, dtype=dtype)

    def _ensure(self, end: int) -> None:
        if end > self.keys.shape[2]:  # grow the buffers by doubling
            size = max(end, 2 * self.keys.shape[2])
            for name in ("keys", "values"):
                old = getattr(self, name)
                new = old.new_empty(old.shape[0], old.shape[1], size, old.shape[3])
                new[:, :, :self.length] = old[:, :, :self.length]
                setattr(self, name, new)
        if end > self.cos.shape[0]:  # rotary tables from the model's own module
            size = max(end, 2 * self.cos.shape[0], 256)
            pos = torch.arange(size)[None]
            cos, sin = self.w.rotary(self.w.embed[:1][None], pos)
            self.cos, self.sin = cos[0].contiguous(), sin[0].contiguous()

    def _mm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return FORMS[self.w.plan[_band(x.shape[0])]](x, weight, None)

    def feed(self, ids: torch.Tensor, keep: int) -> torch.Tensor:
        """Run ``ids`` (T,) after the held prefix; logits of the last ``keep`` positions."""
        w = self.w
        t, start = ids.shape[0], self.length
        end = start + t
        self._ensure(end)
        cos, sin = self.cos[start:end], self.sin[start:end]  # (T, D)
        half = w.head_dim // 2
        nq, nkv, d = w.heads, w.kv_heads, w.head_dim
        mask = None
        if t > 1:  # the new tokens see the prefix and each other causally
            mask = torch.ones(t, end, dtype=torch.bool).tril(diagonal=start)
        x = w.embed[ids]  # (T, H)
        for li, (n1, e1, qkv_w, o_w, n2, e2, gu_w, down_w) in enumerate(w.layers):
            h = _rms(x, n1, e1)
            qkv = self._mm(h, qkv_w).view(t, nq + 2 * nkv, d).transpose(0, 1)  # (heads, T, D)
            qk = qkv[:nq + nkv]
            rot = torch.cat((-qk[..., half:], qk[..., :half]), dim=-1)
            qk = qk * cos + rot * sin
            self.keys[li, :, start:end] = qk[nq:]
            self.values[li, :, start:end] = qkv[nq + nkv:]
            attn = F.scaled_dot_product_attention(
                qk[:nq][None], self.keys[li, :, :end][None], self.values[li, :, :end][None],
                attn_mask=mask, scale=w.scale, enable_gqa=nq != nkv)  # (1, heads, T, D)
            x = x + self._mm(attn[0].transpose(0, 1).reshape(t, nq * d), o_w)
            h = _rms(x, n2, e2)
            gu = self._mm(h, gu_w)
            x = x + self._mm(F.silu(gu[:, :w.intermediate]) * gu[:, w.intermediate:], down_w)
        self.length = end
        return self._mm(_rms(x[t - keep:], w.norm, w.norm_eps), w.head)  # (keep, V_model)

    def crop(self, length: int) -> None:
        """Forget every position from ``length`` on (the buffers stay; a length moves)."""
        self.length = min(self.length, length)


__all__ = ["FastLlama", "unsupported"]

"""A decode-only forward for small Llama models: fewer kernels per step, KV in static buffers.

A draft token of the bundled draft (4 layers, hidden 384) took ~3.6 ms through transformers'
``LlamaForCausalLM`` on this project's 2-core machine, of which the matrix products were
~1.5 ms: the rest was the framework around them (the cache's concatenations, masks, rotary
tables, ~45 small tensors per layer). On a GPU the same framework is all there is: a 135M
model took ~20 ms a token on an H200 (issue 27), host-bound. This runner computes the same
function with the same weights and less around them:

- q, k and v come from one product with the three weights stacked, gate and up from another
  (per layer 4 products instead of 7), each in the form and weight layout (row- or
  column-major) ``cpu_linear`` chose for the model;
- keys and values go into buffers allocated once (grown by doubling), so a rollback only moves
  a length and nothing is concatenated;
- the rotary cos/sin come from the model's own rotary module, once per position.

Two ways through the buffers, same function:

- *sliced* (CPU default): attend over ``keys[:end]``, write ``keys[start:end]``: the shapes
  follow the length, nothing is computed for unused positions;
- *fixed* (CUDA default): every shape depends on the step's width alone (attention over the
  whole buffer under a mask built from a position tensor on the device), so one step of each
  width 1 ... ``FIXED_WIDTHS`` is captured once as a CUDA graph and replayed per round with
  the ids and the start position copied into its input tensors; a rollback moves the host's
  length, which the next replay writes to the device. Without CUDA the same plumbing runs
  eagerly (the tests check it on the CPU).

Only what it can reproduce is taken: a ``LlamaForCausalLM`` on the CPU or one CUDA device (MPS
is not measured) in fp32, fp64 (the tests' tiny models), fp16 or bf16, no biases, SiLU, a
static rotary type, no sliding window, no gradients. Anything else (and
``SPECVIZ_STOCK_FORWARD=1``) keeps transformers' forward. Logits agree with transformers' to
float rounding (``tests/core/test_fast_llama.py``).
"""

from __future__ import annotations

import os
import weakref
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from .cpu_linear import FORMS, WIDTHS, DecodeLinear, _band, stack_weights

STATIC_ROPE = ("default", "linear", "llama3")
DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
# Widths of the fixed path's steps (one graph each on CUDA): 1 + K drafts for K up to
# policy.K_LIMIT (16). A wider feed (a prompt) takes the sliced path.
FIXED_WIDTHS = 17
# The fixed path's first buffer size (positions); growth re-captures the graphs.
FIXED_CAPACITY = 1024
_FUSED: weakref.WeakKeyDictionary[Any, _Weights] = weakref.WeakKeyDictionary()


def unsupported(model: Any) -> str | None:
    """Why ``model`` must keep transformers' forward (None: the fast runner reproduces it)."""
    if os.environ.get("SPECVIZ_STOCK_FORWARD") == "1":
        return "SPECVIZ_STOCK_FORWARD=1"
    if type(model).__name__ != "LlamaForCausalLM":
        return f"{type(model).__name__} is not a LlamaForCausalLM"
    cfg = model.config
    if getattr(model, "hf_device_map", None):
        return "spread over devices (device_map)"
    params = list(model.parameters())
    if len({p.device for p in params}) != 1:
        return "parameters on more than one device"
    if params and params[0].device.type not in ("cpu", "cuda"):  # MPS: nobody measured it
        return f"{params[0].device.type}: not measured there"
    if any(p.dtype not in DTYPES for p in params):
        return "not fp32, fp16 or bf16 (or the tests' fp64)"
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


def serves_target(model: Any) -> bool:
    """Whether the target (alone and when verifying: one path for both) runs on FastLlama.

    CUDA: yes, with graphs (a step is host-bound there). CPU: yes; its linears already take
    ``cpu_linear``'s forms, and the runner saves the rest (``benchmarks/fast_target.py``
    prints the ratio). MPS: not measured, so transformers' forward stays (``unsupported``).
    """
    return unsupported(model) is None and os.environ.get("SPECVIZ_STOCK_TARGET") != "1"


def graphs_wanted(device: torch.device) -> bool:
    """CUDA graphs for the fixed path: on CUDA unless ``SPECVIZ_NO_GRAPHS=1``."""
    return device.type == "cuda" and os.environ.get("SPECVIZ_NO_GRAPHS") != "1"


def _stack(*linears: Any) -> torch.Tensor:
    """The linears' weights stacked into one tensor in the layout cpu_linear gave them
    (row- or column-major), each linear's weight then a view of its rows (no second copy: a
    target's q/k/v and gate/up are most of its parameters); a later change of layout moves
    the stack whole (``cpu_linear.set_layout``), so the runner keeps multiplying the model's
    own weights."""
    return stack_weights(linears)


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
                _stack(a.q_proj, a.k_proj, a.v_proj),
                a.o_proj.weight,
                layer.post_attention_layernorm.weight,
                layer.post_attention_layernorm.variance_epsilon,
                _stack(m.gate_proj, m.up_proj),
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
        self._probe = inner.layers[0].self_attn.q_proj

    @property
    def plan(self) -> tuple[str, ...]:
        """The product form cpu_linear gives this model's linears now, per width (else
        F.linear): read at each product, so a later ``use_fast_linears`` is followed."""
        probe = self._probe
        return probe.plan if isinstance(probe, DecodeLinear) else ("linear",) * len(WIDTHS)


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """LlamaRMSNorm, in fp32 as transformers computes it (a no-op cast for fp32 models)."""
    h = x.float()
    return weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


@dataclass
class _Step:
    """One width's fixed step: its input ids, its output logits, its graph (CUDA)."""

    ids: torch.Tensor  # (width,) long
    out: torch.Tensor | None = None  # (width, V_model), written by each replay
    graph: Any = None  # torch.cuda.CUDAGraph


@dataclass
class _State:
    """Buffers of one sequence: keys, values, rotary tables; the fixed path's steps."""

    keys: torch.Tensor  # (layers, kv_heads, capacity, D)
    values: torch.Tensor
    cos: torch.Tensor  # (positions, D)
    sin: torch.Tensor
    start: torch.Tensor  # (1,) long: the fixed path's first position, on the device
    steps: dict[int, _Step] = field(default_factory=dict)
    pool: Any = None  # the graphs' shared memory pool


# States with captured graphs outlive their runner: the next run of the same model takes one
# back instead of capturing again (a run builds a new CachedModel, a new FastLlama).
_SPARE: weakref.WeakKeyDictionary[Any, list[_State]] = weakref.WeakKeyDictionary()


class FastLlama:
    """One sequence's decode state over a supported Llama: ``feed`` ids, ``crop`` back.

    ``fixed`` (default: on CUDA) takes the fixed-shape path for feeds of up to FIXED_WIDTHS
    tokens; ``graphs`` (default: on CUDA) captures each of its widths once as a CUDA graph.
    """

    def __init__(self, model: Any, capacity: int | None = None, *, fixed: bool | None = None,
                 graphs: bool | None = None) -> None:
        w = _FUSED.get(model)
        if w is None:
            w = _FUSED[model] = _Weights(model)
        self.w = w
        self.device = w.embed.device
        self.graphs = graphs_wanted(self.device) if graphs is None else graphs
        self.fixed = self.graphs if fixed is None else (fixed or self.graphs)
        self.length = 0
        spare = _SPARE.get(model) if self.graphs else None
        if spare:
            self.s = spare.pop()
        else:
            if capacity is None:  # growth re-captures every graph: start large with them
                capacity = FIXED_CAPACITY if self.graphs else 256
            shape = (len(w.layers), w.kv_heads, capacity, w.head_dim)
            dtype, dev = w.embed.dtype, self.device
            # Zeros, not empty: the fixed path multiplies masked positions by weight 0, and
            # 0 × NaN from uninitialised memory would be NaN.
            self.s = _State(torch.zeros(shape, dtype=dtype, device=dev),
                            torch.zeros(shape, dtype=dtype, device=dev),
                            torch.empty(0, w.head_dim, dtype=dtype, device=dev),
                            torch.empty(0, w.head_dim, dtype=dtype, device=dev),
                            torch.zeros(1, dtype=torch.long, device=dev))
            self._tables(capacity)
        if self.graphs:  # back to the spare list when this runner is dropped
            weakref.finalize(self, _SPARE.setdefault(model, []).append, self.s)

    @property
    def keys(self) -> torch.Tensor:
        return self.s.keys

    @property
    def values(self) -> torch.Tensor:
        return self.s.values

    @property
    def cos(self) -> torch.Tensor:
        return self.s.cos

    @property
    def sin(self) -> torch.Tensor:
        return self.s.sin

    @property
    def capacity(self) -> int:
        return int(self.s.keys.shape[2])

    def _tables(self, size: int) -> None:
        """Rotary cos/sin for positions 0 ... size - 1, from the model's own module."""
        pos = torch.arange(size, device=self.device)[None]
        cos, sin = self.w.rotary(self.w.embed[:1][None], pos)
        self.s.cos, self.s.sin = cos[0].contiguous(), sin[0].contiguous()

    def _ensure(self, end: int) -> None:
        s = self.s
        if end > self.capacity:  # grow the buffers by doubling
            size = max(end, 2 * self.capacity)
            for name in ("keys", "values"):
                old = getattr(s, name)
                new = old.new_zeros(old.shape[0], old.shape[1], size, old.shape[3])
                new[:, :, :self.length] = old[:, :, :self.length]
                setattr(s, name, new)
            s.steps.clear()  # the graphs read the old buffers: capture again
        if end > s.cos.shape[0]:
            self._tables(max(end, self.capacity))
            s.steps.clear()

    def _mm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return FORMS[self.w.plan[_band(x.shape[0])]](x, weight, None)

    def feed(self, ids: torch.Tensor, keep: int) -> torch.Tensor:
        """Run ``ids`` (T,) after the held prefix; logits of the last ``keep`` positions."""
        t = ids.shape[0]
        end = self.length + t
        self._ensure(end)
        if self.fixed and t <= FIXED_WIDTHS:
            logits = self._replay(ids, t)
        else:
            logits = self._sliced(ids, self.length, end)
        self.length = end
        return logits[t - keep:]

    def _layer_qkv(self, x: torch.Tensor, layer: tuple[Any, ...]) -> tuple[torch.Tensor, ...]:
        """(q, k, v) of one layer before rotary, each (heads, T, D)."""
        w, t = self.w, x.shape[0]
        nq, nkv = w.heads, w.kv_heads
        qkv = self._mm(_rms(x, layer[0], layer[1]), layer[2]).view(
            t, nq + 2 * nkv, w.head_dim).transpose(0, 1)  # (heads, T, D)
        return qkv[:nq + nkv], qkv[nq + nkv:]

    def _rotate(self, qk: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = self.w.head_dim // 2
        return qk * cos + torch.cat((-qk[..., half:], qk[..., :half]), dim=-1) * sin

    def _rest(self, x: torch.Tensor, attn: torch.Tensor, layer: tuple[Any, ...]) -> torch.Tensor:
        """The layer after attention: output product, residual, MLP. attn (1, heads, T, D)."""
        w, t = self.w, x.shape[0]
        _, _, _, o_w, n2, e2, gu_w, down_w = layer
        x = x + self._mm(attn[0].transpose(0, 1).reshape(t, w.heads * w.head_dim), o_w)
        gu = self._mm(_rms(x, n2, e2), gu_w)
        return x + self._mm(F.silu(gu[:, :w.intermediate]) * gu[:, w.intermediate:], down_w)

    def _sliced(self, ids: torch.Tensor, start: int, end: int) -> torch.Tensor:
        """The step over shapes that follow the length; logits of every fed position."""
        w, s, t = self.w, self.s, ids.shape[0]
        nq, nkv = w.heads, w.kv_heads
        cos, sin = s.cos[start:end], s.sin[start:end]  # (T, D)
        mask = None
        if t > 1:  # the new tokens see the prefix and each other causally
            mask = torch.ones(t, end, dtype=torch.bool, device=self.device).tril(diagonal=start)
        x = w.embed[ids]  # (T, H)
        for li, layer in enumerate(w.layers):
            qk, v = self._layer_qkv(x, layer)
            qk = self._rotate(qk, cos, sin)
            s.keys[li, :, start:end] = qk[nq:]
            s.values[li, :, start:end] = v
            attn = F.scaled_dot_product_attention(
                qk[:nq][None], s.keys[li, :, :end][None], s.values[li, :, :end][None],
                attn_mask=mask, scale=w.scale, enable_gqa=nq != nkv)  # (1, heads, T, D)
            x = self._rest(x, attn, layer)
        return self._mm(_rms(x, w.norm, w.norm_eps), w.head)  # (T, V_model)

    def _fixed_step(self, ids: torch.Tensor) -> torch.Tensor:
        """The step over shapes set by the width alone (what a graph captures): positions
        from the device tensor ``start``, attention over the whole buffer under a mask."""
        w, s, t = self.w, self.s, ids.shape[0]
        nq, nkv = w.heads, w.kv_heads
        pos = s.start + torch.arange(t, device=self.device)  # (T,)
        cos, sin = s.cos.index_select(0, pos), s.sin.index_select(0, pos)  # (T, D)
        cols = torch.arange(self.capacity, device=self.device)
        mask = cols[None] <= pos[:, None]  # (T, capacity): the prefix and causally the new ones
        x = w.embed[ids]  # (T, H)
        for li, layer in enumerate(w.layers):
            qk, v = self._layer_qkv(x, layer)
            qk = self._rotate(qk, cos, sin)
            s.keys[li].index_copy_(1, pos, qk[nq:])
            s.values[li].index_copy_(1, pos, v)
            attn = F.scaled_dot_product_attention(
                qk[:nq][None], s.keys[li][None], s.values[li][None],
                attn_mask=mask, scale=w.scale, enable_gqa=nq != nkv)  # (1, heads, T, D)
            x = self._rest(x, attn, layer)
        return self._mm(_rms(x, w.norm, w.norm_eps), w.head)  # (T, V_model)

    def _replay(self, ids: torch.Tensor, t: int) -> torch.Tensor:
        """The fixed step of width ``t`` after the held prefix, through its graph if captured."""
        step = self.s.steps.get(t)
        if step is None:
            step = self.s.steps[t] = self._capture(t)
        step.ids.copy_(ids)
        self.s.start.fill_(self.length)  # a rollback moved the host's length: say so
        if step.graph is not None:
            step.graph.replay()
        else:
            step.out = self._fixed_step(step.ids)
        assert step.out is not None
        return step.out.clone()  # the next replay overwrites step.out

    def _capture(self, t: int) -> _Step:
        """Width ``t``'s step; on CUDA with graphs, captured (its warm-up writes only positions
        past the held prefix, which nothing reads)."""
        step = _Step(torch.zeros(t, dtype=torch.long, device=self.device))
        if not self.graphs:
            return step
        self.s.start.fill_(self.length)
        stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                self._fixed_step(step.ids)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.s.pool):
            step.out = self._fixed_step(step.ids)
        self.s.pool = graph.pool()
        step.graph = graph
        return step

    def warm(self, widths: range | list[int]) -> None:
        """Capture the fixed step of each width now (before a timed run); no-op off the path."""
        if not self.fixed:
            return
        for t in widths:
            if 1 <= t <= FIXED_WIDTHS:
                self._ensure(self.length + t)
                if t not in self.s.steps:
                    self.s.steps[t] = self._capture(t)

    def crop(self, length: int) -> None:
        """Forget every position from ``length`` on (the buffers stay; a length moves)."""
        self.length = min(self.length, length)


__all__ = ["FIXED_WIDTHS", "FastLlama", "graphs_wanted", "serves_target", "unsupported"]

"""Faster CPU forms of the few-row matrix products of decoding, chosen per width by measurement.

Decoding multiplies every weight matrix by 1 to K + 1 rows. With torch's MKL on this project's
machine (a 2-core AMD EPYC), ``F.linear`` does that badly: one row goes to a matrix-vector
kernel that streams the weights at a third of the speed the matrix-matrix kernel reaches, and
2 to 11 rows to kernels slower than the same product written another way. Two other forms
compute the same product:

- ``wxt``: W·xᵀ, the weight as the left operand, a single row padded to two (MKL's own
  matrix-matrix kernel, without the repacking): best for 1 to ~5 rows here;
- ``onednn``: oneDNN's linear on the plain weights (``torch.ops.mkldnn._linear_pointwise``, the
  op torch's own compiler emits on CPUs; no copy of the weights): flat in the row count, best
  from ~6 rows here, prefill included.

On the bundled target a one-token pass drops from about 59 ms to 32 ms, a 5-token verify pass
from 92 ms to 56 ms and an 11-token one from 129 ms to 79 ms (``benchmarks/cpu_linear.py``
prints the table).

The target alone and the speculative decoder run the same module objects, so every speedup
the app shows compares equally fast passes. Results differ from ``F.linear`` by float rounding
only (summation order; about 1e-5 on the bundled target's logits).

Other CPUs and BLAS builds differ, so :func:`use_fast_linears` times every form over the
model's linear layers at a few widths and keeps, per width, the fastest (``F.linear`` unless
another beats it by more than 10%); the plan is kept in a memo file per machine and model
shape. ``SPECVIZ_STOCK_LINEAR=1`` keeps ``F.linear`` everywhere. Training (gradients on),
other dtypes and devices always take ``F.linear``.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

Product = Callable[[torch.Tensor, torch.Tensor, "torch.Tensor | None"], torch.Tensor]

# Widths timed; a product of n rows takes the form chosen at the smallest width ≥ n, and the
# last (a stand-in for prefill) covers everything wider than the one before it.
WIDTHS = (1, 3, 5, 8, 11, 32)


def small_product(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` computed as (W·xᵀ)ᵀ, one row padded to two."""
    rows = x.numel() // weight.shape[1]
    flat = x.reshape(rows, weight.shape[1])
    if rows == 1:
        flat = torch.cat((flat, flat))  # a 1-column product falls back to the slow gemv
    out = torch.mm(weight, flat.t()).t()[:rows].contiguous()  # contiguous: SDPA's fast kernel
    if bias is not None:                                      # needs unit-stride heads
        out += bias
    return out.view(*x.shape[:-1], weight.shape[0])


def onednn_product(x: torch.Tensor, weight: torch.Tensor,
                   bias: torch.Tensor | None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` by oneDNN on the plain (unpacked) weight."""
    flat = x.reshape(-1, weight.shape[1])
    out: torch.Tensor = torch.ops.mkldnn._linear_pointwise(flat, weight, bias, "none", [], "")
    return out.view(*x.shape[:-1], weight.shape[0])


def _stock_product(x: torch.Tensor, weight: torch.Tensor,
                   bias: torch.Tensor | None) -> torch.Tensor:
    return F.linear(x, weight, bias)


FORMS: dict[str, Product] = {"linear": _stock_product, "wxt": small_product,
                             "onednn": onednn_product}
LABELS = {"linear": "F.linear", "wxt": "W·xᵀ", "onednn": "oneDNN"}


def _band(rows: int) -> int:
    """Index into WIDTHS of the width whose choice a product of ``rows`` rows takes."""
    for i, width in enumerate(WIDTHS):
        if rows <= width:
            return i
    return len(WIDTHS) - 1


class DecodeLinear(nn.Linear):
    """An ``nn.Linear`` that takes, per row count, the form its plan names (CPU, fp32, no grad).

    ``plan[i]`` is the form for products of up to ``WIDTHS[i]`` rows (see :func:`_band`).
    """

    plan: tuple[str, ...] = ("linear",) * len(WIDTHS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        if (torch.is_grad_enabled() or x.device.type != "cpu" or x.dtype != torch.float32
                or w.dtype != torch.float32 or x.numel() == 0):
            return F.linear(x, w, self.bias)
        return FORMS[self.plan[_band(x.numel() // w.shape[1])]](x, w, self.bias)


@dataclass(frozen=True)
class LinearChoice:
    """What :func:`use_fast_linears` decided, with the timings it decided on."""

    fast: bool  # some width takes a form other than F.linear
    layers: int  # layers switched (0 when not fast)
    plan: tuple[str, ...]  # the form per width of WIDTHS
    why: str
    ms: dict[str, list[float]] = field(default_factory=dict)  # form -> sweep ms per width


def _sweep_ms(layers: list[nn.Linear], product: Product, inputs: dict[int, torch.Tensor]) -> float:
    """One product per layer in model order, as a forward pass meets them: the weights come
    from memory, not from a cache that one layer timed alone would sit in (a small draft's
    would)."""
    start = time.perf_counter()
    for m in layers:
        product(inputs[m.in_features], m.weight, None)
    return (time.perf_counter() - start) * 1000.0


def _machine_key(layers: list[nn.Linear]) -> str:
    """What the timing depends on: the CPU, torch, its thread count and the layer shapes."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            names = (ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
            cpu = next(names, cpu)
    except OSError:
        pass
    shapes = sorted({tuple(m.weight.shape) for m in layers})
    digest = hashlib.sha1(repr(shapes).encode()).hexdigest()[:12]
    return (f"{cpu} | torch {torch.__version__} | {torch.get_num_threads()} threads | "
            f"widths {','.join(map(str, WIDTHS))} | {digest}")


def _read_memo(memo: Path | None) -> dict[str, Any]:
    try:
        data = json.loads(memo.read_text(encoding="utf-8")) if memo else {}
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_memo(memo: Path | None, data: dict[str, Any]) -> None:
    if memo is None:
        return
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
        tmp.replace(memo)
    except OSError:
        pass  # a read-only cache only costs the timing next time


def _linears(model: nn.Module) -> list[nn.Linear]:
    # Exact type only: subclasses (quantised layers, LoRA) keep their own forward.
    return [m for m in model.modules()
            if type(m) in (nn.Linear, DecodeLinear) and isinstance(m, nn.Linear)]


def describe(plan: tuple[str, ...]) -> str:
    """'1–5 rows W·xᵀ, 6–11 rows oneDNN, 12+ rows oneDNN' from a plan."""
    parts, lo, i, last = [], 1, 0, len(WIDTHS) - 1  # the last width stands for all wider
    while i < last:
        j = i
        while j + 1 < last and plan[j + 1] == plan[i]:
            j += 1
        span = (f"{lo} row{'s' if lo > 1 else ''}" if lo == WIDTHS[j]
                else f"{lo}–{WIDTHS[j]} rows")
        parts.append(f"{span} {LABELS[plan[i]]}")
        lo, i = WIDTHS[j] + 1, j + 1
    parts.append(f"{lo}+ rows {LABELS[plan[last]]}")
    return ", ".join(parts)


def _time_forms(layers: list[nn.Linear], reps: int) -> dict[str, list[float]]:
    """Sweep ms per form and width (the fastest of ``reps`` interleaved sweeps: anything else
    running on the machine only ever adds time). A form that fails here is left out."""
    forms = dict(FORMS)
    ms: dict[str, list[float]] = {name: [] for name in forms}
    with torch.inference_mode():
        for width in WIDTHS:
            inputs = {m.in_features: torch.randn(width, m.in_features) for m in layers}
            for name, product in list(forms.items()):
                try:
                    _sweep_ms(layers, product, inputs)  # first calls pay one-off costs
                except (RuntimeError, AttributeError, NotImplementedError):
                    del forms[name]
                    ms.pop(name)
            best = {name: float("inf") for name in forms}
            for _ in range(reps):
                for name, product in forms.items():
                    best[name] = min(best[name], _sweep_ms(layers, product, inputs))
            for name in forms:
                ms[name].append(best[name])
    return ms


def choose_plan(ms: dict[str, list[float]]) -> tuple[str, ...]:
    """Per width, F.linear unless another form is more than 10% faster, then the fastest."""
    plan = []
    for i in range(len(ms["linear"])):
        stock = ms["linear"][i]
        others = {name: t[i] for name, t in ms.items() if name != "linear"}
        name = min(others, key=lambda n: others[n]) if others else "linear"
        plan.append(name if others and others[name] < 0.9 * stock else "linear")
    return tuple(plan)


def use_fast_linears(model: nn.Module, *, reps: int = 1, force: bool | None = None,
                     memo: Path | None = None,
                     announce: Callable[[str], None] | None = None) -> LinearChoice:
    """Give ``model``'s linear layers the fastest product form per width on this machine.

    Times every form of :data:`FORMS` over all the model's linear layers at each width of
    :data:`WIDTHS` and switches every ``nn.Linear`` to :class:`DecodeLinear` with the plan of
    :func:`choose_plan` when it uses any form but ``F.linear`` (about 2 s for the bundled
    target, once). ``memo`` (a JSON file) keeps each plan per CPU, torch version, thread count and
    set of layer shapes, so a second launch does not time again. ``force`` skips the timing
    (True: W·xᵀ at every width; False: restore ``nn.Linear``). Only for a float32 model wholly
    on the CPU; anything else is left as it is. ``announce`` is told before a timing starts.
    """
    layers = _linears(model)
    params = list(model.parameters())
    stock = ("linear",) * len(WIDTHS)
    if not layers or not params or any(p.device.type != "cpu" or p.dtype != torch.float32
                                       for p in params):
        return LinearChoice(False, 0, stock, "fast CPU linear: not a float32 CPU model")
    if force is None and os.environ.get("SPECVIZ_STOCK_LINEAR") == "1":
        force = False
    ms: dict[str, list[float]] = {}
    if force is not None:
        plan = ("wxt",) * len(WIDTHS) if force else stock
        how = "set, not timed"
    else:
        key = _machine_key(layers)
        known = _read_memo(memo).get(key)
        if (isinstance(known, dict) and isinstance(known.get("plan"), list)
                and len(known["plan"]) == len(WIDTHS)
                and all(name in FORMS for name in known["plan"])):
            plan, ms = tuple(known["plan"]), known.get("ms", {})
            how = "timed before on this machine"
        else:
            if announce is not None:
                announce("Timing this CPU's matrix products (once per model and machine)…")
            ms = _time_forms(layers, reps)
            plan = choose_plan(ms)
            how = f"timed over {len(layers)} layers"
            data = _read_memo(memo)
            data[key] = {"plan": list(plan),
                         "ms": {name: [round(t, 2) for t in times] for name, times in ms.items()}}
            _write_memo(memo, data)
    fast = plan != stock
    for layer in layers:
        layer.__class__ = DecodeLinear if fast else nn.Linear
        if fast:
            layer.plan = plan  # type: ignore[assignment]
    why = f"CPU linear forms: {describe(plan)} ({how})"
    return LinearChoice(fast, len(layers) if fast else 0, plan, why, ms)

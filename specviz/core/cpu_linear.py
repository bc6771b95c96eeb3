"""A faster CPU path for the few-row matrix products of decoding, chosen by measurement.

Decoding multiplies every weight matrix by 1 to K + 1 rows. With torch's MKL on this project's
machine (a 2-core AMD EPYC), ``F.linear`` does that badly: one row goes to a matrix-vector
kernel that streams the weights at a third of the speed the matrix-matrix kernel reaches, and
2 to 8 rows go to a kernel that repacks the whole weight matrix on every call. Writing the same
product as W·xᵀ (the weight as the left operand, a single row padded to two) avoids both:
the bundled target's one-token pass drops from about 57 ms to 30 ms and its five-token verify
pass from about 87 ms to 53 ms (``benchmarks/cpu_linear.py`` prints the table).

The target alone and the speculative decoder run the same module objects, so every speedup
the app shows compares equally fast passes. Results differ from ``F.linear`` by float rounding
only (summation order; about 1e-5 on the bundled target's logits).

Other CPUs and BLAS builds may not share MKL's weakness, so :func:`use_fast_linears` times
both forms over the model's linear layers and switches only when the W·xᵀ form wins.
``SPECVIZ_STOCK_LINEAR=1`` keeps ``F.linear`` everywhere. Training (gradients on), other
dtypes and devices, and products of more than ``MAX_ROWS`` rows (prefill) always take
``F.linear``.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

MAX_ROWS = 11  # lookup_k + 1; from 12 rows F.linear is as fast or faster here (measured)


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


class DecodeLinear(nn.Linear):
    """An ``nn.Linear`` that takes :func:`small_product` for few rows on CPU in fp32, no grad."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        if (torch.is_grad_enabled() or x.device.type != "cpu" or x.dtype != torch.float32
                or w.dtype != torch.float32 or x.dim() == 0
                or not 0 < x.numel() <= MAX_ROWS * w.shape[1]):
            return F.linear(x, w, self.bias)
        return small_product(x, w, self.bias)


@dataclass(frozen=True)
class LinearChoice:
    """What :func:`use_fast_linears` decided, with the timings it decided on."""

    fast: bool
    layers: int  # layers switched (0 when not fast)
    stock_ms: float  # F.linear over all the linear layers, 1 and 5 rows, summed (fastest sweeps)
    fast_ms: float  # small_product on the same
    why: str

    def line(self) -> str:
        return self.why


def _sweep_ms(layers: list[nn.Linear], product: Any, inputs: dict[int, torch.Tensor]) -> float:
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
    return f"{cpu} | torch {torch.__version__} | {torch.get_num_threads()} threads | {digest}"


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


def use_fast_linears(model: nn.Module, *, reps: int = 3, force: bool | None = None,
                     memo: Path | None = None) -> LinearChoice:
    """Switch ``model``'s linear layers to :class:`DecodeLinear` where that is faster here.

    Times ``F.linear`` and :func:`small_product` over all the model's linear layers for 1 and
    5 rows (the fastest of ``reps`` interleaved sweeps) and switches every ``nn.Linear`` when the
    latter wins by more than 10%. ``force`` skips the timing (True: switch, False: restore
    ``nn.Linear``).
    ``memo`` (a JSON file) keeps each decision per CPU, torch version, thread count and set of
    layer shapes, so a second launch does not time again (about 0.7 s for the bundled target).
    Only for a float32 model wholly on the CPU; anything else is left as it is.
    """
    layers = _linears(model)
    params = list(model.parameters())
    if not layers or not params or any(p.device.type != "cpu" or p.dtype != torch.float32
                                       for p in params):
        return LinearChoice(False, 0, 0.0, 0.0, "fast CPU linear: not a float32 CPU model")
    if force is None and os.environ.get("SPECVIZ_STOCK_LINEAR") == "1":
        force = False
    stock_ms = fast_ms = 0.0
    key = _machine_key(layers) if force is None else ""
    known = _read_memo(memo).get(key) if force is None else None
    if isinstance(known, dict) and isinstance(known.get("fast"), bool):
        fast = known["fast"]
        stock_ms, fast_ms = known.get("stock_ms", 0.0), known.get("fast_ms", 0.0)
        why = (f"fast CPU linear: {'on' if fast else 'off'} (timed before on this machine: "
               f"F.linear {stock_ms:.1f} ms, W·xᵀ {fast_ms:.1f} ms)")
    elif force is None:
        with torch.inference_mode():
            for rows in (1, 5):
                inputs = {m.in_features: torch.randn(rows, m.in_features) for m in layers}
                _sweep_ms(layers, F.linear, inputs)  # first calls pay one-off costs
                _sweep_ms(layers, small_product, inputs)
                # Interleaved, so both meet the same load; the fastest sweep of each, since
                # anything else running on the machine only ever adds time.
                pairs = [(_sweep_ms(layers, F.linear, inputs),
                          _sweep_ms(layers, small_product, inputs)) for _ in range(reps)]
                stock_ms += min(a for a, _ in pairs)
                fast_ms += min(b for _, b in pairs)
        fast = fast_ms < 0.9 * stock_ms
        why = (f"fast CPU linear: {'on' if fast else 'off'} (all {len(layers)} linear layers, "
               f"1 + 5 rows: F.linear {stock_ms:.1f} ms, W·xᵀ {fast_ms:.1f} ms)")
        memo_data = _read_memo(memo)
        memo_data[key] = {"fast": fast, "stock_ms": round(stock_ms, 2),
                          "fast_ms": round(fast_ms, 2)}
        _write_memo(memo, memo_data)
    else:
        fast = force
        why = f"fast CPU linear: {'on' if fast else 'off'} (set, not timed)"
    for layer in layers:
        layer.__class__ = DecodeLinear if fast else nn.Linear
    return LinearChoice(fast, len(layers) if fast else 0, stock_ms, fast_ms, why)

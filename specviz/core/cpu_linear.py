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

The weights can also be stored column-major (the same values, the same (out, in) shape, strides
(1, out): ``w.t().contiguous().t()``). ``F.linear`` then multiplies by a contiguous Wᵀ and MKL's
few-row kernels stop repacking the weights: on an AVX-512 Xeon (measured) a sweep over the
bundled target's weights got faster at most widths; other CPUs are not measured, so it is
timed per machine. The price: converting takes a transposing copy at each load (~0.3 s for the
bundled target on a quiet 2-core Xeon, ~0.8 s loaded), and transformers' ``save_pretrained`` refuses
column-major tied or stacked weights (it views shared tensors flat): ``set_layout(..., "row")``
first. Everything else reads the same values (indexing, ``state_dict``, ``torch.save``).

Other CPUs and BLAS builds differ, so :func:`use_fast_linears` times every form over the
model's linear layers at a few widths, in row-major alone by default and in both layouts where
``SPECVIZ_LINEAR_LAYOUTS=row,col`` asks (:func:`timed_layouts` says why column-major is not
the default: whole runs of the default were slower in it), keeps column-major only where its
sweeps are clearly faster (:func:`choose_layout`) and then, per width, the fastest form in
that layout (``F.linear`` unless another beats it by
more than 10%); layout and plan are kept in a memo file per machine and model shape.
``SPECVIZ_STOCK_LINEAR=1`` keeps row-major weights and ``F.linear`` everywhere. Training
(gradients on), other dtypes and devices always take ``F.linear`` (on whatever layout the
weights have: the values are the same).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from collections.abc import Callable, Sequence
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
# How the weights lie in memory: row-major (torch's own) or column-major (strides (1, out)).
LAYOUTS = ("row", "col")
LAYOUT_LABELS = {"row": "row-major", "col": "column-major"}
# Column-major is kept only when its sweeps over all WIDTHS take less than this share of
# row-major's, and its one-row sweep (every draft token, every step of the target alone) no
# more than NOISE_1 more.
LAYOUT_MARGIN = 0.95
NOISE_1 = 1.03


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


def layout_of(weight: torch.Tensor) -> str:
    """'col' for a column-major weight (or a row slice of one: strides (1, ≥ out)), else 'row'."""
    return "col" if weight.dim() == 2 and weight.shape[0] > 1 and weight.stride(0) == 1 else "row"


def _arranged(t: torch.Tensor, layout: str) -> torch.Tensor:
    """``t``'s values laid out whole in ``layout`` (``t`` itself when it already is)."""
    return t.t().contiguous().t() if layout == "col" else t.contiguous()


def stack_weights(linears: Sequence[nn.Linear]) -> torch.Tensor:
    """The linears' weights stacked (their output rows one after another) in the layout they
    have, each linear's weight then a view of its rows: no second copy. Column-major: a
    (Σ out, in) tensor of strides (1, Σ out), each view's strides (1, Σ out). The stack is
    remembered on the linears, so :func:`set_layout` moves it whole later and keeps the views."""
    layout = layout_of(linears[0].weight)
    with torch.inference_mode(False), torch.no_grad():  # plain tensors: the model may train
        if layout == "col":  # an (in, Σ out) row-major tensor, seen transposed
            stacked = torch.cat([lin.weight.data.t() for lin in linears], dim=1).contiguous().t()
        else:
            stacked = torch.cat([lin.weight.data for lin in linears]).contiguous()
        at = 0
        for lin in linears:
            rows = lin.weight.shape[0]
            lin.weight.data = stacked[at:at + rows]
            lin.__dict__["stacked_in"] = (stacked, at, at + rows)
            at += rows
    return stacked


def _stack_of(lin: nn.Linear) -> tuple[torch.Tensor, int, int] | None:
    """The stack ``lin``'s weight is still a view of, with its rows (None: a weight of its own)."""
    held = lin.__dict__.get("stacked_in")
    if held is None:
        return None
    stacked, start, stop = held
    w = lin.weight
    same = (w.untyped_storage().data_ptr() == stacked.untyped_storage().data_ptr()
            and w.shape == stacked[start:stop].shape
            and w.storage_offset() == stacked[start:stop].storage_offset())
    return held if same else None


def set_layout(linears: Sequence[nn.Linear], layout: str) -> None:
    """Lay the linears' weights out in ``layout``, in place: each Parameter keeps its identity
    (a tied embedding follows its head), a stack of :func:`stack_weights` moves whole (the
    same tensor object, so whoever holds it sees the new layout) and its linears stay views
    of it. At most one weight's worth of memory more while it runs."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r}: not one of {LAYOUTS}")
    done: set[int] = set()
    with torch.inference_mode(False), torch.no_grad():
        for lin in linears:
            held = _stack_of(lin)
            if held is not None:
                stacked = held[0]
                if id(stacked) in done:
                    continue
                done.add(id(stacked))
                if layout_of(stacked) == layout and _arranged(stacked, layout) is stacked:
                    continue
                group = [(m, s, e) for m in linears
                         if (h := _stack_of(m)) is not None and h[0] is stacked
                         for s, e in [h[1:]]]
                stacked.data = _arranged(stacked, layout)
                for m, start, stop in group:
                    m.weight.data = stacked[start:stop]
            elif id(lin.weight) not in done:
                done.add(id(lin.weight))
                lin.__dict__.pop("stacked_in", None)
                new = _arranged(lin.weight.data, layout)
                if new is not lin.weight.data:
                    lin.weight.data = new


@dataclass(frozen=True)
class LinearChoice:
    """What :func:`use_fast_linears` decided, with the timings it decided on."""

    fast: bool  # some width takes a form other than F.linear, or the weights are column-major
    layers: int  # layers switched or laid out anew (0 when not fast)
    plan: tuple[str, ...]  # the form per width of WIDTHS
    why: str
    # layout -> form -> sweep ms per width
    ms: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    layout: str = "row"  # of the weights: "row" or "col"


def _sweep_ms(layers: list[nn.Linear], product: Product, inputs: dict[int, torch.Tensor]) -> float:
    """One product per layer in model order, as a forward pass meets them: the weights come
    from memory, not from a cache that one layer timed alone would sit in (a small draft's
    would)."""
    start = time.perf_counter()
    for m in layers:
        product(inputs[m.in_features], m.weight, None)
    return (time.perf_counter() - start) * 1000.0


def timed_layouts() -> tuple[str, ...]:
    """The layouts :func:`use_fast_linears` times by default: row-major only, unless
    ``SPECVIZ_LINEAR_LAYOUTS=row,col`` asks for column-major too. Column-major makes the bundled
    target's wider passes cheaper (4-6 tokens 0.76-0.86x, quiet, 1 thread) and its one-token
    step a little (0.96x) but its 2- and 3-token passes dearer (1.06-1.07x), and those are
    what the default drafts most: in whole runs interleaved on this project's CPU (2 threads,
    quiet, 2026-11-27, ``benchmarks/cpu_linear.py --parts runs``) the default ran 0.88x
    (hand-written prompts) and 0.98x (template) of its row-major speed while the target alone
    ran 1.05x / 1.02x, so its lead over the target alone shrank. Summed sweeps do not see that."""
    raw = os.environ.get("SPECVIZ_LINEAR_LAYOUTS", "").strip()
    asked = tuple(x.strip() for x in raw.split(",") if x.strip()) if raw else ("row",)
    return tuple(x for x in LAYOUTS if x in asked) or ("row",)


def _machine_key(layers: list[nn.Linear], layouts: Sequence[str] = ("row",)) -> str:
    """What the timing depends on: the CPU, torch, its thread count, the layer shapes and the
    layouts timed."""
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
            f"widths {','.join(map(str, WIDTHS))} | {digest} | layouts {','.join(layouts)}")


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


def describe(plan: tuple[str, ...], layout: str = "row") -> str:
    """'row-major weights; 1–5 rows W·xᵀ, 6–11 rows oneDNN, 12+ rows oneDNN' from a plan."""
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
    return f"{LAYOUT_LABELS[layout]} weights; " + ", ".join(parts)


def _warm(layers: list[nn.Linear], product: Product, inputs: dict[int, torch.Tensor]) -> None:
    """One product per weight shape: the first calls of a form and shape pay one-off costs."""
    seen: set[tuple[tuple[int, ...], tuple[int, ...]]] = set()
    for m in layers:
        key = (tuple(m.weight.shape), m.weight.stride())
        if key not in seen:
            seen.add(key)
            product(inputs[m.in_features], m.weight, None)


def _time_forms(layers: list[nn.Linear], reps: int,
                layouts: Sequence[str] = LAYOUTS) -> dict[str, dict[str, list[float]]]:
    """Sweep ms per layout, form and width: the fastest of ``reps`` sweeps (anything else
    running on the machine only ever adds time). The weights are converted in place between
    layouts, which alternate rep by rep (row, col, col, row, ...: one conversion per rep);
    within a layout the forms alternate width by width. A form that fails is left out of that
    layout. The weights are left in the last layout timed."""
    forms = {layout: dict(FORMS) for layout in layouts}
    best = {layout: {name: [float("inf")] * len(WIDTHS) for name in FORMS} for layout in layouts}
    inputs = {width: {m.in_features: torch.randn(width, m.in_features) for m in layers}
              for width in WIDTHS}
    warmed: set[tuple[str, str, int]] = set()
    order = list(layouts)
    with torch.inference_mode():
        for _ in range(max(1, reps)):
            for layout in order:
                set_layout(layers, layout)
                for i, width in enumerate(WIDTHS):
                    for name, product in list(forms[layout].items()):
                        if (layout, name, width) not in warmed:
                            warmed.add((layout, name, width))
                            try:
                                _warm(layers, product, inputs[width])
                            except (RuntimeError, AttributeError, NotImplementedError):
                                del forms[layout][name]
                                continue
                        t = _sweep_ms(layers, product, inputs[width])
                        best[layout][name][i] = min(best[layout][name][i], t)
            order.reverse()  # the layout timed last is timed first next: no conversion
    return {layout: {name: best[layout][name] for name in forms[layout]} for layout in layouts}


def choose_plan(ms: dict[str, list[float]]) -> tuple[str, ...]:
    """Per width, F.linear unless another form is more than 10% faster, then the fastest."""
    plan = []
    for i in range(len(ms["linear"])):
        stock = ms["linear"][i]
        others = {name: t[i] for name, t in ms.items() if name != "linear"}
        name = min(others, key=lambda n: others[n]) if others else "linear"
        plan.append(name if others and others[name] < 0.9 * stock else "linear")
    return tuple(plan)


def planned_ms(ms: dict[str, list[float]]) -> list[float]:
    """Per width, the sweep ms of the form :func:`choose_plan` picks (what would run)."""
    return [ms[name][i] for i, name in enumerate(choose_plan(ms))]


def choose_layout(ms: dict[str, dict[str, list[float]]]) -> str:
    """Column-major where, each layout with its own plan, its sweeps summed over WIDTHS take
    less than LAYOUT_MARGIN of row-major's and its one-row sweep no more than NOISE_1 times
    row-major's; else row-major (torch's own: nothing to convert)."""
    if not ms.get("row", {}).get("linear") or not ms.get("col", {}).get("linear"):
        return "row"
    row, col = planned_ms(ms["row"]), planned_ms(ms["col"])
    if sum(col) < LAYOUT_MARGIN * sum(row) and col[0] <= NOISE_1 * row[0]:
        return "col"
    return "row"


def layout_ratio(ms: Any) -> float | None:
    """Column-major's planned sweeps over row-major's, summed over WIDTHS (None: not both, or
    a memo's timings that do not read)."""
    try:
        return sum(planned_ms(ms["col"])) / sum(planned_ms(ms["row"]))
    except (KeyError, TypeError, IndexError, ValueError, ZeroDivisionError, AttributeError):
        return None


def set_linears(model: nn.Module, plan: tuple[str, ...], layout: str = "row") -> int:
    """Every plain linear layer of ``model`` to ``plan`` (``DecodeLinear``; all ``F.linear``:
    ``nn.Linear``) with its weights in ``layout``. Returns how many layers."""
    layers = _linears(model)
    set_layout(layers, layout)
    fast = plan != ("linear",) * len(WIDTHS)
    for layer in layers:
        layer.__class__ = DecodeLinear if fast else nn.Linear
        if fast:
            layer.plan = plan  # type: ignore[assignment]
        else:
            layer.__dict__.pop("plan", None)
    return len(layers)


def _valid(known: Any) -> bool:
    """A memo entry this version reads: a layout (entries from before layouts: timed again)
    and a form per width."""
    return (isinstance(known, dict) and known.get("layout") in LAYOUTS
            and isinstance(known.get("plan"), list) and len(known["plan"]) == len(WIDTHS)
            and all(name in FORMS for name in known["plan"]))


def use_fast_linears(model: nn.Module, *, reps: int = 2, force: bool | None = None,
                     memo: Path | None = None,
                     announce: Callable[[str], None] | None = None,
                     layouts: Sequence[str] | None = None) -> LinearChoice:
    """Give ``model``'s linear layers the faster weight layout and product form per width on
    this machine.

    Times every form of :data:`FORMS` over all the model's linear layers at each width of
    :data:`WIDTHS` in each of ``layouts`` (default :func:`timed_layouts`: row-major alone unless
    asked; the weights converted in place), keeps
    the layout of :func:`choose_layout` and in it the plan of :func:`choose_plan`, switching
    every ``nn.Linear`` to :class:`DecodeLinear` when the plan uses any form but ``F.linear``
    (``reps`` sweeps per form and width in each layout timed; row-major alone converts
    nothing, both layouts ~13-17 s for the bundled target on a loaded 2-core machine, once).
    ``memo`` (a JSON file) keeps each choice per CPU,
    torch version, thread count and set of layer shapes, so a second launch does not time
    again (an entry without a layout, from before layouts were timed, is timed again once).
    ``force`` skips the timing (True: W·xᵀ at every width; False: ``F.linear``; both
    row-major). Only for a float32 model wholly on the CPU; anything else is left as it is.
    ``announce`` is told before a timing starts.
    """
    layers = _linears(model)
    params = list(model.parameters())
    stock = ("linear",) * len(WIDTHS)
    if not layers or not params or any(p.device.type != "cpu" or p.dtype != torch.float32
                                       for p in params):
        return LinearChoice(False, 0, stock, "fast CPU linear: not a float32 CPU model")
    if force is None and os.environ.get("SPECVIZ_STOCK_LINEAR") == "1":
        force = False
    ms: dict[str, dict[str, list[float]]] = {}
    layout = "row"
    if force is not None:
        plan = ("wxt",) * len(WIDTHS) if force else stock
        how = "set, not timed"
    else:
        layouts = tuple(layouts) if layouts is not None else timed_layouts()
        key = _machine_key(layers, layouts)
        known = _read_memo(memo).get(key)
        if isinstance(known, dict) and _valid(known):
            plan, layout, ms = tuple(known["plan"]), known["layout"], known.get("ms", {})
            how = "timed before on this machine"
        else:
            if announce is not None:
                announce("Timing this CPU's matrix products (once per model and machine)…")
            ms = _time_forms(layers, reps, layouts)
            layout = choose_layout(ms)
            plan = choose_plan(ms[layout])
            how = f"timed over {len(layers)} layers"
            data = _read_memo(memo)
            data[key] = {"layout": layout, "plan": list(plan),
                         "ms": {lay: {name: [round(t, 2) for t in times]
                                      for name, times in forms.items()}
                                for lay, forms in ms.items()}}
            _write_memo(memo, data)
    set_linears(model, plan, layout)
    fast = plan != stock or layout != "row"
    ratio = layout_ratio(ms)
    sweeps = (f"; column-major sweeps {ratio:.2f}× row-major's" if ratio is not None else "")
    why = f"CPU linear forms: {describe(plan, layout)} ({how}{sweeps})"
    return LinearChoice(fast, len(layers) if fast else 0, plan, why, ms, layout)

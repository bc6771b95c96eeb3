"""The cost policy's calibration kept on disk, per machine, device and target.

``engine.verify_costs`` times a target pass at each of a few widths (v(n), seconds); on a
busy 2-core laptop that took 23 s of a 41 s second launch (issue 26, item 14). The figures
depend on the machine, the device and the model (its shape, dtype and the forward it runs
on), not on the prompt, so they are kept in ``<cache>/calibration.json`` under a fingerprint
of those three; the next launch uses them at once and a re-measurement, taken when the caller
chooses (the app: in the background after loading), is blended in.

A busy machine only adds time, so a re-measurement may pull a width down freely (by half the
gap) but up only by a quarter of the gap and at most ×``BOUND`` of the kept figure: a burst of
load from elsewhere moves a kept curve a little, never wrecks it. A curve no machine could time
quiet (a narrower pass dearer than ``SLACK`` × a wider one: :func:`plausible`) is not kept and
not used: found on this project's machine, 1.53 s for one token and 0.84 s for three, timed
while other processes held both cores; the cost policy then read a one-token step as dearer
than a two-token pass and never took a plain step. A file that cannot be read or
parsed, or an entry of another shape, counts as nothing kept (and is rewritten), never as an
error: the store only saves time.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import platform
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

FILE_NAME = "calibration.json"
FORMAT = 1
DOWN = 0.5  # share of the gap a faster re-measurement closes
UP = 0.25  # share of the gap a slower one closes (a busy machine only adds time)
BOUND = 2.0  # a slower re-measurement counts as at most BOUND × the kept figure
MAX_ENTRIES = 64  # the oldest go first: machines and pairs come and go
# A pass over fewer tokens never costs more than one over more (the same weights, less work);
# quiet timings of the bundled target break that by at most ~1.2x (width 5 against 8: the fast
# linear path changes kernel between width groups), a burst of load by far more.
SLACK = 1.5


def store_path() -> Path:
    """``calibration.json`` under the specviz cache (``models.cache_root``),
    or the file SPECVIZ_CALIBRATION_STORE names (the tests: one per test)."""
    env = os.environ.get("SPECVIZ_CALIBRATION_STORE", "").strip()
    if env:
        return Path(env).expanduser()
    from .models import cache_root

    return cache_root() / FILE_NAME


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_parts() -> dict[str, Any]:
    """What makes one machine's timings unlike another's (not its name: a copied cache on an
    identical machine may keep its figures)."""
    import torch

    return {"cpu": _cpu_name(), "cores": os.cpu_count(), "threads": torch.get_num_threads(),
            "system": platform.system(), "torch": torch.__version__}


def device_parts(device: Any) -> dict[str, Any]:
    """The device a model runs on, by kind and (for a GPU) by model name."""
    import torch

    dev = torch.device(device)
    parts: dict[str, Any] = {"device": dev.type}
    if dev.type == "cuda" and torch.cuda.is_available():
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        parts["gpu"] = torch.cuda.get_device_name(index)
    return parts


def linear_form(model: Any) -> str:
    """How the model's linear layers multiply (``cpu_linear``): the weights' layout and the
    form per width band, e.g. "col linear,linear,linear,linear,linear,linear" ("row stock"
    for plain ``nn.Linear`` layers). A pass's cost by width depends on it as much as on the
    machine: a calibration timed under one is not the shape of another."""
    from torch import nn

    from .cpu_linear import layout_of

    for m in model.modules():
        if isinstance(m, nn.Linear):
            plan = getattr(m, "plan", None)
            return f"{layout_of(m.weight)} {','.join(plan) if plan else 'stock'}"
    return "none"


def model_parts(model: Any, path: str) -> dict[str, Any]:
    """A model by its shape (config), dtype and size, the forward ``path`` it runs on and
    the form of its linear products (:func:`linear_form`)."""
    cfg = model.config.to_dict()
    for name in ("_name_or_path", "name_or_path", "transformers_version", "dtype", "torch_dtype"):
        cfg.pop(name, None)
    config = json.dumps(cfg, sort_keys=True, default=str)
    params = list(model.parameters())
    digest = hashlib.sha256(config.encode()).hexdigest()[:16]
    return {"class": type(model).__name__, "config": digest,
            "dtype": str(params[0].dtype).removeprefix("torch.") if params else "?",
            "parameters": sum(p.numel() for p in params), "path": path,
            "linear": linear_form(model)}


def fingerprint(parts: Mapping[str, Any]) -> str:
    """A short stable key for the parts (machine, device, model)."""
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # missing, unreadable, not UTF-8, not JSON
        return {}
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return {}
    entries = data.get("entries")
    return entries if isinstance(entries, dict) else {}


def _costs(entry: Any, widths: Sequence[int]) -> dict[int, float] | None:
    """An entry's seconds per width, if it holds a positive finite figure for every width."""
    if not isinstance(entry, dict) or not isinstance(entry.get("seconds"), dict):
        return None
    seconds = entry["seconds"]
    out: dict[int, float] = {}
    for n in widths:
        value = seconds.get(str(n))
        if type(value) not in (int, float) or not math.isfinite(value) or value <= 0:
            return None
        out[n] = float(value)
    return out


def plausible(seconds: Mapping[int, float]) -> bool:
    """Whether a curve of pass times (width -> seconds) could have been timed on a machine
    left alone: no pass costs more than ``SLACK`` × a pass over more tokens."""
    widths = sorted(seconds)
    return all(seconds[a] <= SLACK * min(seconds[b] for b in widths[i + 1:])
               for i, a in enumerate(widths[:-1]))


def load(key: str, widths: Sequence[int], path: Path | None = None) -> dict[int, float] | None:
    """The kept seconds per width under ``key``; None when there are none (or none usable: a
    curve that is not :func:`plausible` counts as none, and is timed again)."""
    costs = _costs(_read(path or store_path()).get(key), widths)
    return costs if costs is not None and plausible(costs) else None


def save(key: str, seconds: Mapping[int, float], parts: Mapping[str, Any],
         path: Path | None = None) -> bool:
    """Keep ``seconds`` under ``key`` (replacing it); False when the file cannot be written."""
    path = path or store_path()
    entries = _read(path)
    old = entries.pop(key, None)
    entries[key] = {"seconds": {str(n): s for n, s in sorted(seconds.items())},
                    "parts": dict(parts), "updates": 1 + _updates(old)}
    step = _step(old)
    if step is not None:  # the speed reference kept beside the passes (save_step)
        entries[key]["step"] = step
    return _write(path, entries)


def _step(entry: Any) -> float | None:
    value: Any = entry.get("step") if isinstance(entry, dict) else None
    if not isinstance(value, (int, float)) or isinstance(value, bool) or \
            not math.isfinite(value) or value <= 0:
        return None
    return float(value)


def load_step(key: str, path: Path | None = None) -> float | None:
    """The target's one-token step (``speed.measure_target_step``) kept under ``key`` with
    the passes, if one is (None: none, or none usable)."""
    return _step(_read(path or store_path()).get(key))


def save_step(key: str, seconds: float, parts: Mapping[str, Any], path: Path | None = None
              ) -> bool:
    """Keep the target's one-token step under ``key`` (beside its passes, if kept)."""
    path = path or store_path()
    entries = _read(path)
    entry = entries.get(key)
    if not isinstance(entry, dict) or not isinstance(entry.get("seconds"), dict):
        entry = {"seconds": {}, "parts": dict(parts), "updates": 0}
    entries[key] = {**entry, "step": seconds}
    return _write(path, entries)


def _write(path: Path, entries: dict[str, Any]) -> bool:
    while len(entries) > MAX_ENTRIES:
        entries.pop(next(iter(entries)))
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps({"format": FORMAT, "entries": entries}, indent=1,
                                  default=str), encoding="utf-8")
        os.replace(tmp, path)  # whole or not at all: a reader never sees half a file
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        return False
    return True


def _updates(entry: Any) -> int:
    count = entry.get("updates") if isinstance(entry, dict) else None
    return count if type(count) is int and count >= 0 else 0


def blend(kept: Mapping[int, float], measured: Mapping[int, float]) -> dict[int, float]:
    """``kept`` moved toward ``measured``: by DOWN of the gap where faster, by UP of it (the
    measurement capped at BOUND × kept) where slower. Widths only one side has are taken as
    they are."""
    out = dict(kept)
    for n, new in measured.items():
        old = kept.get(n)
        if old is None:
            out[n] = new
        elif new <= old:
            out[n] = old + DOWN * (new - old)
        else:
            out[n] = old + UP * (min(new, BOUND * old) - old)
    return out


__all__ = ["blend", "device_parts", "fingerprint", "linear_form", "load", "load_step",
           "machine_parts", "model_parts", "plausible", "save", "save_step", "store_path"]

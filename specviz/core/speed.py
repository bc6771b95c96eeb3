"""Honest speed figures: every speedup is measured against something named, or not shown.

Units: one *step* is one forward pass of the target p on one new token with its KV cache
(what the target alone does per token). Measured at load by :func:`measure_target_step`.

- c = time of one draft pass ÷ step, v = time of one verify pass (K + 1 positions) ÷ step.
  On a CPU a verify pass costs more than a step (v ≈ 1.4 on the bundled pair), which the
  paper's form (v = 1) leaves out.
- expected speedup = E[tokens per round] ÷ (K·c + v), E = (1 − α^(K+1)) / (1 − α)
  (Leviathan et al., eq. 1 and thm 3.8, with the verify pass at its measured cost).
- measured speedup: tokens/s of the run ÷ tokens/s of the target alone on the same prompt
  (a race), or, without one, ÷ (1 / step).

Qt-free; the GUI's SpeedStats and the race view read these.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any


def expected_tokens_per_round(alpha: float, k: int) -> float:
    """E[tokens per round] = (1 − α^(K+1)) / (1 − α) = 1 + α + … + α^K."""
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def expected_speedup(alpha: float, k: int, cost_ratio: float, verify_cost: float = 1.0) -> float:
    """E[tokens per round] ÷ (K·c + v), in one-token target steps; v = 1 is the paper's form."""
    denominator = k * cost_ratio + verify_cost
    return expected_tokens_per_round(alpha, k) / denominator if denominator > 0 else 0.0


def pass_costs(draft_s: float, draft_passes: int, verify_s: float, verify_passes: int,
               step_s: float = 0.0) -> tuple[float, float]:
    """(c, v): one draft pass and one verify pass in the units the speedup formula takes.

    The one definition every reader uses (the app's numbers, the tally, sweeps). With the
    target's one-token step measured (``step_s`` > 0), both are in steps: c = draft pass ÷
    step, v = verify pass ÷ step. Without it, the verify pass is the unit: c = draft pass ÷
    verify pass and v = 1 (the paper's form). 0 where nothing was timed.
    """
    t_draft = draft_s / draft_passes if draft_passes > 0 else 0.0
    t_verify = verify_s / verify_passes if verify_passes > 0 else 0.0
    if step_s > 0:
        return t_draft / step_s, t_verify / step_s
    if t_verify > 0:
        return t_draft / t_verify, 1.0
    return 0.0, 0.0


def speedup_vs_step(tokens: int, elapsed_s: float, step_s: float) -> float:
    """Speedup against the target alone at one measured step per token: tokens·step ÷ elapsed."""
    if tokens <= 0 or elapsed_s <= 0 or step_s <= 0:
        return 0.0
    return tokens * step_s / elapsed_s


def speedup_vs_run(tokens_per_s: float, baseline_tokens_per_s: float) -> float:
    """Speedup against a measured target-alone run: the ratio of tokens per second."""
    if tokens_per_s <= 0 or baseline_tokens_per_s <= 0:
        return 0.0
    return tokens_per_s / baseline_tokens_per_s


def describe_step(step_s: float, kept: bool = False) -> str:
    """How the reference reads on screen: 'vs target one-token step measured at load: 41.2 ms',
    or, for a step ``kept`` from an earlier launch on this machine (core/calibration.py), 'vs
    target one-token step kept from an earlier launch: 41.2 ms': never 'at load' when it was
    not."""
    when = "kept from an earlier launch" if kept else "measured at load"
    return f"vs target one-token step {when}: {step_s * 1000:.1f} ms"


def measure_target_step(pair: Any, passes: int = 5, warmup: int = 2, context: int = 32,
                        clock: Callable[[], float] = time.perf_counter,
                        budget_s: float = 1.0, target: Any = None) -> float:
    """Seconds of one target step (median of ``passes`` after ``warmup``), as the baseline does it.

    The step runs on the engine's own target path (``parts.Factory().target``: FastLlama where
    it serves the target, as the target alone and the verifying target run), so a speedup
    against it divides like for like; ``target`` gives another runner (tests). A
    ``context``-token prefix is cached first; each step then feeds one token, keeps one row of
    logits and turns it into probabilities, as the autoregressive decoder does per token.
    Timed passes stop early once they took ``budget_s`` (at least one is always timed), so a
    large model or a busy machine does not hold the load up for long.
    """
    import torch

    from .parts import Factory

    runner = target if target is not None else Factory().target(pair)
    vocab = int(pair.vocab_size)
    times: list[float] = []
    with torch.inference_mode():
        logits = runner.feed([i % vocab for i in range(context)], keep=1)  # (1, V)
        token = int(logits[-1].argmax())
        for i in range(warmup + passes):
            if i > warmup and sum(times[warmup:]) >= budget_s:
                break
            t0 = clock()
            logits = runner.feed([token], keep=1)
            probs = torch.softmax(logits[-1].float(), dim=-1).cpu()  # (V,)
            times.append(clock() - t0)
            token = int(probs.argmax())
    return float(statistics.median(times[warmup:]))


def target_step(pair: Any, measure: Callable[[Any], float] = measure_target_step,
                machine: Callable[[], dict[str, Any]] | None = None) -> tuple[float, bool]:
    """The target's one-token step (``measure``, :func:`measure_target_step`) kept with its
    passes' calibration (core/calibration.py: per machine, thread count, device, target and
    forward path): a launch with one kept takes it at once (~0.5-1 s of passes saved on the
    bundled pair, 2 cores); else timed now and kept. Returns (seconds, kept), so the screen
    can say which (:func:`describe_step`). ``machine`` names this machine in the key (the
    real one by default; the tests pass another)."""
    from . import calibration
    from .engine import _target_runner, calibration_key

    key, parts = calibration_key(_target_runner(pair), machine)
    kept = calibration.load_step(key)
    if kept is not None:
        return kept, True
    step = measure(pair)
    calibration.save_step(key, step, parts)
    return step, False


__all__ = [
    "describe_step",
    "expected_speedup",
    "expected_tokens_per_round",
    "measure_target_step",
    "speedup_vs_run",
    "speedup_vs_step",
    "target_step",
]

"""The default (hybrid drafter + cost policy) per prompt against the target alone, round by round.

    .venv/bin/python benchmarks/default_rounds.py [--sets grounded,free,template] [--prompts 6]
        [--max-new-tokens 96] [--threads 2] [--clock model|real] [--rounds PROMPT]
    .venv/bin/python benchmarks/default_rounds.py --file PATH/question.jsonl --categories rag
        [--prompts 3] [--ids 481,483] [--drafter hybrid,lookup,model] [--rounds rag:481]

For each prompt it prints what does not depend on the machine's load: tokens per round,
target passes, positions verified (the widths of the target's passes, summed), drafts by
source and how many were kept, and the K chosen; and a speedup over the target alone, either
timed (``--clock real``: both run interleaved in this process, wall clock) or modeled
(``--clock model``, the default: every forward pass advances a virtual clock by a fixed cost
per model and width, so the cost policy's decisions, and the speedup, are the same on every
run and under any load; ``--costs`` names the table, see ``COSTS``). ``--rounds N`` prints
prompt N's rounds (source, K, kept, the policy's reason). At T = 0 each text is compared with
the target alone's. ``--file`` reads the prompts of a prompt file instead (one per line, or
Spec-Bench's JSON lines, each in the chat template), the first ``--prompts`` of each of
``--categories`` (``--ids``: those question ids only); a prompt is then named
``category:id`` (``--rounds rag:481``). ``--drafter`` may name several drafters: each runs
beside the same target-alone run.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from grounded_prompts import grounded_prompts  # noqa: E402

from specviz.core.cached_model import CachedModel  # noqa: E402
from specviz.core.engine import AutoregressiveDecoder, SpeculativeDecoder, chat_prompt  # noqa: E402
from specviz.core.engine import calibrate as engine_calibrate  # noqa: E402
from specviz.core.events import Round, RunFinished, Settings  # noqa: E402
from specviz.core.models import DEFAULT_PAIR, PRESETS, ModelPair, load_pair  # noqa: E402
from specviz.core.parts import Factory  # noqa: E402
from specviz.core.promptset import pick, read_prompts  # noqa: E402
from specviz.distill.prompts import free_prompts, heldout_prompts  # noqa: E402

SETS = {"grounded": grounded_prompts, "template": heldout_prompts, "free": free_prompts}

# Milliseconds of one forward pass by width on the project's 2-core CPU (torch 2.13, 2 threads,
# the bundled pair, ~350-token context; best of 5 sweeps, 2026-11-26 21:33 UTC, load ~0.5):
# the target's step rises at 4 (cpu_linear's width groups 1 | 2-3 | 4-5 | 6-8 | 9-11 | 12+).
COSTS: dict[str, dict[str, dict[int, float]]] = {
    "cpu2": {
        "target": {1: 39.4, 2: 43.0, 3: 48.8, 4: 86.4, 5: 92.6, 6: 76.3, 7: 83.2, 8: 79.6,
                   9: 88.8, 10: 96.9, 11: 90.5, 12: 101.9, 13: 122.4, 14: 120.4, 15: 122.1,
                   16: 92.0, 17: 92.0},
        "draft": {1: 4.25, 2: 4.85, 3: 5.06, 4: 8.25, 5: 8.14, 6: 8.39, 7: 8.69, 8: 8.95,
                  9: 9.29, 10: 8.14, 11: 9.5, 12: 10.84, 13: 9.28, 14: 9.65, 15: 10.56,
                  16: 8.7, 17: 9.71},
    },
}

# The calibration this machine kept (calibration.json, 2 threads, found 2026-11-26 21:30 UTC),
# timed while other processes held both cores: seconds per width, no quiet machine's shape.
BUSY_CALIBRATION = {1: 1.5314, 2: 2.1129, 3: 0.8361, 5: 1.3615, 8: 1.5140, 11: 1.8885,
                    17: 1.4809}


def _cost(table: dict[int, float], n: int) -> float:
    """Seconds of a pass of ``n`` tokens (beyond the table: its widest, + 2% a token)."""
    widest = max(table)
    if n <= widest:
        return table[n] / 1000
    return table[widest] * (1 + 0.02 * (n - widest)) / 1000


class VirtualClock:
    """A clock that only forward passes move (``advance``)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def modeled_factory(pair: ModelPair, costs: dict[str, dict[int, float]],
                    calibration: str = "model") -> Factory:
    """The real parts, with a clock that each pass advances by its modeled cost; the cost
    policy's calibration modeled too ("model"), the one this machine keeps ("kept": whatever
    load it was timed under, calibration.json) or BUSY_CALIBRATION ("busy")."""
    clock = VirtualClock()

    class Modeled(CachedModel):
        def feed(self, ids: list[int], keep: int, local: bool = False) -> torch.Tensor:
            out = super().feed(ids, keep, local)
            who = "target" if self.model is pair.target else "draft"
            seconds = _cost(costs[who], len(ids))
            clock.advance(seconds)
            self.forward_time_s += seconds
            return out

    def calibrate(_: ModelPair) -> dict[int, float]:
        if calibration == "kept":
            return engine_calibrate(pair)
        if calibration == "busy":
            return dict(BUSY_CALIBRATION)
        return {n: _cost(costs["target"], n) for n in (1, 2, 3, 5, 8, 11, 17)}

    def no_warm(*_: Any) -> None:
        pass

    return Factory(clock=clock, model=Modeled, calibrate=calibrate, warm=no_warm)


@dataclass
class Run:
    """One decoder's run of one prompt: its rounds and result."""

    rounds: list[Round] = field(default_factory=list)
    done: RunFinished | None = None
    wall_s: float = 0.0

    @property
    def tokens(self) -> int:
        assert self.done is not None
        return len(self.done.generated_ids)

    def figures(self) -> str:
        rounds = self.rounds
        positions = sum(r.k + 1 for r in rounds)
        by: dict[str, list[float]] = {}
        for r in rounds[1:]:  # round 0 also prefills the prompt
            src = r.drafted[0].drafter if r.k else "plain"
            d = by.setdefault(src, [0, 0, 0, 0.0])
            d[0] += 1
            d[1] += r.k
            d[2] += r.n_accepted + 1
            d[3] += r.draft_time_s + r.verify_time_s
        first = rounds[0]
        parts = [f"{self.tokens / len(rounds):4.2f} tok/r", f"{len(rounds):3d} passes",
                 f"{positions:4d} verified",
                 # round 0 prefills the prompt: the target's pass and the draft's catch-up
                 f"round 0 {first.verify_time_s * 1000:.0f}+{first.draft_time_s * 1000:.0f} ms "
                 f"of {self.wall_s:.2f} s"]
        # per source after round 0: rounds, drafts, tokens gained, tokens/s of those rounds
        parts += [f"{src} {n}r {k}d {a}t {a / max(sec, 1e-9):5.1f}/s"
                  for src, (n, k, a, sec) in sorted(by.items())]
        return "  ".join(parts)


def run_one(decoder: AutoregressiveDecoder | SpeculativeDecoder, prompt: str,
            clock: Any) -> Run:
    out = Run()
    t0 = clock()
    for ev in decoder.run(prompt):
        if isinstance(ev, Round):
            out.rounds.append(ev)
        elif isinstance(ev, RunFinished):
            out.done = ev
    out.wall_s = clock() - t0
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default="grounded,free,template")
    ap.add_argument("--prompts", type=int, default=6)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--clock", choices=("model", "real"), default="model")
    ap.add_argument("--costs", choices=sorted(COSTS), default="cpu2")
    ap.add_argument("--calibration", choices=("model", "kept", "busy"),
                    default="model", help="the modeled clock's calibration: its own costs, the "
                    "machine's kept one (calibration.json) or one timed under load (BUSY_...)")
    ap.add_argument("--drafter", default="hybrid", help="one drafter or several, comma-separated")
    ap.add_argument("--policy", default="cost")
    ap.add_argument("--rounds", default="", help="set:prompt (1-based; with --file "
                    "category:id) whose rounds to print")
    ap.add_argument("--only", default="", help="prompts to run (1-based, comma-separated)")
    ap.add_argument("--file", type=Path, default=None, help="a prompt file (one per line, or "
                    "Spec-Bench's question.jsonl) instead of the project's sets")
    ap.add_argument("--categories", default="", help="with --file: these categories only")
    ap.add_argument("--ids", default="", help="with --file: these question ids only")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    pair = load_pair(*PRESETS[DEFAULT_PAIR])
    torch.set_num_threads(args.threads)  # whatever the load's thread fit chose
    tok = pair.tokenizer
    if args.clock == "model":
        factory = modeled_factory(pair, COSTS[args.costs], args.calibration)
        clock: Any = factory.clock
    else:
        factory, clock = Factory(), time.perf_counter
        warm = chat_prompt(tok, "Hello")
        s = Settings(temperature=0, max_new_tokens=8)
        run_one(AutoregressiveDecoder(pair, s), warm, clock)
        run_one(SpeculativeDecoder(pair, s), warm, clock)
    print(f"# {DEFAULT_PAIR}, T = 0, {args.max_new_tokens} new tokens, torch threads "
          f"{torch.get_num_threads()}, clock {args.clock}"
          + (f" ({args.costs}, calibration {args.calibration})" if args.clock == "model"
             else "")
          + f"; {args.drafter} + {args.policy} against the target alone")
    drafters = args.drafter.split(",")
    for set_name, named in _prompt_sets(args):
        ratios: dict[str, list[float]] = {d: [] for d in drafters}
        print(f"\n{set_name}")
        for i, (name, text, chat) in enumerate(named):
            if args.only and str(i + 1) not in args.only.split(","):
                continue
            prompt = chat_prompt(tok, text) if chat else text
            s = Settings(temperature=0, max_new_tokens=args.max_new_tokens, seed=i)
            jobs: list[tuple[str, AutoregressiveDecoder | SpeculativeDecoder]] = [
                ("base", AutoregressiveDecoder(pair, s, factory=factory))]
            for d in drafters:
                spec_s = Settings(**{**s.__dict__, "drafter": d, "k_policy": args.policy})
                jobs.append((d, SpeculativeDecoder(pair, spec_s, factory=factory)))
            shift = i % len(jobs)  # rotated per prompt: a drifting load hits every row alike
            jobs = jobs[shift:] + jobs[:shift]
            runs = {label: run_one(dec, prompt, clock) for label, dec in jobs}
            base = runs["base"]
            assert base.done is not None
            context = len(tok(prompt, add_special_tokens=False)["input_ids"])
            for d in drafters:
                spec = runs[d]
                assert spec.done is not None
                ratio = (spec.tokens / spec.wall_s) / (base.tokens / base.wall_s)
                ratios[d].append(ratio)
                n = min(base.tokens, spec.tokens)
                same = base.done.generated_ids[:n] == spec.done.generated_ids[:n]
                label = f"{name} ({context} tok) {d}" if len(drafters) > 1 else name
                print(f"  {label}  {ratio:5.2f}x  {'same' if same else 'DIFFERENT'}  "
                      f"{spec.figures()}", flush=True)
                if f"{set_name}:{name}" in args.rounds.split(","):
                    _print_rounds(spec, base)
        for d in drafters:
            if ratios[d]:
                geo = math.exp(statistics.fmean(math.log(r) for r in ratios[d]))
                who = f"{d}: " if len(drafters) > 1 else ""
                print(f"  {who}geomean {geo:.2f}x  worst {min(ratios[d]):.2f}x")


def _prompt_sets(args: argparse.Namespace) -> list[tuple[str, list[tuple[str, str, bool]]]]:
    """(set name, [(prompt name, text, whether it goes in the chat template)]) per set: the
    project's sets (prompts named 1, 2, …) or a prompt file's categories (named by id)."""
    if args.file is None:
        return [(name, [(str(i + 1), text, chat)
                        for i, (text, chat) in enumerate(SETS[name]()[:args.prompts])])
                for name in args.sets.split(",")]
    categories = [c for c in args.categories.split(",") if c] or None
    items = pick(read_prompts(args.file), args.prompts, categories)
    ids = set(args.ids.split(",")) if args.ids else None
    out: dict[str, list[tuple[str, str, bool]]] = {}
    for item in items:
        if ids is None or item.id in ids:
            out.setdefault(item.category, []).append((item.id, item.text, True))
    return list(out.items())


def _print_rounds(spec: Run, base: Run) -> None:
    """Each round of ``spec``: source, K, kept, its pass's time and the policy's reason."""
    for r in spec.rounds:
        src = r.drafted[0].drafter if r.drafted else "-"
        print(f"      {r.index:3d} {src:6s} K {r.k:2d} kept {r.n_accepted:2d}  "
              f"{r.draft_time_s * 1000:6.1f} + {r.verify_time_s * 1000:6.1f} ms  "
              f"{r.policy_reason}")
    widths: dict[int, list[float]] = {}
    for r in spec.rounds[1:]:
        widths.setdefault(r.k + 1, []).append(r.verify_time_s * 1000)
    base_ms = statistics.median(r.verify_time_s * 1000 for r in base.rounds[1:])
    by_width = ", ".join(f"{w}: {statistics.median(t):.1f} ({len(t)})"
                         for w, t in sorted(widths.items()))
    print(f"      target alone: median pass {base_ms:.1f} ms; by width: {by_width}")


if __name__ == "__main__":
    main()

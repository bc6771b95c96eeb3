"""The fast CPU linear forms (specviz/core/cpu_linear.py) against F.linear, side by side.

    .venv/bin/python benchmarks/cpu_linear.py --prompts 6
    .venv/bin/python benchmarks/cpu_linear.py --threads 1 --parts layouts   # layouts only

0. Weight layouts: the choice ``use_fast_linears`` makes for the target and the draft with both
   layouts timed (``SPECVIZ_LINEAR_LAYOUTS=row,col``; by default it times row-major alone) (its why:
   the layout, the plan, column-major's summed sweeps ÷ row-major's), then one FastLlama pass
   of the target on w new tokens after a ``--context``-token prefix (v(w), the verify pass the
   app runs; w = 1: a step of the target alone) and of the draft on one token, with row-major
   and with column-major weights, each layout with the plan timed for it (two copies of each
   model in memory, passes alternating ABBA). Prints the fastest pass per width and layout
   (a busy machine only adds) with col ÷ row, the medians, the sum over the widths, and which
   layout the default took.
1. One forward pass of the target on n new tokens after a 200-token context, and of the
   draft on one, with F.linear ("stock") and with the forms specviz chose for this machine
   ("fast": W·xᵀ or oneDNN per width; the plan is printed), interleaved; the median of 11
   passes each, three rounds.
2. Whole runs on the default pair (T = 0, K = 4): the target alone, the model draft at fixed
   K and the hybrid drafter with the cost policy, each with both forms, one after the other
   on each prompt of each set. Prints tokens/s of each, fast ÷ stock for each decoder, and the
   speculative ÷ target-alone ratio under each form: the speedup the app shows compares equal
   forms, so that last ratio is what an audience sees. Greedy output is checked against the
   target alone's under each form.
Absolute times depend on the machine's load; read the ratios.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from draft_quality import finish, prompts_for, set_threads, teacher_paused  # noqa: E402

from specviz.core.cpu_linear import (  # noqa: E402
    LAYOUT_LABELS,
    LAYOUTS,
    LinearChoice,
    choose_plan,
    describe,
    layout_ratio,
    set_linears,
    use_fast_linears,
)
from specviz.core.engine import AutoregressiveDecoder, SpeculativeDecoder  # noqa: E402
from specviz.core.events import Settings  # noqa: E402
from specviz.core.fast_llama import FastLlama  # noqa: E402
from specviz.core.models import (  # noqa: E402
    DEFAULT_PAIR,
    PRESETS,
    ModelPair,
    cache_root,
    cached_forward,
    load_pair,
)
from specviz.core.tally import Tally  # noqa: E402

FORMS = ("stock", "fast")


def set_form(pair: ModelPair, form: str) -> None:
    """stock: F.linear everywhere; fast: the plan specviz times and keeps for this machine."""
    for model in (pair.target, pair.draft):
        if model is not None:
            use_fast_linears(model, force=False)
            if form == "fast":
                use_fast_linears(model, memo=cache_root() / "cpu_linear.json")


def pass_ms(model: Any, n: int, context: int = 200, reps: int = 11) -> float:
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    ids = torch.randint(100, 9000, (1, context))
    new = torch.randint(100, 9000, (1, n))
    with torch.inference_mode():
        cached_forward(model, cache, input_ids=ids)
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            cached_forward(model, cache, input_ids=new)
            times.append(time.perf_counter() - start)
            cache.crop(-n)
    return statistics.median(times) * 1000.0


def layouts(pair: ModelPair, choices: dict[str, LinearChoice], context: int,
            widths: list[int], rounds: int, reps: int) -> None:
    """Part 0: v(w) on FastLlama over a row-major and a column-major copy of each model (each
    layout with the plan timed for it), pass by pass in ABBA order."""
    plans = {}
    for name, choice in choices.items():
        if set(choice.ms) != {"row", "col"}:
            print(f"  {name}: no timings of both layouts (forced or not a float32 CPU model)")
            return
        plans[name] = {lay: choose_plan(choice.ms[lay]) for lay in ("row", "col")}
        print(f"  {name}: default {LAYOUT_LABELS[choice.layout]}; its summed sweeps col ÷ row "
              f"{layout_ratio(choice.ms):.3f}")
        for lay in ("row", "col"):
            print(f"    {describe(plans[name][lay], lay)}")
    vocab = int(pair.target.config.vocab_size)
    prefix = torch.tensor([(7 * i + 11) % vocab for i in range(context)])
    gen = torch.Generator().manual_seed(0)
    news = {w: torch.randint(100, min(vocab, 9000), (w,), generator=gen) for w in widths}
    runners: dict[tuple[str, str], FastLlama] = {}
    for name, model in (("target", pair.target), ("draft", pair.draft)):
        if model is None:
            continue
        twin = copy.deepcopy(model)  # a second copy of the weights: no conversion between
        for lay, m in zip(("row", "col"), (model, twin), strict=True):
            set_linears(m, plans[name][lay], lay)
            runners[(name, lay)] = FastLlama(m, capacity=context + max(widths) + 8)
            with torch.inference_mode():
                runners[(name, lay)].feed(prefix % int(m.config.vocab_size), 1)
    with torch.inference_mode():
        times: dict[tuple[str, str], list[float]] = {}
        cases = [("target", w) for w in widths] + ([("draft", 1)] if pair.draft else [])
        order = ["row", "col"]
        for _ in range(rounds):
            for name, w in cases:
                for _ in range(reps):
                    for lay in order:
                        runner = runners[(name, lay)]
                        start = time.perf_counter()
                        runner.feed(news[w], w)
                        times.setdefault((lay, f"{name} {w}"), []).append(
                            (time.perf_counter() - start) * 1000.0)
                        runner.crop(context)
                    order.reverse()  # ABBA: neither layout always goes first
    del runners
    labels = [f"target {w}" for w in widths] + (["draft 1"] if pair.draft else [])
    print(f"  {'v(w), ms':<10}{'row':>8}{'col':>8}  col/row   (medians: row, col, col/row)")
    for label in labels:
        row, col = min(times[("row", label)]), min(times[("col", label)])
        mrow, mcol = (statistics.median(times[(lay, label)]) for lay in ("row", "col"))
        print(f"  {label:<10}{row:>8.1f}{col:>8.1f}{col / row:>9.2f}   "
              f"({mrow:.1f}, {mcol:.1f}, {mcol / mrow:.2f})")
    row = sum(min(times[("row", f"target {w}")]) for w in widths)
    col = sum(min(times[("col", f"target {w}")]) for w in widths)
    print(f"  target summed over widths {','.join(map(str, widths))}: col ÷ row {col / row:.3f}")
    for name, model in (("target", pair.target), ("draft", pair.draft)):
        if model is not None:  # back to what the default chose
            set_linears(model, choices[name].plan, choices[name].layout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=6, help="prompts per set")
    ap.add_argument("--sets", default="heldout,eval")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-pause-teacher", action="store_true")
    ap.add_argument("--parts", default="layouts,passes,runs",
                    help="which of: layouts (0), passes (1), runs (2)")
    ap.add_argument("--context", type=int, default=400, help="prefix of part 0's passes")
    ap.add_argument("--widths", default="1,2,3,4,5,6,8,11,12,16", help="part 0's widths")
    ap.add_argument("--rounds", type=int, default=3, help="part 0: rounds over the widths")
    ap.add_argument("--reps", type=int, default=4,
                    help="part 0: passes per width, layout and round (ABBA)")
    args = ap.parse_args()
    parts = set(args.parts.split(","))
    set_threads(args.threads)
    print(f"# load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    pair = load_pair(*PRESETS[DEFAULT_PAIR], device="cpu")
    assert pair.draft is not None
    choices = {}
    for name, model in (("target", pair.target), ("draft", pair.draft)):
        # Both layouts timed (as SPECVIZ_LINEAR_LAYOUTS=row,col asks): part 0 compares them.
        choices[name] = use_fast_linears(model, memo=cache_root() / "cpu_linear.json",
                                         layouts=LAYOUTS)
        print(f"{name}, both layouts timed: {choices[name].why}")
    ns = (1, 2, 3, 5, 8, 11)
    with teacher_paused(not args.no_pause_teacher):
        if "layouts" in parts:
            print(f"0. weight layouts: FastLlama pass after {args.context} tokens, ms (fastest of "
                  f"{args.reps} x {args.rounds} rounds, row and col interleaved)")
            layouts(pair, choices, args.context, [int(w) for w in args.widths.split(",")],
                    args.rounds, args.reps)
            print(f"# load average after part 0: "
                  f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
        if "passes" in parts:
            print("1. one forward pass, ms (median of 11; three rounds, stock and fast "
                  "interleaved)")
            rows: dict[tuple[str, str], list[float]] = {}
            for _ in range(3):
                for form in FORMS:
                    set_form(pair, form)
                    for n in ns:
                        rows.setdefault((form, f"target {n}"), []).append(pass_ms(pair.target, n))
                    rows.setdefault((form, "draft 1"), []).append(pass_ms(pair.draft, 1))
            labels = [f"target {n}" for n in ns] + ["draft 1"]
            print(f"  {'tokens':<10}" + "".join(f"{form:>10}" for form in FORMS) + "  fast/stock")
            for label in labels:
                stock, fast = (statistics.median(rows[(form, label)]) for form in FORMS)
                print(f"  {label:<10}{stock:>10.1f}{fast:>10.1f}{fast / stock:>11.2f}")
            for form in FORMS:
                one = statistics.median(rows[(form, "target 1")])
                five = statistics.median(rows[(form, "target 5")])
                draft = statistics.median(rows[(form, "draft 1")])
                print(f"  {form}: verify of 5 ÷ one step v = {five / one:.2f}, "
                      f"draft ÷ step c = {draft / one:.3f}")

        if "runs" in parts:
            print(f"\n2. whole runs, T = 0, K = 4, {args.max_new_tokens} tokens")
            decoders = {"target alone": None, "model, fixed K 4": ("model", "fixed"),
                        "hybrid + cost": ("hybrid", "cost")}
            warm = prompts_for(pair, 1)[0]
            for form in FORMS:
                set_form(pair, form)
                short = Settings(temperature=0.0, max_new_tokens=8, drafter="model",
                                 k_policy="fixed", lookup_k=10)
                finish(AutoregressiveDecoder(pair, short), warm)
                finish(SpeculativeDecoder(pair, short), warm)
            for name in args.sets.split(","):
                prompts = (prompts_for(pair, args.prompts) if name == "heldout"
                           else prompts_for(pair, args.prompts, eval_set="handwritten"))
                tallies = {(form, d): Tally() for form in FORMS for d in decoders}
                mismatches = 0
                for i, prompt in enumerate(prompts):
                    for form in FORMS:
                        set_form(pair, form)
                        alone_ids: tuple[int, ...] = ()
                        for label, how in decoders.items():
                            drafter, policy = how or ("model", "fixed")
                            settings = Settings(temperature=0.0, max_new_tokens=args.max_new_tokens,
                                                seed=1000 + i, k=4, drafter=drafter,
                                                k_policy=policy, lookup_k=10)
                            if how is None:
                                run = finish(AutoregressiveDecoder(pair, settings), prompt)
                                alone_ids = run.generated_ids
                            else:
                                run = finish(SpeculativeDecoder(pair, settings), prompt)
                                mismatches += run.generated_ids != alone_ids
                            tallies[(form, label)].add_summary(run.summary)
                print(f"{name} ({len(prompts)} prompts): tokens/s, and ÷ the target alone "
                      "with the same form")
                for label in decoders:
                    tps = {form: tallies[(form, label)].tokens_per_s for form in FORMS}
                    over = {form: tps[form] / tallies[(form, "target alone")].tokens_per_s
                            for form in FORMS}
                    print(f"  {label:<18} stock {tps['stock']:6.2f} ({over['stock']:.2f}x)   "
                          f"fast {tps['fast']:6.2f} ({over['fast']:.2f}x)   "
                          f"fast/stock {tps['fast'] / tps['stock']:.2f}")
                print(f"  greedy outputs differing from the target alone (same form): {mismatches}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

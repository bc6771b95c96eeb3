"""Two drafts for one target, side by side: which one to ship (issue 11's decision).

    .venv/bin/python benchmarks/draft_compare.py --a assets/draft-smollm2-135m --b DIR

For each prompt of each set (template hold-out, the hand-written evaluation set) and each
temperature, runs the target alone, then draft A and draft B at fixed K, one after the
other, so that both drafts meet the same machine load. Prints per set and temperature:
α = P(draft kept | tested), tokens per round and tokens/s over the target alone's, for A
and B, and B ÷ A. At T = 0 it also checks that both give the target alone's greedy output.
At T > 0 the three runs of a prompt share a seed; their texts differ (the law is the same),
so the ratios there are over more tokens' noise: read them with the prompt count.
Absolute times depend on the machine's load; the ratios are what to read.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from draft_quality import finish, prompts_for, set_threads, teacher_paused  # noqa: E402

from specviz.core.engine import AutoregressiveDecoder, SpeculativeDecoder  # noqa: E402
from specviz.core.events import Settings  # noqa: E402
from specviz.core.models import load_pair  # noqa: E402
from specviz.core.speed import speedup_vs_run  # noqa: E402
from specviz.core.tally import Tally  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", default="smollm2-135m-draft", help="the draft shipped now")
    ap.add_argument("--b", required=True, help="the candidate")
    ap.add_argument("--target", default="smollm2-135m")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--prompts", type=int, default=12, help="prompts per set")
    ap.add_argument("--sets", default="heldout,eval")
    ap.add_argument("--temperatures", default="0,1")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--no-pause-teacher", action="store_true")
    args = ap.parse_args()
    set_threads(args.threads)
    pair_a = load_pair(args.a, args.target, device="cpu")
    pair_b = load_pair(args.b, args.target, device="cpu")
    results: dict[str, Any] = {"command": " ".join(sys.argv)}
    with teacher_paused(not args.no_pause_teacher):
        warm = prompts_for(pair_a, 1)[0]  # first passes pay one-off costs: not timed
        short = Settings(k=args.k, temperature=0.0, max_new_tokens=8, drafter="model",
                         k_policy="fixed", lookup_k=10)
        for decoder in (AutoregressiveDecoder(pair_a, short), SpeculativeDecoder(pair_a, short),
                        SpeculativeDecoder(pair_b, short)):
            finish(decoder, warm)
        for name in args.sets.split(","):
            prompts = (prompts_for(pair_a, args.prompts) if name == "heldout"
                       else prompts_for(pair_a, args.prompts, eval_set="handwritten"))
            for temperature in (float(t) for t in args.temperatures.split(",")):
                base, tallies, mismatches = Tally(), {"a": Tally(), "b": Tally()}, 0
                for i, prompt in enumerate(prompts):
                    s = Settings(k=args.k, temperature=temperature,
                                 max_new_tokens=args.max_new_tokens, seed=1000 + i,
                                     drafter="model", k_policy="fixed", lookup_k=10)
                    alone = finish(AutoregressiveDecoder(pair_a, s), prompt)
                    base.add_summary(alone.summary)
                    for key, pair in (("a", pair_a), ("b", pair_b)):
                        run = finish(SpeculativeDecoder(pair, s), prompt)
                        tallies[key].add_summary(run.summary)
                        if temperature == 0:
                            mismatches += run.generated_ids != alone.generated_ids
                row = {key: {"alpha": t.alpha, "tokens_per_round": t.mean_tokens_per_round,
                             "speedup": speedup_vs_run(t.tokens_per_s, base.tokens_per_s)}
                       for key, t in tallies.items()}
                row["b_over_a"] = row["b"]["speedup"] / row["a"]["speedup"]
                row["greedy_mismatches"] = mismatches
                results[f"{name}_t{temperature:g}"] = row
                a, b = row["a"], row["b"]
                print(f"{name} ({len(prompts)} prompts), T={temperature:g}, K={args.k}: "
                      f"A α {a['alpha']:.3f}, {a['tokens_per_round']:.2f} tok/round, "
                      f"{a['speedup']:.2f}x | B α {b['alpha']:.3f}, "
                      f"{b['tokens_per_round']:.2f} tok/round, {b['speedup']:.2f}x | "
                      f"B/A {row['b_over_a']:.3f}"
                      + (f"; greedy outputs differing from the target alone: {mismatches}"
                         if temperature == 0 else ""), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Does the cost policy's non-decreasing v(n) fit cost speed? (issue 12, a design check)

    .venv/bin/python benchmarks/cost_fit.py [--prompts 6]

The cost policy (specviz.core.policy.CostModel.verify_cost) makes the target's measured pass
times over 2 or more tokens non-decreasing in the width (pool-adjacent-violators), so that a
width timed during a burst of load cannot make a wider pass look cheap. On some CPUs a pass
over 2–3 tokens really costs more than over 4–8 (another matrix kernel), and the fit then
lifts the wider widths. This runs, per prompt and set (template hold-out, hand-written,
input-grounded; T = 0, K starts at 4), the target alone, the model at fixed K 4, and hybrid and
model drafting with the cost policy with the fit on (as shipped) and off (each width as
measured), one after the other, and prints each row's geometric-mean speedup over the target
alone (worst prompt in brackets). Greedy outputs must equal the target alone's.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from draft_quality import finish, set_threads, teacher_paused  # noqa: E402
from drafters import SETS  # noqa: E402

from specviz.core import policy  # noqa: E402
from specviz.core.engine import AutoregressiveDecoder, SpeculativeDecoder, chat_prompt  # noqa: E402
from specviz.core.events import Settings  # noqa: E402
from specviz.core.models import DEFAULT_PAIR, PRESETS, load_pair  # noqa: E402
from specviz.core.speed import speedup_vs_run  # noqa: E402

ROWS = ("model fixed on", "hybrid cost on", "hybrid cost off", "model cost on", "model cost off")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=6, help="prompts per set")
    ap.add_argument("--sets", default="template,free,grounded")
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-pause-teacher", action="store_true")
    args = ap.parse_args()
    set_threads(args.threads)
    fit = policy._isotonic
    fit_on = {"on": True}
    policy._isotonic = lambda points: fit(points) if fit_on["on"] else list(points)
    pair = load_pair(*PRESETS[DEFAULT_PAIR])
    with teacher_paused(not args.no_pause_teacher):
        warm = chat_prompt(pair.tokenizer, "Hello")
        short = Settings(temperature=0, max_new_tokens=8, k_policy="cost", drafter="model",
                         lookup_k=10)
        finish(AutoregressiveDecoder(pair, short), warm)
        finish(SpeculativeDecoder(pair, short), warm)  # also times v(n) once for the pair
        for name in args.sets.split(","):
            ratios: dict[str, list[float]] = {row: [] for row in ROWS}
            for text, chat in SETS[name]()[:args.prompts]:
                prompt = chat_prompt(pair.tokenizer, text) if chat else text
                s = Settings(k=4, temperature=0, max_new_tokens=args.max_new_tokens,
                             drafter="model", k_policy="fixed", lookup_k=10)
                alone = finish(AutoregressiveDecoder(pair, s), prompt)
                for row in ROWS:
                    drafter, k_policy, on = row.split()
                    fit_on["on"] = on == "on"
                    run = finish(SpeculativeDecoder(
                        pair, Settings(k=4, temperature=0, max_new_tokens=args.max_new_tokens,
                                       drafter=drafter, k_policy=k_policy, lookup_k=10)), prompt)
                    assert run.generated_ids == alone.generated_ids, (row, text[:40])
                    ratios[row].append(speedup_vs_run(run.summary.tokens_per_s,
                                                      alone.summary.tokens_per_s))
            cells = ", ".join(
                f"{row}: {math.exp(sum(map(math.log, v)) / len(v)):.3f}x ({min(v):.2f})"
                for row, v in ratios.items())
            print(f"{name} ({args.prompts} prompts, T=0): {cells}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

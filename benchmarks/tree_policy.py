"""The cost policy's tree-or-chain choice for model-tree, measured without a clock: the bundled
pair drafts for real, but every round is timed by a fixed cost model (a CPU's v(width), as
this machine's calibration measured it, or a GPU's flat one), so the figures do not move with
the machine's load.

    .venv/bin/python benchmarks/tree_policy.py [--sets grounded,template,free] [--prompts 2]
        [--max-new-tokens 48] [--temperature 0] [--threads 1]

Per set and cost model it prints, for the chain ("model") and "model-tree" under the cost
policy: tokens per round, positions verified per token, the share of rounds that drafted a
tree, and the tokens per second the cost model gives the run (its rounds' o + drafts·c +
v(width)), then tree ÷ chain. v in one-token passes: "cpu" 1, 1.07, 1.14, 1.21, 1.28 for
widths 1-5 and +0.23 a token after (SmolLM2-135M, 2 cores: ~83 ms, ~105 ms at 5, ~220 ms at
11, engine.verify_costs);
"flat" 1 + 0.01 a token. A draft step costs 0.15 of a pass, a round's bookkeeping 0.02.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from drafters import SETS  # noqa: E402

from specviz.core.engine import CALIBRATION_WIDTHS, SpeculativeDecoder, chat_prompt  # noqa: E402
from specviz.core.events import Round, RunFinished, Settings  # noqa: E402
from specviz.core.models import DEFAULT_PAIR, PRESETS, load_pair  # noqa: E402
from specviz.core.parts import Factory  # noqa: E402
from specviz.core.plans import Outcome  # noqa: E402
from specviz.core.policy import CostPolicy  # noqa: E402
from specviz.core.registry import Entry  # noqa: E402

DRAFT, BOOKKEEPING = 0.15, 0.02


def cpu(n: int) -> float:
    return 1.0 + 0.07 * (min(n, 5) - 1) + 0.23 * max(0, n - 5)


def flat(n: int) -> float:
    return 1.0 + 0.01 * (n - 1)


V: dict[str, Callable[[int], float]] = {"cpu": cpu, "flat": flat}


def spine_of(parents: tuple[int, ...] | None, k: int) -> int:
    """Draft passes of a round: its drafts for a chain, the first children's chain for a tree."""
    if parents is None:
        return k
    first: dict[int, int] = {}
    for node, parent in enumerate(parents):
        first.setdefault(parent, node)
    n, at = 0, -1
    while at in first:
        at, n = first[at], n + 1
    return n


def policy_timed_by(v: Callable[[int], float]) -> Callable[[int], CostPolicy]:
    class Timed(CostPolicy):
        def observe(self, outcome: Outcome) -> None:
            draft = DRAFT * spine_of(outcome.parents, outcome.k)
            super().observe(replace(outcome, draft_s=draft, verify_s=v(outcome.fed),
                                    round_s=draft + v(outcome.fed) + BOOKKEEPING))
    return Timed


@dataclass
class Row:
    tokens: int = 0
    rounds: int = 0
    trees: int = 0
    positions: int = 0
    seconds: float = 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default="grounded,template,free")
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    pair = load_pair(*PRESETS[DEFAULT_PAIR], device="cpu")
    print(f"# {DEFAULT_PAIR}, T {args.temperature:g}, {args.prompts} prompts per set, "
          f"{args.max_new_tokens} new tokens; rounds timed by a cost model, not the clock")
    for set_name in args.sets.split(","):
        prompts = [chat_prompt(pair.tokenizer, text) if chat else text
                   for text, chat in SETS[set_name]()[:args.prompts]]
        for v_name, v in V.items():
            factory = Factory(calibrate=lambda _, v=v: {n: v(n) for n in CALIBRATION_WIDTHS}
                              ).with_policies(Entry("cost", "", policy_timed_by(v)))
            rows = {d: Row() for d in ("model", "model-tree")}
            for i, prompt in enumerate(prompts):
                for drafter, row in rows.items():
                    s = Settings(temperature=args.temperature, seed=i, drafter=drafter,
                                 k_policy="cost", max_new_tokens=args.max_new_tokens)
                    for event in SpeculativeDecoder(pair, s, factory=factory).run(prompt):
                        if isinstance(event, Round):
                            row.rounds += 1
                            row.positions += 1 + event.k
                            parents = tuple(d.parent for d in event.drafted
                                            if d.parent is not None)
                            tree = len(parents) == event.k and event.k > 0
                            row.trees += tree
                            width = 1 + event.k
                            row.seconds += (BOOKKEEPING + v(width) + DRAFT * spine_of(
                                parents if tree else None, event.k))
                        elif isinstance(event, RunFinished):
                            row.tokens += len(event.generated_ids)
            print(f"\n{set_name}, v {v_name}")
            print(f"  {'':<11} {'tok/r':>5}  {'pos/t':>5}  {'trees':>5}  {'tok/s':>6}")
            for drafter, row in rows.items():
                print(f"  {drafter:<11} {row.tokens / row.rounds:5.2f}  "
                      f"{row.positions / row.tokens:5.2f}  "
                      f"{100 * row.trees / row.rounds:4.0f}%  {row.tokens / row.seconds:6.3f}")
            a, b = rows["model"], rows["model-tree"]
            print(f"  model-tree ÷ model: tokens per round "
                  f"{(b.tokens / b.rounds) / (a.tokens / a.rounds):.2f}x, tokens/s (cost model) "
                  f"{(b.tokens / b.seconds) / (a.tokens / a.seconds):.2f}x")


if __name__ == "__main__":
    main()

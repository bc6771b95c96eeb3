"""Tokens per round of drafters on a prompt file, measured without a clock (lookup-tree vs lookup).

    .venv/bin/python benchmarks/tree_rounds.py PATH/question.jsonl [--per-category 3]
        [--categories summarization,extraction,rag] [--max-new-tokens 96]
        [--drafters lookup,lookup-tree] [--policies frozen,fixed]

T = 0, the default pair, each prompt's first turn in the chat template. Per category and
drafter × policy: tokens per round, target passes (rounds), positions verified per round (the
pass's drafts: chain drafts or tree nodes), α = kept / tested, and the tokens/s ÷ the target
alone's that ``FROZEN_V`` predicts (Σ v(1 + drafts) over the rounds against one v(1) per token;
lookup drafts cost nothing). ``fixed``: each drafter's own K (lookup_k). ``frozen``: the cost
policy choosing K each round on the fixed v(n) below, never on a clock, so every figure here is
the same on a busy machine as on a quiet one (wall time is not measured at all).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specviz.core.engine import SpeculativeDecoder, chat_prompt  # noqa: E402
from specviz.core.events import Round, RunFinished, Settings  # noqa: E402
from specviz.core.models import DEFAULT_PAIR, PRESETS, load_pair  # noqa: E402
from specviz.core.parts import Factory  # noqa: E402
from specviz.core.plans import Outcome  # noqa: E402
from specviz.core.policy import CostModel, CostPolicy  # noqa: E402
from specviz.core.promptset import pick, read_prompts  # noqa: E402
from specviz.core.registry import Entry  # noqa: E402

# Seconds of a target pass by width: the bundled target's calibration on this project's 2-core
# CPU, 1 thread, quiet (the kept calibration, cache_root()/calibration.json, 2026-11-26);
# only its shape matters.
FROZEN_V = {1: 0.164, 2: 0.1723, 3: 0.1847, 5: 0.2797, 8: 0.3078, 11: 0.317, 17: 0.3988}


class FrozenCosts(CostModel):
    """v(n) as calibrated, never updated from a round's clock."""

    def add(self, outcome: Outcome) -> None:
        pass


class FrozenCostPolicy(CostPolicy):
    """The cost policy on FROZEN_V: its K depends on α̂ and v, not on the machine's load."""

    def __init__(self, k: int) -> None:
        super().__init__(k, costs=FrozenCosts())
        self.costs.calibrate(FROZEN_V)


@dataclass
class Row:
    tokens: int = 0
    rounds: int = 0
    positions: int = 0
    accepted: int = 0
    tested: int = 0
    predicted_s: float = 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", type=Path, help="Spec-Bench's question.jsonl (or any prompt file)")
    ap.add_argument("--per-category", type=int, default=3)
    ap.add_argument("--categories", default="summarization,extraction,rag")
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--drafters", default="lookup,lookup-tree")
    ap.add_argument("--policies", default="frozen,fixed", help="frozen (cost on FROZEN_V), fixed")
    args = ap.parse_args()
    torch.set_num_threads(1)
    items = pick(read_prompts(args.path), args.per_category, args.categories.split(","))
    pair = load_pair(*PRESETS[DEFAULT_PAIR])
    fit = FrozenCosts()
    fit.calibrate(FROZEN_V)
    factory = Factory(calibrate=lambda _pair: dict(FROZEN_V), warm=lambda *_: None)
    factory = factory.with_policies(Entry("cost", "the cost policy on FROZEN_V",
                                          FrozenCostPolicy))
    configs = [(d, p) for p in args.policies.split(",") for d in args.drafters.split(",")]
    rows: dict[tuple[str, str, str], Row] = {}
    print(f"# {DEFAULT_PAIR}; {len(items)} prompts, {args.max_new_tokens} new tokens, T = 0")
    for item in items:
        prompt = chat_prompt(pair.tokenizer, item.text)
        texts = set()
        for drafter, policy in configs:
            s = Settings(temperature=0.0, max_new_tokens=args.max_new_tokens, seed=0,
                         drafter=drafter, k_policy="cost" if policy == "frozen" else policy)
            row = rows.setdefault((item.category, drafter, policy), Row())
            for event in SpeculativeDecoder(pair, s, factory=factory).run(prompt):
                if isinstance(event, Round):
                    row.positions += event.k
                    row.predicted_s += fit.verify_cost(event.k + 1)
                elif isinstance(event, RunFinished):
                    row.tokens += event.summary.tokens
                    row.rounds += event.summary.rounds
                    row.accepted += event.summary.accepted
                    row.tested += event.summary.tested
                    texts.add(event.generated_ids)
        print(f"# {item.category} {item.id}: {'same text' if len(texts) == 1 else 'TEXTS DIFFER'}",
              file=sys.stderr, flush=True)
    print(f"{'category':<14} {'drafter':<12} {'policy':<7} {'tok/round':>9} {'passes':>6} "
          f"{'pos/round':>9} {'alpha':>5} {'predicted':>9}")
    v1 = fit.verify_cost(1)
    for (category, drafter, policy), row in rows.items():
        print(f"{category:<14} {drafter:<12} {policy:<7} {row.tokens / row.rounds:9.2f} "
              f"{row.rounds:6d} {row.positions / row.rounds:9.2f} "
              f"{row.accepted / max(row.tested, 1):5.2f} "
              f"{row.tokens * v1 / row.predicted_s:8.2f}x")


if __name__ == "__main__":
    main()

"""Lookup drafting replayed against the target's own greedy text: K policies in seconds, and
what a perfect K would give.

    .venv/bin/python benchmarks/lookup_replay.py [PATH/question.jsonl] [--per-category 5]
        [--categories summarization,extraction,rag] [--sets grounded,template,free]
        [--prompts 6] [--max-new-tokens 128]

At T = 0 the target keeps a draft exactly when it is the target's greedy token, so once the
target alone has written each prompt's text (one run per prompt, the only target passes this
script makes) every lookup round can be replayed without the target: the drafter proposes
from the context, the kept drafts are the longest prefix that agrees with the greedy text,
and the round appends them and the next greedy token. The cost policy sizes K on a fixed
v(n) (``tree_rounds.FROZEN_V``, the bundled target's quiet 1-thread calibration), so the
figures are the same on a busy machine as on a quiet one. The round loop mirrors the
engine's (``pick``, ``propose``, ``observe``, ``update``); on Spec-Bench's first 3 prompts of
summarization, extraction and RAG at 96 tokens it gave the passes ``tree_rounds.py --policies
frozen`` counts through the engine (134 / 188 / 164), 2026-11-27.

Rows per group: the lookup chain under the cost policy; the same with long matches keyed as
before 2026-11-27 (``lookup:4`` for every match of 4 ids or more); fixed K 2, 4 and 16; and
``oracle K``: each round drafts exactly as many as the target will keep (a bound no policy
that decides before verifying can reach). predicted: tokens/s ÷ the target alone's on that
v(n) (lookup drafts cost nothing).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from grounded_prompts import grounded_prompts  # noqa: E402
from tree_rounds import FROZEN_V, FrozenCostPolicy  # noqa: E402

from specviz.core.drafters import LookupDrafter  # noqa: E402
from specviz.core.engine import AutoregressiveDecoder, chat_prompt  # noqa: E402
from specviz.core.events import RunFinished, Settings  # noqa: E402
from specviz.core.models import DEFAULT_PAIR, PRESETS, load_pair  # noqa: E402
from specviz.core.plans import Outcome  # noqa: E402
from specviz.core.promptset import pick, read_prompts  # noqa: E402
from specviz.distill.prompts import free_prompts, heldout_prompts  # noqa: E402

SETS = {"grounded": grounded_prompts, "template": heldout_prompts, "free": free_prompts}
LOOKUP_K = 16


@dataclass
class Text:
    group: str
    vocab: int
    prompt: list[int]
    greedy: list[int]


class ShortKeys(LookupDrafter):
    """Long matches keyed as before 2026-11-27: every match of ngram_max ids is lookup:4."""

    def extent(self, context: Sequence[int], n: int, start: int) -> int:
        return n


def kept(proposal: Sequence[int], greedy: Sequence[int], t: int) -> int:
    """Drafts the target keeps at T = 0: the longest prefix equal to its greedy tokens."""
    n = 0
    while n < len(proposal) and t + n < len(greedy) and proposal[n] == greedy[t + n]:
        n += 1
    return n


def v(n: int) -> float:
    """FROZEN_V, linear between its widths."""
    if n in FROZEN_V:
        return FROZEN_V[n]
    lo = max(w for w in FROZEN_V if w <= n)
    hi = min(w for w in FROZEN_V if w >= n)
    return FROZEN_V[lo] + (FROZEN_V[hi] - FROZEN_V[lo]) * (n - lo) / (hi - lo)


Chooser = Callable[[LookupDrafter, list[int], Text, int], int]


def replay(text: Text, drafter_cls: type[LookupDrafter],
           choose: Chooser | None) -> tuple[int, int, float]:
    """(tokens, rounds, predicted seconds) of one text; ``choose`` None: the cost policy."""
    drafter = drafter_cls(text.vocab, lookup_k=LOOKUP_K)
    policy = FrozenCostPolicy(4) if choose is None else None
    greedy, t, rounds, seconds = text.greedy, 0, 0, 0.0
    while t < len(greedy):
        context = text.prompt + greedy[:t]
        room = len(greedy) - t - 1  # the round's last token is the target's own
        if policy is not None:
            plan, choice = policy.pick([drafter.plan(context)], max(room, 0))
            k = choice.k
        else:
            plan, k = drafter.plan(context), min(choose(drafter, context, text, t), max(room, 0))
        proposal = drafter.propose(context, k, None).tokens if k else ()  # type: ignore[arg-type]
        n = min(kept(proposal, greedy, t), max(room, 0))
        if policy is not None:
            fed = len(proposal) + 1
            policy.observe(Outcome(plan, len(proposal), n, 0.0, v(fed), fed, v(fed)))
        drafter.update(n)
        t, rounds, seconds = t + n + 1, rounds + 1, seconds + v(len(proposal) + 1)
    return len(greedy), rounds, seconds


def oracle(drafter: LookupDrafter, context: list[int], text: Text, t: int) -> int:
    return kept(drafter.propose(context, LOOKUP_K, None).tokens, text.greedy, t)  # type: ignore[arg-type]


def fixed(k: int) -> Chooser:
    return lambda *_: k


def texts(args: argparse.Namespace) -> list[Text]:
    pair = load_pair(*PRESETS[DEFAULT_PAIR])
    tok = pair.tokenizer
    wanted: list[tuple[str, str]] = []
    if args.path is not None:
        items = pick(read_prompts(args.path), args.per_category, args.categories.split(","))
        wanted += [(item.category, chat_prompt(tok, item.text)) for item in items]
    for name in [s for s in args.sets.split(",") if s]:
        wanted += [(name, chat_prompt(tok, t) if chat else t)
                   for t, chat in SETS[name]()[:args.prompts]]
    out = []
    s = Settings(temperature=0.0, max_new_tokens=args.max_new_tokens, seed=0)
    for group, prompt in wanted:
        for event in AutoregressiveDecoder(pair, s).run(prompt):
            if isinstance(event, RunFinished):
                ids = [int(i) for i in tok(prompt, add_special_tokens=True)["input_ids"]]
                out.append(Text(group, pair.vocab_size, ids, list(event.generated_ids)))
        print(f"# {group}: {len(out[-1].prompt)} prompt ids, {len(out[-1].greedy)} greedy",
              file=sys.stderr, flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", type=Path, nargs="?", help="a prompt file (Spec-Bench's JSON lines)")
    ap.add_argument("--per-category", type=int, default=5)
    ap.add_argument("--categories", default="summarization,extraction,rag")
    ap.add_argument("--sets", default="grounded,template,free")
    ap.add_argument("--prompts", type=int, default=6)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    args = ap.parse_args()
    torch.set_num_threads(1)
    all_texts = texts(args)
    rows: list[tuple[str, type[LookupDrafter], Chooser | None]] = [
        ("cost policy", LookupDrafter, None), ("cost, short keys", ShortKeys, None),
        ("fixed K 2", LookupDrafter, fixed(2)), ("fixed K 4", LookupDrafter, fixed(4)),
        ("fixed K 16", LookupDrafter, fixed(16)), ("oracle K", LookupDrafter, oracle)]
    print(f"# {DEFAULT_PAIR}; T = 0; {args.max_new_tokens} new tokens; lookup_k {LOOKUP_K}; "
          f"v(n) = tree_rounds.FROZEN_V")
    print(f"{'group':<14} {'prompts':>7} {'row':<17} {'tok/round':>9} {'passes':>6} "
          f"{'predicted':>9}")
    v1 = v(1)
    for group in dict.fromkeys(t.group for t in all_texts):
        mine = [t for t in all_texts if t.group == group]
        for name, cls, choose in rows:
            tokens = rounds = 0
            seconds = 0.0
            for text in mine:
                a, b, c = replay(text, cls, choose)
                tokens, rounds, seconds = tokens + a, rounds + b, seconds + c
            print(f"{group:<14} {len(mine):>7} {name:<17} {tokens / rounds:9.2f} {rounds:6d} "
                  f"{tokens * v1 / seconds:8.2f}x", flush=True)


if __name__ == "__main__":
    main()

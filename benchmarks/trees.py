"""Trees against chains on the bundled pair, side by side in one run: model-tree vs the model
chain, lookup-tree vs lookup, at the same K (the same verify width: a tree of K nodes is one
target pass over K + 1 tokens, as a chain of K drafts is).

    .venv/bin/python benchmarks/trees.py [--sets grounded,template,free] [--prompts 4]
        [--temperatures 0,1] [--max-new-tokens 64] [--k 4] [--lookup-k 8]
        [--policies fixed,cost] [--pairs model,lookup] [--device auto|cpu|cuda|mps]

For each prompt, interleaved (an order rotated per prompt, so a drifting load hits every row
alike): the target alone, then per K policy each chain drafter and its tree. Per set and
temperature it prints, per row, tokens per round, tokens/s, the geometric mean over prompts of
tokens/s ÷ the target alone's, positions verified per token (1 + drafts per round, ÷ tokens),
the share of rounds that drafted a branching tree; then,
per pair, the tree ÷ the chain in tokens per round and in tokens/s (geometric means over
prompts). At T = 0 it counts the prompts whose text is the target alone's ("same"). With
the cost policy, lookup-tree's K is its node cap, sized on the measured v(K + 1) each round;
model-tree drafts the chain drafter's chain and puts a sibling beside it only where the
policy predicts more tokens/s for the tree at the measured v(width) (a chain elsewhere). On
a shared machine only the ratios mean anything.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from drafters import SETS, run_specviz  # noqa: E402

from specviz.core.engine import AutoregressiveDecoder, SpeculativeDecoder, chat_prompt  # noqa: E402
from specviz.core.events import Round, RunFinished, Settings  # noqa: E402
from specviz.core.models import DEFAULT_PAIR, PRESETS, load_pair  # noqa: E402

PAIRS = (("model", "model-tree"), ("lookup", "lookup-tree"))


@dataclass
class Row:
    tokens: int = 0
    rounds: int = 0
    branched: int = 0  # rounds whose drafts formed a tree that is not a chain
    positions: int = 0  # positions the target verified (1 + drafts, per round)
    wall_s: float = 0.0
    per_round: list[float] = field(default_factory=list)  # per prompt
    speed: list[float] = field(default_factory=list)  # tokens/s per prompt
    ratios: list[float] = field(default_factory=list)  # ÷ the target alone, per prompt
    same: int = 0
    compared: int = 0


def geomean(xs: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(x) for x in xs)) if xs and min(xs) > 0 else 0.0


def run_once(decoder: AutoregressiveDecoder | SpeculativeDecoder, prompt: str
             ) -> tuple[float, RunFinished, int, int, int]:
    """(wall seconds, the finish, rounds, rounds that branched, positions verified)."""
    rounds = branched = positions = 0
    t0 = time.perf_counter()
    done = None
    for event in decoder.run(prompt):
        if isinstance(event, Round):
            rounds += 1
            positions += 1 + event.k
            branched += event.branches
        elif isinstance(event, RunFinished):
            done = event
    wall = time.perf_counter() - t0
    assert done is not None
    return wall, done, rounds, branched, positions


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default="grounded,template,free")
    ap.add_argument("--prompts", type=int, default=4, help="prompts per set")
    ap.add_argument("--temperatures", default="0,1")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--k", type=int, default=4, help="K: chain drafts, tree nodes (model)")
    ap.add_argument("--lookup-k", type=int, default=8, help="lookup's K: copied tokens, nodes")
    ap.add_argument("--policies", default="fixed,cost")
    ap.add_argument("--pairs", default="model,lookup",
                    help="which chain drafters to run beside their trees (model, lookup)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = default)")
    ap.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda", "mps"))
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    pair = load_pair(*PRESETS[DEFAULT_PAIR], device=args.device)
    gpu = f" ({torch.cuda.get_device_name(pair.device)})" if pair.device.type == "cuda" else ""
    print(f"# {DEFAULT_PAIR} on {pair.device}{gpu}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads; {args.prompts} prompts per set, "
          f"{args.max_new_tokens} new tokens, K {args.k}, lookup K {args.lookup_k}")
    policies = args.policies.split(",")
    pairs = [(chain, tree) for chain, tree in PAIRS if chain in args.pairs.split(",")]
    if not pairs:
        ap.error(f"--pairs: choose from {', '.join(chain for chain, _ in PAIRS)}")
    names = [f"{d} {p}" for p in policies for chain_tree in pairs for d in chain_tree]
    warm = chat_prompt(pair.tokenizer, "Hello")
    for name in names:  # first forwards allocate; the cost policy times v(n) once per pair
        d, p = name.split()
        run_specviz(SpeculativeDecoder(pair, Settings(temperature=0, max_new_tokens=8,
                                                      drafter=d, k_policy=p)), warm)
    for temperature in (float(t) for t in args.temperatures.split(",")):
        for set_name in args.sets.split(","):
            prompts = [chat_prompt(pair.tokenizer, text) if chat else text
                       for text, chat in SETS[set_name]()[:args.prompts]]
            rows = {name: Row() for name in ["target alone", *names]}
            t_start = time.perf_counter()
            for i, prompt in enumerate(prompts):
                jobs = list(rows)
                jobs = jobs[i % len(jobs):] + jobs[:i % len(jobs)]
                ids: dict[str, list[int]] = {}
                for name in jobs:
                    d, _, p = name.partition(" ")
                    s = Settings(k=args.k, lookup_k=args.lookup_k, temperature=temperature,
                                 max_new_tokens=args.max_new_tokens, seed=i,
                                 drafter="model" if name == "target alone" else d,
                                 k_policy="fixed" if name == "target alone" else p)
                    decoder = (AutoregressiveDecoder(pair, s) if name == "target alone"
                               else SpeculativeDecoder(pair, s))
                    wall, done, n_rounds, branched, positions = run_once(decoder, prompt)
                    row = rows[name]
                    n = len(done.generated_ids)
                    row.tokens += n
                    row.rounds += n_rounds
                    row.branched += branched
                    row.positions += positions
                    row.wall_s += wall
                    row.per_round.append(n / max(n_rounds, 1))
                    row.speed.append(n / wall)
                    ids[name] = list(done.generated_ids)
                for name, row in rows.items():
                    row.ratios.append(row.speed[-1] / rows["target alone"].speed[-1])
                    if temperature == 0:
                        ref = ids["target alone"]
                        m = min(len(ref), len(ids[name]))
                        row.compared += 1
                        row.same += ids[name][:m] == ref[:m]
                print(f"# {set_name} T={temperature:g} prompt {i + 1}/{len(prompts)} done",
                      file=sys.stderr, flush=True)
            print(f"\n{set_name}, T = {temperature:g} ({len(prompts)} prompts, "
                  f"{time.perf_counter() - t_start:.0f} s)")
            print(f"  {'':<20} {'tok/r':>5}  {'pos/t':>5}  {'tok/s':>7}  {'geomean':>7}  "
                  f"{'trees':>5}  same")
            for name, row in rows.items():
                same = f"{row.same}/{row.compared}" if row.compared else "-"
                trees = f"{100 * row.branched / max(row.rounds, 1):4.0f}%"
                print(f"  {name:<20} {row.tokens / max(row.rounds, 1):5.2f}  "
                      f"{row.positions / max(row.tokens, 1):5.2f}  "
                      f"{row.tokens / row.wall_s:7.2f}  {geomean(row.ratios):6.2f}x  {trees}  "
                      f"{same:>4}")
            for p in policies:
                for chain, tree in pairs:
                    a, b = rows[f"{chain} {p}"], rows[f"{tree} {p}"]
                    per_round = geomean([y / x for x, y in zip(a.per_round, b.per_round,
                                                               strict=True)])
                    speed = geomean([y / x for x, y in zip(a.speed, b.speed, strict=True)])
                    print(f"  {tree} ÷ {chain} ({p}): tokens per round {per_round:.2f}x, "
                          f"tokens/s {speed:.2f}x")


if __name__ == "__main__":
    main()

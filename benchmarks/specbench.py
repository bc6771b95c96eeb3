"""Spec-Bench by category for the default pair, beside transformers' greedy and prompt lookup.

    .venv/bin/python benchmarks/specbench.py PATH/question.jsonl [--per-category 5]
        [--categories writing,math_reasoning] [--max-new-tokens 96] [--out FILE.md]

Spec-Bench (Xia et al. 2024; 480 questions in 13 categories) is read from the path given;
specviz ships no copy. T = 0. For each prompt (its first turn, in the chat template), in an
order rotated per prompt so that a drifting machine load hits every row alike: the target
alone (specviz's AutoregressiveDecoder), specviz's default configuration (the CLI's: hybrid
drafting with the cost policy) and any ``--config`` given, transformers' plain greedy
``generate`` and ``generate(prompt_lookup_num_tokens=10)`` on the same target. Per category
and overall: α, tokens per round, the geometric mean and the worst prompt of tokens/s ÷ the
target alone's on that prompt, the share of wall time outside model forward passes, and how
many prompts gave the target alone's token ids (exactness at T = 0). On a shared machine only
the ratios mean anything; pause other CPU work first.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shlex
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specviz.core.engine import (  # noqa: E402
    AutoregressiveDecoder,
    SpeculativeDecoder,
    calibrate,
    chat_prompt,
)
from specviz.core.events import Settings  # noqa: E402
from specviz.core.models import DEFAULT_PAIR, PRESETS, ModelPair, load_pair  # noqa: E402
from specviz.core.promptset import (  # noqa: E402
    BASELINE_LABEL,
    CategoryRow,
    PromptItem,
    PromptResult,
    compare,
    pick,
    read_prompts,
    table,
    to_markdown,
    to_text,
)
from specviz.core.sweep import Measured, measure  # noqa: E402
from specviz.explore_cli import parse_config  # noqa: E402

HF_GREEDY, HF_LOOKUP = "transformers greedy", "transformers prompt lookup 10"


def run_hf(pair: ModelPair, prompt: str, max_new: int, lookup: int | None) -> Measured:
    """transformers' generate on the target: wall time and ids (no α: it reports none)."""
    ids = pair.tokenizer(prompt, return_tensors="pt", add_special_tokens=True)["input_ids"]
    extra = {"prompt_lookup_num_tokens": lookup} if lookup else {}
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = pair.target.generate(ids, do_sample=False, max_new_tokens=max_new,
                                   pad_token_id=pair.tokenizer.eos_token_id, **extra)
    wall = time.perf_counter() - t0
    gen = tuple(int(i) for i in out[0, ids.shape[1]:])
    return Measured(tokens=len(gen), wall_s=wall, rounds=0, drafted=0, tested=0, accepted=0,
                    forward_s=0.0, generated_ids=gen)


def round_robin(items: list[PromptItem]) -> list[PromptItem]:
    """The first prompt of every category, then the second of every one, and so on: the table
    written after each prompt (``--out``) then covers every category evenly when a long run is
    stopped early."""
    order = list(dict.fromkeys(item.category for item in items))
    seen: dict[str, int] = {}
    ranked = []
    for item in items:
        seen[item.category] = seen.get(item.category, 0) + 1
        ranked.append((seen[item.category], order.index(item.category), item))
    return [item for *_, item in sorted(ranked, key=lambda r: (r[0], r[1]))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", type=Path, help="Spec-Bench's question.jsonl (or any prompt file)")
    ap.add_argument("--per-category", type=int, default=5)
    ap.add_argument("--categories", default=None, help="comma-separated (default: all)")
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--config", action="append", default=[],
                    help='more specviz rows, as key=value (e.g. "drafter=model k_policy=fixed")')
    ap.add_argument("--no-hf", action="store_true", help="skip transformers' rows")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = default)")
    ap.add_argument("--out", type=Path, help="also write the table, command and machine here "
                    "(Markdown)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    cats = args.categories.split(",") if args.categories else None
    items = round_robin(pick(read_prompts(args.path), args.per_category, cats))
    # Every other option at its default (core/options.py: the CLI's and the API's).
    base = Settings(temperature=0.0, max_new_tokens=args.max_new_tokens, seed=0)
    configs = [(f"specviz {base.drafter} {base.k_policy}", base)]
    configs += [(f"specviz {c}", parse_config(c, base)) for c in args.config]
    pair = load_pair(*PRESETS[DEFAULT_PAIR])
    tok = pair.tokenizer
    command = "python benchmarks/specbench.py " + shlex.join(sys.argv[1:])
    machine = (f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
               f"torch {torch.__version__} with {torch.get_num_threads()} threads, "
               f"{platform.system()}; pair {DEFAULT_PAIR}")
    started = datetime.datetime.now(datetime.UTC)
    print(f"# {command}\n# {machine}\n# {started:%Y-%m-%d %H:%M} UTC; {len(items)} prompts, "
          f"{args.max_new_tokens} new tokens, T = 0", flush=True)

    warm = chat_prompt(tok, "Hello")
    short = replace(base, max_new_tokens=8)
    for decoder in (AutoregressiveDecoder(pair, short), SpeculativeDecoder(pair, short)):
        for _ in decoder.run(warm):  # first forwards allocate; the cost policy calibrates
            pass
    calibrate(pair)  # the cost policy's v(n), once per pair: outside every timed run
    if not args.no_hf:
        run_hf(pair, warm, 8, None)

    results: list[PromptResult] = []
    t_start = time.perf_counter()
    for i, item in enumerate(items):
        prompt = chat_prompt(tok, item.text)
        jobs: list[tuple[str, Settings | int | None]] = [(BASELINE_LABEL, base), *configs]
        if not args.no_hf:
            jobs += [(HF_GREEDY, None), (HF_LOOKUP, 10)]
        shift = i % len(jobs)
        runs: dict[str, Measured] = {}
        for label, job in jobs[shift:] + jobs[:shift]:
            if isinstance(job, Settings):
                decoder = (AutoregressiveDecoder(pair, job) if label == BASELINE_LABEL
                           else SpeculativeDecoder(pair, job))
                runs[label] = measure(list(decoder.run(prompt)))
            else:
                runs[label] = run_hf(pair, prompt, args.max_new_tokens, job)
        for label, _ in jobs:
            results.append(compare(item, label, runs[label], runs[BASELINE_LABEL], True))
        if args.out:
            write_result(args.out, table(results), command, machine, started,
                         time.perf_counter() - t_start, len(items), args.per_category,
                         args.max_new_tokens, i + 1)
        print(f"# {i + 1}/{len(items)} {item.category} {item.id}: "
              + ", ".join(f"{r.config} {r.speedup:.2f}x" for r in results[-len(jobs):]
                          if r.config != BASELINE_LABEL), file=sys.stderr, flush=True)
    rows = table(results)
    elapsed = time.perf_counter() - t_start
    print(f"\n{to_text(rows)}\n# {elapsed:.0f} s")
    if args.out:
        write_result(args.out, rows, command, machine, started, elapsed, len(items),
                     args.per_category, args.max_new_tokens, None)


def write_result(out: Path, rows: list[CategoryRow], command: str, machine: str,
                 started: datetime.datetime, elapsed: float, n_items: int, per_category: int,
                 max_new: int, done: int | None) -> None:
    """The dated result file (rewritten after every prompt while partial: a stopped run
    keeps what it measured)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = "" if done is None else f" **Partial: {done} of {n_items} prompts so far.**"
    out.write_text(
        f"# Spec-Bench by category: the default pair beside transformers\n\n"
        f"- **Date:** {started:%Y-%m-%d %H:%M} UTC, {elapsed:.0f} s\n"
        f"- **Machine:** {machine}\n"
        f"- **Command:** `{command}`\n\n"
        f"{n_items} prompts (the first {per_category} of each category listed; "
        f"their first turn, in the chat template), {max_new} new tokens, "
        "T = 0. Speedup: tokens/s ÷ the target alone's (specviz's AutoregressiveDecoder) "
        "on the same prompt; every row runs one after the other, in an order rotated per "
        "prompt. Identical: prompts whose token ids equal the target alone's "
        f"(transformers' rows: their common prefix).{partial}\n\n" + to_markdown(rows),
        encoding="utf-8")


if __name__ == "__main__":
    main()

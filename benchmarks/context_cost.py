"""Seconds of a draft and a target pass by context length (width 1 and a few wider), interleaved.

    .venv/bin/python benchmarks/context_cost.py [--contexts 64,512,1024,1536] [--widths 1,5,11]
        [--reps 15] [--threads 1]

The cost policy prices a drafted token at the draft's measured seconds per token (c) and a
target pass at v(n); both were timed at whatever context the run had. Attention makes every
pass dearer as the cache grows, and not in the same proportion for the draft as for the
target: this prints, for the default pair, each pass's median and best seconds after a cached
prefix of each length (the same text, cropped), and the draft's step as a share of the
target's one-token pass at that length (the c the policy learns there). Lengths and widths
are visited in a rotated order within each repetition, so a drifting load hits them alike.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specviz.core.cached_model import CachedModel  # noqa: E402
from specviz.core.models import DEFAULT_PAIR, PRESETS, load_pair  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--contexts", default="64,512,1024,1536")
    ap.add_argument("--widths", default="1,5,11")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    pair = load_pair(*PRESETS[DEFAULT_PAIR])
    torch.set_num_threads(args.threads)
    contexts = [int(x) for x in args.contexts.split(",")]
    widths = [int(x) for x in args.widths.split(",")]
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    ids: list[int] = pair.tokenizer(text * 4)["input_ids"][:max(contexts)]
    models = {
        "draft": CachedModel(pair.draft, pair.vocab_size, pair.draft_vocab_map,
                             pair.draft_oov_id, fast=True),
        "target": CachedModel(pair.target, pair.vocab_size, fast=True),
    }
    times: dict[tuple[str, int, int], list[float]] = {}
    print(f"# {DEFAULT_PAIR}, torch threads {torch.get_num_threads()}, load average "
          f"{os.getloadavg()[0]:.2f} at the start", flush=True)
    cases = [(who, n, w) for n in contexts for who in models for w in widths]
    with torch.inference_mode():
        for rep in range(args.reps + 1):  # repetition 0 warms every shape
            shift = rep % len(cases)
            for who, n, w in cases[shift:] + cases[:shift]:
                lm = models[who]
                if lm.length > n:
                    lm.crop(n)
                if lm.length < n:
                    lm.feed(ids[lm.length:n], keep=1)
                t0 = time.perf_counter()
                lm.feed(ids[n - w:n] if w <= n else ids[:w], keep=w)  # any w tokens
                seconds = time.perf_counter() - t0
                lm.crop(n)
                if rep:
                    times.setdefault((who, n, w), []).append(seconds)
    print(f"# load average {os.getloadavg()[0]:.2f} at the end")
    print(f"{'context':>7} {'model':<6} " + " ".join(f"{'w' + str(w) + ' med':>9} {'best':>7}"
                                               for w in widths) + "  draft w1 ÷ target w1")
    for n in contexts:
        for who in models:
            cells = []
            for w in widths:
                t = times[(who, n, w)]
                cells.append(f"{statistics.median(t) * 1000:7.2f}ms {min(t) * 1000:6.2f}ms")
            share = ""
            if who == "draft":
                d = statistics.median(times[("draft", n, 1)])
                tg = statistics.median(times[("target", n, 1)])
                share = f"  {d / tg:.3f}"
            print(f"{n:7d} {who:<6} " + " ".join(cells) + share)


if __name__ == "__main__":
    main()

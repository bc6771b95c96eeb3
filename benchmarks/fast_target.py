"""The target's pass on FastLlama against transformers' forward, side by side in one run.

    .venv/bin/python benchmarks/fast_target.py [--device cpu|cuda|mps] [--dtype auto]
        [--context 300] [--reps 15] [--widths 1,2,5,11,17]

For each width (1 + K drafts) it times, interleaved rep by rep, one cached pass of the bundled
target after a ``--context``-token prefix through: transformers' forward (the model's own
modules: on the CPU with cpu_linear's products), FastLlama's sliced path (the CPU default),
its fixed path run eagerly, and on CUDA its fixed path replayed as CUDA graphs (the CUDA
default). It prints the fastest time of each (a busy machine only adds) and its ratio to
transformers'. ``engine.verify_costs`` and ``fast_llama.serves_target`` follow from it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specviz.core.drafters import CachedModel  # noqa: E402
from specviz.core.fast_llama import FastLlama  # noqa: E402
from specviz.core.models import BUNDLED_TARGET, load_model  # noqa: E402


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()
    elif device.type == "mps":
        torch.mps.synchronize()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda", "mps"))
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--target", default=BUNDLED_TARGET)
    ap.add_argument("--context", type=int, default=300)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--widths", default="1,2,5,11,17")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--no-fixed", action="store_true",
                    help="leave out the fixed path run eagerly (slow on a CPU, not its default)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    loaded = load_model(args.target, args.device, args.dtype)
    model = loaded.model
    dev = next(model.parameters()).device
    vocab = int(model.config.vocab_size)
    widths = [int(w) for w in args.widths.split(",")]
    ids = [(7 * i + 11) % vocab for i in range(args.context)]
    with torch.inference_mode():
        runners = {"transformers": CachedModel(model, vocab)}
        for name, fixed, graphs in (("fast sliced", False, False), ("fast fixed", True, False),
                                    ("fast graphs", True, True)):
            if (graphs and dev.type != "cuda") or (args.no_fixed and fixed and not graphs):
                continue
            lm = CachedModel(model, vocab, fast=True)
            assert lm.fast is not None, "FastLlama cannot run this model"
            lm.fast = FastLlama(model, fixed=fixed, graphs=graphs)
            lm.fast.warm(widths)
            runners[name] = lm
        for lm in runners.values():
            lm.feed(ids, keep=1)
        print(f"# {loaded.name} on {dev} ({next(model.parameters()).dtype}), torch "
              f"{torch.__version__}, {torch.get_num_threads()} threads, context "
              f"{args.context}, fastest of {args.reps}; command: {' '.join(sys.argv)}")
        print(f"  {'width':>5}  " + "  ".join(f"{n:>22}" for n in runners), flush=True)
        for w in widths:  # a width at a time, printed as it ends (a slow machine shows some)
            best = dict.fromkeys(runners, float("inf"))
            for rep in range(args.reps):
                order = list(runners.items())
                for name, lm in order[rep % len(order):] + order[:rep % len(order)]:
                    sync(dev)
                    t0 = time.perf_counter()
                    lm.feed([ids[-1]] * w, keep=w)
                    sync(dev)
                    best[name] = min(best[name], time.perf_counter() - t0)
                    lm.crop(args.context)
            base = best["transformers"]
            cells = [f"{1000 * best[n]:8.2f} ms ({base / best[n]:5.2f}x)" for n in runners]
            print(f"  {w:>5}  " + "  ".join(f"{c:>22}" for c in cells), flush=True)


if __name__ == "__main__":
    main()

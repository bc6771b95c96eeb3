"""Where a K sweep's time goes, and the sweep before and after a change, side by side.

    .venv/bin/python benchmarks/sweep_speed.py [--before REV] [--order ABBA] [--k 1,...,8]
        [--prompts N] [--max-new-tokens 16] [--repeats 1] [--settle SPREAD] [--threads 1]

Each letter of ``--order`` is one fresh process (A: specviz/core/sweep.py as it was at commit
``--before``, B: this checkout's) running the same short sweep of the bundled pair through
``run_sweep`` as ``specviz-explore sweep`` does: import, load the pair, then the sweep (its
warm-up, every run). A fresh process each time, since the warm-up pays what a process's first
forwards cost. ABBA puts each variant once early and once late, so a load that drifts over the
minutes hits both alike. ``--settle`` applies to B only (A has no such option).

Per process it prints the seconds of: loading (import and both models), the warm-up and
everything else outside the runs' own clocks (``outside``: sweep wall − Σ run clocks), the
runs' own clocks (``runs``: what the sweep measures; it moves with the machine's load, not
with the sweep's code), and the runs made. Then, per variant, the medians, and B ÷ A.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BEFORE = "8fdc8f9"  # main before the one-warm-up-per-sweep change
# The app's first prompt, then the first three held-out template prompts (as in
# benchmarks/results/2026-11-26-1630-sweep-k.md).
PROMPTS = ["What are three interesting facts about the water cycle?",
           "What is 15% of 80? Answer briefly.", "What is the moon landing?",
           "How do I get started with travelling on a budget?"]


def old_sweep(rev: str) -> Any:
    """specviz/core/sweep.py at ``rev``, imported beside this checkout's core."""
    text = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:specviz/core/sweep.py"],
                          check=True, capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp(prefix="specviz-sweep-before-")) / "_sweep_before.py"
    path.write_text(text, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("specviz.core._sweep_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def child(args: argparse.Namespace) -> None:
    t0 = time.perf_counter()
    sys.path.insert(0, str(ROOT))
    from specviz import explore_cli as ec
    from specviz.core import sweep as new

    sw = old_sweep(args.before) if args.child == "A" else new
    cli = ec.build_parser().parse_args(
        ["sweep", "--k", args.k, "--max-new-tokens", str(args.max_new_tokens),
         "--threads", str(args.threads), "--repeats", str(args.repeats)])
    points = [sw.Point(p.label, p.settings) for p in ec.sweep_points(cli)]
    pair = ec.load(cli)
    prompts = [ec._prompt(pair, cli, t) for t in PROMPTS[:args.prompts]]
    loaded = time.perf_counter()
    extra = {"settle": args.settle} if args.child == "B" and args.settle is not None else {}
    samples = list(sw.run_sweep(pair, points, prompts, args.repeats, **extra))
    end = time.perf_counter()
    runs = sum(s.run.wall_s for s in samples)
    result = sw.summarize(points, samples, args.repeats, len(prompts), **extra)
    print(json.dumps({
        "variant": args.child, "load": loaded - t0, "outside": end - loaded - runs,
        "runs": runs, "sweep": end - loaded, "total": end - t0, "n": len(samples),
        "identical": [r.identical for r in result.rows],
        "speedup": [round(r.speedup, 3) for r in result.rows]}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", default=BEFORE)
    p.add_argument("--order", default="ABBA")
    p.add_argument("--k", default="1,2,3,4,5,6,7,8")
    p.add_argument("--prompts", type=int, default=1, choices=range(1, len(PROMPTS) + 1))
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--settle", type=float, default=None)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--child", choices=["A", "B"], help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args)
        return
    passed = [a for a in sys.argv[1:] if a != "--child"]
    rows: list[dict[str, Any]] = []
    print(f"{'':>3} {'load s':>7} {'outside s':>9} {'runs s':>7} {'sweep s':>8} "
          f"{'total s':>8} {'runs':>4}  identical", flush=True)
    for letter in args.order:
        out = subprocess.run([sys.executable, __file__, *passed, "--child", letter],
                             check=True, capture_output=True, text=True, cwd=ROOT).stdout
        row = json.loads(out.strip().splitlines()[-1])
        rows.append(row)
        print(f"{letter:>3} {row['load']:7.1f} {row['outside']:9.1f} {row['runs']:7.1f} "
              f"{row['sweep']:8.1f} {row['total']:8.1f} {row['n']:>4}  {row['identical']}",
              flush=True)
    med = {v: {k: statistics.median(r[k] for r in rows if r["variant"] == v)
               for k in ("load", "outside", "runs", "sweep", "total", "n")}
           for v in sorted({r["variant"] for r in rows})}
    for v, m in med.items():
        print(f"median {v}: load {m['load']:.1f} s, outside the runs {m['outside']:.1f} s, "
              f"runs {m['runs']:.1f} s ({m['n']:.0f}), sweep {m['sweep']:.1f} s, "
              f"total {m['total']:.1f} s")
    if len(med) == 2:
        a, b = med["A"], med["B"]
        print(f"B ÷ A: outside the runs {b['outside'] / a['outside']:.2f}, sweep "
              f"{b['sweep'] / a['sweep']:.2f}, total {b['total'] / a['total']:.2f}")


if __name__ == "__main__":
    main()

"""One-off CLI runs against one warm process, on the same prompts, side by side in one run.

    .venv/bin/python benchmarks/oneoff.py [--sets grounded,template,free] [--prompts 3]
        [--max-new-tokens 96] [--temperature 0] [--repeats 1] [--busy] [--no-oneoff]
        [--no-warm] [--compare-warm] [-- extra specviz-cli arguments for both sides]

For each prompt, in an order rotated per prompt (so drifting load hits every row alike):

- one-off: a fresh ``python -m specviz.cli --json`` process with the defaults, and one with
  ``--baseline`` (the target alone); their tokens/s is what the CLI prints (its run's own clock,
  from RunFinished), so the process's start-up and model load are not in it; the process's
  wall time, spawn to exit, is printed beside it;
- warm: this process, with the pair loaded once and warmed, running the same requests through
  the API (``core.run.run``: the CLI's own path, chat template included);
- with ``--compare-warm``, also one-off processes with ``SPECVIZ_WARM=0`` ("unwarmed": no pass
  width run before the run's clock, ``engine.warm_widths``) and with ``SPECVIZ_WARM=all``
  ("all widths": on the CPU the target's 17 widths too, not only the draft's).

Per prompt set it prints each side's speedup (geometric mean over prompts of default tok/s ÷
target-alone tok/s, the worst prompt beside it) and one-off ÷ warm (the goal: ≥ 0.9). With
``--repeats R`` each run is the best of R. With ``--busy`` a second process keeps one core busy
(a Python spin loop) for the whole run, as a presenter's laptop with something else running
(the goal: the default ≥ 1.0× on every set); ``--no-oneoff`` then times the warm side alone.

Both sides read the cost policy's calibration kept on this machine (core/calibration.py), as a
user's second run would. Every process fits torch's threads to the cores others leave free
while it loads (core/threads.py), so where the load moves, processes may differ in thread
count: pin it with ``SPECVIZ_THREADS=N`` to compare like with like. Pause other work first: on
a shared machine only the ratios mean anything, and only where both sides ran in the same
minutes.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from grounded_prompts import grounded_prompts  # noqa: E402

from specviz.distill.prompts import free_prompts, heldout_prompts  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SETS = {"grounded": grounded_prompts, "template": heldout_prompts, "free": free_prompts}
MODES = ("speculative", "baseline")


@dataclass
class Timing:
    """One run: tokens, the run's own seconds (RunFinished), the process's (one-off only)."""

    tokens: int
    run_s: float
    process_s: float = math.nan
    ids: tuple[int, ...] = ()

    @property
    def tps(self) -> float:
        return self.tokens / self.run_s if self.run_s else 0.0


@dataclass
class Side:
    """One way of running (one-off or warm) over one prompt set: per prompt, per mode."""

    runs: list[dict[str, Timing]] = field(default_factory=list)

    def ratios(self) -> list[float]:
        return [r["speculative"].tps / r["baseline"].tps for r in self.runs]

    def geomean(self) -> float:
        ratios = self.ratios()
        return math.exp(statistics.fmean(math.log(x) for x in ratios)) if ratios else math.nan

    def tps(self, mode: str) -> float:
        return (sum(r[mode].tokens for r in self.runs) / sum(r[mode].run_s for r in self.runs)
                if self.runs else math.nan)


def oneoff(text: str, chat: bool, seed: int, mode: str, args: argparse.Namespace,
           env_extra: dict[str, str]) -> Timing:
    """A fresh specviz-cli process on ``text``; its RunFinished's tokens and seconds."""
    with tempfile.NamedTemporaryFile("w", suffix=".txt", encoding="utf-8", delete=False) as f:
        f.write(text)
    cmd = [sys.executable, "-m", "specviz.cli", "--json", "--prompt-file", f.name,
           "--temperature", str(args.temperature), "--max-new-tokens",
           str(args.max_new_tokens), "--seed", str(seed), *args.extra]
    cmd += ["--baseline"] if mode == "baseline" else []
    cmd += [] if chat else ["--no-chat"]
    env = dict(os.environ, **env_extra, PYTHONPATH=os.pathsep.join(
        [str(ROOT), os.environ.get("PYTHONPATH", "")]))
    try:
        t0 = time.perf_counter()
        out = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True,
                             timeout=600)
        wall = time.perf_counter() - t0
    finally:
        os.unlink(f.name)
    for line in out.stdout.splitlines():
        event = json.loads(line)
        if event.get("type") in ("run_finished", "RunFinished") or "summary" in event:
            s = event["summary"]
            return Timing(s["tokens"], s["wall_time_s"], wall,
                          tuple(event.get("generated_ids", ())))
    sys.exit(f"specviz-cli gave no summary (rc {out.returncode}):\n{out.stdout[-2000:]}\n"
             f"{out.stderr[-2000:]}")


class Warm:
    """This process: the pair loaded once, warmed, then each request through core.run.run."""

    def __init__(self, args: argparse.Namespace) -> None:
        from specviz.cli import build_parser
        from specviz.core.models import BUNDLED_TARGET, default_draft, load_pair, locate

        # The one-off side's extra CLI arguments, read by the CLI's own parser: both sides
        # run the same settings and pair.
        self.cli = build_parser().parse_args(["--temperature", str(args.temperature),
                                              "--max-new-tokens", str(args.max_new_tokens),
                                              *args.extra])
        draft = self.cli.draft or default_draft()
        self.pair = load_pair(locate(draft) if draft else None,
                              locate(self.cli.target or BUNDLED_TARGET),
                              self.cli.device, self.cli.dtype)
        for mode in MODES:  # first forwards allocate; the default calibrates (kept, or timed)
            self.run("Hello", True, 0, mode, max_new_tokens=8)

    def run(self, text: str, chat: bool, seed: int, mode: str,
            max_new_tokens: int | None = None) -> Timing:
        from dataclasses import replace

        from specviz.cli import _settings
        from specviz.core.events import RunFinished
        from specviz.core.run import Request, run

        settings = replace(_settings(self.cli), seed=seed)
        if max_new_tokens is not None:
            settings = replace(settings, max_new_tokens=max_new_tokens)
        *_, done = run(self.pair, Request(text, settings, mode, chat))  # type: ignore[arg-type]
        assert isinstance(done, RunFinished), done
        return Timing(done.summary.tokens, done.summary.wall_time_s,
                      ids=tuple(done.generated_ids))


def spinner() -> subprocess.Popen[bytes]:
    """A second process that keeps one core busy until killed."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default="grounded,template,free")
    ap.add_argument("--prompts", type=int, default=3, help="prompts per set")
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--repeats", type=int, default=1, help="best of this many per run")
    ap.add_argument("--busy", action="store_true",
                    help="a second process keeps one core busy for the whole run")
    ap.add_argument("--no-oneoff", action="store_true", help="the warm side alone")
    ap.add_argument("--no-warm", action="store_true", help="the one-off side alone")
    ap.add_argument("--compare-warm", action="store_true",
                    help="also one-off runs with SPECVIZ_WARM=0 (no width warmed before the "
                    "clock) and =all (the CPU target's widths too)")
    ap.add_argument("extra", nargs="*", help="specviz-cli arguments for both sides (after --)")
    args = ap.parse_args()
    busy = spinner() if args.busy else None
    try:
        run(args, busy is not None)
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()


def run(args: argparse.Namespace, busy: bool) -> None:
    # One-off kinds: the environment their processes get.
    oneoffs = {} if args.no_oneoff else {"oneoff": {}}
    if args.compare_warm and not args.no_oneoff:
        oneoffs["unwarmed"] = {"SPECVIZ_WARM": "0"}
        oneoffs["all widths"] = {"SPECVIZ_WARM": "all"}
    kinds = [*oneoffs, *([] if args.no_warm else ["warm"])]
    t_load = time.perf_counter()
    warm = Warm(args) if "warm" in kinds else None
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else math.nan
    print(f"# {args.prompts} prompts per set, {args.max_new_tokens} new tokens, T = "
          f"{args.temperature:g}, best of {args.repeats}, extra CLI args {args.extra or 'none'}; "
          f"{os.cpu_count()} cores, load average {load:.1f}"
          f"{'; one core kept busy by a spin loop' if busy else ''}; warm side loaded in "
          f"{time.perf_counter() - t_load:.1f} s", flush=True)
    goals_met = True
    for set_name in args.sets.split(","):
        sides = {k: Side() for k in kinds}
        prompts = SETS[set_name]()[:args.prompts]
        for i, (text, chat) in enumerate(prompts):
            jobs = [(k, m) for k in kinds for m in MODES]
            shift = i % len(jobs)
            got: dict[str, dict[str, Timing]] = {k: {} for k in kinds}
            for _ in range(args.repeats):
                for kind, mode in jobs[shift:] + jobs[:shift]:
                    if kind in oneoffs:
                        t = oneoff(text, chat, i, mode, args, oneoffs[kind])
                    else:
                        assert warm is not None
                        t = warm.run(text, chat, i, mode)
                    best = got[kind].get(mode)
                    if best is None or t.run_s < best.run_s:
                        got[kind][mode] = t
            for kind in kinds:
                sides[kind].runs.append(got[kind])
            same = {k: "same" if v["speculative"].ids[:len(v["baseline"].ids)]
                    == v["baseline"].ids[:len(v["speculative"].ids)] else "DIFFERENT"
                    for k, v in got.items()}
            print(f"#   {set_name} {i + 1}/{len(prompts)}: " + "; ".join(
                f"{k} {v['speculative'].tps:.1f} / {v['baseline'].tps:.1f} tok/s = "
                f"{v['speculative'].tps / v['baseline'].tps:.2f}x"
                + (f" (process {v['speculative'].process_s:.1f} / "
                   f"{v['baseline'].process_s:.1f} s)" if k in oneoffs else "")
                + (f", text {same[k]}" if args.temperature == 0 else "")
                for k, v in got.items()), flush=True)
        line = f"{set_name:<9}"
        for kind in kinds:
            side = sides[kind]
            line += (f"  {kind}: {side.geomean():5.2f}x (worst {min(side.ratios()):.2f}x; "
                     f"{side.tps('speculative'):.1f} / {side.tps('baseline'):.1f} tok/s)")
        if "warm" in sides:
            for kind in oneoffs:
                ratio = sides[kind].geomean() / sides["warm"].geomean()
                line += f"  {kind} / warm {ratio:.2f}"
                goals_met &= ratio >= 0.9 or kind != "oneoff"
        if busy:
            goals_met &= all(s.geomean() >= 1.0 for s in sides.values())
        print(line, flush=True)
    both = "oneoff" in kinds and "warm" in kinds
    goals = ("one-off ≥ 0.9 × warm" if both else "") + \
        (("; " if both else "") + "default ≥ 1.0x on every set" if busy else "")
    if goals:
        print(f"# goals ({goals}): {'met' if goals_met else 'NOT met'}")


if __name__ == "__main__":
    main()

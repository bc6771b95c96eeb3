"""App start-up time: launch ``python -m specviz`` offscreen and time the window and the pair.

    .venv/bin/python benchmarks/startup.py [--runs 3] [--warmup 1] [--device cpu|cuda|mps]
        [-- extra app args]

Each launch runs with SPECVIZ_STARTUP_TRACE=quit: the app prints when its window first
paints ("shown") and when the default pair is loaded ("ready"), then quits. Times are from
just before the process is spawned (interpreter start-up and imports included). A warm-up
launch is not counted (disk cache, bytecode). Settings live in a temporary folder, so every
launch is a first launch of the window on the default pair. Pause other work while timing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def launch(extra: list[str], config: str, store: str | None = None) -> dict[str, float]:
    env = dict(os.environ, QT_QPA_PLATFORM=os.environ.get("QT_QPA_PLATFORM", "offscreen"),
               SPECVIZ_STARTUP_TRACE="quit", XDG_CONFIG_HOME=config,
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    if store is not None:  # the cost policy's kept calibration (core/calibration.py)
        env["SPECVIZ_CALIBRATION_STORE"] = store
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # a warm launch of an installed app has bytecode
    t0 = time.time()
    out = subprocess.run([sys.executable, "-m", "specviz", *extra], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    t_exit = time.time()
    stamps = {"exit": t_exit - t0}
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0] == "specviz-startup" and parts[1] in ("shown", "ready"):
            stamps[parts[1]] = float(parts[2]) - t0
            if len(parts) == 4 and parts[3].startswith("cpu="):  # the app's own CPU time
                stamps[parts[1] + "_cpu"] = float(parts[3][4:])
    if "ready" not in stamps:
        sys.exit(f"launch did not get ready (rc {out.returncode}):\n{out.stdout}\n{out.stderr}")
    return stamps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--device", choices=("auto", "cpu", "cuda", "mps"),
                        help="the app's --device (default: the app's own choice)")
    parser.add_argument("--compare-calibration", action="store_true",
                        help="each run launches twice, side by side: with the calibration kept "
                        "by the warm-up launch, and with none kept (timed at load)")
    parser.add_argument("extra", nargs="*", help="arguments for the app (after --)")
    args = parser.parse_args()
    if args.device:
        args.extra = ["--device", args.device, *args.extra]
    with tempfile.TemporaryDirectory() as config:
        kept = str(Path(config) / "calibration.json") if args.compare_calibration else None
        for _ in range(args.warmup):
            launch(args.extra, config, kept)
        runs, fresh = [], []
        for i in range(args.runs):
            s = launch(args.extra, config, kept)
            runs.append(s)
            print(f"launch {i + 1}: window shown {s['shown']:.2f} s (CPU {s['shown_cpu']:.2f} s), "
                  f"pair ready {s['ready']:.2f} s (CPU {s['ready_cpu']:.2f} s), "
                  f"process exited {s['exit']:.2f} s", flush=True)
            if args.compare_calibration:
                f = launch(args.extra, config, str(Path(config) / f"none-{i}.json"))
                fresh.append(f)
                print(f"  no calibration kept: pair ready {f['ready']:.2f} s (CPU "
                      f"{f['ready_cpu']:.2f} s); kept / none {s['ready'] / f['ready']:.2f}x",
                      flush=True)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    med = {k: statistics.median(r[k] for r in runs) for k in ("shown", "ready", "shown_cpu",
                                                                "ready_cpu")}
    # The app's CPU time is what the wall time would be on an idle machine (one busy thread
    # at a time: the GUI waits while the load thread imports and loads), give or take.
    print(f"median of {args.runs}: shown {med['shown']:.2f} s, ready {med['ready']:.2f} s; "
          f"app CPU time to shown {med['shown_cpu']:.2f} s, to ready {med['ready_cpu']:.2f} s "
          f"(targets: 1.5 s and 5 s; {os.cpu_count()} cores, load average {load:.1f})")
    if fresh:
        print(f"median ready with the calibration kept {med['ready']:.2f} s, with none kept "
              f"{statistics.median(f['ready'] for f in fresh):.2f} s")


if __name__ == "__main__":
    main()

"""The app's race (F7) on the bundled pair, offscreen: each K policy's measured speedup.

    .venv/bin/python benchmarks/app_race.py [--races 3] [--policies fixed,cost]
        [--prompt "..."] [--temperature 0.7] [--max-new-tokens 128] [--live 3 --bars-s 0,0.2]

A main window is built as a user gets it (settings in a temporary folder), the default pair
loads, and per K policy ``--races`` races run one after the other through the window's own
race action: the speculative run, then the target alone (the main view held while they are
timed, as on screen; the race window follows them). Each line is one race: both runs' tokens
per second from their own summaries and their ratio (the speedup the race window shows).
The first race of a policy comes straight after the load, as a user's first race does. The
same prompt runs through ``specviz-cli --race`` for the decoders without a window (its own
untimed warm-up first). With ``--live N``, N plain runs (Run, F5) follow per value of
``--bars-s`` (RunView.BARS_S: how often a new round's bars may begin), each drawn live,
alternating the values: the window's drawing takes CPU from the decoder, and these lines say
how much. A background teacher (specviz-teacher) is paused while timing.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from draft_quality import teacher_paused  # noqa: E402


def races(policy: str, n: int, prompt: str, temperature: float, max_new: int,
          live: int = 0, bars_s: tuple[float, ...] = ()) -> None:
    from PySide6.QtWidgets import QApplication

    from specviz.core.events import RunFinished
    from specviz.gui.stage.stage import RaceRunner
    from specviz.gui.windows.app import MainWindow

    app = QApplication.instance() or QApplication([])
    w = MainWindow()
    w.resize(1920, 1080)
    w.show()
    ctl = w.controller
    t0 = time.time()
    while (ctl.pair is None or ctl.loading) and time.time() - t0 < 300:
        app.processEvents()
        time.sleep(0.02)
    w.controls.k_policy.setCurrentText(policy)
    w.controls.prompt.setPlainText(prompt)
    w.controls.temperature.setValue(temperature)
    w.controls.max_new.setValue(max_new)
    w.controls.seed.setValue(0)
    runner = w.findChildren(RaceRunner)[0]
    done: list[RunFinished] = []
    ctl.yielded.connect(lambda e: done.append(e) if isinstance(e, RunFinished) else None)
    for i in range(n):
        count = len(done)
        runner.start()
        while len(done) < count + 2:
            app.processEvents()
            time.sleep(0.005)
        spec, base = done[-2], done[-1]
        a = len(spec.generated_ids) / spec.summary.wall_time_s
        b = len(base.generated_ids) / base.summary.wall_time_s
        print(f"  {policy:<6} race {i + 1}: speculative {a:5.1f} tok/s, target alone "
              f"{b:5.1f} tok/s, speedup {a / b:.2f}x", flush=True)
        for _ in range(50):  # the race window starts its replay: let it settle
            app.processEvents()
            time.sleep(0.01)
    w.race_window.hide()
    speeds: dict[float, list[float]] = {b: [] for b in bars_s}
    for i in range(live):
        for b in bars_s if i % 2 == 0 else bars_s[::-1]:
            w.run_view.BARS_S = b
            count = len(done)
            w.actions_by_name["run"].trigger()
            while len(done) < count + 1 or ctl.state != "idle":
                app.processEvents()
                time.sleep(0.005)
            run = done[-1]
            speeds[b].append(len(run.generated_ids) / run.summary.wall_time_s)
    for b, got in speeds.items():
        if got:
            print(f"  {policy:<6} live runs, bars at most every {b:g} s: "
                  + ", ".join(f"{v:.1f}" for v in got) + " tok/s", flush=True)
    w.close()
    ctl.shutdown()


def cli_race(policy: str, prompt: str, temperature: float, max_new: int) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "specviz.cli", "--race", "--k-policy", policy, "--prompt", prompt,
         "--temperature", str(temperature), "--max-new-tokens", str(max_new), "--seed", "0"],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    speed = [ln for ln in out.stdout.splitlines() if "measured speedup" in ln]
    return f"  {policy:<6} specviz-cli --race: " + (speed[0].lstrip("# ") if speed
                                                     else f"failed: {out.stderr[-300:]}")


def main() -> None:
    from specviz.core.presets import DEFAULT_PROMPT

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--races", type=int, default=3)
    ap.add_argument("--policies", default="fixed,cost")
    ap.add_argument("--prompt", default=DEFAULT_PROMPT)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--live", type=int, default=0, help="plain runs drawn live, per --bars-s")
    ap.add_argument("--bars-s", default="0,0.2",
                    help="RunView.BARS_S values for the live runs (the app's is 0.2)")
    ap.add_argument("--no-pause-teacher", action="store_true",
                    help="leave a background teacher (specviz-teacher) running")
    args = ap.parse_args()
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="specviz-bench-")
    import torch

    print(f"# torch {torch.__version__}, {torch.get_num_threads()} threads; command: "
          f"benchmarks/app_race.py {' '.join(sys.argv[1:])}", flush=True)
    print(f"# prompt {args.prompt!r}, T = {args.temperature}, {args.max_new_tokens} tokens, "
          f"seed 0, hybrid drafter", flush=True)
    with teacher_paused(not args.no_pause_teacher):
        for policy in args.policies.split(","):
            races(policy, args.races, args.prompt, args.temperature, args.max_new_tokens,
                  args.live, tuple(float(b) for b in args.bars_s.split(",")))
            print(cli_race(policy, args.prompt, args.temperature, args.max_new_tokens),
                  flush=True)


if __name__ == "__main__":
    main()

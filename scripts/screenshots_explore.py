#!/usr/bin/env python
"""Fill the Explore window's tabs with short real runs and save a screenshot of each.

    .venv/bin/python scripts/screenshots_explore.py [OUT_DIR]          # the bundled default pair
    .venv/bin/python scripts/screenshots_explore.py OUT_DIR --tiny     # tiny random models
    .venv/bin/python scripts/screenshots_explore.py OUT_DIR --size 1366x768
    xvfb-run -s "-screen 0 1366x768x24" ... --platform xcb --maximized   # a real window

Runs a sweep (K 1,2,4 on two short prompts, 16 tokens), a three-lane lineup (K 2, K 4, the
cost policy; 24 tokens) and a prompt set (4 prompts in 2 categories, written to a temporary
JSONL here), then shows the lineup in the Diagnose tab and runs the prompt set there, and
saves sweep.png, lineup.png (the replay half way), lineup-end.png, promptset.png,
diagnose.png and diagnose-set.png; prints their paths.
Each step has its own time limit; running past it ends the script with one message.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
if "--platform" not in sys.argv:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
else:
    os.environ["QT_QPA_PLATFORM"] = sys.argv[sys.argv.index("--platform") + 1]

SIZE = (1920, 1080)
SWEEP_PROMPTS = ("The capital of France is", "def add(a, b):")
# "k=2" alone keeps the default drafter and cost policy (K 2 is only where it starts): the
# first two lanes fix K with the draft model so that the three lanes differ.
LANES = ("k=2 drafter=model k_policy=fixed", "k=4 drafter=model k_policy=fixed", "k_policy=cost")
SET_ROWS = (  # Spec-Bench's form, written here (the real file is never used)
    {"question_id": 1, "category": "writing", "turns": ["Write a haiku about the sea."]},
    {"question_id": 2, "category": "writing", "turns": ["Describe a rainy morning."]},
    {"question_id": 3, "category": "math", "turns": ["What is 12 times 7?"]},
    {"question_id": 4, "category": "math", "turns": ["Add 15 and 27, then halve it."]},
)


class StepTimeout(Exception):
    """A step ran past its time limit."""


def _wait(app: Any, done: Any, timeout_s: float, what: str) -> None:
    """Process events until ``done()``; StepTimeout after ``timeout_s``."""
    end = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > end:
            raise StepTimeout(f"{what} did not finish within {timeout_s:.0f} s")
        app.processEvents()
        time.sleep(0.01)


def _settle(app: Any, seconds: float = 0.3) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        app.processEvents()
        time.sleep(0.01)


def _run(app: Any, window: Any, button: Any, timeout_s: float, what: str) -> None:
    """Click a panel's run button and wait for the window's ``ended``."""
    ended: list[bool] = []
    window.ended.connect(lambda: ended.append(True))
    button.click()
    if not window.busy:  # a bad field: the panel says why and starts nothing
        raise RuntimeError(f"{what} did not start")
    _wait(app, lambda: bool(ended), timeout_s, what)


def _grab(window: Any, path: Path, app: Any) -> Path:
    _settle(app, 0.2)
    if not window.grab().save(str(path)):
        raise OSError(f"could not write {path}")
    return path


def _loader(tiny: bool) -> Any:
    if tiny:
        from tests.tiny import tiny_pair

        return lambda: tiny_pair(sharpness=3.0)
    from specviz.core.models import BUNDLED_TARGET, default_draft, load_pair, locate

    def load() -> Any:
        draft = default_draft()
        return load_pair(locate(draft) if draft else None, locate(BUNDLED_TARGET), "auto",
                         "auto")

    return load


def take(out_dir: str | Path, tiny: bool = False, size: tuple[int, int] = SIZE,
         maximized: bool = False, timeout_s: float = 300.0,
         sweep_tokens: int = 16, lineup_tokens: int = 24, set_tokens: int = 16) -> list[Path]:
    """Fill the Explore window's tabs and grab each; returns the PNG paths."""
    from PySide6.QtCore import Qt

    from specviz.gui.windows.app import make_app
    from specviz.gui.windows.explore import ExploreWindow

    app = make_app()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # As the main window opens it: the Diagnose tab offers its rounds there (not followed here).
    window = ExploreWindow(_loader(tiny), lambda *_: None)
    paths: list[Path] = []
    try:
        if maximized:  # a bare X server (Xvfb) has no window manager to do the maximising
            window.setGeometry(window.screen().availableGeometry())
            window.showMaximized()
        else:
            window.setWindowState(Qt.WindowState.WindowNoState)
            window.resize(*size)
            window.show()
        _settle(app, 0.5)  # let a window manager place it
        tabs = window.tabs

        sweep = window.sweep_panel
        tabs.setCurrentWidget(sweep)
        sweep.ks.setText("1,2,4")
        sweep.prompts.setPlainText("\n".join(SWEEP_PROMPTS))
        sweep.tokens.setValue(sweep_tokens)
        sweep.repeats.setValue(1)
        _run(app, window, sweep.run_button, timeout_s, "the sweep")
        paths.append(_grab(window, out / "sweep.png", app))

        lineup = window.lineup_panel
        tabs.setCurrentWidget(lineup)
        lineup.prompt.setText(SWEEP_PROMPTS[0])
        lineup.tokens.setValue(lineup_tokens)
        for edit, text in zip(lineup.configs, (*LANES, ""), strict=True):
            edit.setText(text)
        _run(app, window, lineup.run_button, timeout_s, "the lineup")
        if lineup.lineup is None:
            raise RuntimeError(f"the lineup did not finish: {lineup.status.text()}")
        lineup.timer.stop()
        lineup.show_at(lineup.lineup.duration_s / 2)
        paths.append(_grab(window, out / "lineup.png", app))
        lineup.show_at(lineup.lineup.duration_s)
        paths.append(_grab(window, out / "lineup-end.png", app))

        with tempfile.TemporaryDirectory() as tmp:
            prompt_file = Path(tmp) / "prompts.jsonl"
            prompt_file.write_text("".join(json.dumps(r) + "\n" for r in SET_ROWS),
                                   encoding="utf-8")
            pset = window.set_panel
            tabs.setCurrentWidget(pset)
            pset.path.setText(str(prompt_file))
            pset.per_category.setValue(0)  # all
            pset.tokens.setValue(set_tokens)
            _run(app, window, pset.run_button, timeout_s, "the prompt set")
            paths.append(_grab(window, out / "promptset.png", app))

            diagnose = window.diagnose_panel
            tabs.setCurrentWidget(diagnose)
            diagnose.use_lineup_button.click()
            if diagnose.tokens.rowCount():
                diagnose.tokens.setCurrentCell(0, 0)  # the rounds of the token rejected most
            paths.append(_grab(window, out / "diagnose.png", app))

            diagnose.path.setText(str(prompt_file))  # the same prompts, diagnosed at T 0.8
            diagnose.per_category.setValue(0)
            diagnose.new_tokens.setValue(set_tokens)
            _run(app, window, diagnose.run_button, timeout_s, "the prompts in Diagnose")
            if diagnose.tokens.rowCount():
                diagnose.tokens.setCurrentCell(0, 0)
            paths.append(_grab(window, out / "diagnose-set.png", app))
        return paths
    finally:
        window.close()
        app.processEvents()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out_dir", nargs="?", default=str(ROOT / "screenshots" / "explore"))
    p.add_argument("--tiny", action="store_true", help="tiny random-weight models (no weights)")
    p.add_argument("--size", default="1920x1080", help="window size, WxH (default 1920x1080)")
    p.add_argument("--maximized", action="store_true", help="maximise instead of --size")
    p.add_argument("--platform", help="Qt platform plugin (default offscreen; xcb under Xvfb)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per step (300)")
    args = p.parse_args(argv)
    try:
        width, height = (int(v) for v in args.size.lower().split("x"))
    except ValueError:
        p.error(f"--size wants WxH, e.g. 1366x768, not {args.size!r}")
    try:
        paths = take(args.out_dir, tiny=args.tiny, size=(width, height),
                     maximized=args.maximized, timeout_s=args.timeout)
    except (StepTimeout, RuntimeError, OSError) as e:
        print(f"screenshots_explore: {e}", file=sys.stderr)
        return 1
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())

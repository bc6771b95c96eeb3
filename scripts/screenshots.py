#!/usr/bin/env python
"""Run a short decode in the real window (offscreen, 1920×1080) and save screenshots.

    .venv/bin/python scripts/screenshots.py [OUT_DIR]            # the bundled default pair
    .venv/bin/python scripts/screenshots.py OUT_DIR --tiny       # tiny random models (tests)
    .venv/bin/python scripts/screenshots.py OUT_DIR --size 1366x768 --k 16
    xvfb-run -s "-screen 0 1366x768x24" ... --platform xcb --maximized   # a real window

Saves run.png (the window after the run), stream.png (the token stream alone),
round-rejected.png and round-bonus.png (a round with a rejection / with full acceptance
selected), presentation.png (no controls; presentation-dark.png and presentation-contrast.png
in the other themes), then baseline.png and baseline-stream.png (the
same prompt, target alone), and prints their paths. Your settings are not touched.
"""

from __future__ import annotations

import argparse
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


def _wait(app: Any, done: Any, timeout_s: float) -> bool:
    """Process events until ``done()`` or the timeout."""
    end = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > end:
            return False
        app.processEvents()
        time.sleep(0.01)
    return True


def take(out_dir: str | Path, tiny: bool = False, loader: Any = None, draft: str | None = None,
         target: str | None = None, prompt: str | None = None, k: int = 4,
         temperature: float = 0.8, max_new_tokens: int = 48, seed: int = 1,
         timeout_s: float = 600.0, size: tuple[int, int] = SIZE,
         maximized: bool = False, drafter: str | None = None) -> list[Path]:
    """Decode in a MainWindow and grab it; returns the PNG paths."""
    from PySide6.QtCore import QSettings, Qt

    from specviz.gui.windows.app import MainWindow, make_app

    app = make_app()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if tiny and loader is None:
        from tests.tiny import tiny_pair

        pair = tiny_pair(sharpness=3.0)
        loader = lambda *args, **kwargs: pair  # noqa: E731
        prompt = prompt if prompt is not None else "the cat sat on"
    with tempfile.TemporaryDirectory() as tmp:
        store = QSettings(str(Path(tmp) / "specviz.ini"), QSettings.Format.IniFormat)
        window = MainWindow(loader=loader, settings=store, draft=draft, target=target,
                            prompt=prompt, autoload=False)
        try:
            if maximized:  # as a first launch on a small screen does
                window.showMaximized()
            else:  # a first launch maximises on a small screen (the offscreen one is 800×800)
                window.setWindowState(Qt.WindowState.WindowNoState)
                window.resize(*size)
                window.show()
            _wait(app, lambda: False, 0.5)  # let a window manager place it
            window.controls.k.setValue(k)
            window.controls.temperature.setValue(temperature)
            window.controls.max_new.setValue(max_new_tokens)
            window.controls.seed.setValue(seed)
            if drafter is not None:
                window.controls.drafter.setCurrentText(drafter)
            window.run()
            finished = _wait(app, lambda: window.controller.state == "idle", timeout_s)
            if not finished:
                raise TimeoutError(f"the run did not finish within {timeout_s:.0f} s")
            view = window.run_view
            _wait(app, lambda: not view.queue, 5.0)
            time.sleep(view.stream.strike_delay_s)  # let rejected drafts get struck through
            view.flush()
            app.processEvents()
            paths = [_grab(window, out / "run.png", app),
                     _grab(view.stream, out / "stream.png", app, window)]
            rounds = view.record.rounds
            for name, wanted in (("round-rejected.png", "resampled"), ("round-bonus.png", "bonus")):
                pick = [r for r in rounds if r.extra is not None and r.extra.kind == wanted]
                if pick:
                    # The most instructive: a rejection after some accepted drafts.
                    view.select_round(max(pick, key=lambda r: (r.n_accepted, -r.index)).index)
                    paths.append(_grab(window, out / name, app))
            paths.extend(_tree_shots(window, view, out, app))
            view.select_round(None)
            window.dock.hide()
            window.menuBar().hide()
            window.statusBar().hide()
            # Presentation mode's type (F11 also goes full screen, which the grab's size fixes).
            from specviz.gui.views.zoom import presentation_factor

            window.zoom.set_factor(presentation_factor(window))
            view.set_presenting(True)  # what F11 does to the layout: every panel in view
            app.processEvents()
            paths.append(_grab(window, out / "presentation.png", app))
            tree = _tree_round(view)
            if tree is not None:  # a tree round, presenting: the room's type
                view.select_round(tree.index)
                paths.append(_grab(window, out / "presentation-tree.png", app))
                view.select_round(None)
            for theme in ("dark", "contrast"):  # View → Theme (gui/look/themes.py)
                window.set_theme(theme)
                paths.append(_grab(window, out / f"presentation-{theme}.png", app))
            window.set_theme("light")
            view.set_presenting(False)
            window.zoom.set_factor(1.0)
            window.dock.show()
            window.menuBar().show()
            window.statusBar().show()

            # The same prompt with the target alone, for the baseline colour and speed.
            window.controls.baseline.setChecked(True)
            window.run()
            if not _wait(app, lambda: window.controller.state == "idle", timeout_s):
                raise TimeoutError(f"the baseline run did not finish within {timeout_s:.0f} s")
            _wait(app, lambda: not view.queue, 5.0)
            paths.append(_grab(window, out / "baseline.png", app))
            paths.append(_grab(view.stream, out / "baseline-stream.png", app, window))
            return paths
        finally:
            window.close()
            app.processEvents()


def _tree_shots(window: Any, view: Any, out: Path, app: Any) -> list[Path]:
    """A tree round (lookup-tree, model-tree) selected, and staged at its siblings' tests:
    round-tree.png and round-tree-step-N.png. None when the run drafted no tree."""
    from specviz.gui.views.staging import phases

    rnd = _tree_round(view)
    if rnd is None:
        return []
    view.select_round(rnd.index)
    paths = [_grab(window, out / "round-tree.png", app)]
    view.stage(rnd)
    steps = phases(rnd)
    for i in range(1, len(steps)):
        view.stager.forward()
        if steps[i].name in ("test", "extra"):
            paths.append(_grab(window, out / f"round-tree-step-{i + 1}.png", app))
    view.stager.stop()
    return paths


def _tree_round(view: Any) -> Any:
    """The run's most instructive tree round (a kept node, the most siblings tested), or None."""
    from specviz.gui.views.tree import is_tree

    trees = [r for r in view.record.rounds if is_tree(r)]
    if not trees:
        return None
    return max(trees, key=lambda r: (r.n_accepted > 0, sum(d.status != "discarded"
                                                           for d in r.drafted), -r.index))


def _grab(widget: Any, path: Path, app: Any, window: Any = None) -> Path:
    """Save a widget (the window, or one view) as a PNG after drawing what is queued."""
    window = window or widget
    app.processEvents()
    window.run_view.flush()
    app.processEvents()
    if not widget.grab().save(str(path)):
        raise OSError(f"could not write {path}")
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out_dir", nargs="?", default=str(ROOT / "screenshots"))
    p.add_argument("--tiny", action="store_true", help="tiny random-weight models (no weights)")
    p.add_argument("--draft", help="draft model (default: the bundled default pair)")
    p.add_argument("--target", help="target model")
    p.add_argument("--prompt", help="the prompt")
    p.add_argument("--k", type=int, default=4)
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--drafter", help="who drafts (e.g. lookup-tree: tree screenshots too)")
    p.add_argument("--size", default="1920x1080", help="window size, WxH (default 1920x1080)")
    p.add_argument("--maximized", action="store_true", help="maximise instead of --size")
    p.add_argument("--platform", help="Qt platform plugin (default offscreen; xcb under Xvfb)")
    args = p.parse_args(argv)
    width, height = (int(v) for v in args.size.lower().split("x"))
    paths = take(args.out_dir, tiny=args.tiny, draft=args.draft, target=args.target,
                 prompt=args.prompt, k=args.k, temperature=args.temperature,
                 max_new_tokens=args.max_new_tokens, seed=args.seed, size=(width, height),
                 maximized=args.maximized, drafter=args.drafter)
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())

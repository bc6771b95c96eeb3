"""The main window as GUI tests build it: a tiny pair behind a custom draft / target, on the CPU."""

from __future__ import annotations

from typing import Any


def tiny_window(qtbot: Any, settings_store: Any, pair: Any, cls: type | None = None) -> Any:
    """A MainWindow (or ``cls``, a broken variant of it) whose loader returns ``pair``; not
    loaded yet. ``specviz.gui.windows.app.MainWindow`` is looked up at call time, so a test that
    patches it gets its variant here too."""
    from specviz.gui.windows import app

    w = (cls or app.MainWindow)(loader=lambda *a, **k: pair, settings=settings_store,
                                autoload=False)
    qtbot.addWidget(w)
    w._set_preset(app.CUSTOM)
    w.controls.draft_edit.setText("tiny-draft")
    w.controls.target_edit.setText("tiny-target")
    w.controls.device.setCurrentText("cpu")
    return w

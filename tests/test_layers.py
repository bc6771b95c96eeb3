"""The core layer stays Qt-free (the import-linter contract in pyproject.toml, checked here too)."""

from __future__ import annotations

import ast
from pathlib import Path

CORE = Path(__file__).resolve().parents[1] / "specviz" / "core"
FORBIDDEN = ("PySide6", "PyQt5", "PyQt6", "pyqtgraph", "specviz.gui", "specviz.distill")


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(("." * node.level) + node.module)
    return names


def test_core_imports_no_qt_no_gui_no_distill() -> None:
    files = sorted(CORE.rglob("*.py"))
    assert len(files) >= 5
    bad = {
        f"{path.name}: {name}"
        for path in files
        for name in imported_modules(path)
        if name.startswith(FORBIDDEN) or name.lstrip(".").startswith(("gui", "distill"))
    }
    assert not bad, bad

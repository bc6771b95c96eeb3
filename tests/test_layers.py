"""The layers keep apart: core is Qt-free and imports neither the GUI nor distill; distill never
imports the GUI (the import-linter contracts in pyproject.toml, checked here too without it).

Relative imports are resolved against the file's package, so ``from .. import gui`` counts as
importing ``specviz.gui``; a broken checker that reads only ``from X`` (not what is imported
from it) misses that line, and the sample check below rejects it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.mutation import mutant

PACKAGE = Path(__file__).resolve().parents[1] / "specviz"
QT = ("PySide6", "PyQt5", "PyQt6", "pyqtgraph")
FORBIDDEN = {
    "core": QT + ("specviz.gui", "specviz.distill"),
    "distill": QT + ("specviz.gui",),
}


def imported_modules(source: str, package: str) -> set[str]:
    """Every module the source imports, absolute (relative ones resolved against ``package``).

    ``from A import b`` counts both ``A`` and ``A.b``: ``b`` may be a submodule.
    """
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + [node.module or ""])
            else:
                base = node.module or ""
            base = base.strip(".")
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def is_forbidden(name: str, forbidden: tuple[str, ...]) -> bool:
    return any(name == f or name.startswith(f + ".") for f in forbidden)


def forbidden_imports(finder: object, source: str, package: str,
                      forbidden: tuple[str, ...]) -> set[str]:
    assert callable(finder)
    return {name for name in finder(source, package) if is_forbidden(name, forbidden)}


# Lines a module in specviz.core must not hold, then lines it may (package, source).
BAD = [
    "import PySide6.QtCore",
    "from PySide6 import QtCore",
    "import pyqtgraph as pg",
    "import specviz.gui.windows.app",
    "from specviz.gui import app",
    "from specviz import gui",
    "from specviz import distill",
    "from ..gui import app",
    "from ..gui.app import MainWindow",
    "from .. import gui",
    "from .. import distill",
    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .. import gui",
]
GOOD = [
    "import torch",
    "from . import events",
    "from .events import Round",
    "from ..core import engine",
    "from specviz.core.events import Settings",
    "from .guide import notes",  # a name that only starts like gui
]


def check_samples(finder: object) -> None:
    forbidden = FORBIDDEN["core"]
    missed = [s for s in BAD if not forbidden_imports(finder, s, "specviz.core", forbidden)]
    assert not missed, f"not caught: {missed}"
    flagged = [s for s in GOOD if forbidden_imports(finder, s, "specviz.core", forbidden)]
    assert not flagged, f"wrongly caught: {flagged}"
    # distill may import core, never the GUI, however it spells the import.
    assert forbidden_imports(finder, "from .. import gui", "specviz.distill",
                             FORBIDDEN["distill"])
    assert not forbidden_imports(finder, "from ..core import engine", "specviz.distill",
                                 FORBIDDEN["distill"])


def test_the_checker_sees_every_spelling_of_a_forbidden_import() -> None:
    check_samples(imported_modules)


def test_the_sample_check_rejects_a_checker_that_ignores_imported_names() -> None:
    # Reads only ``from X``: ``from .. import gui`` looks like ``import specviz``.
    broken = mutant(imported_modules,
                    ('names.update(f"{base}.{alias.name}" for alias in node.names)', "pass"))
    with pytest.raises(AssertionError, match="from .. import gui"):
        check_samples(broken)


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_imports_nothing_forbidden(layer: str) -> None:
    files = sorted((PACKAGE / layer).rglob("*.py"))
    assert len(files) >= 5, files
    bad = set()
    for path in files:
        rel = path.relative_to(PACKAGE.parent)
        package = ".".join(rel.parts[:-1])  # the folder, for a module and an __init__ alike
        source = path.read_text(encoding="utf-8")
        bad |= {f"{rel}: {name}"
                for name in forbidden_imports(imported_modules, source, package,
                                              FORBIDDEN[layer])}
    assert not bad, bad


def import_cycles(sources: dict[str, str], package: str) -> list[list[str]]:
    """The cycles among ``sources`` (module name under ``package``, dotted -> source), imports
    inside functions too: a lazy import still ties the two modules together."""

    def name_package(name: str) -> str:  # what a relative import in that module starts from
        return ".".join([package, *name.split(".")[:-1]])
    def module_of(imported: str) -> str | None:
        """The longest module among ``sources`` that names ``imported`` (``from m import f``)."""
        parts = imported.removeprefix(package + ".").split(".")
        for n in range(len(parts), 0, -1):
            if ".".join(parts[:n]) in sources:
                return ".".join(parts[:n])
        return None

    graph = {name: {module_of(m) for m in imported_modules(src, name_package(name))
                    if m.startswith(package + ".")} - {None, name}
             for name, src in sources.items()}
    found: list[list[str]] = []

    def walk(start: str, node: str, path: list[str]) -> None:
        for nxt in sorted(graph[node]):
            if nxt == start:
                found.append([*path, nxt])
            elif nxt not in path and nxt > start:  # each cycle once, from its least module
                walk(start, nxt, [*path, nxt])

    for name in sorted(graph):
        walk(name, name, [name])
    return found


def test_no_import_cycles_in_the_gui() -> None:
    """House: app → stage → export → app was a circle (export's command line took make_app
    from app); make_app now lives in startup. The GUI's subpackages are walked module by
    module (``windows.app``, ``stage.export``, ...)."""
    gui = PACKAGE / "gui"
    sources = {".".join(p.relative_to(gui).with_suffix("").parts): p.read_text(encoding="utf-8")
               for p in gui.rglob("*.py") if p.name != "__init__.py"}
    assert {"windows.app", "stage.stage", "stage.export", "replay.player"} <= set(sources)
    assert import_cycles(sources, "specviz.gui") == []
    # The broken variants: export importing app again, absolutely and relatively.
    for line in ("from specviz.gui.windows.app import main", "from ..windows.app import main"):
        broken = dict(sources)
        broken["stage.export"] += f"\ndef _main():\n    {line}\n"
        assert ["stage.export", "windows.app", "stage.stage", "stage.export"] in \
            import_cycles(broken, "specviz.gui"), line

"""No test under tests/core patches a core module's global (issue 25): a broken variant or a
fixture reaches the code under test as an argument (``parts.Factory``, a parameter with a
default, a copy built by ``tests/mutation.py``'s ``with_globals``), never by
``monkeypatch.setattr`` on ``specviz.core``.

The check reads the test files (no import): for each ``<anything>.setattr`` / ``.delattr``
call (``monkeypatch``, ``m`` of ``monkeypatch.context()``, a ``pytest.MonkeyPatch()``) it
finds what the target is:
- a dotted string: core if it starts with ``specviz.core``;
- a name imported or assigned at module level: core if it comes from ``specviz.core`` (a
  module, or a class or function defined there: patching ``CachedModel.feed`` changes every
  user too);
- a parameter of the enclosing function with a type (a fixture's object, e.g.
  ``tiny_pair.target``): an instance, not a module global;
- anything else (a local variable, a call): the check cannot tell, so it counts as a patch.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE_TESTS = Path(__file__).resolve().parent / "core"
CORE = "specviz.core"
PATCHES = {"setattr", "delattr"}


def _is_core(origin: str) -> bool:
    return origin == CORE or origin.startswith(CORE + ".")


def _origins(tree: ast.Module) -> dict[str, str]:
    """Imported name (at any level) or module-level name -> where it comes from
    ("specviz.core.engine", "httpx2", ...); a name assigned from an expression that names a
    core module (``sys.modules["specviz.core.x"]``, ``engine.verify``) comes from core."""
    origins: dict[str, str] = {}
    imports = [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
    for node in [*imports, *tree.body]:
        if isinstance(node, ast.Import):
            for alias in node.names:
                origins[alias.asname or alias.name.split(".")[0]] = \
                    alias.name if alias.asname else alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                origins[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = node.value
            if value is None:
                continue
            core = any(isinstance(n, ast.Constant) and isinstance(n.value, str)
                       and _is_core(n.value) for n in ast.walk(value)) or \
                any(isinstance(n, ast.Name) and _is_core(origins.get(n.id, ""))
                    for n in ast.walk(value))
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        origins[name.id] = CORE if core else "here"
    return origins


def _root(node: ast.expr) -> ast.expr:
    """The name an attribute or subscript chain starts from (or what is not a name)."""
    while isinstance(node, ast.Attribute | ast.Subscript):
        node = node.value
    return node


def _typed_parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """Parameters with a type other than Any or a module (fixtures' objects)."""
    args = [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]
    return {a.arg for a in args if a.annotation is not None
            and ast.unparse(a.annotation) not in ("Any", "ModuleType", "types.ModuleType")}


def core_patches(source: str) -> list[str]:
    """'line: call' for each patch in ``source`` whose target is (or may be) a core global."""
    tree = ast.parse(source)
    origins = _origins(tree)
    found: list[str] = []

    def visit(node: ast.AST, typed: set[str]) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            typed = typed | _typed_parameters(node)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in PATCHES and node.args:
            target = node.args[0]
            if isinstance(target, ast.Constant) and isinstance(target.value, str):
                core = _is_core(target.value)
            else:
                root = _root(target)
                if isinstance(root, ast.Name) and root.id in origins:
                    core = _is_core(origins[root.id])
                else:  # a typed parameter's object is an instance; anything else is unknown
                    core = not (isinstance(root, ast.Name) and root.id in typed)
            if core:
                found.append(f"{node.lineno}: {ast.unparse(node)}")
        for child in ast.iter_child_nodes(node):
            visit(child, typed)

    visit(tree, set())
    return found


def test_no_test_in_tests_core_patches_a_core_global() -> None:
    found = [f"{path.relative_to(CORE_TESTS.parent)}:{hit}"
             for path in sorted(CORE_TESTS.rglob("*.py"))
             for hit in core_patches(path.read_text(encoding="utf-8"))]
    assert found == [], "pass the part in instead of patching core:\n" + "\n".join(found)


PLANTED = '''
import os
import sys

import specviz.core.verify as verify_mod
from specviz.core import engine
from specviz.core.engine import SpeculativeDecoder
from specviz.core.models import ModelPair

RACE = sys.modules["specviz.core.race"]


def test_planted(monkeypatch, tiny_pair: ModelPair) -> None:
    monkeypatch.setattr(engine, "verify", None)  # core: 14
    monkeypatch.setattr("specviz.core.engine.time", None)  # core: 15
    monkeypatch.setattr(SpeculativeDecoder, "run", None)  # core: 16
    monkeypatch.setattr(RACE, "split_runs", None)  # core: 17
    module = verify_mod
    monkeypatch.setattr(module, "verify", None)  # cannot tell: 19
    with monkeypatch.context() as m:
        m.delattr(verify_mod.verify, "__doc__")  # core: 21
    monkeypatch.setattr(tiny_pair.target, "forward", None)  # an instance
    monkeypatch.setattr(os, "getcwd", None)  # not core
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)  # not core
    monkeypatch.setenv("SPECVIZ_STOCK_TARGET", "1")  # not a patch of a global
'''


def test_a_planted_patch_of_a_core_global_is_found(tmp_path: Path) -> None:
    path = tmp_path / "test_planted.py"
    path.write_text(PLANTED, encoding="utf-8")
    found = core_patches(path.read_text(encoding="utf-8"))
    assert [int(hit.split(":")[0]) for hit in found] == [14, 15, 16, 17, 19, 21], found


@pytest.mark.parametrize("line", [
    'monkeypatch.setattr(tiny_pair.target, "forward", None)',
    'monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)',
])
def test_a_patch_outside_core_is_not_counted(line: str) -> None:
    source = ("from specviz.core.models import ModelPair\n\n\n"
              f"def test_x(monkeypatch, tiny_pair: ModelPair) -> None:\n    {line}\n")
    assert core_patches(source) == []

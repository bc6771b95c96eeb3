"""One cache folder for everything specviz makes once: SPECVIZ_CACHE, else XDG_CACHE_HOME,
else ~/.cache (issue 26, item 21). A broken copy of the rule is shown failing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from specviz.core import models
from specviz.core.models import cache_root, load_model
from tests.mutation import mutant
from tests.tiny import tiny_llama, word_tokenizer

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake home; neither variable set."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("SPECVIZ_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    return tmp_path / "home"


@pytest.mark.parametrize(("specviz", "xdg", "expected"), [
    (None, None, "home/.cache/specviz"),
    (None, "XDG", "XDG/specviz"),
    ("MINE", "XDG", "MINE"),
    ("MINE", None, "MINE"),
    (None, "relative/dir", "home/.cache/specviz"),  # the XDG spec: relative values are ignored
    ("  ", "XDG", "XDG/specviz"),  # blank is unset
])
def test_the_rule(home: Path, monkeypatch: pytest.MonkeyPatch, specviz: str | None,
                  xdg: str | None, expected: str) -> None:
    base = home.parent
    if specviz is not None:
        monkeypatch.setenv("SPECVIZ_CACHE", specviz if specviz.isspace() else str(base / specviz))
    if xdg is not None:
        monkeypatch.setenv("XDG_CACHE_HOME", xdg if xdg.startswith("relative") else str(base / xdg))
    assert cache_root() == base / expected


def test_the_old_rule_ignored_xdg(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Broken variant: without the XDG branch the cache stays under ~/.cache."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(home.parent / "XDG"))
    old = mutant(models.cache_root, ('    if xdg and Path(xdg).is_absolute():', '    if False:'))
    assert old() == home / ".cache" / "specviz" != cache_root()


def test_the_cpu_timings_land_in_the_xdg_cache(home: Path, monkeypatch: pytest.MonkeyPatch,
                                               tmp_path: Path) -> None:
    """The issue's file: cpu_linear.json follows XDG_CACHE_HOME; nothing under ~/.cache."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("SPECVIZ_STOCK_LINEAR", raising=False)
    folder = tmp_path / "m"
    tok = word_tokenizer()
    tiny_llama(len(tok), seed=1).save_pretrained(folder)
    tok.save_pretrained(folder)
    load_model(str(folder), device="cpu", dtype="float32")
    assert (tmp_path / "xdg" / "specviz" / "cpu_linear.json").is_file()
    assert not (home / ".cache").exists()


def test_no_other_code_spells_a_cache_path() -> None:
    """Everything goes through cache_root(): no '.cache' literal elsewhere in the code."""
    spelled = []
    for folder in ("specviz", "benchmarks", "scripts"):
        for path in (ROOT / folder).rglob("*"):
            if path.is_file() and path.suffix in (".py", "") and path.name != "models.py":
                text = path.read_text(encoding="utf-8", errors="replace")
                spelled += [f"{path.relative_to(ROOT)}: {m.group(0)}"
                            for m in re.finditer(r"[\"'/~][^\"'\n]*\.cache\b[^\"'\n]*", text)]
    assert spelled == []

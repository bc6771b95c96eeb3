"""`specviz` itself says which apt packages Qt's xcb plugin lacks, before Qt aborts (issue 26,
item 23). ldd's output is faked; the real entry point runs in a child with a fake ldd first
on PATH, and the broken variant (no check) reaches Qt's own abort."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from specviz.gui.windows import qt_check

ROOT = Path(__file__).resolve().parents[2]
LDD_MISSING = """/x/libqxcb.so:
\tlinux-vdso.so.1 (0x00007ffd)
\tlibxcb-cursor.so.0 => not found
\tlibxcb.so.1 => /lib/x86_64-linux-gnu/libxcb.so.1 (0x00007f)
/x/libQt6XcbQpa.so.6:
\tlibxcb-cursor.so.0 => not found
\tlibxkbcommon-x11.so.0 => not found
"""
LDD_FINE = "\tlibxcb.so.1 => /lib/x86_64-linux-gnu/libxcb.so.1 (0x00007f)\n"
EXPECTED = ("specviz: Qt cannot open a window: libxcb-cursor.so.0, libxkbcommon-x11.so.0 are "
            "missing; install with: sudo apt-get install -y libxcb-cursor0 libxkbcommon-x11-0 "
            "(or run without a screen: QT_QPA_PLATFORM=offscreen; skip this check: "
            "SPECVIZ_SKIP_QT_CHECK=1)")


def fake(output: str):
    return lambda paths: output


@pytest.mark.parametrize(("env", "system", "ldd", "expected"), [
    ({}, "linux", LDD_MISSING, EXPECTED),
    ({"QT_QPA_PLATFORM": "xcb"}, "linux", LDD_MISSING, EXPECTED),
    ({"QT_QPA_PLATFORM": "xcb:nograb"}, "linux", LDD_MISSING, EXPECTED),
    ({}, "linux", LDD_FINE, None),
    ({}, "linux", "", None),  # no ldd: nothing known missing
    ({"QT_QPA_PLATFORM": "offscreen"}, "linux", LDD_MISSING, None),
    ({"QT_QPA_PLATFORM": "wayland"}, "linux", LDD_MISSING, None),
    ({"SPECVIZ_SKIP_QT_CHECK": "1"}, "linux", LDD_MISSING, None),
    ({}, "darwin", LDD_MISSING, None),
    ({}, "win32", LDD_MISSING, None),
])
def test_the_check(env: dict, system: str, ldd: str, expected: str | None) -> None:
    assert qt_check.check(env, system, fake(ldd)) == expected


def test_one_library_reads_as_one() -> None:
    assert qt_check.message(["libxcb-cursor.so.0"]).startswith(
        "specviz: Qt cannot open a window: libxcb-cursor.so.0 is missing; install with: "
        "sudo apt-get install -y libxcb-cursor0 (")


def _launch(tmp_path: Path, ldd: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`python -m specviz` with a fake ldd first on PATH, on the xcb platform, no display."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "ldd").write_text(f"#!/bin/sh\ncat <<'EOF'\n{ldd}EOF\n")
    (bin_dir / "ldd").chmod(0o755)
    child = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    child.update(PATH=f"{bin_dir}{os.pathsep}{child.get('PATH', '')}", QT_QPA_PLATFORM="xcb",
                 PYTHONPATH=str(ROOT), XDG_CONFIG_HOME=str(tmp_path / "config"), **env)
    return subprocess.run([sys.executable, "-m", "specviz", "--no-load"], env=child, cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.skipif(sys.platform != "linux", reason="the xcb plugin is Linux's")
def test_the_program_prints_the_apt_line_and_exits_1_before_qt(tmp_path: Path) -> None:
    done = _launch(tmp_path, LDD_MISSING)
    assert done.returncode == 1
    assert done.stderr.strip() == EXPECTED and done.stdout == ""


@pytest.mark.skipif(sys.platform != "linux", reason="the xcb plugin is Linux's")
def test_without_the_check_qt_aborts_with_its_own_text(tmp_path: Path) -> None:
    """The broken variant (the check skipped, as a direct launch was before): Qt starts on xcb
    and dies with its raw plugin text, no apt line."""
    done = _launch(tmp_path, LDD_MISSING, SPECVIZ_SKIP_QT_CHECK="1")
    assert done.returncode != 0 and "apt-get" not in done.stderr
    assert "xcb" in done.stderr

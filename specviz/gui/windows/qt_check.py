"""Before Qt starts: the system libraries its X11 (xcb) plugin needs, or one line saying which
apt packages to install.

Without them Qt aborts at the first QApplication with its raw "could not load the Qt platform
plugin" text and a core dump. ``ldd`` on PySide6's xcb plugin names what the dynamic linker
cannot find; no Qt module is imported here (importing one is fine, starting one is not, but
this runs before either and costs one ``ldd``).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

SKIP_ENV = "SPECVIZ_SKIP_QT_CHECK"

# Debian/Ubuntu package of each library the xcb plugin links (Qt 6.5+ needs xcb-cursor too).
PACKAGES = {
    "libxcb-cursor.so.0": "libxcb-cursor0", "libxcb-icccm.so.4": "libxcb-icccm4",
    "libxcb-keysyms.so.1": "libxcb-keysyms1", "libxcb-image.so.0": "libxcb-image0",
    "libxcb-render-util.so.0": "libxcb-render-util0", "libxcb-randr.so.0": "libxcb-randr0",
    "libxcb-shape.so.0": "libxcb-shape0", "libxcb-xfixes.so.0": "libxcb-xfixes0",
    "libxcb-xkb.so.1": "libxcb-xkb1", "libxcb-sync.so.1": "libxcb-sync1",
    "libxcb-shm.so.0": "libxcb-shm0", "libxcb-render.so.0": "libxcb-render0",
    "libxcb-util.so.1": "libxcb-util1", "libxcb-xinerama.so.0": "libxcb-xinerama0",
    "libxcb-xinput.so.0": "libxcb-xinput0", "libxcb-glx.so.0": "libxcb-glx0",
    "libxcb.so.1": "libxcb1", "libxkbcommon.so.0": "libxkbcommon0",
    "libxkbcommon-x11.so.0": "libxkbcommon-x11-0", "libX11-xcb.so.1": "libx11-xcb1",
    "libX11.so.6": "libx11-6", "libSM.so.6": "libsm6", "libICE.so.6": "libice6",
    "libfontconfig.so.1": "libfontconfig1", "libfreetype.so.6": "libfreetype6",
    "libEGL.so.1": "libegl1", "libGL.so.1": "libgl1", "libOpenGL.so.0": "libopengl0",
    "libGLX.so.0": "libglx0", "libdbus-1.so.3": "libdbus-1-3",
    "libglib-2.0.so.0": "libglib2.0-0",
}
# Platforms that never load the xcb plugin: nothing to check.
NOT_XCB = ("offscreen", "minimal", "vnc", "wayland", "eglfs", "linuxfb", "direct2d", "windows",
           "cocoa")


def xcb_plugins() -> list[Path]:
    """PySide6's xcb platform plugin and the library behind it (found without importing Qt)."""
    spec = importlib.util.find_spec("PySide6")
    if spec is None or not spec.submodule_search_locations:
        return []
    qt = Path(next(iter(spec.submodule_search_locations))) / "Qt"
    return sorted([*qt.glob("plugins/platforms/libqxcb.so"), *qt.glob("lib/libQt6XcbQpa.so.*")])


def run_ldd(paths: list[Path]) -> str:
    """What ``ldd`` prints for ``paths`` ('' when there is no ldd or it fails)."""
    try:
        return subprocess.run(["ldd", *map(str, paths)], capture_output=True, text=True,
                              timeout=20, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def not_found(ldd_output: str) -> list[str]:
    """The libraries ldd could not find ("\tlibxcb-cursor.so.0 => not found"), sorted."""
    return sorted({line.split()[0] for line in ldd_output.splitlines()
                   if "=> not found" in line and line.split()})


def message(missing: list[str]) -> str:
    """One line: what is missing and the apt-get command that installs it."""
    packages = sorted({PACKAGES.get(lib, lib) for lib in missing})
    libs = ", ".join(missing)
    return (f"specviz: Qt cannot open a window: {libs} {'is' if len(missing) == 1 else 'are'} "
            f"missing; install with: sudo apt-get install -y {' '.join(packages)} (or run "
            f"without a screen: QT_QPA_PLATFORM=offscreen; skip this check: {SKIP_ENV}=1)")


def wanted(env: Mapping[str, str], system: str) -> bool:
    """Whether to check: on Linux, unless skipped or the platform is not xcb."""
    if system != "linux" or env.get(SKIP_ENV, "").strip() == "1":
        return False
    platform = env.get("QT_QPA_PLATFORM", "").strip().split(":", 1)[0].lower()
    return not platform.startswith(NOT_XCB)


def check(env: Mapping[str, str] | None = None, system: str | None = None,
          ldd: Callable[[list[Path]], str] = run_ldd) -> str | None:
    """The one-line message if Qt's xcb plugin lacks libraries, else None."""
    env = os.environ if env is None else env
    if not wanted(env, sys.platform if system is None else system):
        return None
    plugins = xcb_plugins()
    if not plugins:
        return None  # no plugin to inspect: Qt says what it lacks itself
    missing = not_found(ldd(plugins))
    return message(missing) if missing else None


__all__ = ["SKIP_ENV", "check", "message", "not_found"]

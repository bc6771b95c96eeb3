"""Themes for the stage: light (the default), dark and high contrast, all colour-blind-safe.

A theme is a table of colours; every view takes one through ``set_theme(theme)`` and draws
with it from then on. The fates keep their decorations (strike, underline, overline, bold,
italic: gui/look/style.py) in every theme, so hue is never the only cue. The checks the tests run
are here too, as plain functions: the WCAG contrast ratio of each fate's text on its
background, and the colour distance between fates as a deuteranope, a protanope and a
tritanope see them (Machado, Oliveira & Fernandes 2009, severity 1, in CIELAB).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from PySide6.QtCore import QObject, QSettings, Qt, Signal
from PySide6.QtGui import QAction, QActionGroup, QColor, QKeySequence, QPalette
from PySide6.QtWidgets import QMainWindow, QWidget

from specviz.gui.look.style import (
    BLUE,
    BONUS_COLOR,
    FATES,
    GREY,
    INK,
    MARK_COLOR,
    ORANGE,
    P_COLOR,
    Q_COLOR,
    REDDISH_PURPLE,
    RESIDUAL_COLOR,
    SKY_BLUE,
    STREAM_KINDS,
    VERMILLION,
)

FATE_KINDS = ("prompt", *STREAM_KINDS)
SPECULATIVE_KINDS = ("accepted", "rejected", "resampled", "bonus")
VISIONS = ("normal", "protanopia", "deuteranopia")  # tritanopia (~1 in 10,000): not checked


@dataclass(frozen=True)
class Theme:
    """Every colour a view draws with. Fates: kind -> (text colour, background)."""

    key: str
    label: str
    window: str  # window and panel background
    base: str  # text areas (the token stream)
    text: str  # ordinary text
    muted: str  # captions, the reason in brackets
    fates: Mapping[str, tuple[str, str]]
    p: str  # target bars
    q: str  # draft bars
    residual: str  # norm(max(0, p - q)) bars
    bonus: str  # bonus token's p bars
    mark: str  # outline round the token taken, the rejected verdict's marker
    plot_bg: str
    plot_axis: str  # axis lines and ticks
    plot_text: str  # tick labels and titles
    plot_grid: str  # the 0.5 / 1 guide lines
    line: str  # acceptance total, histogram bars, K per round
    points: str  # acceptance per round, by position
    expected: str  # the i.i.d. diamonds
    lookup: str  # α bar of the lookup drafter
    greyed: str  # discarded drafts' bars (staging)
    good: str  # ✓ identical text (race)
    bad: str  # ✗ / not exact
    # Text of a disabled control (Stop during a replay): far dimmer than ``text``, so the
    # state shows (the muted captions' grey once made disabled buttons look enabled).
    disabled: str = "#8C8C8C"
    error: tuple[str, str, str] = field(default=("#5A1E00", "#FBE3D3", VERMILLION))
    warning: tuple[str, str, str] = field(default=("#3D2C00", "#FFF0A0", "#A03F00"))

    def fg(self, kind: str) -> str:
        return self.fates[kind][0]

    def bg(self, kind: str) -> str:
        return self.fates[kind][1]

    def ink(self, kind: str) -> str:
        """A fate's colour for words on the plot or the window (a verdict in a title): its
        text colour, or its background where that stands out more (black text in high
        contrast)."""
        fg, bg = self.fates[kind]
        return max((fg, bg), key=lambda c: contrast_ratio(c, self.plot_bg))


LIGHT = Theme(
    key="light", label="Light",
    window="#EFEFEF", base="#FFFFFF", text=INK, muted=GREY,
    fates={k: (FATES[k].foreground, FATES[k].background) for k in FATE_KINDS},
    p=P_COLOR, q=Q_COLOR, residual=RESIDUAL_COLOR, bonus=BONUS_COLOR, mark=MARK_COLOR,
    plot_bg="#FFFFFF", plot_axis=INK, plot_text=INK, plot_grid="#DDDDDD",
    line=BLUE, points=SKY_BLUE, expected=REDDISH_PURPLE, lookup=ORANGE, greyed="#C8C8C8",
    good="#006B4F", bad="#A03F00",
)

# Dark: the Okabe-Ito hues as light text on dark tints of themselves. p is the lightest bar
# here (it reads first, as the darkest does on white), q a mid blue.
DARK = Theme(
    key="dark", label="Dark",
    window="#1C1C1C", base="#121212", text="#EDEDED", muted="#B4B4B4",
    fates={"prompt": ("#B4B4B4", "#121212"),
           "accepted": ("#A6D8FF", "#0B3553"),
           "rejected": ("#FFB999", "#521C0C"),
           "resampled": ("#FFE680", "#625000"),
           "bonus": ("#86E8C8", "#0A3F31"),
           "target": ("#EDEDED", "#3A3A3A")},
    p="#E2D6FF", q="#3D8FD1", residual="#E69F00", bonus="#2BB38A", mark="#FF7A33",
    plot_bg="#121212", plot_axis="#D8D8D8", plot_text="#EDEDED", plot_grid="#3C3C3C",
    line="#56B4E9", points="#A6D8FF", expected="#E28FC0", lookup="#E69F00", greyed="#4A4A4A",
    good="#5FD3A8", bad="#FF9A66", disabled="#6B6B6B",
    error=("#FFD9C7", "#4F2410", "#FF7A33"), warning=("#FFE680", "#3A2F00", "#E69F00"),
)

# High contrast: black ground, white text, each fate a saturated block under black text
# (≥ 7:1), told apart by lightness as well as hue.
HIGH_CONTRAST = Theme(
    key="contrast", label="High contrast",
    window="#000000", base="#000000", text="#FFFFFF", muted="#E0E0E0",
    fates={"prompt": ("#E0E0E0", "#000000"),
           "accepted": ("#000000", "#6CC4FF"),
           "rejected": ("#000000", "#FF9E6B"),
           "resampled": ("#000000", "#FFF05A"),
           "bonus": ("#000000", "#3DF5B8"),
           "target": ("#000000", "#FFFFFF")},
    p="#FFFFFF", q="#3DA5F5", residual="#FFB000", bonus="#3DF5B8", mark="#FF7A33",
    plot_bg="#000000", plot_axis="#FFFFFF", plot_text="#FFFFFF", plot_grid="#5A5A5A",
    line="#6CC4FF", points="#FFFFFF", expected="#FF8CD2", lookup="#FFB000", greyed="#505050",
    good="#3DF5B8", bad="#FF9E6B", disabled="#7A7A7A",
    error=("#FFFFFF", "#000000", "#FF7A33"), warning=("#FFF05A", "#000000", "#FFF05A"),
)

THEMES: dict[str, Theme] = {t.key: t for t in (LIGHT, DARK, HIGH_CONTRAST)}
SETTINGS_KEY = "view/theme"


def palette(theme: Theme) -> QPalette:
    """A Qt palette in the theme's colours (light: an empty one, so the platform's shows)."""
    pal = QPalette()
    if theme.key == LIGHT.key:
        return pal
    role, group = QPalette.ColorRole, QPalette.ColorGroup
    raised = QColor(theme.window).lighter(135 if theme.key == "dark" else 100)
    for r, c in ((role.Window, theme.window), (role.WindowText, theme.text),
                 (role.Base, theme.base), (role.AlternateBase, theme.window),
                 (role.Text, theme.text), (role.Button, raised.name()),
                 (role.ButtonText, theme.text), (role.BrightText, theme.text),
                 (role.ToolTipBase, theme.base), (role.ToolTipText, theme.text),
                 (role.PlaceholderText, theme.muted), (role.Highlight, theme.line),
                 (role.HighlightedText, theme.base), (role.Link, theme.line),
                 (role.Light, theme.muted), (role.Midlight, theme.muted),
                 (role.Mid, theme.plot_grid), (role.Dark, theme.plot_grid),
                 (role.Shadow, "#000000")):
        pal.setColor(r, QColor(c))
    for r in (role.WindowText, role.Text, role.ButtonText):
        pal.setColor(group.Disabled, r, QColor(theme.disabled))
    # A disabled button is flat (the window's colour), an enabled one raised.
    pal.setColor(group.Disabled, role.Button, QColor(theme.window))
    return pal


def check_box_palette(theme: Theme) -> QPalette:
    """A check box's palette: the platform style (Fusion) draws the box's outline in the
    window colour darkened, invisible on black (high contrast) and faint elsewhere; here the
    "window" it darkens is the text colour, so the box shows at ≥ 3:1 in every theme."""
    pal = palette(theme)
    role, group = QPalette.ColorRole, QPalette.ColorGroup
    for g in (group.Active, group.Inactive):
        pal.setColor(g, role.Window, QColor(theme.text))
    pal.setColor(group.Disabled, role.Window, QColor(theme.disabled))
    # Its own ground stays the panel's: a check box paints none (autoFillBackground off).
    return pal


def mark_check_boxes(root: QWidget, theme: Theme) -> None:
    """Every check box under ``root`` with its box visible in ``theme``."""
    from PySide6.QtWidgets import QCheckBox

    for box in root.findChildren(QCheckBox):
        box.setPalette(check_box_palette(theme))


def apply_palette(widget: QWidget, theme: Theme) -> None:
    """The theme's palette on ``widget`` and (by Qt's propagation) its children."""
    widget.setPalette(palette(theme))
    widget.setAutoFillBackground(theme.key != LIGHT.key or widget.autoFillBackground())


def style_plot(plot: Any, theme: Theme) -> None:
    """A pyqtgraph PlotItem's axes (lines, ticks, tick labels) in the theme's ink."""
    import pyqtgraph as pg

    for name in ("left", "bottom", "right", "top"):
        axis = plot.getAxis(name)
        axis.setPen(pg.mkPen(theme.plot_axis))
        axis.setTextPen(pg.mkPen(theme.plot_text))


def theme_named(key: object) -> Theme:
    """The theme saved under ``key`` (anything unknown: light)."""
    return THEMES.get(str(key), LIGHT)


# -- the checks ------------------------------------------------------------------------------

def _rgb(color: str) -> tuple[float, float, float]:
    c = color.lstrip("#")
    return int(c[0:2], 16) / 255, int(c[2:4], 16) / 255, int(c[4:6], 16) / 255


def _linear(v: float) -> float:
    return v / 12.92 if v <= 0.04045 else ((v + 0.055) / 1.055) ** 2.4


def luminance(color: str) -> float:
    """WCAG 2 relative luminance of an sRGB colour."""
    r, g, b = (_linear(v) for v in _rgb(color))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast_ratio(a: str, b: str) -> float:
    """WCAG 2 contrast ratio, 1 to 21 (4.5 for normal text at AA, 7 at AAA)."""
    la, lb = sorted((luminance(a), luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


# Machado et al. 2009, severity 1.0, on linear RGB.
CVD: dict[str, tuple[tuple[float, float, float], ...]] = {
    "protanopia": ((0.152286, 1.052583, -0.204868), (0.114503, 0.786281, 0.099216),
                   (-0.003882, -0.048116, 1.051998)),
    "deuteranopia": ((0.367322, 0.860646, -0.227968), (0.280085, 0.672501, 0.047413),
                     (-0.011820, 0.042940, 0.968881)),
    "tritanopia": ((1.255528, -0.076749, -0.178779), (-0.078411, 0.930809, 0.147602),
                   (0.004733, 0.691367, 0.303900)),
}


def _lab(linear: tuple[float, float, float]) -> tuple[float, float, float]:
    r, g, b = (min(1.0, max(0.0, v)) for v in linear)
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883

    def f(t: float) -> float:
        return t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116

    fx, fy, fz = f(x), f(y), f(z)
    return 116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)


def seen_as(color: str, vision: str = "normal") -> tuple[float, float, float]:
    """CIELAB of ``color`` as seen with normal vision or one of the CVD kinds."""
    lin = tuple(_linear(v) for v in _rgb(color))
    if vision != "normal":
        m = CVD[vision]
        lin = tuple(sum(m[i][j] * lin[j] for j in range(3)) for i in range(3))
    return _lab(lin)  # type: ignore[arg-type]


def distance(a: str, b: str, vision: str = "normal") -> float:
    """ΔE (CIE76) between two colours as someone with ``vision`` sees them."""
    return math.dist(seen_as(a, vision), seen_as(b, vision))


MIN_TEXT_CONTRAST = {"light": 4.5, "dark": 4.5, "contrast": 7.0}
MIN_DISTANCE = 12.0  # ΔE between any two fates (or bars, or lines) under each vision
# ΔE of a colour from the ground it stands on: the light theme's pale tints are close to
# white for a protanope (bonus: 9); their decorations (gui/look/style.py) carry them as well.
MIN_GROUND = 8.0


def contrast_problems(theme: Theme) -> list[str]:
    """Fate text on its background (and the plain text on the window) below the minimum."""
    need = MIN_TEXT_CONTRAST.get(theme.key, 7.0 if "contrast" in theme.key else 4.5)
    pairs = [(f"{k} text on its background", *theme.fates[k]) for k in FATE_KINDS]
    pairs += [("text on the window", theme.text, theme.window),
              ("text on the stream", theme.text, theme.base),
              ("captions on the window", theme.muted, theme.window),
              ("plot text on the plot", theme.plot_text, theme.plot_bg),
              # Verdict words in the bar panels' titles are fate colours on the plot.
              *((f"{k} word on the plot", theme.ink(k), theme.plot_bg) for k in STREAM_KINDS),
              ("error banner", *theme.error[:2]), ("warning banner", *theme.warning[:2])]
    return [f"{theme.key}: {what} {contrast_ratio(a, b):.2f}:1 < {need}:1"
            for what, a, b in pairs if contrast_ratio(a, b) < need]


def groups(theme: Theme) -> dict[str, dict[str, str]]:
    """Colours that must be told apart from each other, by what they are."""
    return {
        # Target-alone tokens come only in a baseline run, never beside the others.
        "fate backgrounds": {k: theme.bg(k) for k in SPECULATIVE_KINDS},
        "bars": {"p": theme.p, "q": theme.q, "residual": theme.residual, "bonus": theme.bonus},
        "acceptance lines": {"total": theme.line, "per round": theme.points,
                             "i.i.d.": theme.expected},
        "drafters": {"model": theme.q, "lookup": theme.lookup},
    }


def distinguishability_problems(theme: Theme, minimum: float = MIN_DISTANCE) -> list[str]:
    """Pairs of colours in a group closer than ``minimum`` ΔE for some kind of vision.

    Fates stand on the window too (a fate's tint is never the ground it sits on), and bars
    and lines must stand out from the plot.
    """
    problems = []
    for vision in VISIONS:
        for name, colours in groups(theme).items():
            items = list(colours.items())
            for i, (ka, a) in enumerate(items):
                for kb, b in items[i + 1:]:
                    d = distance(a, b, vision)
                    if d < minimum:
                        problems.append(f"{theme.key} {name}: {ka} / {kb} ΔE {d:.1f} "
                                        f"({vision})")
                ground = theme.base if name == "fate backgrounds" else theme.plot_bg
                d = distance(a, ground, vision)
                if d < MIN_GROUND:
                    problems.append(f"{theme.key} {name}: {ka} on its ground ΔE {d:.1f} "
                                    f"({vision})")
    return problems


__all__ = ["DARK", "HIGH_CONTRAST", "LIGHT", "SETTINGS_KEY", "THEMES", "Theme", "Themes",
           "contrast_problems", "contrast_ratio", "distance", "distinguishability_problems",
           "check_box_palette", "lenience_style", "luminance", "mark_check_boxes",
           "prompt_style", "seen_as", "theme_named"]


# -- the window's View → Theme menu ----------------------------------------------------------

CYCLE_KEY = "Ctrl+Shift+T"  # next theme: works in presentation mode, where menus are hidden


def prompt_style(theme: Theme) -> str:
    """The prompt box's frame: the text colour on the window (high contrast's black-on-black
    box showed no edge at all, so the prompt did not look like a place to type)."""
    return (f"QPlainTextEdit {{ border: 2px solid {theme.text}; background: {theme.base}; "
            f"color: {theme.text}; padding: 2px; }}")


def lenience_style(theme: Theme) -> str:
    """The "B < 1" note's own style sheet (#A03F00 is 2.7:1 on the dark window)."""
    return (f"color: {theme.ink('rejected') if theme is not LIGHT else '#A03F00'};"
            " font-weight: bold")


class Themes(QObject):
    """View → Theme (Light / Dark / High contrast) on a main window, remembered in ``store``,
    and Ctrl+Shift+T for the next one (the menu bar is hidden while presenting).

    It paints the window's palette and check boxes; the views follow :attr:`changed`.
    """

    changed = Signal(object)  # Theme, just applied

    def __init__(self, window: QMainWindow, store: QSettings) -> None:
        super().__init__(window)
        self.window, self.store = window, store
        self.current: Theme = LIGHT
        menus = {m.title().replace("&", ""): m for m in
                 (a.menu() for a in window.menuBar().actions()) if m is not None}
        view_menu = menus.get("View") or window.menuBar().addMenu("&View")
        menu = view_menu.addMenu("&Theme")
        group = QActionGroup(window)
        group.setExclusive(True)
        self.actions: dict[str, QAction] = {}
        for theme in THEMES.values():
            action = QAction(theme.label, window)
            action.setCheckable(True)
            action.triggered.connect(lambda _=False, t=theme: self.choose(t))
            group.addAction(action)
            menu.addAction(action)
            self.actions[theme.key] = action
        cycle = QAction("Next theme", window)
        cycle.setShortcut(QKeySequence(CYCLE_KEY))
        cycle.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        cycle.triggered.connect(self.cycle)
        menu.addSeparator()
        menu.addAction(cycle)
        window.addAction(cycle)  # a shortcut of the window: menus hidden, it still works
        self.actions["next"] = cycle

    def restore(self) -> None:
        """The theme ``store`` remembers (after the views listen to :attr:`changed`)."""
        saved = theme_named(self.store.value(SETTINGS_KEY, LIGHT.key))
        self.actions[saved.key].setChecked(True)
        if saved is not LIGHT:
            self.apply(saved)
        else:
            mark_check_boxes(self.window, LIGHT)  # the platform's own box is faint (2.2:1) too

    def apply(self, theme: Theme) -> None:
        """``theme`` on the window (palette, check boxes, the menu's tick), then the views."""
        self.current = theme
        apply_palette(self.window, theme)
        mark_check_boxes(self.window, theme)
        self.actions[theme.key].setChecked(True)
        self.changed.emit(theme)

    def choose(self, theme: Theme) -> None:
        """Apply ``theme`` and remember it."""
        self.apply(theme)
        self.store.setValue(SETTINGS_KEY, theme.key)

    def cycle(self) -> None:
        """The next theme (Ctrl+Shift+T)."""
        keys = list(THEMES)
        self.choose(THEMES[keys[(keys.index(self.current.key) + 1) % len(keys)]])

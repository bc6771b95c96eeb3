"""Palette, fonts and token labels shared by every view (readable from the back of a room)."""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtGui import QColor, QFont, QTextCharFormat

# Okabe-Ito colours (safe for the common colour-vision deficiencies). Each fate also has
# a decoration that does not depend on hue at all: strike-through, underline, bold+overline.
BLUE = "#0072B2"
VERMILLION = "#D55E00"
ORANGE = "#E69F00"
BLUISH_GREEN = "#009E73"
SKY_BLUE = "#56B4E9"
REDDISH_PURPLE = "#CC79A7"
GREY = "#595959"
INK = "#111111"


@dataclass(frozen=True)
class Fate:
    """How one kind of token looks in the stream and in the legend."""

    key: str
    label: str
    foreground: str  # text colour (dark enough for contrast on its background)
    background: str  # light tint behind the token: a solid area a projector shows well
    strike: bool = False
    underline: bool = False
    bold: bool = False
    overline: bool = False
    italic: bool = False
    help: str = ""


FATES: dict[str, Fate] = {
    "prompt": Fate("prompt", "prompt", "#5E5E5E", "#FFFFFF", help="the text you gave"),
    "accepted": Fate("accepted", "accepted draft", "#00507D", "#CCE3F4",
                     help="drafted by q, kept by p (r < min(1, p/q))"),
    "rejected": Fate("rejected", "rejected draft", "#9C3D00", "#F7CDBA", strike=True,
                     help="drafted by q, refused by p: shown, then struck through"),
    "resampled": Fate("resampled", "resampled", "#574000", "#FFF0A0", underline=True,
                      help="drawn from norm(max(0, p − q)) after a rejection"),
    "bonus": Fate("bonus", "bonus", "#005C43", "#C6EDE1", bold=True, overline=True,
                  help="all K drafts kept: one more token from p for free"),
    "target": Fate("target", "target alone", "#222222", "#E3E3E3", italic=True,
                   help="baseline: one target forward pass per token"),
}
STREAM_KINDS = ("accepted", "rejected", "resampled", "bonus", "target")

# Bars: p (target) and q (draft), and the residual distribution.
P_COLOR = "#3B2A8F"  # dark violet: darkest bar, so p reads first even in greyscale
Q_COLOR = SKY_BLUE
RESIDUAL_COLOR = ORANGE
BONUS_COLOR = BLUISH_GREEN
MARK_COLOR = VERMILLION

STREAM_POINT_SIZE = 20  # token stream: readable from the back of a room
UI_POINT_SIZE = 12
PLOT_POINT_SIZE = 13


def char_format(kind: str, point_size: float = STREAM_POINT_SIZE,
                colors: tuple[str, str] | None = None) -> QTextCharFormat:
    """The character format of a token of one fate in the stream (``colors``: a theme's
    (text, background) for it; default the light theme's)."""
    fate = FATES[kind]
    foreground, background = colors or (fate.foreground, fate.background)
    fmt = QTextCharFormat()
    fmt.setForeground(QColor(foreground))
    if kind != "prompt":
        fmt.setBackground(QColor(background))
    fmt.setFontPointSize(point_size)
    fmt.setFontStrikeOut(fate.strike)
    fmt.setFontUnderline(fate.underline)
    if fate.underline:
        fmt.setUnderlineStyle(QTextCharFormat.UnderlineStyle.SingleUnderline)
        fmt.setUnderlineColor(QColor(foreground))
    fmt.setFontOverline(fate.overline)
    fmt.setFontItalic(fate.italic)
    fmt.setFontWeight(QFont.Weight.Bold if fate.bold else QFont.Weight.Normal)
    return fmt


def configure_plots() -> None:
    """pyqtgraph on white with dark ink: high contrast on a projector."""
    import pyqtgraph as pg

    pg.setConfigOptions(background="w", foreground=INK, antialias=True)


_VISIBLE = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"}


def token_label(text: str, limit: int = 12) -> str:
    """A token's text made visible: spaces as ␣, newlines as ↵, CJK kept; long ones cut."""
    if text == "":
        return "∅"
    shown = "".join(_VISIBLE.get(ch, ch if ch.isprintable() else f"⟨{ord(ch):02X}⟩")
                    for ch in text)
    shown = shown.replace("⟩⟨", " ")  # byte pieces ⟨E4⟩⟨BD⟩ -> ⟨E4 BD⟩: shorter, same meaning
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def special_marker(appended: str, own: str) -> str:
    """Text to draw for a token that adds nothing: EOS and other specials get a visible mark.

    The first half of a split multi-byte character also adds "", but its own text is a byte
    piece like ⟨E4⟩: it stays invisible, and the character appears with the next token.
    """
    if appended or not own or "⟨" in own:
        return appended
    return f"⟨{own}⟩"


def with_newline_marks(text: str) -> str:
    """A token holding a newline gets a visible ↵ before the break, so its colour shows."""
    return text.replace("\r", "").replace("\n", "↵\n")


def inline_rejected(text: str) -> str:
    """A rejected draft shown inline: newlines as ↵ so a refused guess never breaks a line."""
    return text.replace("\n", "↵").replace("\r", "")


def fmt_prob(x: float | None) -> str:
    """Probabilities with three decimals; tiny ones in scientific notation."""
    if x is None:
        return "—"
    if x != 0 and abs(x) < 0.001:
        return f"{x:.1e}"
    return f"{x:.3f}"

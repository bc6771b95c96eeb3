"""Help → Glossary: what accepted / rejected / resampled / bonus, α, c, v and K mean, in the
project's words (p = target, q = draft), in a window that reads from the back of a room."""

from __future__ import annotations

from html import escape
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QFont, QKeySequence
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QMenu, QTextBrowser, QVBoxLayout, QWidget

from specviz.gui.look.style import FATES, STREAM_KINDS, UI_POINT_SIZE
from specviz.gui.look.themes import LIGHT, Theme

# (term, meaning). Each fate's colour is drawn as in the stream (the term is its sample).
FATE_MEANINGS = {
    "accepted": "a draft token the target kept: the draw r fell below min(1, p/q).",
    "rejected": "a draft token the target turned down (r ≥ min(1, p/q)); struck through. "
                "Drafts after it in the round are discarded, never tested.",
    "resampled": "the token drawn in place of the rejected draft, from the residual "
                 "norm(max(0, p − q)): what p wants that q over-proposed.",
    "bonus": "every draft of the round was kept, so the same target pass gives one more "
             "token, drawn from p at position K + 1.",
    "target": "a token of the target alone (the baseline run): one target pass per token.",
}

TERMS = (
    ("p, q", "p is the target model's probability of a token, q the draft model's. The "
             "output follows p exactly; q only proposes."),
    ("K", "how many tokens the draft proposes in a round. Fixed, or chosen each round by "
          "the heuristic or the cost policy (the K / round plot)."),
    ("round", "the draft proposes K tokens; the target scores all K + 1 positions in one "
              "pass; the drafts are tested in order until the first rejection."),
    ("r", "a uniform draw in [0, 1) per tested draft; kept if r < min(1, p/q)."),
    ("α", "the share of tested drafts kept: P(draft kept | tested). Drafts after a "
          "rejection are never tested and do not count. A run with tree rounds shows it "
          "per position: each depth of a tree counts once, kept if any draft there was "
          "kept, so it compares with a chain's; the siblings tested beside a position's "
          "first draft are counted apart (under α, and in its tooltip)."),
    ("c", "the cost ratio: one draft pass ÷ one target step (the target's one-token step, "
          "timed when the pair loaded)."),
    ("v", "one verify pass (the target scoring K + 1 positions) ÷ one target step; above 1 "
          "on a CPU, where a wider pass costs more."),
    ("expected speedup", "E[tokens / round] ÷ (K·c + v), with E = (1 − α^(K+1)) / (1 − α) "
                         "under i.i.d. acceptance."),
    ("measured speedup", "tokens / s of this run ÷ tokens / s of the target alone (a race, "
                         "F7), or ÷ 1 / (the target's step). Measured, never estimated; time "
                         "paused or waiting for Step is left out."),
    ("kept by position", "at each draft position 1…K, drafts kept ÷ drafts tested there. "
                         "Conditional on reaching the position: position 3 is tested only "
                         "when 1 and 2 were kept, so a late position may score high on few "
                         "rounds."),
    ("lookup drafter", "drafts by copying what followed the last n tokens earlier in the "
                       "text (dotted underline); q is then one-hot."),
)


def fate_sample(kind: str, theme: Theme = LIGHT) -> str:
    """A fate's name drawn as the stream draws it (colour and decoration)."""
    f = FATES[kind]
    fg, bg = theme.fates[kind]
    deco = " ".join(d for d, on in (("line-through", f.strike), ("underline", f.underline),
                                    ("overline", f.overline)) if on) or "none"
    return (f"<span style='color:{fg}; background:{bg}; text-decoration:{deco}; "
            f"font-weight:{'900' if f.bold else '700'};"
            f"{' font-style:italic;' if f.italic else ''}'>&nbsp;{escape(f.label)}&nbsp;</span>")


def legend_tooltip() -> str:
    """The legend's tooltip: what each fate means, and where the whole glossary is."""
    lines = [f"<b>{escape(FATES[k].label)}</b>: {escape(FATE_MEANINGS[k])}"
             for k in STREAM_KINDS]
    return "<br>".join([*lines, "Help → Glossary (F1): α, c, v, K and the plots."])


def glossary_html(theme: Theme = LIGHT) -> str:
    """The glossary as one page: the token fates first, then the letters and figures."""
    rows = [f"<tr><td style='padding:6px 14px 6px 0; white-space:nowrap'>"
            f"{fate_sample(kind, theme)}</td><td style='padding:6px 0'>"
            f"{escape(FATE_MEANINGS[kind])}</td></tr>" for kind in STREAM_KINDS]
    rows += [f"<tr><td style='padding:6px 14px 6px 0; white-space:nowrap'><b>{escape(term)}"
             f"</b></td><td style='padding:6px 0'>{escape(meaning)}</td></tr>"
             for term, meaning in TERMS]
    return (f"<div style='color:{theme.text}'><h2>Glossary</h2>"
            "<p>Speculative decoding: a small draft model q proposes, the large target p "
            "checks all proposals in one pass, and the output follows p exactly.</p>"
            f"<table>{''.join(rows)}</table></div>")


class GlossaryDialog(QDialog):
    """The glossary in a window of its own (F1), in the app's large type; zoom and themes
    reach it through its font and palette."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("specviz — glossary")
        self.browser = QTextBrowser()
        font = QFont()
        font.setPointSize(UI_POINT_SIZE + 2)
        self.browser.setFont(font)
        self.browser.setOpenLinks(False)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.close)
        layout = QVBoxLayout(self)
        layout.addWidget(self.browser, 1)
        layout.addWidget(buttons)
        self.set_theme(LIGHT)
        self.resize(1000, 760)

    def set_theme(self, theme: Theme) -> None:
        self.browser.setHtml(glossary_html(theme))


def show_glossary(window: Any) -> GlossaryDialog:
    """Open (or raise) the window's glossary, in its current theme, at most the window's size."""
    dialog = getattr(window, "glossary", None)
    if dialog is None:
        dialog = window.glossary = GlossaryDialog(window)
    dialog.set_theme(getattr(window, "theme", LIGHT))
    screen = window.screen().availableGeometry() if window.screen() is not None else None
    if screen is not None:  # fits 1366 × 768 (the text scrolls if the type is large)
        dialog.resize(min(1000, screen.width() - 40), min(760, screen.height() - 80))
    dialog.show()
    dialog.raise_()
    return dialog


def install_help(window: Any) -> QMenu:
    """Help → Glossary (F1) on the window's menu bar."""
    menu = window.menuBar().addMenu("&Help")
    action = QAction("Glossary: accepted, rejected, resampled, bonus, α, c, v… (F1)", window)
    action.setShortcut(QKeySequence("F1"))
    action.setShortcutContext(Qt.ShortcutContext.ApplicationShortcut)
    action.triggered.connect(lambda: show_glossary(window))
    menu.addAction(action)
    window.addAction(action)
    window.glossary_action = action
    return menu


__all__ = ["FATE_MEANINGS", "TERMS", "GlossaryDialog", "glossary_html", "install_help",
           "legend_tooltip", "show_glossary"]

"""Demo prompts: one click gives a prompt where the bundled pair shows a typical behaviour."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMenu, QWidget

from specviz.core.presets import DEFAULT_PROMPT


@dataclass(frozen=True)
class Demo:
    title: str
    prompt: str
    note: str  # what to expect (the menu item's tooltip and the status line)


# The figures in the notes: bundled pair, CLI defaults (K 4, greedy T 0, chat template), seed 0,
# 48 new tokens: specviz-cli --json --max-new-tokens 48 --prompt ... [--drafter lookup].


PARAGRAPH = (
    "Speculative decoding speeds up text generation from a large language model. A small "
    "draft model proposes several tokens ahead, and the large target model checks all of "
    "them in a single forward pass. Each proposed token is kept with probability "
    "min(1, p/q), where p is the target's probability and q the draft's. At the first "
    "rejection, a replacement token is drawn from the normalised residual max(0, p - q), "
    "so the output follows exactly the target's distribution. When every proposal is kept, "
    "the target adds one bonus token for free. The speed-up depends on how often the draft "
    "agrees with the target and on how cheap the draft is compared with the target."
)

DEMOS = (
    Demo("High acceptance: the water cycle", DEFAULT_PROMPT,
         "common facts in plain English: long accepted runs (measured: acceptance 0.41, "
         "2.5 tokens per round)"),
    Demo("Low acceptance: rhyming puzzle",
         "Write a four-line poem about a quantum physicist's cat, in which every line rhymes "
         "with 'orange' and the third word of each line starts with Z.",
         "odd constraints: many rejections and resamples (measured: acceptance 0.20, "
         "1.8 tokens per round)"),
    Demo("Chinese: 水循环 (water cycle)", "请用三句话解释水循环。",
         "Chinese: multi-byte tokens and split characters; the small pair is weak here "
         "(measured: acceptance 0.17, 1.7 tokens per round)"),
    Demo("Copy from the prompt: summarise a paragraph",
         "Summarise this paragraph, reusing its wording:\n\n" + PARAGRAPH,
         "the answer repeats the prompt's phrases: choose the lookup or hybrid drafter "
         "(measured acceptance: model 0.04, lookup 0.20, hybrid 0.18)"),
)


def choose(window: Any, chosen: Demo) -> str:
    """Put ``chosen`` in the prompt box for the next run and say so in the status line.

    During a run the run goes on with its own prompt; during a replay the recording's
    settings are released first (else the replay would put the old prompt back when it ends).
    Returns what the status line says.
    """
    if window.controls.showing_recording:
        window.replayer.stop()  # the user's settings back, editable
    window.controls.prompt.setPlainText(chosen.prompt)
    if window.controller.state != "idle":
        message = (f"Demo prompt “{chosen.title}” set for the next run (this run keeps its "
                   f"prompt; Run, F5, starts it): {chosen.note}")
    else:
        message = f"Demo prompt “{chosen.title}” set: press Run (F5). {chosen.note}"
    window.status_label.setText(message)
    return message


def add_menu(window: QWidget, menu: QMenu, choose: callable) -> list[QAction]:  # type: ignore[valid-type]
    """One action per demo prompt; ``choose(demo)`` puts it in the prompt box."""
    actions = []
    for demo in DEMOS:
        action = QAction(demo.title, window)
        action.setToolTip(demo.note)
        action.setStatusTip(demo.note)
        action.triggered.connect(lambda _=False, d=demo: choose(d))
        menu.addAction(action)
        actions.append(action)
    menu.setToolTipsVisible(True)
    return actions

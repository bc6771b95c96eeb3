"""Exports are valid: PNGs of the requested size, SVGs that parse, HTML with every token and
its class, an animation with one frame per moment."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest
from PIL import Image
from PySide6.QtGui import QImage

from specviz.gui import export
from specviz.gui.export import (
    export_acceptance,
    export_animation,
    export_bars,
    export_transcript,
    projector_scale,
    render_widget,
    transcript_html,
)
from specviz.gui.style import FATES
from tests.gui.scripted import EXPECTED_TOKENS, PROMPT, baseline_events, speculative_events
from tests.mutation import mutant

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support propagateSizeHints")


def colours(image: QImage, step: int = 4) -> set[int]:
    return {image.pixel(x, y) & 0xFFFFFF for y in range(0, image.height(), step)
            for x in range(0, image.width(), step)}


@pytest.mark.parametrize("size", [(1920, 1080), (800, 450)])
def test_bars_png_has_the_requested_size(qtbot, tmp_path: Path, size: tuple[int, int]) -> None:
    rnd = speculative_events()[1]
    path = export_bars(rnd, tmp_path / "bars.png", size)
    image = QImage(str(path))
    assert (image.width(), image.height()) == size
    assert len(colours(image)) > 20  # bars, labels, titles: not a blank page


def test_bars_and_acceptance_svg_parse(qtbot, tmp_path: Path) -> None:
    svg = export_bars(speculative_events()[1], tmp_path / "bars.svg")
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg")
    texts = "".join(t.text or "" for t in root.iter() if t.tag.endswith("text"))
    assert "␣dog" in texts and "␣cat" in texts  # the candidates' labels
    svg = export_acceptance(speculative_events(), tmp_path / "acceptance.svg")
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg") and len(list(root.iter())) > 50


def test_acceptance_png_has_the_requested_size(qtbot, tmp_path: Path) -> None:
    path = export_acceptance(speculative_events(), tmp_path / "acceptance.png", (1280, 720))
    image = QImage(str(path))
    assert (image.width(), image.height()) == (1280, 720)
    assert len(colours(image)) > 20


def test_projector_fonts() -> None:
    # At 1920 px wide a view is drawn 1.5× its size: 20 pt stream text (26.7 px at 96 dpi)
    # comes out at 40 px, 12 pt labels (16 px) at 24 px.
    assert projector_scale(1920) == 1.5
    assert projector_scale(3840) == 3.0


class Spans(HTMLParser):
    """Collects (classes, title, text) of every token span."""

    def __init__(self) -> None:
        super().__init__()
        self.spans: list[tuple[list[str], str, str]] = []
        self._open: tuple[list[str], str] | None = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = dict(attrs)
        if tag == "span" and "tok" in (a.get("class") or "").split() and "title" in a:
            self._open = ((a["class"] or "").split(), a["title"] or "")
            self.spans.append((self._open[0], self._open[1], ""))

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            classes, title, text = self.spans[-1]
            self.spans[-1] = (classes, title, text + data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "span":
            self._open = None


def test_html_holds_every_token_with_its_class_and_figures(tmp_path: Path) -> None:
    path = export_transcript(speculative_events(), tmp_path / "run.html")
    page = path.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "<style>" in page  # standalone
    assert PROMPT in page
    parser = Spans()
    parser.feed(page)
    got = [(text, [c for c in classes if c != "tok"][0]) for classes, _, text in parser.spans]
    assert got == EXPECTED_TOKENS
    titles = [title for _, title, _ in parser.spans]
    # The rejected " sat" (round 1, position 3): p 0.1, q 0.5, min(1, p/q) 0.2, r 0.9.
    sat = titles[2]
    for figure in ("p = 0.100", "q = 0.500", "min(1, p/q) = 0.200", "r = 0.900", "rejected"):
        assert figure in sat
    assert "accepted" in titles[0] and "r = 0.200" in titles[0]
    assert "bonus" in titles[7] and "resampled" in titles[3]
    for kind in ("accepted", "rejected", "resampled", "bonus"):
        assert f".{kind} {{ color: {FATES[kind].foreground}" in page


def test_html_of_the_target_alone(tmp_path: Path) -> None:  # noqa: ARG001 - same signature
    parser = Spans()
    parser.feed(transcript_html(baseline_events()))
    assert [(t, c[-1]) for c, _, t in parser.spans] == [(" the", "target"), (" cat", "target"),
                                                          (" sat", "target")]


def test_animation_has_a_frame_per_round(qtbot, tmp_path: Path) -> None:
    path = tmp_path / "run.gif"
    n = export_animation(speculative_events(), path, size=(480, 270))
    with Image.open(path) as gif:
        assert gif.size == (480, 270)
        assert gif.n_frames == n == 5  # the prompt, then one per round (4)
        durations = []
        for i in range(gif.n_frames):
            gif.seek(i)
            durations.append(gif.info["duration"])
    assert durations == [100, 100, 100, 100, 4000]  # rounds end 0.1 s apart; the last holds


def test_a_race_animates_as_a_race(qtbot, tmp_path: Path) -> None:
    path = tmp_path / "race.gif"
    n = export_animation([*speculative_events(), *baseline_events()], path, size=(480, 270))
    # Moments: 0, then rounds end at 0.1, 0.2, 0.3 (both sides), 0.4, and the ends 0.3, 0.5.
    with Image.open(path) as gif:
        assert gif.n_frames == n == 6


def test_render_widget_draws_at_the_requested_size(qtbot) -> None:
    from specviz.gui.run_view import RunView

    view = RunView(frame_ms=1_000_000)
    qtbot.addWidget(view)
    image = render_widget(view, (960, 540))
    assert (image.width(), image.height()) == (960, 540)
    # Laid out as for 1920 × 1080 (1280 × 720 at scale 1.5), drawn at 0.75: the same slide.
    assert (view.width(), view.height()) == (1280, 720)
    assert len(colours(image)) > 5


MUTANTS = {
    "rejected drafts left out of the HTML": (
        "test_html_holds_every_token_with_its_class_and_figures", "transcript_tokens",
        [('elif d.status == "rejected":', 'elif False:')]),
    "tooltip without r": (
        "test_html_holds_every_token_with_its_class_and_figures", "Token",
        [("min(1, p/q) = {fmt_prob(d.ratio)} · r = {fmt_prob(d.r)} · {decision}",
          "min(1, p/q) = {fmt_prob(d.ratio)} · {decision}")]),
    "PNG at the exporter's own height": (
        "test_bars_png_has_the_requested_size", "export_graphics",
        [('params.param("height").setValue(size[1], blockSignal=image_exporter.heightChanged)',
          'params.param("height").setValue(size[1] + 7, '
          'blockSignal=image_exporter.heightChanged)')]),
    "one scale for every width": ("test_projector_fonts", "projector_scale",
                                  [("return PROJECTOR_SCALE * width / PROJECTOR[0]",
                                    "return PROJECTOR_SCALE")]),
    "a frame per float time, equal moments apart": (
        "test_a_race_animates_as_a_race", "animation_frames",
        [("moments = sorted({round(t, 6) for t in", "moments = sorted({t for t in")]),
    "laid out at the pixel size: small type": (
        "test_render_widget_draws_at_the_requested_size", "_offscreen",
        [("logical = (round(size[0] / scale), round(size[1] / scale))", "logical = size")]),
    "the target alone's tokens as resampled": (
        "test_html_of_the_target_alone", "transcript_tokens",
        [("tokens.append(Token(text, event.extra.kind, event.index, i, draft, event.extra))",
          'tokens.append(Token(text, "resampled", event.index, i, draft, event.extra))')]),
    "a race's transcript is the target alone": (
        "test_the_command_line_exports_without_a_model", "transcript_html",
        [("    if race is not None:\n        events = race.speculative.events\n", "")]),
    "no frame for the prompt": (
        "test_animation_has_a_frame_per_round", "animation_frames",
        [("if isinstance(event, Round) and not event.final or isinstance(event, RunStarted):",
          "if isinstance(event, Round) and not event.final:")]),
}


@pytest.mark.parametrize("name", list(MUTANTS))
def test_each_test_rejects_its_broken_variant(name: str, qtbot, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    test_name, attr, edits = MUTANTS[name]
    broken = mutant(getattr(export, attr), *edits)
    monkeypatch.setattr(export, attr, broken)
    monkeypatch.setitem(globals(), attr, broken)
    test = globals()[test_name]
    with pytest.raises(AssertionError):
        if test_name == "test_bars_png_has_the_requested_size":
            test(qtbot, tmp_path, (800, 450))
        elif test_name in ("test_html_holds_every_token_with_its_class_and_figures",
                           "test_html_of_the_target_alone"):
            test(tmp_path)
        elif test_name == "test_projector_fonts":
            test()
        elif test_name == "test_render_widget_draws_at_the_requested_size":
            test(qtbot)
        else:
            test(qtbot, tmp_path)


def test_the_command_line_exports_without_a_model(qtbot, tmp_path: Path) -> None:
    from specviz.core.events import to_json

    rec = tmp_path / "race.jsonl"
    rec.write_text("".join(to_json(e) + "\n" for e in [*speculative_events(),
                                                        *baseline_events()]), encoding="utf-8")
    assert export.main([str(rec), "--png", str(tmp_path / "end.png"), "--html",
                        str(tmp_path / "t.html"), "--size", "640x360"]) == 0
    image = QImage(str(tmp_path / "end.png"))
    assert (image.width(), image.height()) == (640, 360)
    page = (tmp_path / "t.html").read_text(encoding="utf-8")
    # Of a race, the speculative run: every token of it, none of the target alone's.
    assert page.count("data-round") == len(EXPECTED_TOKENS)
    assert 'class="tok target" data-round' not in page

"""Exports are valid: PNGs of the requested size, SVGs that parse, HTML with every token and
its class, an animation with one frame per moment."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest
from PIL import Image
from PySide6.QtGui import QImage

from specviz.gui.look.style import FATES
from specviz.gui.stage import export
from specviz.gui.stage.export import (
    export_acceptance,
    export_animation,
    export_bars,
    export_transcript,
    projector_scale,
    render_widget,
    transcript_html,
)
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
    from specviz.gui.views.run_view import RunView

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
        "test_a_race_animates_as_a_race", "plan_animation",
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
        "test_animation_has_a_frame_per_round", "plan_animation",
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


# -- the GIF export in the window: off the GUI thread, with progress, Cancel and close ----------
# (Rehearsal: exporting race.jsonl froze the window ~50 s and closing it did not stop it.)


def _window_with_a_run(qtbot, settings_store) -> object:
    from tests.gui.windows import tiny_window

    w = tiny_window(qtbot, settings_store, None)
    for event in speculative_events():
        w.run_view.apply(event)
    w.run_view.flush()
    return w


def _answer_save_dialogs(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every save dialog answers ``path`` (patched on the class: a mutant's copy of the
    module's functions sees it too)."""
    from PySide6.QtWidgets import QFileDialog

    monkeypatch.setattr(QFileDialog, "getSaveFileName",
                        staticmethod(lambda *a, **k: (str(path), "")))


def _start_gif(w, path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _answer_save_dialogs(path, monkeypatch)
    menu = next(a.menu() for a in w.menuBar().actions() if a.menu() is not None
                and a.menu().title() == "&File")
    export_menu = next(a.menu() for a in menu.actions() if a.menu() is not None)
    next(a for a in export_menu.actions() if a.text().startswith("Run as an animated GIF")
         ).trigger()


class Ticks:
    """Counts the turns of the event loop (a 0 ms timer fires once per turn)."""

    def __init__(self) -> None:
        from PySide6.QtCore import QTimer

        self.count = 0
        self.timer = QTimer()
        self.timer.setInterval(0)
        self.timer.timeout.connect(self._tick)
        self.timer.start()

    def _tick(self) -> None:
        self.count += 1


def test_the_event_loop_turns_between_the_frames_of_a_gif_export(
        qtbot, settings_store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    w = _window_with_a_run(qtbot, settings_store)
    path = tmp_path / "run.gif"
    ticks = Ticks()
    _start_gif(w, path, monkeypatch)
    # The menu's slot returns at once: nothing is drawn or written in it.
    assert not path.exists()
    job = w.stage.export_progress.job
    assert job.running and w.stage.export_progress.bar.isVisibleTo(w)
    assert w.stage.export_progress.cancel_button.isVisibleTo(w)
    seen: list[int] = []
    job.drawn.connect(lambda done, total: seen.append(ticks.count))
    before = ticks.count
    qtbot.waitUntil(lambda: not job.running, timeout=60_000)
    assert path.exists() and len(seen) == job.total == 5
    # Counted in turns of the loop, not seconds: other events ran before and between frames.
    assert all(b > a for a, b in zip([before, *seen], seen, strict=False)), seen
    assert "Exported" in w.status_label.text() and not w.stage.export_progress.bar.isVisibleTo(w)
    with Image.open(path) as gif:
        assert gif.n_frames == 5


@pytest.mark.parametrize("how", ["cancel", "close"])
def test_cancel_or_closing_the_window_stops_a_gif_export(
        how: str, qtbot, settings_store, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    w = _window_with_a_run(qtbot, settings_store)
    path = tmp_path / "run.gif"
    _start_gif(w, path, monkeypatch)
    job = w.stage.export_progress.job
    drawn: list[int] = []
    job.drawn.connect(lambda done, total: drawn.append(done))
    qtbot.waitUntil(lambda: len(drawn) >= 1, timeout=30_000)
    if how == "cancel":
        w.stage.export_progress.cancel_button.click()
    else:
        w.close()
    assert not job.running
    assert job.wait(10.0)  # the encoding thread ended
    stopped_at = len(drawn)
    qtbot.wait(50)
    assert len(drawn) == stopped_at < job.total  # no frame drawn after it
    assert not path.exists() and list(tmp_path.glob("*.gif")) == []
    if how == "cancel":
        assert "cancelled" in w.status_label.text()


def test_an_unwritable_path_is_one_message(qtbot, settings_store, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    w = _window_with_a_run(qtbot, settings_store)
    missing = tmp_path / "no such folder"
    _start_gif(w, missing / "run.gif", monkeypatch)
    assert "does not exist" in w.run_view.banner.text()
    assert not w.stage.export_progress.running
    # Save recording and Export transcript: one message each, the run still on screen.
    for path, act in ((missing / "run.jsonl", lambda p: w.save_recording(str(p))),
                      (missing / "t.html", None)):
        w.run_view.clear_error()
        if act is None:
            _answer_save_dialogs(path, monkeypatch)
            file_menu = next(a.menu() for a in w.menuBar().actions()
                             if a.menu() is not None and a.menu().title() == "&File")
            export_menu = next(a.menu() for a in file_menu.actions() if a.menu() is not None)
            next(a for a in export_menu.actions() if a.text().startswith("Coloured transcript")
                 ).trigger()
        else:
            act(path)
        assert "Could not write" in w.run_view.banner.text() and str(path) in \
            w.status_label.text()
    assert len(w.run_view.record.rounds) == 4  # nothing lost


def test_gif_frames_have_no_buttons_or_scroll_bars_and_whole_panels(qtbot) -> None:
    from specviz.core.events import RunStarted

    view = export._slide_run_view((1920, 1080))  # noqa: SLF001
    qtbot.addWidget(view)
    started, *rounds = speculative_events()
    export._run_frame(view, [started, *rounds], (1920, 1080))  # noqa: SLF001
    assert isinstance(started, RunStarted)
    assert not view.follow_button.isVisible()
    assert not view.stream.verticalScrollBar().isVisible()
    bar = view.bars.scroll.verticalScrollBar()
    assert not bar.isVisible() and bar.maximum() == 0  # every p/q panel whole: no axis cut


def test_the_gif_speed_card_uses_the_figure_the_window_measured(qtbot) -> None:
    from specviz.gui.views.run_view import RunView

    window_view = RunView(frame_ms=1_000_000)
    qtbot.addWidget(window_view)
    window_view.set_target_step("tiny-target", "cpu", 0.08)
    for event in speculative_events():
        window_view.apply(event)
    window_view.flush()
    shown = window_view.speed.values["measured_speedup"].text()
    assert shown.endswith("×")
    view = export._slide_run_view((960, 540), reference=window_view)  # noqa: SLF001
    qtbot.addWidget(view)
    export._run_frame(view, speculative_events(), (960, 540))  # noqa: SLF001
    assert view.speed.values["measured_speedup"].text() == shown


def test_headers_say_the_k_policy_and_the_range_used() -> None:
    from dataclasses import replace

    started, *rest = speculative_events()
    cost = replace(started, settings=replace(started.settings, k_policy="cost"))
    page = transcript_html([cost, *rest])
    assert "K by the cost policy (K\u00a02–3 used)" in page and "K = 3" not in page
    assert "K\u00a0=\u00a03" in transcript_html(speculative_events())


GIF_MUTANTS = {
    # The old behaviour: the menu's slot drew and encoded every frame before returning.
    "synchronous export": (
        "test_the_event_loop_turns_between_the_frames_of_a_gif_export", "stage",
        "build_export_menu",
        [("progress.start(list(source), path, reference=window.run_view)",
          "export.export_animation(list(source), path)")]),
    # (Every frame drawn in one slot is no variant of this test's: drawing a widget offscreen
    # processes events, so the loop turns; what froze the window was the encoding.)
    "closing the window leaves the export running": (
        "close", "stage", "ExportProgress",
        [("            self.cancel()  # closing", "            pass  #")]),
    "cancel lets the encoder write what it has": (
        "cancel", "export", "AnimationJob",
        [("        self._stop.set()  # before", "        pass  # before")]),
    "transcript written without a check": (
        "test_an_unwritable_path_is_one_message", "stage", "build_export_menu",
        [("if path and write_file(window, path, export.transcript_html(events())):",
          "if path and export.export_transcript(events(), path):")]),
    "frames keep the scroll bars and cut panels": (
        "test_gif_frames_have_no_buttons_or_scroll_bars_and_whole_panels", "export",
        "_slide_run_view", [("    view.set_presenting(True)", "    pass")]),
    "the speed card forgets the window's reference": (
        "test_the_gif_speed_card_uses_the_figure_the_window_measured", "export",
        "_slide_run_view", [("    if reference is not None:", "    if False:")]),
}


@pytest.mark.parametrize("name", list(GIF_MUTANTS))
def test_the_gif_export_tests_reject_their_broken_variants(
        name: str, qtbot, settings_store, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from specviz.gui.stage import stage

    test_name, module_name, attr, edits = GIF_MUTANTS[name]
    module = {"stage": stage, "export": export}[module_name]
    monkeypatch.setattr(module, attr, mutant(getattr(module, attr), *edits))
    rejected = False
    with qtbot.capture_exceptions() as raised_in_qt:  # a slot's traceback counts as a failure
        try:
            if test_name in ("cancel", "close"):
                test_cancel_or_closing_the_window_stops_a_gif_export(
                    test_name, qtbot, settings_store, tmp_path, monkeypatch)
            elif test_name.startswith(("test_gif_frames", "test_the_gif")):
                globals()[test_name](qtbot)
            else:
                globals()[test_name](qtbot, settings_store, tmp_path, monkeypatch)
        except (AssertionError, AttributeError):
            rejected = True
    assert rejected or raised_in_qt


# -- the command line: bad input is one line on stderr and exit code 2, never a traceback ------


@pytest.mark.parametrize("case", ["missing recording", "truncated recording",
                                  "unwritable gif", "unwritable html", "bad size", "no run"])
def test_the_command_line_refuses_bad_input_in_one_line(case: str, qtbot, tmp_path: Path,
                                                        capsys) -> None:
    from specviz.core.events import to_json

    good = tmp_path / "run.jsonl"
    text = "".join(to_json(e) + "\n" for e in speculative_events())
    good.write_text(text, encoding="utf-8")
    cut = tmp_path / "cut.jsonl"
    cut.write_text(text[: len(text) // 2 + 7], encoding="utf-8")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("", encoding="utf-8")
    nowhere = tmp_path / "no such folder"
    argv = {"missing recording": [str(tmp_path / "absent.jsonl"), "--html", str(tmp_path / "t")],
            "truncated recording": [str(cut), "--html", str(tmp_path / "t.html")],
            "unwritable gif": [str(good), "--gif", str(nowhere / "run.gif")],
            "unwritable html": [str(good), "--html", str(nowhere / "t.html")],
            "bad size": [str(good), "--size", "big"],
            "no run": [str(empty), "--html", str(tmp_path / "t.html")]}[case]
    try:
        code = export.main(argv)
    except SystemExit as exc:  # argparse's own refusals (exit 2)
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err and "error:" in lines[-1]
    assert sum("error" in line for line in lines) == 1  # argparse prints its usage first
    assert not (nowhere.exists() or (tmp_path / "t.html").exists())


def test_the_old_command_line_tracebacks_are_rejected(qtbot, tmp_path: Path, capsys,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The broken variant: main without its checks (read_recording's error propagates)."""
    broken = mutant(export.main, ("    try:\n        events = read_recording(args.recording)\n"
                                  "    except OSError as exc:",
                                  "    events = read_recording(args.recording)\n    try:\n"
                                  "        pass\n    except OSError as exc:"))
    monkeypatch.setattr(export, "main", broken)
    from specviz.core.recording import RecordingError

    with pytest.raises((AssertionError, RecordingError)):
        test_the_command_line_refuses_bad_input_in_one_line("missing recording", qtbot,
                                                            tmp_path, capsys)


def test_the_race_header_says_the_k_policy() -> None:
    from dataclasses import replace

    started, *rest = speculative_events()
    cost = replace(started, settings=replace(started.settings, k_policy="cost"))
    view = export._race_view([cost, *rest, *baseline_events()])  # noqa: SLF001
    title = view.panes["speculative"].title.text()
    assert "cost policy" in title and "K\u00a02–3 used" in title and "K\u00a0=" not in title
    view.deleteLater()


def test_saving_a_race_to_an_unwritable_path_says_so(qtbot, tmp_path: Path) -> None:
    from specviz.gui.stage import stage

    window = stage.RaceWindow()
    qtbot.addWidget(window)
    window.view.load([*speculative_events(), *baseline_events()])
    window.save(str(tmp_path / "no such folder" / "race.jsonl"))  # no traceback
    assert "Could not write" in window.statusBar().currentMessage()
    assert window.view.events  # nothing lost: the race is still there to save elsewhere
    window.save(str(tmp_path / "race.jsonl"))
    assert (tmp_path / "race.jsonl").read_text(encoding="utf-8").count("\n") == \
        len(window.view.events)


def test_the_race_save_test_rejects_the_old_write(qtbot, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The broken variant: the race window writing without a check (FileNotFoundError)."""
    from specviz.gui.stage import stage

    broken = mutant(stage.RaceWindow,
                    ('            write_file(self, path, "".join(to_json(e) + "\\n" for e in '
                     'self.view.events))',
                     '            Path(path).write_text("".join(to_json(e) + "\\n" for e in '
                     'self.view.events))'))
    monkeypatch.setattr(stage, "RaceWindow", broken)
    with pytest.raises((AssertionError, OSError)):
        test_saving_a_race_to_an_unwritable_path_says_so(qtbot, tmp_path)

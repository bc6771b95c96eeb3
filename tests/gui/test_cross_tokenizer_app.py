"""The app and a pair across tokenizers: loaded when the chosen drafter can read the draft's own
tokenizer, reused without a reload otherwise, one clear message for a drafter that cannot, and
the shared vocabulary on screen.

The pairs are saved to folders and loaded by the app's own loader (models.load_pair): two byte-
level BPE tokenizers trained offline (tests/core/test_cross_tokenizer.py) under tiny Llamas,
and a second draft on the target's own tokenizer.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specviz.core.events import RunFailed, RunFinished
from specviz.gui import worker as worker_mod
from specviz.gui.windows.app import CUSTOM, MainWindow
from specviz.gui.worker import DecodeController, PairSpec
from tests.core.test_cross_tokenizer import draft_tokenizer, target_tokenizer
from tests.mutation import mutant
from tests.plain import plain
from tests.tiny import tiny_llama

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support propagateSizeHints")

PROMPT = "the cat sat on the mat"
ACROSS = plain(drafter="cross-tokenizer", k=3, max_new_tokens=10, seed=1)
MODEL = plain(k=3, max_new_tokens=10, seed=1)


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, str]:
    """target, draft (a tokenizer of its own) and same (the target's tokenizer), saved."""
    root = tmp_path_factory.mktemp("across")
    t_tok, d_tok = target_tokenizer(), draft_tokenizer()
    out = {}
    for name, tok, seed in (("target", t_tok, 2), ("draft", d_tok, 1), ("same", t_tok, 3)):
        model = tiny_llama(len(tok), seed=seed, hidden=16, layers=1, sharpness=3.0)
        model.save_pretrained(root / name)
        tok.save_pretrained(root / name)
        out[name] = str(Path(root / name))
    return out


def spec(folders: dict[str, str], draft: str, cross: bool) -> PairSpec:
    return PairSpec(folders[draft], folders["target"], "cpu", cross_tokenizer=cross)


def run(qtbot, controller: DecodeController, pair: PairSpec, settings) -> None:
    with qtbot.waitSignal(controller.finished, timeout=30000):
        controller.start(pair, settings, PROMPT)


def test_a_cross_tokenizer_pair_loads_for_its_drafter_and_serves_the_others(
        qtbot, folders, make_controller) -> None:
    controller, got = make_controller(None)  # the app's own loader
    run(qtbot, controller, spec(folders, "draft", True), ACROSS)
    assert not got.failures, got.failures
    assert controller.pair is not None and controller.pair.cross_tokenizer
    assert isinstance(got.events[-1], RunFinished)
    assert got.events[0].pair.draft.endswith("(own tokenizer)")
    # The model drafter on it: the engine's one message, naming the drafter that can; no reload.
    run(qtbot, controller, spec(folders, "draft", False), MODEL)
    assert len(got.failures) == 1 and got.failures[0].kind == "input"
    assert "cross-tokenizer drafter can" in got.failures[0].message
    # The app stays usable: the target alone and the cross drafter run on the loaded pair.
    finished = len(got.of_type(RunFinished))
    with qtbot.waitSignal(controller.finished, timeout=30000):
        controller.start(spec(folders, "draft", False), MODEL, PROMPT, baseline=True)
    assert len(got.of_type(RunFinished)) == finished + 1 and len(got.failures) == 1
    run(qtbot, controller, spec(folders, "draft", True), ACROSS)
    assert len(got.failures) == 1 and isinstance(got.events[-1], RunFinished)
    assert controller.load_count == 1


def test_the_load_check_catches_a_loader_that_drops_the_flag(qtbot, folders,
                                                              make_controller) -> None:
    broken = mutant(worker_mod._default_loader,
                    ("cross_tokenizer=cross_tokenizer)", "cross_tokenizer=False)"))
    controller, got = make_controller(broken)
    run(qtbot, controller, spec(folders, "draft", True), ACROSS)
    assert controller.pair is None and got.failures
    assert got.failures[0].kind == "tokenizer"


@pytest.mark.parametrize("broken", [False, True])
def test_a_failed_load_without_the_flag_is_retried_with_it(qtbot, folders, make_controller,
                                                           broken: bool) -> None:
    cls = DecodeController
    if broken:  # the broken variant: the failure memo ignores the flag
        cls = mutant(DecodeController, ("self.failed_spec == pair and",
                                        "self.failed_spec is not None and dataclasses.replace("
                                        "self.failed_spec, cross_tokenizer=pair.cross_tokenizer)"
                                        " == pair and"))
    controller, got = make_controller(None, cls)
    run(qtbot, controller, spec(folders, "draft", False), MODEL)
    failure = got.failures[0]
    assert isinstance(failure, RunFailed) and failure.kind == "tokenizer"
    assert "cross-tokenizer drafter" in failure.message  # it names the drafter that works
    # Choosing that drafter loads again (the spec differs by its flag): not "Not retried".
    run(qtbot, controller, spec(folders, "draft", True), ACROSS)
    retried = len(got.failures) == 1 and controller.load_count == 2 and \
        controller.pair is not None and controller.pair.cross_tokenizer
    assert retried != broken, got.failures


def test_a_load_accepting_another_tokenizer_serves_a_run_not_asking_for_it(folders) -> None:
    a, b = spec(folders, "draft", False), spec(folders, "draft", True)
    assert a != b and hash(a) != hash(b)  # the memo and the load tasks tell them apart
    assert worker_mod.serves(b, a) and not worker_mod.serves(a, b)


@pytest.mark.parametrize("broken", [False, True])
def test_one_tokenizer_pair_switching_drafter_does_not_reload(qtbot, folders, make_controller,
                                                              broken: bool) -> None:
    controller, got = make_controller(None)
    if broken:  # the broken variant: the loaded pair serves only the very same spec
        controller._loaded_serves = lambda s: controller.pair is not None and \
            controller.pair_spec == s
    run(qtbot, controller, spec(folders, "same", False), MODEL)
    run(qtbot, controller, spec(folders, "same", True), ACROSS)
    assert not got.failures, got.failures
    assert not controller.pair.cross_tokenizer  # one tokenizer: the model drafter drafts
    assert (controller.load_count == 1) != broken


# -- the window -------------------------------------------------------------------------------


@pytest.fixture
def window(qtbot, settings_store, folders):
    w = MainWindow(loader=None, settings=settings_store, autoload=False)
    qtbot.addWidget(w)
    w.controller.measure_at_load = False  # no timing here: the runs are what is tested
    w._set_preset(CUSTOM)
    c = w.controls
    c.draft_edit.setText(folders["draft"])
    c.target_edit.setText(folders["target"])
    c.device.setCurrentText("cpu")
    c.k_policy.setCurrentText("fixed")
    c.k.setValue(3)
    c.max_new.setValue(12)
    c.temperature.setValue(0.0)
    c.prompt.setPlainText(PROMPT)
    c.chat.setChecked(False)
    yield w
    w.close()
    w.controller.decoder_thread.wait()


def run_window(qtbot, w: MainWindow) -> None:
    w.run()
    qtbot.waitUntil(lambda: w.controller.state == "idle", timeout=30000)
    w.run_view.flush()


def outside_share(w: MainWindow) -> tuple[int, float]:
    """Independently of SharedVocab: target tokens whose string the draft's vocabulary lacks,
    over the run's last 256 target tokens (prompt, then generated)."""
    pair = w.controller.pair
    rec = w.run_view.record
    ids = [*rec.started.prompt_ids, *[i for r in rec.rounds for i in r.appended_ids]][-256:]
    draft_vocab = pair.draft_tokenizer.get_vocab()
    target_vocab = pair.tokenizer.get_vocab()
    shared = sum(1 for tok, i in target_vocab.items() if tok in draft_vocab)
    strings = pair.tokenizer.convert_ids_to_tokens(ids)
    return shared, 100 * sum(1 for s in strings if s not in draft_vocab) / len(ids)


def test_the_window_loads_across_tokenizers_and_says_how_much_is_shared(qtbot, window) -> None:
    w = window
    w.controls.drafter.setCurrentText("cross-tokenizer")
    run_window(qtbot, w)
    assert isinstance(w.run_view.record.events[-1], RunFinished), w.run_view.banner.text()
    shared, pct = outside_share(w)
    info = w.run_view.info.text()
    assert f"across tokenizers: {shared:,} shared of 330; {pct:.1f}% of recent target " \
           f"tokens outside" in info, info
    assert "across tokenizers" in w.status_label.text()
    assert "tokens shared with the draft's 300" in w.run_view.info.toolTip()
    # The model drafter: one clear message naming the drafter that works; nothing reloads.
    w.controls.drafter.setCurrentText("model")
    run_window(qtbot, w)
    assert "cross-tokenizer drafter can" in w.run_view.banner.text()
    assert w.controller.load_count == 1
    w.controls.drafter.setCurrentText("cross-tokenizer")
    run_window(qtbot, w)
    assert isinstance(w.run_view.record.events[-1], RunFinished)
    assert "across tokenizers" in w.run_view.info.text()


def test_the_window_check_catches_an_app_that_ignores_the_drafter(qtbot, window,
                                                                  monkeypatch) -> None:
    # The app as it was: the spec never says the drafter reads its own tokenizer.
    monkeypatch.setattr(type(window.controls), "cross_tokenizer", lambda self: False)
    window.controls.drafter.setCurrentText("cross-tokenizer")
    run_window(qtbot, window)
    assert window.controller.pair is None
    assert "different tokenizers" in window.run_view.banner.text()


def test_one_tokenizer_runs_say_nothing_of_tokenizers(qtbot, window, folders) -> None:
    window.controls.draft_edit.setText(folders["same"])
    window.controls.drafter.setCurrentText("cross-tokenizer")
    run_window(qtbot, window)
    assert isinstance(window.run_view.record.events[-1], RunFinished)
    assert "across tokenizers" not in window.run_view.info.text()
    assert window.run_view.info.toolTip() == ""


# -- the draft's token starts in the stream ------------------------------------------------------


def split_errors(w: MainWindow) -> list[str]:
    """Each tick must sit where the draft's tokenizer starts a token of the kept output, and
    some inside a target token (the two tokenizers cut this text differently)."""
    stream = w.run_view.stream
    kept = [s for s in stream.spans if s.token_number is not None]
    output = "".join(s.output for s in kept)
    doc = stream.document().toPlainText()
    enc = w.controller.pair.draft_tokenizer(output, add_special_tokens=False,
                                            return_offsets_mapping=True)
    starts = {a for a, b in enc["offset_mapping"] if b > a}
    # The document position of each output character of a token drawn as its own text.
    where, at = {}, 0
    for s in kept:
        if s.text == s.output:
            where.update({at + i: s.start + i for i in range(len(s.output))})
        at += len(s.output)
    wanted = sorted(where[a] for a in starts if a in where)
    got = [p for p in stream.draft_split_positions() if p in set(where.values())]
    errors = [] if got == wanted else [f"ticks at {got}, the draft's starts at {wanted}"]
    inside = [p for p in got if p not in {s.start for s in kept}]
    if not inside:
        errors.append("no tick inside a target token")
    if doc[wanted[0]:wanted[0] + 1] != output[min(starts)]:
        errors.append("the first tick is not at the draft's first token")
    return errors


def grab_stream(w: MainWindow):
    stream = w.run_view.stream
    stream.viewport().repaint()
    return stream.viewport().grab().toImage()


def test_the_stream_ticks_the_drafts_token_starts(qtbot, window) -> None:
    w = window
    w.resize(1000, 700)
    w.controls.drafter.setCurrentText("cross-tokenizer")
    w.controls.max_new.setValue(24)
    run_window(qtbot, w)
    w.run_view.stream.verticalScrollBar().setValue(0)
    before = grab_stream(w)
    w.draft_splits_action.setChecked(True)
    after = grab_stream(w)
    assert split_errors(w) == []
    differing = sum(before.pixel(x, y) != after.pixel(x, y)
                    for x in range(0, before.width(), 2) for y in range(before.height()))
    assert differing > 10  # the ticks are drawn
    w.draft_splits_action.setChecked(False)
    assert grab_stream(w) == before


def test_the_tick_check_catches_ticks_at_the_targets_tokens_only(qtbot, window) -> None:
    w = window
    w.controls.drafter.setCurrentText("cross-tokenizer")
    w.controls.max_new.setValue(24)
    run_window(qtbot, w)
    stream = w.run_view.stream
    broken = mutant(type(stream), ("positions.append(span.start + inside)", "pass"))
    stream.draft_split_positions = lambda: broken.draft_split_positions(stream)
    assert split_errors(w)

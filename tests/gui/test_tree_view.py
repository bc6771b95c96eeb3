"""The tree view of a tree round: nodes, the kept path, each rejection's residual, staging.

A scripted lookup-tree run (tests/gui/scripted.py) and one real lookup-tree run of the tiny
pair drive it. Each exactness check is shown rejecting a broken copy (tests/mutation.py).
"""

from __future__ import annotations

import dataclasses

import pytest
from PySide6.QtGui import QColor

import specviz.gui.views.tree as tree_module
from specviz.core.events import Round, from_json, to_json
from specviz.core.recording import RecordingReader
from specviz.gui.look.themes import DARK, LIGHT
from specviz.gui.views.run_view import RunView
from specviz.gui.views.staging import phases
from specviz.gui.views.tree import (
    EXTRA,
    ROOT,
    Reveal,
    TreeView,
    is_tree,
    kept_path,
    residual_after,
    sibling_tests,
)
from tests.gui.scripted import tree_events, tree_round_bonus, tree_round_resampled
from tests.mutation import mutant

pytestmark = pytest.mark.qt_log_ignore("This plugin does not support propagateSizeHints",
                                       "This plugin does not support raise")


@pytest.fixture
def view(qtbot) -> RunView:
    v = RunView(frame_ms=10_000)  # frames are driven by hand with flush()
    qtbot.addWidget(v)
    v.resize(1366, 900)
    v.show()
    return v


def play(view: RunView, events: list) -> None:
    for e in events:
        view.apply(e)
    view.flush(now=0.0)
    view.stream.apply_strikes(now=10.0)


def test_tree_rounds_get_the_tree_chains_keep_the_bars(view: RunView) -> None:
    events = tree_events()
    rounds = [e for e in events if isinstance(e, Round)]
    assert [is_tree(r) for r in rounds] == [True, True, False]  # the third: parents -1, 0
    assert not is_tree(dataclasses.replace(
        rounds[0], drafted=tuple(dataclasses.replace(d, parent=None) for d in rounds[0].drafted)))
    play(view, events[:2])
    assert view.tree.isVisible() and not view.bars.isVisible()
    assert view.tree.round is rounds[0]
    play(view, events[2:4])  # the chain round: the bars again
    assert view.bars.isVisible() and not view.tree.isVisible()
    view.select_round(0)
    assert view.tree.isVisible() and view.tree.round is rounds[0]
    assert "Selected round 1" in view.tree.header.text()


def drawn_path_problems(tree: TreeView) -> list[str]:
    """What is wrong with the path as drawn: the thick edges must lead, from the root, through
    accepted nodes only, one per context, to where the extra token hangs."""
    canvas, rnd = tree.canvas, tree.round
    assert rnd is not None
    widest = max(w for _, w in canvas.edge_colors().values())
    thick = [k for k, (_, w) in canvas.edge_colors().items() if w == widest and k != EXTRA]
    problems = [f"node {k} ({rnd.drafted[k].text!r}) is {rnd.drafted[k].status} but on the "
                "kept path" for k in thick if rnd.drafted[k].status != "accepted"]
    accepted = [d.index for d in rnd.drafted if d.status == "accepted"]
    if sorted(thick) != accepted:
        problems.append(f"the path drawn is {sorted(thick)}, the accepted nodes {accepted}")
    at = ROOT
    for k in sorted(thick):
        if rnd.drafted[k].parent != at:
            problems.append(f"node {k} hangs from {rnd.drafted[k].parent}, not from {at}")
        at = k
    if rnd.extra is not None and canvas.placed[EXTRA].parent != at:
        problems.append(f"the {rnd.extra.kind} token hangs from {canvas.placed[EXTRA].parent},"
                        f" not from the path's end {at}")
    return problems


@pytest.mark.parametrize("make", [tree_round_resampled, tree_round_bonus])
def test_the_kept_path_is_drawn_through_accepted_nodes_only(qtbot, make) -> None:  # noqa: ANN001
    tree = TreeView()
    qtbot.addWidget(tree)
    rnd = make()
    tree.show_round(rnd)
    assert drawn_path_problems(tree) == []
    canvas = tree.canvas
    # Every node has a box or is folded into the discarded node above it.
    shown = {k for k in canvas.boxes if k not in (ROOT, EXTRA)}
    assert len(shown) + sum(canvas.hidden.values()) == len(rnd.drafted)
    for k in shown:  # token, p and q on each box
        first, second = canvas.lines(k)
        d = rnd.drafted[k]
        assert tree_module.token_label(d.text, tree_module.TOKEN_CHARS) in first
        assert f"p {tree_module.fmt_prob(d.p)}" in second and "q 1" in second
        assert first.startswith({"accepted": "✓", "rejected": "✗"}.get(d.status, "“"))


def test_a_round_trimmed_before_its_extra_token_draws_and_stages(qtbot) -> None:  # noqa: ANN001
    """EOS or the budget can end a round on its path: no extra token, no box for it."""
    rnd = dataclasses.replace(tree_round_bonus(), extra=None)
    tree = TreeView()
    qtbot.addWidget(tree)
    tree.show_round(rnd)
    assert EXTRA not in tree.canvas.boxes and drawn_path_problems(tree) == []
    assert [p.name for p in phases(rnd)] == ["draft", "score", "test", "test", "test",
                                             "discard"]


def test_a_path_through_a_rejected_node_is_caught(qtbot, monkeypatch) -> None:  # noqa: ANN001
    """Broken: the path takes the first tested child at each context, kept or not."""
    broken = mutant(kept_path, ('d.status == "accepted"', 'd.status != "discarded"'))
    monkeypatch.setattr(tree_module, "kept_path", broken)
    tree = TreeView()
    qtbot.addWidget(tree)
    tree.show_round(tree_round_resampled())
    problems = drawn_path_problems(tree)
    assert any("' cat') is rejected but on the kept path" in p for p in problems), problems


def residual_problems(rnd: Round) -> list[str]:
    """Each residual shown against what the event says independently: the next sibling's
    ratio (q one-hot: min(1, p′(x))) and, where the walk ended, the extra token's law."""
    problems = []
    walk = sibling_tests(rnd)
    for i, t in enumerate(walk):
        after = tree_module.residual_after(rnd, t.node)  # the view's residual, all it lists
        if after is None:
            continue
        rest = {tid: prob for tid, _, prob in after[0]}
        listed = {text: prob for _, text, prob in after[0]}
        if any(listed[text] != prob for text, prob in t.residual or ()):
            problems.append(f"the residual listed after {t.node} is not the view's residual")
        later = [u for u in walk[i + 1:] if u.context == t.context]
        if later:
            nxt = rnd.drafted[later[0].node]
            got = rest.get(nxt.token_id)
            if got is None or abs(got - nxt.ratio) > 1e-6:
                problems.append(f"after {rnd.drafted[t.node].text!r}: p′({nxt.text!r}) shown "
                                f"{got}, its test used {nxt.ratio}")
        elif t is walk[-1] and rnd.extra is not None and rnd.extra.kind == "resampled":
            law = dict(zip(rnd.extra.dist_top.texts, rnd.extra.dist_top.probs, strict=True))
            for text, prob in listed.items():
                if text in law and abs(law[text] - prob) > 1e-6:
                    problems.append(f"the last residual gives {text!r} {prob}, the extra was "
                                    f"drawn with {law[text]}")
    return problems


def test_each_residual_is_what_the_next_sibling_meets() -> None:
    rnd = tree_round_resampled()
    walk = sibling_tests(rnd)
    assert [(rnd.drafted[t.node].text, t.order) for t in walk] == \
        [(" cat", 1), (" the", 2), (" big", 1), (" sun", 2)]
    assert residual_problems(rnd) == []
    # Three residuals: after " cat" at the root, after " big" and after " sun" under " the".
    assert [t.residual is not None for t in walk] == [True, False, True, True]
    assert not any(t.recorded for t in walk)  # the scripted events carry none: computed
    after_sun = dict(walk[3].residual or ())
    assert " big" not in after_sun and " sun" not in after_sun  # both rejected: removed
    big, sun = rnd.drafted[4], rnd.drafted[5]
    context_p = dict(zip(big.p_top.texts, big.p_top.probs, strict=True))  # p after " the"
    assert after_sun and all(abs(prob - context_p[text] / (1.0 - big.p - sun.p)) < 1e-12
                             for text, prob in after_sun.items())


def test_a_residual_without_renormalisation_is_caught(monkeypatch) -> None:
    """Broken: p with the rejected siblings removed but not renormalised."""
    broken = mutant(residual_after, ("(i, t, p / mass)", "(i, t, p)"))
    monkeypatch.setattr(tree_module, "residual_after", broken)
    problems = residual_problems(tree_round_resampled())
    assert problems and "its test used" in problems[0], problems


def test_recorded_residuals_match_the_computed_ones(tiny_pair) -> None:  # noqa: ANN001
    """A real lookup-tree run: the residual the engine recorded (format 3) is the one the
    view computes from p_top for a one-hot q, and what the next sibling was tested against."""
    from specviz.core.engine import SpeculativeDecoder
    from tests.plain import plain

    events = list(SpeculativeDecoder(tiny_pair, plain(
        k=8, max_new_tokens=24, seed=3, temperature=1.0, drafter="lookup-tree", lookup_k=8,
        top_n=64)).run("the cat sat on the mat the cat ran to the cat sat on a red mat the cat"))
    trees = [e for e in events if isinstance(e, Round) and is_tree(e)]
    rejected = [(r, d) for r in trees for d in r.drafted if d.status == "rejected"]
    assert len(rejected) >= 3
    for rnd, d in rejected:
        assert d.residual_top is not None
        recorded = residual_after(rnd, d.index)
        bare = dataclasses.replace(rnd, drafted=tuple(
            dataclasses.replace(x, residual_top=None) for x in rnd.drafted))
        computed = residual_after(bare, d.index)
        assert recorded is not None and computed is not None and recorded[1] and not computed[1]
        mine = {i: p for i, _, p in computed[0]}
        shared = [(i, p) for i, _, p in recorded[0] if i in mine]
        assert len(shared) >= 3
        assert all(abs(mine[i] - p) < 1e-6 for i, p in shared), (shared, mine)
        assert residual_problems(rnd) == []


def test_staged_tree_walks_the_siblings_one_by_one(view: RunView) -> None:
    events = tree_events()
    play(view, events[:1])
    view.stage_next = True
    play(view, events[1:2])
    rnd = events[1]
    assert view.stager.round is rnd and view.tree.isVisible() and not view.bars.isVisible()
    names = [p.name for p in phases(rnd)]
    assert names == ["draft", "score", "test", "test", "test", "test", "discard", "dist",
                     "extra"]
    canvas = view.tree.canvas
    seen = []
    assert canvas.reveal == Reveal(scored=False, tested=0, discarded=False, dist=False,
                                   extra=False)
    assert all(canvas.state(k) == "pending" for k in range(len(rnd.drafted)))
    while view.stager.forward():
        phase = view.stager.phases[view.stager.index]
        assert (EXTRA in canvas.drawn()) == (phase.name in ("dist", "extra"))  # no spoiler
        if phase.name == "test":
            d = rnd.drafted[canvas.current]
            seen.append(d.text)
            assert d.text.strip() in view.stage_panel.caption.text()
            assert view.stage_panel.rline.ratio == d.ratio and view.stage_panel.rline.r == d.r
            assert canvas.state(d.index) == d.status  # its verdict is out, the next ones not
            later = [t.node for t in sibling_tests(rnd)][phase.tested:]
            assert all(canvas.state(k) == "pending" for k in later)
            # The stream shows as much: this round's decided drafts so far, no more.
            spans = [s for s in view.stream.spans if s.round_index == rnd.index]
            assert [s.text for s in spans] == [rnd.drafted[t.node].text
                                               for t in sibling_tests(rnd)[:phase.tested]]
    assert seen == [" cat", " the", " big", " sun"]
    assert canvas.current is None and canvas.reveal.extra
    assert "p″" in view.stage_panel.caption.text()  # drawn from what two rejections left
    assert "none kept" in view.tree.residuals.text()
    while view.stager.back():
        pass
    assert canvas.reveal.tested == 0 and not canvas.reveal.scored


def test_tree_round_in_the_stream_keeps_the_output_order(view: RunView) -> None:
    """The kept nodes take the output's places in path order (a tree's node 3 can be the
    path's third token): the stream once read each kept node's output at its node index."""
    play(view, tree_events()[:3])
    spans = [(s.text, s.kind, s.output) for s in view.stream.spans if s.round_index == 1]
    assert spans == [(" on", "accepted", " on"), (" a", "accepted", " a"),
                     (" red", "accepted", " red"), (" sun", "bonus", " sun")]
    first = [(s.text, s.kind) for s in view.stream.spans if s.round_index == 0]
    assert first == [(" cat", "rejected"), (" the", "accepted"), (" big", "rejected"),
                     (" sun", "rejected"), (" mat", "resampled")]
    resampled = next(s for s in view.stream.spans if s.kind == "resampled")
    assert resampled.draft is not None and resampled.draft.text == " sun"  # it replaces
    big = next(s for s in view.stream.spans if s.text == " big")
    tip = view.stream.describe(big)
    assert "tree node 5, a candidate after “␣the”" in tip
    assert "the next candidate meets the residual" in tip and "resample" not in tip


def test_tree_recording_round_trips_and_replays(view: RunView) -> None:
    events = tree_events()
    lines = "".join(to_json(e) + "\n" for e in events).encode()
    read = RecordingReader().feed(lines)
    assert read == events and [from_json(to_json(e)) for e in events] == events
    assert [d.parent for d in read[1].drafted] == [-1, -1, -1, 0, 1, 1, 5]
    play(view, read[:2])
    assert view.tree.isVisible()


def test_tree_colours_follow_the_theme(qtbot) -> None:  # noqa: ANN001
    tree = TreeView()
    qtbot.addWidget(tree)
    tree.resize(1200, 400)
    tree.show_round(tree_round_resampled())
    for theme in (LIGHT, DARK):
        tree.set_theme(theme)
        image = tree.canvas.grab().toImage()
        kept = tree.canvas.boxes[1]
        inside = image.pixelColor(int(kept.left() + 4), int(kept.bottom() - 4))
        assert inside == QColor(theme.bg("accepted")), (theme.key, inside.name())
        ground = image.pixelColor(2, image.height() - 2)
        assert ground == QColor(theme.plot_bg), (theme.key, ground.name())


def test_a_tree_round_exports_as_its_tree(qtbot, tmp_path) -> None:  # noqa: ANN001
    """The p/q panel's Export on a tree round gives the tree (PNG at the size asked, SVG with
    the nodes' tokens), in the kept path's and the rejected siblings' colours."""
    import xml.etree.ElementTree as ET

    from PySide6.QtGui import QImage

    from specviz.gui.stage.export import export_bars

    rnd = tree_round_resampled()
    png = export_bars(rnd, tmp_path / "tree.png", (1280, 720))
    image = QImage(str(png))
    assert (image.width(), image.height()) == (1280, 720)
    seen = {image.pixel(x, y) & 0xFFFFFF for y in range(0, 720, 3) for x in range(0, 1280, 3)}
    for kind in ("accepted", "rejected", "resampled"):
        assert QColor(LIGHT.bg(kind)).rgb() & 0xFFFFFF in seen, kind
    svg = export_bars(rnd, tmp_path / "tree.svg")
    texts = "".join(t.text or "" for t in ET.parse(svg).getroot().iter())
    assert "␣cat" in texts and "␣the" in texts and "Siblings tested in turn" in texts


def test_zoom_scales_the_tree_and_a_small_view_shrinks_it_no_further_than_its_floor(
        qtbot) -> None:  # noqa: ANN001
    tree = TreeView()
    qtbot.addWidget(tree)
    tree.resize(2400, 1400)
    tree.show()
    tree.show_round(tree_round_resampled())
    height = tree.canvas.boxes[ROOT].height()
    tree.set_scale(1.5)  # Ctrl+plus (gui/views/zoom.py), room to spare: the type grows
    assert tree.canvas.fit == 1.0 and tree.canvas.boxes[ROOT].height() > 1.4 * height
    tree.set_scale(1.0)
    tree.resize(500, 200)  # too small: the type gives way, to MIN_FIT at most, then scrolls
    qtbot.waitUntil(lambda: tree.canvas.fit < 1.0)
    assert tree.canvas.zoom >= tree_module.MIN_FIT - 1e-9

"""Frame cost of the RunView: CPU time per flush and per paint, one scripted round a frame.

    QT_QPA_PLATFORM=offscreen .venv/bin/python benchmarks/frame_cost.py [--rounds 60] [--k 4 16]

A RunView (1366x768, offscreen) gets one scripted round per frame (rejections at varying
positions and full acceptances, so the number of panels changes from round to round, as in a
live run). For each frame it measures, in CPU time of this process (time.process_time, not
wall time: the figures do not depend much on what else the machine runs):

- flush: ``view.flush()``, folding the round in and updating every view's items;
- paint: ``QApplication.processEvents()`` until nothing is pending: layout and repaints;

and counts paint events (widgets repainted per frame). It prints the median and p90 of each
per K. To compare two versions, run it with each on the path, e.g. an older commit:

    mkdir /tmp/old && git archive COMMIT specviz tests | tar -x -C /tmp/old
    PYTHONPATH=/tmp/old QT_QPA_PLATFORM=offscreen python benchmarks/frame_cost.py
    PYTHONPATH=$PWD QT_QPA_PLATFORM=offscreen python benchmarks/frame_cost.py
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

if not os.environ.get("PYTHONPATH"):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("PYQTGRAPH_QT_LIB", "PySide6")
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QEvent, QObject  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from specviz.core.events import (  # noqa: E402
    ExtraToken,
    PairInfo,
    Round,
    RunStarted,
    Settings,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.gui.scripted
from tests.gui.scripted import VOCAB, draft, top  # noqa: E402

WORDS = [t for t in VOCAB if t not in (" sun", " mat", " big")]


def scripted_rounds(k: int, n: int) -> list:
    """RunStarted and ``n`` rounds of K = ``k``: every third round all kept, else a rejection."""
    started = RunStarted(
        mode="speculative", prompt="Once upon", prompt_ids=(0, 1),
        settings=Settings(k=k, temperature=1.0, max_new_tokens=10_000, seed=1, top_n=10,
                          drafter="model", k_policy="fixed", lookup_k=10),
        pair=PairInfo(draft="draft", target="target", device="cpu", dtype="float32",
                      vocab_size=len(VOCAB)))
    events: list = [started]
    generated = 0
    for r in range(n):
        reject = None if r % 3 == 0 else (r * 5) % k
        drafted = []
        for i in range(k):
            status = ("accepted" if reject is None or i < reject
                      else "rejected" if i == reject else "discarded")
            p = 0.3 + 0.6 * ((r * 7 + i * 3) % 10) / 10  # bars and ranges change every round
            q = 0.2 + 0.7 * ((r * 3 + i * 5) % 10) / 10
            rr = None if status == "discarded" else 0.5
            drafted.append(draft(i, WORDS[(r + i) % len(WORDS)], status, p, q, rr))
        accepted = k if reject is None else reject
        kind = "bonus" if reject is None else "resampled"
        text = WORDS[(r * 3) % len(WORDS)]
        extra = ExtraToken(kind=kind, token_id=VOCAB.index(text), text=text, prob=0.5, p=0.4,
                           dist_top=top([(text, 0.5), (" sun", 0.2), (" mat", 0.1)]))
        appended = [d.text for d in drafted[:accepted]] + [text]
        generated += len(appended)
        events.append(Round(
            index=r, k=k, drafted=tuple(drafted), n_accepted=accepted, extra=extra,
            bonus_top=None, appended_ids=tuple(VOCAB.index(t) for t in appended),
            appended_text="".join(appended), appended_texts=tuple(appended),
            draft_time_s=0.01 * k, verify_time_s=0.05, n_generated=generated,
            target_calls=r + 1, draft_calls=(r + 1) * k, elapsed_s=0.1 * (r + 1)))
    return events


class PaintCounter(QObject):
    def __init__(self) -> None:
        super().__init__()
        self.paints = 0

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt override
        if event.type() == QEvent.Type.Paint:
            self.paints += 1
        return False


def settle(app: QApplication) -> None:
    for _ in range(3):  # scene updates are queued: a second pass paints what the first posted
        app.processEvents()


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def measure(app: QApplication, k: int, rounds: int, warmup: int,
            timer: bool = False) -> dict[str, float]:
    """Per round: ``flush`` and paint (all of a round's drawing in one frame); or, with
    ``timer``, the timer's frames (``RunView.frame``) 34 ms apart until the round is drawn,
    each frame with its paint: the longest of them is the round's worst frame."""
    from specviz.gui.views.run_view import RunView

    view = RunView(frame_ms=1_000_000)  # frames driven by hand here, not by the timer
    view.timer.stop()
    view.resize(1366, 768)
    view.show()
    settle(app)
    counter = PaintCounter()
    app.installEventFilter(counter)
    flush, paint, paints, worst = [], [], [], []
    events = scripted_rounds(k, rounds + warmup)
    view.apply(events[0])
    view.flush(now=0.0)
    settle(app)
    now = 0.0
    for i, event in enumerate(events[1:]):
        view.apply(event)
        counter.paints = 0
        frames = []
        t0 = time.process_time()
        if not timer:
            view.flush(now=float(i))
            t1 = time.process_time()
            settle(app)
            t2 = time.process_time()
            frames.append(t2 - t0)
        else:
            t1 = t0
            for _ in range(4):  # the round's frames (one more, drawing nothing, is cheap)
                now += 0.034
                ta = time.process_time()
                view.frame(now=now)
                tb = time.process_time()
                settle(app)
                frames.append(time.process_time() - ta)
                t1 += tb - ta
            t2 = time.process_time()
        if i >= warmup:
            flush.append((t1 - t0) * 1000)
            paint.append((t2 - t0 - (t1 - t0)) * 1000)
            paints.append(counter.paints)
            worst.append(max(frames) * 1000)
    app.removeEventFilter(counter)
    view.close()
    view.deleteLater()
    settle(app)
    return {"flush_p50": statistics.median(flush), "flush_p90": pct(flush, 0.9),
            "paint_p50": statistics.median(paint), "paint_p90": pct(paint, 0.9),
            "frame_p50": statistics.median([a + b for a, b in zip(flush, paint, strict=True)]),
            "worst_p50": statistics.median(worst), "worst_p90": pct(worst, 0.9),
            "paints": statistics.mean(paints)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--k", type=int, nargs="+", default=[4, 16])
    args = parser.parse_args()
    app = QApplication.instance() or QApplication([])
    import specviz.gui.views.run_view as rv

    print(f"specviz from {Path(rv.__file__).resolve().parents[2]}; load average "
          f"{os.getloadavg()[0]:.1f}; CPU ms per frame, {args.rounds} rounds, one a frame")
    print("one round: flush() draws all of it, then paint (the per-round cost)")
    print(f"{'K':>3} {'flush p50':>10} {'p90':>7} {'paint p50':>10} {'p90':>7} "
          f"{'round p50':>10} {'paints/round':>13}")
    for k in args.k:
        m = measure(app, k, args.rounds, args.warmup)
        print(f"{k:>3} {m['flush_p50']:>10.1f} {m['flush_p90']:>7.1f} {m['paint_p50']:>10.1f} "
              f"{m['paint_p90']:>7.1f} {m['frame_p50']:>10.1f} {m['paints']:>13.1f}")
    import specviz.gui.views.run_view as run_view

    if not hasattr(run_view.RunView, "frame"):
        return  # a tree from before bounded frames: the timer called flush()
    print("the timer's frames (RunView.frame, 34 ms apart) that draw one round, with paint: "
          "the longest of them (what stalls the GUI thread)")
    print(f"{'K':>3} {'worst frame p50':>16} {'p90':>7} {'round p50':>10}")
    for k in args.k:
        m = measure(app, k, args.rounds, args.warmup, timer=True)
        print(f"{k:>3} {m['worst_p50']:>16.1f} {m['worst_p90']:>7.1f} {m['frame_p50']:>10.1f}")


if __name__ == "__main__":
    main()

"""A sweep's plot as a PNG, drawn with Pillow (no Qt, no matplotlib).

Measured speedup over the target alone (blue, filled) and the prediction
E[tokens per round] ÷ (K·c + v) (vermillion, dashed) against the sweep's points, α on the
right-hand axis (green), the target alone at 1×, the best measured point ringed and the
gap at it written out.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw, ImageFont

BLUE, ORANGE, GREEN, GREY, INK = (0, 114, 178), (213, 94, 0), (0, 158, 115), (150, 150, 150), \
    (30, 30, 30)


ASCII = str.maketrans({"×": "x", "÷": "/", "α": "a", "●": "o", "▫": "-", "△": "^", "·": "*"})


def _font(size: int) -> tuple[Any, bool]:
    """A font with ×, ÷, α (DejaVu Sans where installed), and whether it has them."""
    for name in ("DejaVuSans.ttf", "NotoSans-Regular.ttf", "LiberationSans-Regular.ttf"):
        try:
            return ImageFont.truetype(name, size), True
        except OSError:
            continue
    return ImageFont.load_default(size=size), False


def _dashed(draw: ImageDraw.ImageDraw, a: tuple[float, float], b: tuple[float, float],
            fill: tuple[int, int, int], width: int = 3, dash: float = 9.0) -> None:
    (x0, y0), (x1, y1) = a, b
    length = max(1.0, ((x1 - x0) ** 2 + (y1 - y0) ** 2) ** 0.5)
    n = int(length // dash)
    for i in range(0, n + 1, 2):
        t0, t1 = i * dash / length, min(1.0, (i + 1) * dash / length)
        draw.line([(x0 + (x1 - x0) * t0, y0 + (y1 - y0) * t0),
                   (x0 + (x1 - x0) * t1, y0 + (y1 - y0) * t1)], fill=fill, width=width)


def sweep_image(result: Any, size: tuple[int, int] = (960, 600)) -> Image.Image:
    """The plot of a :class:`specviz.core.sweep.SweepResult`."""
    w, h = size
    img = Image.new("RGB", size, "white")
    d = ImageDraw.Draw(img)
    (small, unicode), (big, _) = _font(14), _font(18)

    def text(xy: tuple[float, float], words: str, **kw: Any) -> None:
        d.text(xy, words if unicode else words.translate(ASCII), **kw)

    def width(words: str) -> float:
        return float(d.textlength(words if unicode else words.translate(ASCII), font=small))
    left, right, top, bottom = 80, w - 80, 60, h - 90
    rows = result.rows
    n = max(1, len(rows))
    ys = [r.speedup for r in rows] + [r.predicted for r in rows] + [1.0]
    y_max = float(max(1.5, max(ys) * 1.15))

    def x_at(i: int) -> float:
        return left + (right - left) * (i + 0.5) / n

    def y_at(v: float) -> float:
        return bottom - (bottom - top) * v / y_max

    def a_at(v: float) -> float:
        return bottom - (bottom - top) * v

    text((left, 18), "Speedup over the target alone: measured vs E[tokens/round] ÷ (K·c + v)",
           fill=INK, font=big)
    d.line([(left, top), (left, bottom), (right, bottom), (right, top)], fill=INK, width=1)
    step = 0.5 if y_max <= 4 else 1.0
    v = 0.0
    while v <= y_max:
        d.line([(left - 5, y_at(v)), (left, y_at(v))], fill=INK)
        text((left - 45, y_at(v) - 8), f"{v:.1f}×", fill=INK, font=small)
        v += step
    for a in (0.0, 0.25, 0.5, 0.75, 1.0):
        d.line([(right, a_at(a)), (right + 5, a_at(a))], fill=GREEN)
        text((right + 9, a_at(a) - 8), f"{a:.2f}", fill=GREEN, font=small)
    text((right + 9, top - 24), "α", fill=GREEN, font=big)
    _dashed(d, (left, y_at(1.0)), (right, y_at(1.0)), GREY, width=1, dash=4)
    text((left + 6, y_at(1.0) - 20), "target alone", fill=GREY, font=small)
    for i, r in enumerate(rows):
        text((x_at(i) - width(r.label) / 2, bottom + 8), r.label, fill=INK, font=small)
    pred = [(x_at(i), y_at(r.predicted)) for i, r in enumerate(rows) if r.predicted > 0]
    for p0, p1 in zip(pred, pred[1:], strict=False):
        _dashed(d, p0, p1, ORANGE)
    for x, y in pred:
        d.rectangle([x - 4, y - 4, x + 4, y + 4], outline=ORANGE, width=2)
    meas = [(x_at(i), y_at(r.speedup)) for i, r in enumerate(rows) if r.speedup > 0]
    if len(meas) > 1:
        d.line(meas, fill=BLUE, width=3)
    for x, y in meas:
        d.ellipse([x - 6, y - 6, x + 6, y + 6], fill=BLUE)
    alpha = [(x_at(i), a_at(r.alpha)) for i, r in enumerate(rows) if r.runs]
    if len(alpha) > 1:
        d.line(alpha, fill=GREEN, width=1)
    for x, y in alpha:
        d.polygon([(x, y - 6), (x + 6, y + 5), (x - 6, y + 5)], outline=GREEN)
    if result.best is not None:
        r = rows[result.best]
        x, y = x_at(result.best), y_at(r.speedup)
        d.ellipse([x - 13, y - 13, x + 13, y + 13], outline=INK, width=2)
        words = (f"best: {r.label}, {r.speedup:.2f}× (predicted {r.predicted:.2f}×, "
                 f"gap {100 * r.gap:+.0f}%)")
        tx = x + 16 if x + 16 + width(words) < right else x - 16 - width(words)
        text((tx, y - 32), words, fill=INK, font=small)
    ly = h - 40
    for colour, words, lx in ((BLUE, "● measured (geomean)", left),
                             (ORANGE, "▫ predicted from α, c, v(K)", left + 220),
                             (GREEN, "△ α (right axis)", left + 470)):
        text((lx, ly), words, fill=colour, font=small)
    note = f"{result.samples}/{result.planned} runs"
    text((right - width(note), ly), note, fill=INK if result.complete else ORANGE,
           font=small)
    return img


def sweep_png(result: Any, path: str | Path, size: tuple[int, int] = (960, 600)) -> None:
    sweep_image(result, size).save(path)


def table_image(header: Sequence[str], rows: Sequence[Sequence[str]], title: str = "",
                note: str = "") -> Image.Image:
    """A table as a picture: a title, the header in bold on grey, rows striped, the first
    two columns left-aligned and the figures right-aligned; as wide as its text needs."""
    (small, unicode), (big, _) = _font(15), _font(18)
    scratch = ImageDraw.Draw(Image.new("RGB", (1, 1)))

    def shown(words: str) -> str:
        return words if unicode else words.translate(ASCII)

    def width(words: str, font: Any = small) -> float:
        return float(scratch.textlength(shown(words), font=font))

    pad, row_h, margin = 12, 28, 24
    widths = [max(width(str(r[i])) for r in [header, *rows]) + 2 * pad
              for i in range(len(header))]
    top = margin + (34 if title else 0)
    w = int(max(sum(widths) + 2 * margin, width(title, big) + 2 * margin,
                width(note) + 2 * margin))
    h = int(top + row_h * (len(rows) + 1) + margin + (26 if note else 0))
    img = Image.new("RGB", (w, h), "white")
    d = ImageDraw.Draw(img)
    if title:
        d.text((margin, margin), shown(title), fill=INK, font=big)
    for n, cells in enumerate([header, *rows]):
        y = top + n * row_h
        if n == 0:
            d.rectangle([margin, y, margin + sum(widths), y + row_h], fill=(225, 225, 225))
        elif n % 2 == 0:
            d.rectangle([margin, y, margin + sum(widths), y + row_h], fill=(245, 245, 245))
        x = float(margin)
        for i, (cell, cw) in enumerate(zip(cells, widths, strict=True)):
            tx = x + pad if i < 2 else x + cw - pad - width(str(cell))
            d.text((tx, y + 5), shown(str(cell)), fill=INK, font=small)
            if n == 0:  # bold by a second pass, one pixel over
                d.text((tx + 1, y + 5), shown(str(cell)), fill=INK, font=small)
            x += cw
    bottom = top + row_h * (len(rows) + 1)
    d.line([(margin, top + row_h), (margin + sum(widths), top + row_h)], fill=INK)
    d.line([(margin, bottom), (margin + sum(widths), bottom)], fill=INK)
    if note:
        d.text((margin, bottom + 8), shown(note), fill=GREY, font=small)
    return img


def promptset_png(rows: Sequence[Any], path: str | Path, title: str = "",
                  note: str = "") -> None:
    """A prompt set's table (:func:`specviz.core.promptset.table` rows) as a PNG."""
    from specviz.core.promptset import HEADER, cells

    table_image(HEADER, [cells(r) for r in rows], title, note).save(path)

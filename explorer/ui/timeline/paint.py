"""Painting helpers of the timeline that hold no state: batched rectangles, the time
axis, the step strip with its breakdown bars, and the legend."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from PyQt6 import sip
from PyQt6.QtCore import QRectF, Qt
from PyQt6.QtGui import QColor, QFont, QFontMetrics, QPainter, QPen

from explorer.palette import CATEGORY_COLORS, KIND_LABELS, UNKNOWN
from explorer.ui.timeline import axis
from explorer.ui.timeline.colors import kind_color

BG = QColor("#ffffff")
ALT_BG = QColor("#f7f8fa")
GUTTER = QColor("#f1f3f5")
HEADER = QColor("#e4e8ee")
DEVICE_HEADER = QColor("#dde8f3")
GRID = QColor("#e3e6ea")
TEXT = QColor("#1f2328")
MUTED = QColor("#5c6670")
SELECT = QColor("#111111")
HIGHLIGHT = QColor("#ff00aa")  # search hits
EVIDENCE = QColor("#f08c00")  # a finding's evidence
EVIDENCE_FILL = QColor(255, 196, 0, 90)
RANGE = QColor(61, 133, 198, 40)
AXIS_LABEL_BG = QColor(255, 255, 255, 200)  # under a counter row's scale labels


def draw_rect_batches(
    painter: QPainter,
    x0: np.ndarray,
    y: np.ndarray,
    x1: np.ndarray,
    h: np.ndarray,
    color: np.ndarray,
    palette: list[QColor],
) -> int:
    """Fill rectangles with one ``drawRects`` call per colour id; returns calls made.

    The QRectF array is a ``sip.array`` filled through a numpy view, so no Python object is
    created per rectangle.
    """
    n = len(x0)
    if n == 0:
        return 0
    order = np.argsort(color, kind="stable")
    # PyQt6's sip stubs know neither sip.array(type, n) nor a voidptr as a buffer.
    rects: Any = sip.array(QRectF, n)  # type: ignore[call-arg]
    buffer: Any = sip.voidptr(rects, n * 32)
    view = np.frombuffer(buffer, dtype=np.float64).reshape(n, 4)
    view[:, 0] = x0[order]
    view[:, 1] = y[order]
    view[:, 2] = (x1 - x0)[order]
    view[:, 3] = h[order]
    c = color[order]
    bounds = np.flatnonzero(np.r_[True, c[1:] != c[:-1], True])
    painter.setPen(Qt.PenStyle.NoPen)
    for a, b in zip(bounds[:-1], bounds[1:], strict=False):
        painter.setBrush(palette[int(c[a])])
        painter.drawRects(rects[int(a) : int(b)])
    return len(bounds) - 1


def draw_axis(
    painter: QPainter,
    left: int,
    width: int,
    height: int,
    t0: float,
    t1: float,
    font: QFont,
    avoid: QRectF | None = None,
) -> str:
    """Ticks and labels along the top of the tracks, relative to the trace start — or, at
    deep zoom, ``+12.345 µs`` from a reference. Returns the gutter's text: ``time``, or the
    reference once (``210.85 ms +``). A tick label that would touch ``avoid`` (the range
    selection's label) is left out."""
    painter.fillRect(QRectF(left, 0, width, height), GUTTER)
    times, step, ref = axis.labelled_ticks(t0, t1, width)
    top = max(abs(t0), abs(t1))
    scale = width / (t1 - t0)
    painter.setFont(font)
    painter.setPen(QPen(MUTED))
    fm = QFontMetrics(font)
    for t in times:
        x = left + (t - t0) * scale
        painter.drawLine(int(x), height - 7, int(x), height)
        text = axis.tick_label(t, step, ref, top)
        box = QRectF(int(x) + 3, 0, fm.horizontalAdvance(text), height)
        if avoid is not None and box.adjusted(-4, 0, 4, 0).intersects(avoid):
            continue
        painter.drawText(int(x) + 3, height - 9, text)
    painter.setPen(QPen(GRID))
    painter.drawLine(left, height - 1, left + width, height - 1)
    return "time" if ref is None else f"{axis.format_offset(ref, step)} +"


def draw_grid(
    painter: QPainter, left: int, width: int, top: int, bottom: int, t0: float, t1: float
) -> None:
    """Faint vertical lines at the axis ticks, under the tracks."""
    times, _ = axis.ticks(t0, t1, width)
    scale = width / (t1 - t0)
    painter.setPen(QPen(GRID))
    for t in times:
        x = int(left + (t - t0) * scale)
        painter.drawLine(x, top, x, bottom)


def step_device(breakdown: pd.DataFrame | None) -> str | None:
    """The device whose breakdown the strip shows: the first accelerator, else the host."""
    if breakdown is None or len(breakdown) == 0:
        return None
    devices = [str(d) for d in pd.unique(breakdown["device"])]
    accel = [d for d in devices if d != "host"]
    return accel[0] if accel else devices[0]


def step_shares(breakdown: pd.DataFrame | None) -> dict[int, pd.Series]:
    """Per step, ns per category on the strip's device (computed once per breakdown)."""
    device = step_device(breakdown)
    if breakdown is None or device is None:
        return {}
    part = breakdown[breakdown["device"].astype(str) == device]
    return {
        int(step): rows.set_index("category")["ns"]
        for step, rows in part.groupby("step", sort=False)
    }


def draw_step_strip(
    painter: QPainter,
    left: int,
    width: int,
    top: int,
    height: int,
    t0: float,
    t1: float,
    steps: pd.DataFrame | None,
    shares: dict[int, pd.Series],
    font: QFont,
) -> None:
    """One box per step with its number and a tiny stacked bar of its time breakdown
    (``shares``: step → ns per category, from :func:`step_shares`)."""
    painter.fillRect(QRectF(left, top, width, height), GUTTER)
    if steps is None or len(steps) == 0:
        return
    scale = width / (t1 - t0)
    start = steps["start_ns"].to_numpy()
    end = steps["end_ns"].to_numpy()
    vis = np.flatnonzero((end > t0) & (start < t1))
    painter.setFont(font)
    fm = QFontMetrics(font)
    bar_h = 6
    for k, i in enumerate(vis):
        x0 = left + max((start[i] - t0) * scale, 0)
        x1 = left + min((end[i] - t0) * scale, width)
        box = QRectF(x0, top + 1, max(x1 - x0 - 1, 1), height - 2)
        painter.fillRect(box, QColor("#d5dbe3") if k % 2 == 0 else QColor("#e2e7ed"))
        step = int(steps["step"].iat[i])
        label = fm.elidedText(f"step {step}", Qt.TextElideMode.ElideRight, int(box.width()) - 4)
        if len(label) > 2:
            painter.setPen(QPen(TEXT))
            painter.drawText(box.adjusted(3, 0, 0, -bar_h), Qt.AlignmentFlag.AlignVCenter, label)
        ns = shares.get(step)
        if ns is not None and ns.sum() > 0 and box.width() > 3:
            # The bar spans the step's full width so it reads as "this step, split".
            full = (end[i] - start[i]) * scale
            xs = left + (start[i] - t0) * scale
            for cat, value in ns.items():
                w = value / ns.sum() * full
                bar = QRectF(xs, top + height - bar_h - 1, w, bar_h).intersected(box)
                if bar.width() > 0:
                    painter.fillRect(bar, QColor(CATEGORY_COLORS.get(str(cat), UNKNOWN)))
                xs += w


def used_categories(shares: dict[int, pd.Series]) -> list[str]:
    """The breakdown categories the step bars draw (more than 0 ns in some step), in
    :data:`CATEGORY_COLORS` order: the legend names these, not the ones no bar shows."""
    used: set[str] = set()
    for ns in shares.values():
        used |= {str(c) for c, v in ns.items() if v > 0}
    return [c for c in CATEGORY_COLORS if c in used] + sorted(used - set(CATEGORY_COLORS))


def legend_entries(kinds: list[str], categories: list[str]) -> list[tuple[str, QColor, bool]]:
    """The legend's entries in order: (label, colour, is a step-bar category)."""
    out = [(KIND_LABELS.get(k, k), kind_color(k), False) for k in kinds]
    out += [
        (c.replace("_", " "), QColor(CATEGORY_COLORS.get(c, UNKNOWN)), True) for c in categories
    ]
    return out


def legend_plan(
    widths: list[int], is_cat: list[bool], header_w: int, more_w: int, limit: int
) -> list[tuple[str, int]]:
    """What the legend draws, left to right: ``("entry", i)``, ``("header", 0)`` (before
    the first category) and ``("more", n)`` (``+n more``). Everything, when it fits; else
    the step-bar categories are kept whole and the slice kinds that do not fit before them
    make way (the categories explain the bars, which nothing else does); only when the
    categories alone do not fit are they cut too, from the end."""
    kinds = [i for i, c in enumerate(is_cat) if not c]
    cats = [i for i, c in enumerate(is_cat) if c]
    cat_w = (header_w + sum(widths[i] for i in cats)) if cats else 0
    x = 8

    def run(order: list[int], room: int) -> tuple[list[int], list[int]]:
        nonlocal x
        shown: list[int] = []
        for n, i in enumerate(order):
            extra = header_w if is_cat[i] and not any(is_cat[j] for j in shown) else 0
            rest = sum(widths[j] for j in order[n + 1 :])
            if (
                x + extra + widths[i] + (0 if x + extra + widths[i] + rest <= room else more_w)
                > room
            ):
                return shown, order[n:]
            x += extra + widths[i]
            shown.append(i)
        return shown, []

    def entries(ids: list[int]) -> list[tuple[str, int]]:
        out: list[tuple[str, int]] = []
        for i in ids:
            if is_cat[i] and not any(what == "header" for what, _ in out):
                out.append(("header", 0))
            out.append(("entry", i))
        return out

    if 8 + sum(widths) + (header_w if cats else 0) <= limit or not cats:
        shown, hidden = run(kinds + cats, limit)
        return entries(shown) + ([("more", len(hidden))] if hidden else [])
    if 8 + cat_w + more_w <= limit:
        shown, hidden = run(kinds, limit - cat_w)
        return entries(shown) + [("more", len(hidden))] + entries(cats)
    shown, hidden = run(kinds + cats, limit)
    return entries(shown) + ([("more", len(hidden))] if hidden else [])


def draw_legend(
    painter: QPainter,
    left: int,
    top: int,
    width: int,
    height: int,
    kinds: list[str],
    font: QFont,
    categories: list[str] | None = None,
) -> list[str]:
    """A swatch and a name for every kind present in the trace, then the breakdown
    categories the step strip's bars draw (``categories``). An entry is drawn whole or not
    at all: what does not fit becomes ``+N more`` (the view lists them on hover), slice
    kinds before categories (:func:`legend_plan`). Returns the labels left out."""
    painter.fillRect(QRectF(0, top, left + width, height), GUTTER)
    painter.setFont(font)
    fm = QFontMetrics(font)
    entries = legend_entries(kinds, categories or [])
    gap_label = "step bars:"
    widths = [14 + fm.horizontalAdvance(label) + 14 for label, _, _ in entries]
    header_w = fm.horizontalAdvance(gap_label) + 20
    more_w = fm.horizontalAdvance("+99 more (hover)") + 12
    plan = legend_plan(widths, [c for _, _, c in entries], header_w, more_w, left + width - 8)
    baseline = int(top + height / 2 + fm.ascent() / 2 - 1)
    drawn = {i for what, i in plan if what == "entry"}
    x = 8
    for what, i in plan:
        if what == "more":
            painter.setPen(QPen(MUTED))
            painter.drawText(x, baseline, f"+{i} more (hover)")
            x += more_w
        elif what == "header":
            painter.setPen(QPen(MUTED))
            painter.drawText(x + 12, baseline, gap_label)
            x += header_w
        else:
            label, color, is_cat = entries[i]
            swatch = (
                QRectF(x, top + height / 2 - 3, 10, 6)
                if is_cat
                else QRectF(x, top + height / 2 - 5, 10, 10)
            )
            painter.fillRect(swatch, color)
            painter.setPen(QPen(TEXT))
            painter.drawText(x + 14, baseline, label)
            x += widths[i]
    return [label for i, (label, _, _) in enumerate(entries) if i not in drawn]

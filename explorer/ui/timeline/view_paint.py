"""Painting of :class:`~explorer.ui.timeline.view.TimelineView`: the painter the view holds
(by composition, kept apart from the widget's state and input handling so each file holds
one thing)."""

from __future__ import annotations

import numpy as np
from PyQt6.QtCore import QPointF, QRectF, Qt
from PyQt6.QtGui import QColor, QPainter, QPaintEvent, QPen, QPolygonF

from explorer.ui.timeline import paint
from explorer.ui.timeline.geometry import (
    AXIS_H,
    LABEL_MIN_PX,
    LABEL_W,
    LEGEND_H,
    MAX_LABELS,
    PIN_W,
    SCROLL_W,
    STEP_H,
)
from explorer.ui.timeline.layout import COMPACT_LANES, LANE_H, Row
from explorer.ui.timeline.lod import counter_pixels, lane_rects, visible_positions
from explorer.ui.timeline.view_part import ViewPart
from explorer.units import fmt_bytes, fmt_ns

COUNTER = QColor("#6b8fb3")
ARROW = QColor("#e0561b")
ARROW_HALO = QColor(255, 255, 255, 220)


class TimelinePainter(ViewPart):
    """The view's painting: :meth:`paint` is its ``paintEvent``. Reads the view's state and
    writes what the painting found out (the legend entries left out, the axis gutter's text,
    the last frame's counts) back to it."""

    def paint(self, event: QPaintEvent | None = None) -> None:
        self.view.paint_count += 1
        p = QPainter(self.view)
        try:
            self._paint(p)
        finally:
            p.end()

    def _paint(self, p: QPainter) -> None:
        w, h = self.view.width(), self.view.height()
        top, bottom = AXIS_H + STEP_H, h - LEGEND_H
        width = self.view._tracks_width()
        p.fillRect(QRectF(0, 0, w, h), paint.BG)
        if self.view.trace is None or self.view.layout_ is None:
            p.setPen(QPen(paint.MUTED))
            p.drawText(
                QRectF(0, 0, w, h),
                Qt.AlignmentFlag.AlignCenter,
                "Open a trace: File → Open, or drop a trace file here",
            )
            return
        self._paint_tracks(p, top, bottom, width)
        self._paint_axes(p, width)
        self._paint_range(p, top, bottom)
        self._paint_corner(p, top)
        self.view.legend_hidden = paint.draw_legend(
            p,
            w - SCROLL_W,
            bottom,
            0,
            LEGEND_H,
            self.view._kinds_present,
            self.view._font,
            categories=paint.used_categories(self.view.step_shares),
        )

    def _paint_tracks(self, p: QPainter, top: int, bottom: int, width: int) -> None:
        """The rows in view: backgrounds, grid, slices and their labels, counters,
        highlights and the selection (clipped to the track area), then the row gutter."""
        rows = self._visible_rows(top, bottom)
        p.setClipRect(QRectF(LABEL_W, top, width, bottom - top))
        self._paint_row_backgrounds(p, rows, top, self.view.width())
        paint.draw_grid(p, LABEL_W, width, top, bottom, self.view.t0, self.view.t1)
        labels = self._paint_slices(p, rows, top, width)
        self._paint_labels(p, labels)
        self._paint_counter_axes(p, rows, top, width)
        self._paint_highlights(p, rows, top, width)
        self._paint_selection(p)
        self._paint_indexing_note(p, bottom, width)
        p.setClipping(False)
        self._paint_gutter(p, rows, top, bottom)

    def _paint_axes(self, p: QPainter, width: int) -> None:
        """The time axis and the step strip under it."""
        self.view.axis_origin = paint.draw_axis(
            p,
            LABEL_W,
            width,
            AXIS_H,
            self.view.t0,
            self.view.t1,
            self.view._font,
            self.range_label_box(),
        )
        paint.draw_step_strip(
            p,
            LABEL_W,
            width,
            AXIS_H,
            STEP_H,
            self.view.t0,
            self.view.t1,
            self.view.steps,
            self.view.step_shares,
            self.view._font,
        )

    def _paint_corner(self, p: QPainter, top: int) -> None:
        """The top-left corner: what the axis counts from, and the steps strip's name."""
        p.fillRect(QRectF(0, 0, LABEL_W, top), paint.GUTTER)
        p.setPen(QPen(paint.MUTED))
        p.setFont(self.view._font)
        p.drawText(
            QRectF(8, 0, LABEL_W - 12, AXIS_H),
            Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignRight
            if self.view.axis_origin != "time"
            else Qt.AlignmentFlag.AlignVCenter,
            self.view.axis_origin,
        )
        p.drawText(QRectF(8, AXIS_H, LABEL_W - 8, STEP_H), Qt.AlignmentFlag.AlignVCenter, "steps")

    # -- rows ----------------------------------------------------------------------------
    def _visible_rows(self, top: int, bottom: int) -> list[Row]:
        return self.layout.rows_between(self.view.scroll_y, self.view.scroll_y + bottom - top)

    def _row_top(self, row: Row, top: int) -> int:
        return top + row.y - self.view.scroll_y

    def _paint_row_backgrounds(self, p: QPainter, rows: list[Row], top: int, w: int) -> None:
        for k, r in enumerate(rows):
            y = self._row_top(r, top)
            if r.kind == "group":
                color = paint.DEVICE_HEADER if r.device else paint.HEADER
                p.fillRect(QRectF(0, y, w, r.height), color)
                if r.key in self.layout.collapsed:
                    self._paint_group_summary(p, r, y)
            elif k % 2:
                p.fillRect(QRectF(0, y, w, r.height), paint.ALT_BG)

    def _paint_indexing_note(self, p: QPainter, bottom: int, width: int) -> None:
        """While a large trace is indexed in the background: say so, and what is shown (at
        the bottom right of the tracks, where rows run out first)."""
        if self.view.lanes_state == "full":
            return
        n = len(self.trace.slices)
        if self.view.index_error:
            text = f"The timeline could not index its {n:,} slices: {self.view.index_error}"
        elif self.view.lanes_state == "indexing":
            text = f"Indexing {n:,} slices for the timeline…"
        else:
            text = f"Each track on one row (busy or idle per pixel) while {n:,} slices are indexed…"
        p.setFont(self.view._font)
        box_w = self.view._fm.horizontalAdvance(text) + 16
        box_h = self.view._fm.height() + 8
        box = QRectF(LABEL_W + width - box_w - 8, bottom - box_h - 6, box_w, box_h)
        p.fillRect(box, paint.AXIS_LABEL_BG)
        p.setPen(QPen(paint.TEXT))
        p.drawText(box, Qt.AlignmentFlag.AlignCenter, text)

    def _paint_group_summary(self, p: QPainter, group: Row, y: int) -> None:
        """A collapsed group's header shows when any of its tracks is busy: the top-level
        slices of every member, in their colours, on one strip."""
        width = self.view._tracks_width()
        for member in self.layout.members(group.group):
            if member.kind != "track" or not len(member.all_lanes):
                continue
            rect = lane_rects(
                self.lanes, int(member.all_lanes[0]), self.view.t0, self.view.t1, width
            )
            if not len(rect):
                continue
            paint.draw_rect_batches(
                p,
                rect.x0 + LABEL_W,
                np.full(len(rect), float(y + 4)),
                np.maximum(rect.x1, rect.x0 + 1) + LABEL_W,
                np.full(len(rect), float(group.height - 8)),
                rect.color,
                self.view._palette,
            )

    def _paint_slices(self, p: QPainter, rows: list[Row], top: int, width: int) -> list:
        """All slice and counter rectangles, batched by colour; returns label candidates."""
        xs0, xs1, ys, hs, cs = [], [], [], [], []
        label_parts = []
        counter_color = len(self.view._palette) - 1
        for r in rows:
            y = self._row_top(r, top)
            if r.kind == "track":
                for i, lane in enumerate(r.lanes):
                    rect = lane_rects(self.lanes, int(lane), self.view.t0, self.view.t1, width)
                    if not len(rect):
                        continue
                    ly = y + 2 + i * LANE_H
                    # A one-pixel gap at the right end of wide slices keeps neighbours apart.
                    x1 = np.where(rect.x1 - rect.x0 >= 4, rect.x1 - 1, rect.x1)
                    xs0.append(rect.x0 + LABEL_W)
                    xs1.append(x1 + LABEL_W)
                    ys.append(np.full(len(rect), float(ly)))
                    hs.append(np.full(len(rect), float(LANE_H - 2)))
                    cs.append(rect.color)
                    big = (rect.slice_id >= 0) & (x1 - rect.x0 >= LABEL_MIN_PX)
                    if big.any():
                        label_parts.append(
                            (
                                rect.x0[big] + LABEL_W,
                                x1[big] + LABEL_W,
                                ly,
                                rect.slice_id[big],
                                rect.color[big],
                            )
                        )
            elif r.kind == "counter":
                s = self.layout.series[r.series]
                v, valid = counter_pixels(s.ts, s.values, self.view.t0, self.view.t1, width)
                # A counter holds its last value only until the trace ends.
                valid &= self.view.times_of(LABEL_W + np.arange(width)) <= self.view.extent[1]
                vmax = self._series_max(r.series)
                hpx = np.where(valid, v / vmax * (r.height - 8), 0.0)
                keep = hpx > 0.5
                n = int(keep.sum())
                if n:
                    xs = np.flatnonzero(keep).astype(float) + LABEL_W
                    xs0.append(xs)
                    xs1.append(xs + 1)
                    ys.append(y + r.height - 3 - hpx[keep])
                    hs.append(hpx[keep])
                    cs.append(np.full(n, counter_color, np.int16))
        if xs0:
            x0, x1 = np.concatenate(xs0), np.concatenate(xs1)
            calls = paint.draw_rect_batches(
                p,
                x0,
                np.concatenate(ys),
                x1,
                np.concatenate(hs),
                np.concatenate(cs),
                self.view._palette,
            )
            self.view.last_paint_stats = {"rects": len(x0), "draw_calls": calls}
        else:
            self.view.last_paint_stats = {"rects": 0, "draw_calls": 0}
        return label_parts

    def counter_value_text(self, i: int, value: float) -> str:
        """A counter row's value as its axis and tooltip show it (bytes in binary units)."""
        s = self.layout.series[i]
        return fmt_bytes(value) if s.unit == "B" else f"{_si(value)}{s.unit}".strip()

    def _paint_counter_axes(self, p: QPainter, rows: list[Row], top: int, width: int) -> None:
        """Each counter row's scale at the right edge: its max at the top, 0 at the bottom."""
        p.setFont(self.view._font)
        fm = self.view._fm
        right = LABEL_W + width - 4
        for r in rows:
            if r.kind != "counter":
                continue
            y = self._row_top(r, top)
            for text, ty in (
                (self.counter_value_text(r.series, self._series_max(r.series)), y + 1),
                ("0", y + r.height - fm.height() - 2),
            ):
                box = QRectF(
                    right - fm.horizontalAdvance(text) - 6,
                    ty,
                    fm.horizontalAdvance(text) + 6,
                    fm.height(),
                )
                p.fillRect(box, paint.AXIS_LABEL_BG)
                p.setPen(QPen(paint.MUTED))
                p.drawText(box, Qt.AlignmentFlag.AlignCenter, text)
            p.setPen(QPen(paint.GRID, 1, Qt.PenStyle.DotLine))
            p.drawLine(QPointF(LABEL_W, y + 5), QPointF(right, y + 5))

    def _series_max(self, i: int) -> float:
        """The top of a counter row's scale (the series' max; cached per layout)."""
        s = self.layout.series[i]
        if s.peak is None:
            s.peak = (
                float(np.nanmax(s.values)) if len(s.values) and np.nanmax(s.values) > 0 else 1.0
            )
        return s.peak

    def _paint_labels(self, p: QPainter, parts: list) -> None:
        p.setFont(self.view._font)
        fm = self.view._fm
        drawn = 0
        dark, light = QPen(paint.TEXT), QPen(QColor("#ffffff"))
        for x0, x1, y, sids, colors in parts:
            names = self.view._names[self.view._name_codes[sids]]
            for a, b, name, c in zip(x0, x1, names, colors, strict=False):
                a = max(a, LABEL_W)
                text = fm.elidedText(str(name), Qt.TextElideMode.ElideRight, int(b - a) - 6)
                if len(text) <= 1:
                    continue
                p.setPen(dark if self.view._text_dark[int(c)] else light)
                p.drawText(
                    QRectF(a + 3, y, b - a - 4, LANE_H - 2), Qt.AlignmentFlag.AlignVCenter, text
                )
                drawn += 1
                if drawn >= MAX_LABELS:
                    self.view.last_paint_stats["labels"] = drawn
                    return
        self.view.last_paint_stats["labels"] = drawn

    def _paint_highlights(self, p: QPainter, rows: list[Row], top: int, width: int) -> None:
        """A finding's evidence (amber, filled), then search hits (magenta outline)."""
        self._paint_marks(
            p, rows, top, width, "evidence", QPen(paint.EVIDENCE, 3), paint.EVIDENCE_FILL
        )
        self._paint_marks(p, rows, top, width, "highlights", QPen(paint.HIGHLIGHT, 2), None)

    def _paint_marks(
        self,
        p: QPainter,
        rows: list[Row],
        top: int,
        width: int,
        which: str,
        pen: QPen,
        fill: QColor | None,
    ) -> None:
        """Outline the slices of ``self.view.<which>`` in the window; many merge per pixel."""
        ids = self.view.evidence if which == "evidence" else self.view.highlights
        if not len(ids) or not self.lanes.n_slices:
            return
        positions = self._mark_positions(which, ids)
        lanes = self.lanes
        scale = width / (self.view.t1 - self.view.t0)
        p.setPen(pen)
        p.setBrush(fill if fill is not None else Qt.BrushStyle.NoBrush)
        for r in rows:
            if r.kind != "track":
                continue
            y = self._row_top(r, top)
            for i, lane in enumerate(r.lanes):
                lo, hi = visible_positions(lanes, int(lane), self.view.t0, self.view.t1)
                k0, k1 = np.searchsorted(positions, [lo, hi])
                if k1 <= k0:
                    continue
                pos = positions[k0:k1]
                sid = lanes.order[pos]
                x0 = (lanes.ts[pos] - self.view.t0) * scale
                x1 = np.maximum((lanes.ts[pos] + lanes.dur[sid] - self.view.t0) * scale, x0 + 2)
                px, first = np.unique(np.floor(x0).astype(np.int64), return_index=True)
                ly = y + 2 + i * LANE_H
                for a0, a1 in zip(x0[first][:500], x1[first][:500], strict=False):
                    p.drawRect(QRectF(LABEL_W + a0, ly - 1, a1 - a0, LANE_H))

    def _mark_positions(self, which: str, ids: np.ndarray) -> np.ndarray:
        """Lane positions of ``ids``, sorted (cached until the ids or the trace change)."""
        cached = self.view._mark_cache.get(which)
        if cached is None or cached[0] is not ids or cached[1] is not self.view.lanes:
            cached = (ids, self.lanes, np.sort(self.lanes.pos[ids].astype(np.int64)))
            self.view._mark_cache[which] = cached
        return cached[2]

    def _paint_selection(self, p: QPainter) -> None:
        if self.view.selected >= 0:
            rect = self.view.slice_rect(self.view.selected)
            if rect is not None:
                p.setBrush(Qt.BrushStyle.NoBrush)
                p.setPen(QPen(paint.BG, 4))  # a white halo keeps it apart from any mark
                p.drawRect(rect.adjusted(-2, -2, 2, 2))
                p.setPen(QPen(paint.SELECT, 2))
                p.drawRect(rect.adjusted(-1, -1, 1, 1))
        for src, dst in self.view.related:
            a, b = self.view.slice_rect(src), self.view.slice_rect(dst)
            if a is None or b is None:
                continue
            self._arrow(p, QPointF(a.left() + 1, a.bottom()), QPointF(b.left() + 1, b.top()))

    def _arrow(self, p: QPainter, start: QPointF, end: QPointF) -> None:
        """A flow arrow above the slices, on a white halo so it never runs over a label
        unreadably (the label shows on both sides of a thin, outlined line)."""
        halo = QPen(ARROW_HALO, 4.5)
        halo.setCapStyle(Qt.PenCapStyle.RoundCap)
        p.setPen(halo)
        p.drawLine(start, end)
        p.setPen(QPen(ARROW, 1.5))
        p.drawLine(start, end)
        d = end - start
        length = max((d.x() ** 2 + d.y() ** 2) ** 0.5, 1e-6)
        ux, uy = d.x() / length, d.y() / length
        tip = QPolygonF(
            [
                end,
                QPointF(end.x() - 8 * ux + 4 * uy, end.y() - 8 * uy - 4 * ux),
                QPointF(end.x() - 8 * ux - 4 * uy, end.y() - 8 * uy + 4 * ux),
            ]
        )
        p.setBrush(ARROW)
        p.drawPolygon(tip)

    def _paint_gutter(self, p: QPainter, rows: list[Row], top: int, bottom: int) -> None:
        p.setClipRect(QRectF(0, top, LABEL_W, bottom - top))
        p.fillRect(QRectF(0, top, LABEL_W, bottom - top), paint.GUTTER)
        fm = self.view._fm
        pinned = set(self.layout.pinned)
        for r in rows:
            y = self._row_top(r, top)
            if r.kind == "group":
                p.fillRect(
                    QRectF(0, y, LABEL_W, r.height),
                    paint.DEVICE_HEADER if r.device else paint.HEADER,
                )
                p.setFont(self.view._bold)
                p.setPen(QPen(paint.TEXT))
                collapsed = r.key in self.layout.collapsed
                mark = "▸" if collapsed else "▾"
                count = len(self.layout.members(r.group)) if collapsed else 0
                label = f"{mark} {r.label}" + (f" ({count} rows)" if count > 1 else "")
                text = fm.elidedText(label, Qt.TextElideMode.ElideMiddle, LABEL_W - 12)
                p.drawText(QRectF(6, y, LABEL_W - 8, r.height), Qt.AlignmentFlag.AlignVCenter, text)
                continue
            p.setFont(self.view._font)
            p.setPen(QPen(paint.TEXT))
            text = fm.elidedText(r.label, Qt.TextElideMode.ElideRight, LABEL_W - 22 - PIN_W)
            p.drawText(
                QRectF(16, y, LABEL_W - 20 - PIN_W, min(r.height, LANE_H + 4)),
                Qt.AlignmentFlag.AlignVCenter,
                text,
            )
            if r.kind == "track" and len(r.all_lanes) > COMPACT_LANES:
                hint = f"▸ {r.hidden_lanes} more levels" if r.hidden_lanes else "▴ fewer levels"
                p.setPen(QPen(paint.MUTED))
                hy = y + r.height - LANE_H - 2 if r.hidden_lanes else y + LANE_H
                p.drawText(
                    QRectF(16, hy, LABEL_W - 20 - PIN_W, LANE_H),
                    Qt.AlignmentFlag.AlignVCenter,
                    hint,
                )
            if r.kind == "counter":
                peak = self._series_max(r.series)
                p.setPen(QPen(paint.MUTED))
                p.drawText(
                    QRectF(16, y + LANE_H, LABEL_W - 20 - PIN_W, LANE_H),
                    Qt.AlignmentFlag.AlignVCenter,
                    f"max {self.counter_value_text(r.series, peak)}",
                )
            cx, cy = LABEL_W - PIN_W / 2 - 2, y + 10
            p.setPen(QPen(paint.MUTED))
            p.setBrush(paint.MUTED if r.key in pinned else Qt.BrushStyle.NoBrush)
            p.drawEllipse(QPointF(cx, cy), 3.5, 3.5)
            p.setPen(QPen(paint.GRID))
            p.drawLine(0, y + r.height - 1, LABEL_W, y + r.height - 1)
        p.setClipping(False)
        p.setPen(QPen(paint.GRID))
        p.drawLine(LABEL_W - 1, top, LABEL_W - 1, bottom)

    def range_label_box(self) -> QRectF | None:
        """Where the range selection's duration label sits on the axis (None: no range)."""
        if self.view.range is None:
            return None
        a, b = self.view._x_of(self.view.range[0]), self.view._x_of(self.view.range[1])
        a, b = max(a, LABEL_W), min(b, LABEL_W + self.view._tracks_width())
        if b <= a:
            return None
        width = (
            self.view._fm.horizontalAdvance(fmt_ns(self.view.range[1] - self.view.range[0])) + 10
        )
        return QRectF((a + b) / 2 - width / 2, 2, width, AXIS_H - 6)

    def _paint_range(self, p: QPainter, top: int, bottom: int) -> None:
        if self.view.range is None:
            return
        a, b = self.view._x_of(self.view.range[0]), self.view._x_of(self.view.range[1])
        a, b = max(a, LABEL_W), min(b, LABEL_W + self.view._tracks_width())
        if b > a:
            p.fillRect(QRectF(a, 0, b - a, bottom), paint.RANGE)
            p.setPen(QPen(QColor("#3d85c6")))
            p.drawLine(QPointF(a, 0), QPointF(a, bottom))
            p.drawLine(QPointF(b, 0), QPointF(b, bottom))
            label = fmt_ns(self.view.range[1] - self.view.range[0])
            box = self.range_label_box()
            assert box is not None  # a range is selected
            p.fillRect(box, QColor("#3d85c6"))
            p.setPen(QPen(QColor("#ffffff")))
            p.setFont(self.view._font)
            p.drawText(box, Qt.AlignmentFlag.AlignCenter, label)


def _si(v: float) -> str:
    for scale, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= scale:
            return f"{v / scale:.1f} {suffix}"
    return f"{v:.3g} "

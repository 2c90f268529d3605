"""Mouse and keyboard handling of :class:`~explorer.ui.timeline.view.TimelineView` (the
input handler the view holds, by composition): zoom, pan, select, hover, range selection,
collapse and pin."""

from __future__ import annotations

import numpy as np
from PyQt6.QtCore import QPointF, Qt
from PyQt6.QtGui import QKeyEvent, QMouseEvent, QWheelEvent
from PyQt6.QtWidgets import QToolTip, QWidget

from explorer.analysis.slice_steps import step_rows
from explorer.ui.timeline import paint
from explorer.ui.timeline.geometry import AXIS_H, LABEL_W, LEGEND_H, PIN_W, STEP_H
from explorer.ui.timeline.layout import COMPACT_LANES
from explorer.ui.timeline.paint import step_device
from explorer.ui.timeline.view_part import ViewPart
from explorer.units import fmt_ns

ZOOM_STEP = 0.8  # one W press or wheel notch shows 80% of the window
PAN_STEP = 0.2  # one A/D press moves a fifth of the window
DRAG_PX = 4  # a press that moves less than this is a click


class TimelineInputHandler(ViewPart):
    """The view's mouse and key handlers (the view forwards its Qt events here); they
    only change the view's state and call its methods."""

    def _area(self, pos: QPointF) -> str:
        if pos.y() < AXIS_H:
            return "axis"
        if pos.y() < AXIS_H + STEP_H:
            return "steps"
        if pos.x() < LABEL_W:
            return "gutter"
        return "tracks"

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 (Qt name)
        key = event.key()
        if self.view.trace is None:
            return QWidget.keyPressEvent(self.view, event)
        if key == Qt.Key.Key_W:
            self.view.zoom(ZOOM_STEP, self._key_anchor())
        elif key == Qt.Key.Key_S:
            self.view.zoom(1 / ZOOM_STEP, self._key_anchor())
        elif key == Qt.Key.Key_A:
            self.view.pan(-PAN_STEP)
        elif key == Qt.Key.Key_D:
            self.view.pan(PAN_STEP)
        elif key == Qt.Key.Key_F:
            self.view.fit_selection()
        elif key == Qt.Key.Key_0:
            self.view.fit_all()
        elif key == Qt.Key.Key_Escape:
            self.view.range = None
            self.view.highlight(np.zeros(0, np.int64))
            self.view.set_evidence(np.zeros(0, np.int64))
            self.view.set_related([])
            self.view.select_slice(-1)
        else:
            return QWidget.keyPressEvent(self.view, event)
        event.accept()

    def _key_anchor(self) -> float | None:
        """Zoom around the pointer when it is over the tracks, else around the centre."""
        pos = self.view.mapFromGlobal(self.view.cursor().pos())
        if (
            LABEL_W <= pos.x() < LABEL_W + self.view._tracks_width()
            and 0 <= pos.y() < self.view.height()
        ):
            return float(pos.x())
        return None

    def wheelEvent(self, event: QWheelEvent) -> None:  # noqa: N802 (Qt name)
        if self.view.trace is None:
            return
        pos = event.position()
        dy = event.angleDelta().y()
        dx = event.angleDelta().x()
        if event.modifiers() & Qt.KeyboardModifier.ShiftModifier or pos.x() < LABEL_W:
            self.view.scrollbar.setValue(self.view.scrollbar.value() - int(dy or dx))
        elif dx and abs(dx) > abs(dy):
            self.view.pan(-dx / 120 * PAN_STEP / 2)
        elif dy:
            self.view.zoom(ZOOM_STEP ** (dy / 120), pos.x())
        event.accept()

    def mousePressEvent(self, event: QMouseEvent) -> None:  # noqa: N802 (Qt name)
        self.view.setFocus()
        self.view._press = event.position()
        self.view._press_area = self._area(self.view._press)
        self.view._press_view = (self.view.t0, self.view.t1, self.view.scroll_y)
        self.view._moved = False

    def mouseMoveEvent(self, event: QMouseEvent) -> None:  # noqa: N802 (Qt name)
        pos = event.position()
        if self.view._press is None or not (event.buttons() & Qt.MouseButton.LeftButton):
            self._hover(pos, event)
            return
        d = pos - self.view._press
        if abs(d.x()) + abs(d.y()) >= DRAG_PX:
            self.view._moved = True
        if not self.view._moved:
            return
        t0, t1, sy = self.view._press_view
        if self.view._press_area == "axis":
            a, b = sorted((self.view._t_of(self.view._press.x()), self.view._t_of(pos.x())))
            self.view.range = (int(a), int(b))
            self.view.update()
        elif self.view._press_area == "tracks":
            shift = -d.x() * (t1 - t0) / self.view._tracks_width()
            self.view.set_visible_range(t0 + shift, t1 + shift)
            self.view.scrollbar.setValue(int(sy - d.y()))

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:  # noqa: N802 (Qt name)
        pos = event.position()
        area, moved = self.view._press_area, self.view._moved
        self.view._press = None
        if self.view.trace is None:
            return
        if area == "axis":
            if moved and self.view.range is not None:
                self.view.range_selected.emit(*self.view.range)
            else:
                self.view.range = None
                self.view.update()
        elif moved:
            return
        elif area == "steps":
            self._click_step(pos.x())
        elif area == "gutter":
            self._click_gutter(pos)
        elif area == "tracks":
            self.view.select_slice(self.view.slice_at(pos.x(), pos.y()))

    def _click_step(self, x: float) -> None:
        if self.view.steps is None or len(self.view.steps) == 0:
            return
        row = int(step_rows(self.view.steps, self.view._t_of(x))[0])
        if row >= 0:
            a, b = (
                int(self.view.steps["start_ns"].iat[row]),
                int(self.view.steps["end_ns"].iat[row]),
            )
            pad = (b - a) * 0.02
            self.view.set_visible_range(a - pad, b + pad)

    def _click_gutter(self, pos: QPointF) -> None:
        row = self.layout.row_at(self.view._content_y(pos.y()))
        if row is None:
            return
        if row.kind == "group":
            self.view.toggle_group(row.group)
        elif pos.x() >= LABEL_W - PIN_W - 4:
            self.view.toggle_pin(row.key)
        elif row.kind == "track" and len(row.all_lanes) > COMPACT_LANES:
            self.view.toggle_compact(row.key)

    def _hover(self, pos: QPointF, event: QMouseEvent) -> None:
        text = ""
        if self.view.trace is not None:
            area = self._area(pos)
            if pos.y() >= self.view.height() - LEGEND_H:
                text = self.legend_text()
            elif area == "tracks":
                sid = self.view.slice_at(pos.x(), pos.y())
                text = self.view.describe(sid) if sid >= 0 else self._counter_text(pos)
            elif area == "steps" and pos.x() >= LABEL_W:
                text = self._step_text(self.view._t_of(pos.x()))
        if text:
            QToolTip.showText(event.globalPosition().toPoint(), text, self.view)
        else:
            QToolTip.hideText()

    def legend_text(self) -> str:
        """The whole legend, one entry a line (the hover popup of a legend cut short)."""
        if not self.view.legend_hidden:
            return ""
        entries = paint.legend_entries(
            self.view._kinds_present, paint.used_categories(self.view.step_shares)
        )
        kinds = [label for label, _, is_cat in entries if not is_cat]
        cats = [label for label, _, is_cat in entries if is_cat]
        return "\n".join(
            ["slice colours: " + ", ".join(kinds)]
            + (["step bars: " + ", ".join(cats)] if cats else [])
        )

    def _counter_text(self, pos: QPointF) -> str:
        """The value of the counter row under the pointer at the pointer's time."""
        row = self.layout.row_at(self.view._content_y(pos.y()))
        if row is None or row.kind != "counter":
            return ""
        s = self.layout.series[row.series]
        k = int(np.searchsorted(s.ts, self.view._t_of(pos.x()), "right")) - 1
        if k < 0:
            return ""
        shown = self.view.counter_value_text(row.series, float(s.values[k]))
        return f"{s.label}\n{shown} at {fmt_ns(int(s.ts[k]))}"

    def _step_text(self, t: float) -> str:
        """A step's duration and its breakdown, largest category first."""
        steps = self.view.steps
        if steps is None or len(steps) == 0:
            return ""
        row = int(step_rows(steps, t)[0])
        if row < 0:
            return ""
        step, dur = int(steps["step"].iat[row]), int(steps["dur_ns"].iat[row])
        lines = [f"step {step} · {fmt_ns(dur)}"]
        b = self.view.breakdown
        device = step_device(b)
        if b is not None and device is not None:
            part = b[(b["step"] == step) & (b["device"].astype(str) == device)]
            part = part[part["ns"] > 0].sort_values("ns", ascending=False)
            lines.append(f"{device}:")
            for cat, ns in zip(part["category"].astype(str), part["ns"], strict=False):
                share = ns / dur * 100 if dur else 0.0
                lines.append(f"  {cat.replace('_', ' ')}: {fmt_ns(int(ns))} ({share:.0f}%)")
        lines.append("click to zoom to this step")
        return "\n".join(lines)

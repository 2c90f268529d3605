"""The timeline widget: a custom ``paintEvent`` over the lane index, because a scene graph
of a million items cannot repaint in 50 ms and per-pixel buckets can.

State is view state only — the visible time window, vertical scroll, selection, highlights,
related-event arrows and the selected range. Everything drawn per repaint is computed from
the window with numpy (see :mod:`explorer.ui.timeline.lod`).

Large traces are indexed off the GUI thread (:mod:`explorer.ui.timeline.lane_builder`): the
first frame shows the rows at once, then every track busy or idle per pixel (the coarse
index), then the full lanes — or the index cached by an earlier open, memory-mapped.

Keys: W/S zoom, A/D pan, F fit the selection, 0 fit the trace, Esc clears the selection.
Mouse: wheel zooms at the pointer (Shift+wheel or wheel over the labels scrolls rows), drag
pans, click selects, drag on the time axis selects a range, click a step zooms to it, click
a group header collapses it, click the pin mark of a row pins it to the top, click a deep
track's name to show its first levels only.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
from PyQt6.QtCore import QCoreApplication, QEventLoop, QPointF, QRectF, Qt, pyqtSignal
from PyQt6.QtGui import QFont, QFontMetrics, QKeyEvent, QMouseEvent, QPaintEvent, QWheelEvent
from PyQt6.QtWidgets import QScrollBar, QWidget

from explorer.trace.model import KINDS, TraceData
from explorer.trace_api import Trace, model_of
from explorer.ui.timeline.colors import category_codes, color_ids, palette
from explorer.ui.timeline.geometry import AXIS_H, LABEL_W, LEGEND_H, MIN_SPAN_NS, SCROLL_W, STEP_H
from explorer.ui.timeline.lane_builder import LaneBuilder, lod_directory, wait_for_builders
from explorer.ui.timeline.layout import LANE_H, Row, TrackLayout
from explorer.ui.timeline.lod import LaneIndex, build_lanes, lane_slice_at
from explorer.ui.timeline.paint import step_shares
from explorer.ui.timeline.view_input import TimelineInputHandler
from explorer.ui.timeline.view_paint import COUNTER, TimelinePainter
from explorer.units import fmt_ns

#: Traces with at least this many slices are indexed in a background thread (a coarse frame
#: first); smaller ones in place, in well under 0.1 s, so what a test or a screenshot sees
#: right after ``set_trace`` is final.
BACKGROUND_FROM = 200_000


class TimelineView(QWidget):
    """Tracks of slices over time. Emits ``slice_selected(id)`` (-1 when cleared),
    ``range_selected(start_ns, end_ns)`` and ``visible_range_changed(start_ns, end_ns)``."""

    slice_selected = pyqtSignal(int)
    range_selected = pyqtSignal(int, int)
    visible_range_changed = pyqtSignal(int, int)
    groups_changed = pyqtSignal()  # the user expanded or collapsed a device group
    #: The lane index changed: ``"coarse"`` (one lane per track, while indexing), then
    #: ``"cached"`` (mapped from an earlier open) or ``"built"``; ``"failed"``: no more comes
    #: (``index_error`` says why).
    lanes_changed = pyqtSignal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("timeline")
        self.setMouseTracking(True)
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.setMinimumSize(400, 200)
        self.trace: Trace | TraceData | None = None  # as given: the window's Trace, or a model
        self.lanes: LaneIndex | None = None
        #: ``"indexing"`` (rows only), ``"coarse"`` (busy per track) or ``"full"``.
        self.lanes_state = "full"
        self.index_error = ""  # why the background index failed (the note shows it)
        self.background_from = BACKGROUND_FROM
        self._builder: LaneBuilder | None = None
        self._quit_connected = False
        self.layout_: TrackLayout | None = None
        self.steps: pd.DataFrame | None = None
        self.breakdown: pd.DataFrame | None = None
        self.step_shares: dict[int, pd.Series] = {}
        self.t0, self.t1 = 0.0, 1.0
        self.extent = (0, 1)  # first and last ns of the trace's contents
        self.scroll_y = 0
        self.selected = -1
        self.highlights = np.zeros(0, np.int64)  # search hits: magenta outlines
        self.evidence = np.zeros(0, np.int64)  # a finding's slices: amber, filled
        self._mark_cache: dict[str, tuple[np.ndarray, object, np.ndarray]] = {}
        self.related: list[tuple[int, int]] = []
        self.range: tuple[int, int] | None = None
        self._palette = palette() + [COUNTER]  # the last id is the counter colour
        self._text_dark = [c.lightnessF() > 0.62 for c in self._palette]
        self._font = QFont(self.font())
        self._font.setPointSizeF(8.5)
        self._bold = QFont(self._font)
        self._bold.setBold(True)
        self._fm = QFontMetrics(self._font)
        self._press: QPointF | None = None
        self._press_area = ""
        self._press_view = (0.0, 0.0, 0)
        self._moved = False
        self._kinds_present: list[str] = []
        self._names = np.zeros(0, dtype=object)
        self._name_codes = np.zeros(0, np.int32)
        self.scrollbar = QScrollBar(Qt.Orientation.Vertical, self)
        self.scrollbar.valueChanged.connect(self._on_scroll)
        self.last_paint_stats: dict[str, int] = {}
        self.expanded_groups: set[str] = set()  # device groups the user opened (by label)
        self.legend_hidden: list[str] = []  # legend entries that did not fit (hover lists them)
        self.axis_origin = "time"  # the axis gutter text: "time" or the reference time
        self.paint_count = 0  # frames painted (tests count repaints)
        # Painting and input handling live in their own objects, which the view holds.
        self.painter = TimelinePainter(self)
        self.input = TimelineInputHandler(self)

    # -- Qt's events, handed to the painter and the input handler ---------------------------
    def paintEvent(self, event: QPaintEvent | None) -> None:  # noqa: N802 (Qt name)
        self.painter.paint(event)

    def keyPressEvent(self, event: QKeyEvent | None) -> None:  # noqa: N802 (Qt name)
        if event is not None:
            self.input.keyPressEvent(event)

    def wheelEvent(self, event: QWheelEvent | None) -> None:  # noqa: N802 (Qt name)
        if event is not None:
            self.input.wheelEvent(event)

    def mousePressEvent(self, event: QMouseEvent | None) -> None:  # noqa: N802 (Qt name)
        if event is not None:
            self.input.mousePressEvent(event)

    def mouseMoveEvent(self, event: QMouseEvent | None) -> None:  # noqa: N802 (Qt name)
        if event is not None:
            self.input.mouseMoveEvent(event)

    def mouseReleaseEvent(self, event: QMouseEvent | None) -> None:  # noqa: N802 (Qt name)
        if event is not None:
            self.input.mouseReleaseEvent(event)

    def counter_value_text(self, i: int, value: float) -> str:
        """A counter sample's value as its row shows it (``3.00 MiB``, ``42.0``)."""
        return self.painter.counter_value_text(i, value)

    def _series_max(self, i: int) -> float:
        return self.painter._series_max(i)

    def range_label_box(self) -> QRectF | None:
        """Where the selected range's label is drawn on the axis, or None."""
        return self.painter.range_label_box()

    def legend_text(self) -> str:
        """The whole legend, one entry a line (the hover popup of a legend cut short)."""
        return self.input.legend_text()

    # -- data ----------------------------------------------------------------------------
    def set_trace(self, trace: Trace | TraceData) -> None:
        """Show the whole trace. A trace of ``background_from`` slices or more is indexed
        off the GUI thread; this returns at once and the frames refine as the index comes."""
        self._stop_builder()
        self.trace = trace
        model = model_of(trace)
        self.index_error = ""
        s = model.slices
        self._name_codes, self._names = category_codes(s["name"])
        kind_codes, kinds = category_codes(s["kind"])
        used = np.zeros(len(kinds) + 1, bool)
        used[kind_codes] = True  # code -1 (missing) marks the extra last flag
        present = set(kinds[used[:-1]])
        self._kinds_present = [k for k in KINDS if k in present]
        self.layout_ = None
        self.selected = -1
        self.highlights = np.zeros(0, np.int64)
        self.evidence = np.zeros(0, np.int64)
        self._mark_cache = {}
        self.related = []
        self.range = None
        self.scroll_y = 0
        self.extent = self._extent_of(model)
        if len(s) < self.background_from:
            self._set_lanes(build_lanes(s, color_ids(s["kind"], s["name"])), "full")
        else:
            tracks = model.tracks["id"].to_numpy()
            self._set_lanes(LaneIndex.tracks_only(s["track"].to_numpy(), tracks), "indexing")
            self._start_builder(model)
        self.fit_all()

    def _set_lanes(self, lanes: LaneIndex, state: str) -> None:
        """Swap in a lane index, keeping the user's collapsed and pinned rows."""
        old = self.layout_
        self.lanes = lanes
        self.lanes_state = state
        assert self.trace is not None  # lanes are built for the trace shown
        self.layout_ = TrackLayout(model_of(self.trace), lanes, frozenset(self.expanded_groups))
        if old is not None:
            self.layout_.collapsed = set(old.collapsed)
            self.layout_.pinned = list(old.pinned)
            self.layout_.relayout()
        self._mark_cache = {}
        self._update_scrollbar()

    def _start_builder(self, trace: TraceData) -> None:
        builder = LaneBuilder(trace.slices, lod_directory(trace.path))
        builder.coarse.connect(self._on_coarse_lanes)
        builder.ready.connect(self._on_lanes_ready)
        builder.failed.connect(self._on_lanes_failed)
        if not self._quit_connected:
            app = QCoreApplication.instance()
            if app is not None:
                app.aboutToQuit.connect(wait_for_builders)
                self._quit_connected = True
        self._builder = builder
        builder.begin()

    @property
    def indexer(self) -> LaneBuilder | None:
        """The background indexing of the current trace while it runs, else None."""
        return self._builder

    def _stop_builder(self) -> None:
        if self._builder is not None:
            self._builder.cancel()  # it finishes its current phase, then stops; ignored
            self._builder = None

    def stop_indexing(self) -> None:
        """Cancel the background indexing of this view's trace, and wait for every lane
        builder still running (the window closes, the application quits)."""
        self._stop_builder()
        wait_for_builders()

    def _on_coarse_lanes(self, builder: LaneBuilder, lanes: LaneIndex) -> None:
        if builder is self._builder and self.lanes_state == "indexing":
            self._set_lanes(lanes, "coarse")
            self.lanes_changed.emit("coarse")
            self.update()

    def _on_lanes_ready(self, builder: LaneBuilder, lanes: LaneIndex, how: str) -> None:
        if builder is not self._builder:
            return  # a trace opened before this one
        self._set_lanes(lanes, "full")
        self._builder = None
        if self.selected >= 0:
            self.ensure_visible(self.selected)
        self.lanes_changed.emit(how)
        self.update()

    def _on_lanes_failed(self, builder: LaneBuilder, message: str) -> None:
        """The coarse rows stay (or the bare rows); the note says why nothing more comes."""
        if builder is self._builder:
            self._builder = None
            self.index_error = message
            self.lanes_changed.emit("failed")
            self.update()

    def wait_for_lanes(self, timeout_s: float = 120.0) -> bool:
        """Deliver events until the full lane index is in place (scripts, the screenshot
        mode, tests); False when ``timeout_s`` passed first."""
        deadline = time.monotonic() + timeout_s
        app = QCoreApplication.instance()
        while self.lanes_state != "full" and not self.index_error and time.monotonic() < deadline:
            builder = self._builder
            if builder is not None:
                builder.wait(20)
            if app is not None:
                app.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 50)
        return self.lanes_state == "full"

    @staticmethod
    def _extent_of(trace: TraceData) -> tuple[int, int]:
        """From the first to the last thing drawn: slices, counter samples, memory events."""
        starts, ends = [], []
        if len(trace.slices):
            starts.append(int(trace.slices["ts"].min()))
            ends.append(int(trace.span_ns))
        for table in (trace.counters, trace.memory):
            if len(table):
                starts.append(int(table["ts"].min()))
                ends.append(int(table["ts"].max()))
        if not starts:
            return 0, 1
        return min(starts), max(max(ends), min(starts) + 1)

    def set_steps(self, steps: pd.DataFrame | None, breakdown: pd.DataFrame | None = None) -> None:
        """Steps (``explorer.analysis.steps``) and their breakdown for the step strip."""
        self.steps = steps
        self.breakdown = breakdown
        self.step_shares = step_shares(breakdown)
        self.update()

    @property
    def view_nbytes(self) -> int:
        """Memory held by the view's own structures (not the trace's tables)."""
        if self.lanes is None or self.layout_ is None:
            return 0
        series = sum(s.ts.nbytes + s.values.nbytes for s in self.layout_.series)
        return self.lanes.nbytes + series + self._names.nbytes

    # -- geometry ------------------------------------------------------------------------
    def _tracks_left(self) -> int:
        return LABEL_W

    def _tracks_width(self) -> int:
        return max(self.width() - LABEL_W - SCROLL_W, 1)

    def _tracks_top(self) -> int:
        return AXIS_H + STEP_H

    def _tracks_bottom(self) -> int:
        return self.height() - LEGEND_H

    def _x_of(self, t: float) -> float:
        return LABEL_W + (t - self.t0) * self._tracks_width() / (self.t1 - self.t0)

    def _t_of(self, x: float) -> float:
        return self.t0 + (x - LABEL_W) * (self.t1 - self.t0) / self._tracks_width()

    def times_of(self, xs: np.ndarray) -> np.ndarray:
        """The times under widget x positions (an array of them)."""
        return self.t0 + (xs - LABEL_W) * (self.t1 - self.t0) / self._tracks_width()

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt name)
        self.scrollbar.setGeometry(
            self.width() - SCROLL_W,
            self._tracks_top(),
            SCROLL_W,
            self._tracks_bottom() - self._tracks_top(),
        )
        self._update_scrollbar()
        super().resizeEvent(event)

    def _update_scrollbar(self) -> None:
        page = self._tracks_bottom() - self._tracks_top()
        total = self.layout_.height if self.layout_ else 0
        self.scrollbar.setPageStep(max(page, 1))
        self.scrollbar.setSingleStep(LANE_H * 3)
        self.scrollbar.setRange(0, max(total - page, 0))
        self.scroll_y = min(self.scroll_y, self.scrollbar.maximum())

    def _on_scroll(self, value: int) -> None:
        self.scroll_y = value
        self.update()

    # -- the visible window ----------------------------------------------------------------
    def visible_range(self) -> tuple[int, int]:
        return int(self.t0), int(np.ceil(self.t1))

    def set_visible_range(self, t0: float, t1: float) -> None:
        """Show [t0, t1] (ns), clamped to a little more than the trace's extent."""
        start, end = self.extent
        span_all = max(end - start, MIN_SPAN_NS)
        t1 = max(t1, t0 + MIN_SPAN_NS)
        span = min(t1 - t0, span_all * 1.5)
        lo, hi = start - span_all * 0.25, end + span_all * 0.25
        t0 = min(max(t0, lo), hi - span)
        self.t0, self.t1 = float(t0), float(t0 + span)
        self.visible_range_changed.emit(*self.visible_range())
        self.update()

    def fit_all(self) -> None:
        start, end = self.extent
        pad = max((end - start) * 0.01, 1)
        self.set_visible_range(start - pad, end + pad)

    def zoom(self, factor: float, at_x: float | None = None) -> None:
        """Zoom in (factor < 1) or out (factor > 1) keeping time under ``at_x`` in place."""
        x = self._x_of((self.t0 + self.t1) / 2) if at_x is None else at_x
        t = self._t_of(x)
        self.set_visible_range(t - (t - self.t0) * factor, t + (self.t1 - t) * factor)

    def pan(self, fraction: float) -> None:
        shift = (self.t1 - self.t0) * fraction
        self.set_visible_range(self.t0 + shift, self.t1 + shift)

    def zoom_to_slices(self, ids: np.ndarray) -> None:
        """Fit the window to these slices (with a margin) and scroll the first into view."""
        ids = np.asarray(ids, dtype=np.int64)
        ids = ids[(ids >= 0) & (ids < len(self.trace or []))]
        if self.trace is None or len(ids) == 0:
            return
        ts = self.trace.slices["ts"].to_numpy()[ids]
        end = ts + self.trace.slices["dur"].to_numpy()[ids]
        lo, hi = float(ts.min()), float(end.max())
        pad = max((hi - lo) * 0.1, MIN_SPAN_NS)
        self.set_visible_range(lo - pad, hi + pad)
        self.ensure_visible(int(ids[0]))

    def fit_selection(self) -> None:
        if self.selected >= 0:
            self.zoom_to_slices(np.array([self.selected]))
        elif len(self.evidence):
            self.zoom_to_slices(self.evidence)
        elif len(self.highlights):
            self.zoom_to_slices(self.highlights)
        elif self.range is not None:
            self.set_visible_range(*self.range)

    def ensure_visible(self, slice_id: int) -> None:
        """Expand the slice's group and scroll its row into view (once indexed)."""
        if self.lanes is None or self.layout_ is None or not self.lanes.n_slices:
            return
        lane = int(self.lanes.lane_of(np.array([slice_id]))[0])
        track = int(self.lanes.lane_track[lane])
        group = self.layout_.group_of_track(track)
        if group in self.layout_.collapsed:
            self.layout_.toggle_collapsed(group)
        row = self.layout_.row_of_track(track)
        if row is None:
            return
        if not self._lane_shown(row, lane):
            self.layout_.toggle_compact(row.key)
        self._update_scrollbar()
        y = self.layout_.lane_y(row, lane)
        page = self._tracks_bottom() - self._tracks_top()
        if not (self.scroll_y <= y and y + LANE_H <= self.scroll_y + page):
            self.scrollbar.setValue(max(y - page // 3, 0))
        self.update()

    @staticmethod
    def _lane_shown(row: Row, lane: int) -> bool:
        return len(row.lanes) > 0 and row.lanes[0] <= lane <= row.lanes[-1]

    # -- selection -----------------------------------------------------------------------
    def select_slice(self, slice_id: int, emit: bool = True) -> None:
        self.selected = int(slice_id)
        if slice_id >= 0:
            self.ensure_visible(int(slice_id))
        if emit:
            self.slice_selected.emit(int(slice_id))
        self.update()

    def highlight(self, ids: np.ndarray) -> None:
        """Outline these slices in magenta (search hits, a panel's rows)."""
        self.highlights = np.unique(np.asarray(ids, dtype=np.int64))
        self.update()

    def set_evidence(self, ids: np.ndarray) -> None:
        """Mark a finding's evidence: amber fill and outline, apart from search hits (magenta
        outline) and the selection (black outline with a white halo)."""
        self.evidence = np.unique(np.asarray(ids, dtype=np.int64))
        self.update()

    def set_related(self, pairs: list[tuple[int, int]]) -> None:
        """Arrows from each ``src`` slice to its ``dst`` (launch → kernel, fwd → bwd...)."""
        self.related = [(int(a), int(b)) for a, b in pairs]
        self.update()

    def toggle_group(self, group: str) -> None:
        """Collapse or expand a group; a device group's state is remembered by its label
        (``expanded_groups``, saved by the window) for the next trace of the same setup."""
        if self.layout_ is not None:
            self.layout_.toggle_collapsed(group)
            label = self.layout_.group_labels().get(group)
            if label is not None and any(r.device for r in self.layout_.members(group)):
                if group in self.layout_.collapsed:
                    self.expanded_groups.discard(label)
                else:
                    self.expanded_groups.add(label)
                self.groups_changed.emit()
            self._update_scrollbar()
            self.update()

    def toggle_compact(self, key: str) -> None:
        if self.layout_ is not None:
            self.layout_.toggle_compact(key)
            self._update_scrollbar()
            self.update()

    def toggle_pin(self, key: str) -> None:
        if self.layout_ is not None:
            self.layout_.toggle_pinned(key)
            self._update_scrollbar()
            self.update()

    def rows(self) -> list[Row]:
        return self.layout_.rows if self.layout_ else []

    # -- hit testing ---------------------------------------------------------------------
    def _content_y(self, y: float) -> float:
        return y - self._tracks_top() + self.scroll_y

    def slice_at(self, x: float, y: float) -> int:
        """The slice under a widget point, or -1."""
        if self.layout_ is None or self.lanes is None or x < LABEL_W:
            return -1
        row = self.layout_.row_at(self._content_y(y))
        if row is None or row.kind != "track":
            return -1
        i = int((self._content_y(y) - row.y - 2) // LANE_H)
        if not 0 <= i < len(row.lanes):
            return -1
        tol = 2 * (self.t1 - self.t0) / self._tracks_width()
        return lane_slice_at(self.lanes, int(row.lanes[i]), self._t_of(x), tol)

    def slice_rect(self, slice_id: int) -> QRectF | None:
        """Where a slice is drawn (widget coordinates), or None when its row is hidden."""
        if self.layout_ is None or self.lanes is None or self.trace is None:
            return None
        if not self.lanes.n_slices:
            return None  # not indexed yet
        lane = int(self.lanes.lane_of(np.array([slice_id]))[0])
        row = self.layout_.row_of_track(int(self.lanes.lane_track[lane]))
        if row is None or not self._lane_shown(row, lane):
            return None
        ts = int(self.trace.slices["ts"].iat[slice_id])
        dur = int(self.trace.slices["dur"].iat[slice_id])
        x0, x1 = self._x_of(ts), self._x_of(ts + dur)
        y = self._tracks_top() - self.scroll_y + self.layout_.lane_y(row, lane)
        return QRectF(x0, y, max(x1 - x0, 1.0), LANE_H - 2)

    def describe(self, slice_id: int) -> str:
        """One-line tooltip text for a slice."""
        assert self.trace is not None  # a slice of the trace shown
        s = self.trace.slices
        return (
            f"{s['name'].iat[slice_id]}\n{s['kind'].iat[slice_id]} · "
            f"{fmt_ns(int(s['dur'].iat[slice_id]))}"
        )

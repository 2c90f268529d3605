"""Memory panel: allocated and reserved memory per device over time, and who holds it.

Curves come from :func:`explorer.analysis.memory.memory_timeline` (one step curve per device,
peak marked) and follow the timeline's zoom through :meth:`MemoryPanel.on_range`. Clicking
the plot picks a time: the table below lists the allocations alive then (size, op, source
line, lifetime); a second tab lists allocations never freed in the trace (leak suspects).
Selecting an allocation highlights the op that made it and zooms the timeline to its life.
Everything is computed by :mod:`explorer.analysis.memory_view` (from
:mod:`explorer.analysis.memory`) in a worker thread; the panel only plots and tabulates.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pyqtgraph as pg
from PyQt6.QtCore import Qt, pyqtSlot
from PyQt6.QtWidgets import (
    QLabel,
    QSplitter,
    QTableView,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from explorer.analysis.memory import alive_at
from explorer.analysis.memory_view import (
    TABLE_COLUMNS,
    MemoryData,
    allocated_before_trace,
    memory_data,
    table_frame,
)
from explorer.trace_api import Trace
from explorer.ui.dataframe_model import DataFrameModel
from explorer.ui.panels import TracePanel, results_table
from explorer.ui.qt_types import present
from explorer.units import fmt_bytes, fmt_ns

PLOT_MIN_H = 100  # the plot keeps this height however small the dock
_CURVE_COLORS = ("#3d85c6", "#d9453d", "#57a773", "#e69138", "#8e5cc4", "#45a5a3", "#c2185b")
_TABLE_FORMATS = {
    "bytes": "bytes", "alloc_ts": "ns", "freed_at": "ns", "lifetime_ns": "ns", "addr": "hex",
}  # fmt: skip
#: Pixels kept free above the highest peak for its label (its text's height and a margin).
LABEL_ROOM_PX = 8
_TABLE_HEADERS = {
    "bytes": "size", "alloc_ts": "allocated at", "freed_at": "freed at", "lifetime_ns": "lifetime",
}  # fmt: skip


class MemoryPanel(TracePanel):
    """Memory curves per device with the peak marked, and the allocations behind them."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.data: MemoryData | None = None
        self.live_ts: int | None = None
        self.followed_range: tuple[int, int] | None = None  # last range from the timeline

        self.status = QLabel("No trace")
        self.status.setWordWrap(True)
        self.plot = pg.PlotWidget(background="w")
        self.plot.setLabel("bottom", "time", units="s")
        self.plot.getAxis("left").enableAutoSIPrefix(False)
        self.plot.setLabel("left", "bytes")
        # pyqtgraph draws a left axis' title 5 px left of the axis: room for it in the margin.
        self.plot.plotItem.layout.setContentsMargins(8, 2, 2, 2)
        self.y_top = 0.0  # the highest value plotted (in plot units), set per trace
        self.plot.plotItem.vb.sigResized.connect(self._fit_head_room)
        self.y_scale = 1  # bytes per plotted unit (binary: KiB, MiB, GiB), set per trace
        self.plot.showGrid(x=True, y=True, alpha=0.2)
        self.plot.setMouseEnabled(x=True, y=False)
        self.plot.addLegend(offset=(10, 10))
        self.plot.scene().sigMouseClicked.connect(self._plot_clicked)
        self.time_cursor = pg.InfiniteLine(angle=90, movable=True, pen=pg.mkPen("#444", width=1))
        self.time_cursor.setVisible(False)
        self.time_cursor.sigPositionChangeFinished.connect(
            lambda line: self.show_live_at(int(round(line.value() * 1e9)))
        )
        self.plot.addItem(self.time_cursor, ignoreBounds=True)

        self.live_model = DataFrameModel(formats=_TABLE_FORMATS, headers=_TABLE_HEADERS)
        self.leak_model = DataFrameModel(formats=_TABLE_FORMATS, headers=_TABLE_HEADERS)
        self.live_table = self._table(self.live_model)
        self.leak_table = self._table(self.leak_model)
        self.tabs = QTabWidget()
        self.tabs.addTab(self.live_table, "Alive at …")
        self.tabs.addTab(self.leak_table, "Never freed")
        # What the "alive at" table cannot list: memory allocated before the trace began.
        self.live_note = QLabel("")
        self.live_note.setWordWrap(True)
        self.live_note.setStyleSheet("color:#5c4400; background:#fff3bf; padding:2px 6px")
        self.live_note.hide()
        below = QWidget()
        below_box = QVBoxLayout(below)
        below_box.setContentsMargins(0, 0, 0, 0)
        below_box.setSpacing(0)
        below_box.addWidget(self.live_note)
        below_box.addWidget(self.tabs, 1)
        self.plot.setMinimumHeight(PLOT_MIN_H)

        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(self.plot)
        splitter.addWidget(below)
        splitter.setChildrenCollapsible(False)
        splitter.setStretchFactor(0, 3)
        splitter.setStretchFactor(1, 2)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addWidget(self.status)
        layout.addWidget(splitter, 1)

    def _table(self, model: DataFrameModel) -> QTableView:
        model.set_frame(pd.DataFrame(columns=TABLE_COLUMNS))
        table = results_table(model, {0: 70, 2: 200, 3: 240})
        present(table.selectionModel()).selectionChanged.connect(
            lambda *_: self._allocation_selected(table, model)
        )
        return table

    # -- contract ----------------------------------------------------------------------------
    def set_trace(self, trace: Trace | None) -> None:
        super().set_trace(trace)
        self.data = None
        self.live_ts = None
        self.followed_range = None
        self._clear_plot()
        self.live_model.set_frame(pd.DataFrame(columns=TABLE_COLUMNS))
        self.leak_model.set_frame(pd.DataFrame(columns=TABLE_COLUMNS))
        if trace is None:
            self.status.setText("No trace")
            return
        self.status.setText("Reading memory events…")
        self.run_in_background(lambda: memory_data(trace.data), self._data_ready, self._failed)

    @pyqtSlot(int, int)
    def on_range(self, start_ns: int, end_ns: int) -> None:
        """Follow the timeline's zoom: show the same time range."""
        if end_ns <= start_ns:
            return
        self.followed_range = (int(start_ns), int(end_ns))
        self.plot.setXRange(start_ns / 1e9, end_ns / 1e9, padding=0)

    def visible_range_ns(self) -> tuple[int, int]:
        """The time range the plot shows, in ns."""
        (x0, x1), _ = self.plot.viewRange()
        return int(round(x0 * 1e9)), int(round(x1 * 1e9))

    # -- results -----------------------------------------------------------------------------
    def _clear_plot(self) -> None:
        for item in list(self.plot.listDataItems()):
            self.plot.removeItem(item)
        for item in getattr(self, "_peak_labels", []):
            self.plot.removeItem(item)
        self._peak_labels: list[pg.TextItem] = []
        self.plot.plotItem.legend.clear()
        self.time_cursor.setVisible(False)

    def _data_ready(self, data: MemoryData) -> None:
        self.data = data
        self._clear_plot()
        if len(data.curves) == 0:
            self.status.setText(
                "This trace has no memory events. Record with "
                "torch.profiler.profile(profile_memory=True) (or explorer.collect) to see memory."
            )
            self.plot.setVisible(False)
            self.updated.emit()
            return
        self.plot.setVisible(True)
        top = float(data.peaks["peak_bytes"].max()) if len(data.peaks) else 0.0
        for data_reserved in (r for _, _, r in data.lines.values() if r is not None):
            top = max(top, float(data_reserved.max()))
        self.y_scale, unit = _binary_unit(top)
        # The unit alone: a rotated "memory (MiB)" is longer than a short plot is tall.
        self.plot.setLabel("left", unit)
        for i, (device, (x, allocated, reserved)) in enumerate(data.lines.items()):
            color = _CURVE_COLORS[i % len(_CURVE_COLORS)]
            curves = [(allocated, pg.mkPen(color, width=2), f"{device} allocated")]
            if reserved is not None:
                dashed = pg.mkPen(color, width=1, style=Qt.PenStyle.DashLine)
                curves.append((reserved, dashed, f"{device} reserved"))
            for y, pen, name in curves:
                item = self.plot.plot(x, y / self.y_scale, pen=pen, name=name)
                item.setDownsampling(auto=True, method="peak")
                item.setClipToView(True)
        for i, peak in enumerate(data.peaks.itertuples(index=False)):
            color = _CURVE_COLORS[i % len(_CURVE_COLORS)]
            px, py = peak.ts / 1e9, float(peak.peak_bytes) / self.y_scale
            marker = pg.ScatterPlotItem([px], [py], symbol="star", size=14, brush=pg.mkBrush(color))
            marker.setObjectName(f"peak:{peak.device}")
            self.plot.addItem(marker)
            t_lo, t_hi = float(data.curves["ts"].min()), float(data.curves["ts"].max())
            right_half = peak.ts > (t_lo + t_hi) / 2  # the label runs toward the middle
            label = pg.TextItem(
                f"peak {fmt_bytes(peak.peak_bytes)} ({peak.device})",
                color=color,
                anchor=(1, 1) if right_half else (0, 1),
            )
            label.setObjectName(f"peak_label:{peak.device}")
            label.setPos(px, py)
            self.plot.addItem(label)
            self._peak_labels.append(label)
        self.plot.enableAutoRange(axis="x")
        self.y_top = top / self.y_scale
        self._fit_head_room()
        if self.followed_range is not None:  # the timeline zoomed before the data was in
            self.on_range(*self.followed_range)
        peaks = ", ".join(
            f"{p.device} peak {fmt_bytes(p.peak_bytes)} at {fmt_ns(p.ts)}"
            for p in data.peaks.itertuples(index=False)
        )
        self.status.setText(
            f"{peaks} · {len(data.allocations):,} allocations, {len(data.leaks):,} never freed. "
            "Click the plot to list what is alive at that time."
        )
        self.leak_model.set_frame(table_frame(data.leaks, self._trace_end()))
        first_peak = int(data.peaks["ts"].iloc[int(np.argmax(data.peaks["peak_bytes"]))])
        self.show_live_at(first_peak)
        self.updated.emit()

    def _fit_head_room(self, *_: Any) -> None:
        """Head room above the highest curve, in pixels, for the peak labels (a label sits
        above its peak): kept as the plot is resized, so no label is cut at the top."""
        if self.y_top <= 0:
            self.plot.setYRange(0, 1, padding=0)
            return
        height = max(self.plot.plotItem.vb.height(), 1.0)
        text = max((lbl.boundingRect().height() for lbl in self._peak_labels), default=0.0)
        room = min((text + LABEL_ROOM_PX) / height, 0.75)
        self.plot.setYRange(0, self.y_top / (1 - room), padding=0)

    def _failed(self, message: str) -> None:
        self.status.setText(f"Could not read memory: {message}")
        self.updated.emit()

    def _trace_end(self) -> int:
        return int(self.trace.span_ns) if self.trace is not None else 0

    # -- interaction -------------------------------------------------------------------------
    def show_live_at(self, ts_ns: int) -> pd.DataFrame:
        """List the allocations alive at ``ts_ns`` (what a click on the plot does)."""
        if self.data is None:
            return pd.DataFrame(columns=TABLE_COLUMNS)
        self.live_ts = int(ts_ns)
        alive = alive_at(self.data.allocations, self.live_ts)
        frame = table_frame(alive, self._trace_end())
        self.live_model.set_frame(frame)
        self.time_cursor.setValue(self.live_ts / 1e9)
        self.time_cursor.setVisible(True)
        total = int(frame["bytes"].sum()) if len(frame) else 0
        self.tabs.setTabText(
            0, f"Alive at {fmt_ns(self.live_ts)} ({len(frame):,}, {fmt_bytes(total)})"
        )
        notes = [
            f"{fmt_bytes(before)} of the {fmt_bytes(held)} allocated on {device} then "
            "was allocated before the trace began (no allocation event for it in the trace), "
            "so this table cannot list it"
            for device, held, before in allocated_before_trace(self.data, alive, self.live_ts)
        ]
        self.live_note.setText("; ".join(notes) + ("." if notes else ""))
        self.live_note.setVisible(bool(notes))
        self.tabs.setTabText(1, f"Never freed ({len(self.data.leaks):,})")
        return frame

    def _plot_clicked(self, event: Any) -> None:
        if self.data is None or event.button() != Qt.MouseButton.LeftButton:
            return
        view = self.plot.plotItem.vb
        if not view.sceneBoundingRect().contains(event.scenePos()):
            return
        point = view.mapSceneToView(event.scenePos())
        self.show_live_at(int(round(point.x() * 1e9)))

    def _allocation_selected(self, table: QTableView, model: DataFrameModel) -> None:
        rows = present(table.selectionModel()).selectedRows()
        if not rows:
            return
        row = model.row(rows[0].row())
        if int(row["slice"]) >= 0:
            self.slices_selected.emit(np.array([int(row["slice"])], np.int64))
        start = int(row["alloc_ts"])
        end = start + max(int(row["lifetime_ns"]), 1)
        self.range_requested.emit(start, end)


def _binary_unit(top_bytes: float) -> tuple[int, str]:
    """The binary unit to plot bytes in so that the largest value reads 1..1023."""
    for scale, unit in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if top_bytes >= scale:
            return scale, unit
    return 1, "B"


__all__ = ["MemoryPanel"]

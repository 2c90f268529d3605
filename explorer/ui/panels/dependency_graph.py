"""Dependency graph panel: what waited for what, around the selection or over a whole step.

The graph comes from :func:`explorer.analysis.dependency_graph.dependency_graph` and the
highlighted chain from :func:`explorer.analysis.critical_path.critical_path`; which nodes to
draw, and where, from :func:`explorer.analysis.graph_layout.graph_layout` (Qt-free). The
layout is layered so that it reads like the timeline: one lane per track (host threads above device
streams), nested ops on rows below their parents inside the lane, nodes placed left to
right in time order with one column per node. Edges are routed orthogonally through the
free space only — the gutter between columns and the channel between rows — so they never
run through a node or its label. Node colour is the kind (the timeline's colours), edge
style is the edge type; the critical path is thick and red, and when there is one the
other edges are dimmed so it reads at a glance.

Laying out thousands of nodes would freeze the UI, so at most ``max nodes`` are shown —
nearest hops first around a selection, critical-path nodes first for a step — and the panel
says when it cut. Picking nodes, hops and lanes runs in a worker thread; only drawing the
(capped) items happens on the UI thread.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from PyQt6 import sip
from PyQt6.QtCore import QPointF, QRectF, Qt, pyqtSlot
from PyQt6.QtGui import QBrush, QColor, QPainter, QPainterPath, QPen
from PyQt6.QtWidgets import (
    QComboBox,
    QGraphicsItem,
    QGraphicsPathItem,
    QGraphicsRectItem,
    QGraphicsScene,
    QGraphicsSimpleTextItem,
    QGraphicsView,
    QHBoxLayout,
    QLabel,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from explorer.analysis.graph_layout import GraphLayout, graph_layout
from explorer.trace_api import Trace
from explorer.ui.panels import TracePanel, trace_steps
from explorer.ui.qt_types import present
from explorer.ui.timeline.colors import kind_color
from explorer.units import fmt_ns

NODE_W, NODE_H = 120.0, 26.0
COL_GAP, LANE_GAP = 34.0, 44.0  # a lane's name sits above the channel over its first row
ROW_GAP = 12.0  # between the nesting rows of one lane: the channel edges run in
LABEL_W = 170.0
CRITICAL = QColor("#d9453d")

# One row per edge type: colour and Qt pen style. "handoff"/"handback": a track recording
# nothing -> work elsewhere meanwhile -> back (inferred, not causal); "queue": a launch
# blocked on a full launch queue.
_EDGE_TABLE = """
nest          #b0b7bf  DotLine
sibling       #b0b7bf  DotLine
thread_order  #7a8691  SolidLine
handoff       #5c6670  DashLine
handback      #5c6670  DashLine
launch        #57a773  DashLine
stream_order  #3d85c6  SolidLine
cross_stream  #8e5cc4  DashDotLine
sync          #d9453d  DashLine
fwdbwd        #c9b458  DashDotDotLine
data          #e69138  SolidLine
runtime_lock  #a87fcf  DotLine
queue         #c2185b  DashDotLine
"""
#: Edge type → (colour, pen style). Types not listed are drawn grey and solid.
EDGE_STYLES: dict[str, tuple[str, Qt.PenStyle]] = {
    name: (colour, Qt.PenStyle[style])
    for name, colour, style in (row.split() for row in _EDGE_TABLE.strip().splitlines())
}


class _NodeItem(QGraphicsRectItem):
    """One slice as a box; selecting it selects the slice on the timeline."""

    def __init__(self, slice_id: int, rect: QRectF) -> None:
        super().__init__(rect)
        self.slice_id = slice_id
        self.setFlag(QGraphicsItem.GraphicsItemFlag.ItemIsSelectable, True)
        self.setAcceptHoverEvents(True)


class GraphView(QGraphicsView):
    """A pannable, wheel-zoomable view of the graph scene."""

    def __init__(self, scene: QGraphicsScene) -> None:
        super().__init__(scene)
        self.setRenderHint(QPainter.RenderHint.Antialiasing, True)
        self.setDragMode(QGraphicsView.DragMode.ScrollHandDrag)
        self.setTransformationAnchor(QGraphicsView.ViewportAnchor.AnchorUnderMouse)
        self.lane_labels: list[QGraphicsSimpleTextItem] = []

    def wheelEvent(self, event: Any) -> None:  # noqa: N802 - Qt API
        factor = 1.15 if event.angleDelta().y() > 0 else 1 / 1.15
        self.scale(factor, factor)
        self.pin_lane_labels()

    def scrollContentsBy(self, dx: int, dy: int) -> None:  # noqa: N802 - Qt API
        super().scrollContentsBy(dx, dy)
        self.pin_lane_labels()

    def pin_lane_labels(self) -> None:
        """Keep the lane names at the left edge of what is visible, however far the user
        scrolled along the graph."""
        left = self.mapToScene(0, 0).x() + 4
        # The scene may already be gone while the panel is being destroyed.
        self.lane_labels = [label for label in self.lane_labels if not sip.isdeleted(label)]
        for label in self.lane_labels:
            label.setX(left)


class DependencyGraphPanel(TracePanel):
    """The dependency graph around the selected slice (N hops) or for one whole step."""

    READS_WINDOW = True

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.layout_data: GraphLayout | None = None
        self.node_items: dict[int, _NodeItem] = {}
        self.lane_tops: list[float] = []  # scene y of each lane's first row
        self.edge_paths: list[tuple[int, int, QPainterPath]] = []  # as drawn (src, dst, path)
        self.selected_slice: int | None = None  # an id of :attr:`subject`'s
        self._placing = False

        self.mode = QComboBox()
        self.mode.addItem("Around selection", "selection")
        self.mode.addItem("Whole step", "step")
        self.step = QComboBox()
        self.step.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.hops = QSpinBox()
        self.hops.setRange(1, 12)
        self.hops.setValue(2)
        self.hops.setPrefix("hops: ")
        self.max_nodes = QSpinBox()
        self.max_nodes.setRange(10, 5000)
        self.max_nodes.setSingleStep(50)
        self.max_nodes.setValue(300)
        self.max_nodes.setPrefix("max nodes: ")
        for widget in (self.mode, self.step):
            widget.currentIndexChanged.connect(self.refresh)
        for spin in (self.hops, self.max_nodes):
            spin.valueChanged.connect(self.refresh)
        self.status = QLabel("No trace")
        self.status.setWordWrap(True)
        self.scene = QGraphicsScene(self)
        self.scene.selectionChanged.connect(self._selection_changed)
        self.view = GraphView(self.scene)

        bar = QHBoxLayout()
        controls: tuple[QWidget, ...] = (self.mode, self.step, self.hops, self.max_nodes)
        for control in controls:
            bar.addWidget(control)
        bar.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addLayout(bar)
        layout.addWidget(self.status)
        layout.addWidget(self.view, 1)
        self.legend = QLabel(edge_legend_html())
        self.legend.setWordWrap(True)
        layout.addWidget(self.legend)

    # -- contract ----------------------------------------------------------------------------
    def set_trace(self, trace: Trace | None) -> None:
        super().set_trace(trace)
        self.selected_slice = None
        self.layout_data = None
        self._draw(None)
        self.step.blockSignals(True)
        self.step.clear()
        self.step.blockSignals(False)
        if trace is None:
            self.status.setText("No trace")
            return
        self.status.setText("Select an event, or choose “Whole step”.")
        subject = present(self.subject, "the trace")  # whole, or the steps that fit
        self.run_in_background(lambda: trace_steps(subject), self._steps_ready, self._failed)

    @pyqtSlot(int)
    def on_selection(self, slice_id: int) -> None:
        """Centre the graph on the selected slice (in "around selection" mode)."""
        if self.trace_with(slice_id) is None:
            return
        row = self.subject_row(slice_id)
        if row < 0:  # outside the steps that fit in memory
            self.status.setText(self.outside_text(slice_id))
            return
        self.selected_slice = row
        if self.mode.currentData() == "selection":
            self.refresh()
        else:
            self._mark_selected(self.selected_slice)

    @pyqtSlot(int, int)
    def on_range(self, start_ns: int, end_ns: int) -> None:
        """Center the view on the nodes inside the range, if any are drawn."""
        if self.layout_data is None or not len(self.layout_data.nodes):
            return
        nodes = self.layout_data.nodes
        inside = nodes[(nodes["ts"] < end_ns) & (nodes["ts"] + nodes["dur"] > start_ns)]
        if len(inside):
            self.view.centerOn(self.node_items[int(inside["id"].iat[0])])

    # -- computing ---------------------------------------------------------------------------
    def refresh(self, *_: Any) -> None:
        """Recompute the picture for the current mode, step, hops and cap."""
        trace = self.subject
        if trace is None:
            return
        hops, cap = self.hops.value(), self.max_nodes.value()
        if self.mode.currentData() == "selection":
            if self.selected_slice is None:
                self.status.setText("Select an event on the timeline to see what it waited for.")
                return
            center, step = self.selected_slice, None
            what = f"around “{_elide(str(trace.slices['name'].iat[center]), 60)}” ({hops} hops)"
        else:
            center, step = None, self.step.currentData()
            what = f"step {step}" if step is not None else "the whole trace"
        self.status.setText(f"Building the dependency graph of {what}…")
        self.run_in_background(
            lambda: graph_layout(trace.data, step, center, hops, cap),
            lambda result: self._layout_ready(result, what),
            self._failed,
        )

    def _steps_ready(self, steps: pd.DataFrame) -> None:
        self.step.blockSignals(True)
        self.step.clear()
        for row in steps.itertuples(index=False):  # one item per step
            self.step.addItem(f"Step {row.step} ({fmt_ns(row.dur_ns)})", int(row.step))
        if not len(steps):
            self.step.addItem("Whole trace", None)
        self.step.blockSignals(False)
        if self.mode.currentData() == "step" or self.selected_slice is not None:
            self.refresh()
        else:
            self.updated.emit()

    def _layout_ready(self, layout: GraphLayout, what: str) -> None:
        self.layout_data = layout
        self._draw(layout)
        text = f"{len(layout.nodes):,} nodes, {len(layout.edges):,} edges · {what}"
        if layout.limited:
            text += (
                f" · showing {len(layout.nodes):,} of {layout.total_nodes:,} nodes "
                "(raise “max nodes” to see more)"
            )
        if layout.critical_ns:
            text += f" · critical path {fmt_ns(layout.critical_ns)} in red"
        if layout.notes:
            text += " · " + "; ".join(layout.notes)
        self.status.setText(text)
        self.updated.emit()

    def _failed(self, message: str) -> None:
        self.status.setText(f"Could not build the dependency graph: {message}")
        self._draw(None)
        self.updated.emit()

    # -- drawing (UI thread, at most max_nodes items) -----------------------------------------
    def node_rect(self, column: int, lane: int, row: int = 0) -> QRectF:
        x = LABEL_W + column * (NODE_W + COL_GAP)
        y = self.lane_tops[lane] + row * (NODE_H + ROW_GAP) if self.lane_tops else 0.0
        return QRectF(x, y, NODE_W, NODE_H)

    def _draw(self, layout: GraphLayout | None) -> None:
        self._placing = True
        try:
            self.view.lane_labels = []  # before clear(): clearing may scroll the view
            self.node_items = {}
            self.scene.clear()
            if layout is None or not len(layout.nodes):
                return
            self._draw_lanes(layout)
            self._draw_edges(layout, self._draw_nodes(layout))
            if self.selected_slice is not None:
                self._mark_selected(self.selected_slice)
        finally:
            self._placing = False
        self.scene.setSceneRect(self.scene.itemsBoundingRect().adjusted(-20, -20, 20, 20))
        self.frame_columns()
        self.view.pin_lane_labels()

    def frame_columns(self) -> None:
        """Show whole columns only, so no node is cut at the view's left or right edge: the
        view is scaled so that a whole number of columns fills its width, and scrolled so
        its left edge falls in the gutter before a column (the selection's near the middle).
        A graph that fits is shown whole."""
        if not self.node_items:
            return
        nodes = [item.rect() for item in self.node_items.values()]
        left = min(r.left() for r in nodes) - COL_GAP / 2
        right = max(r.right() for r in nodes) + COL_GAP / 2
        pitch = NODE_W + COL_GAP
        total = max(round((right - left) / pitch), 1)
        selected = self.node_items.get(
            self.selected_slice if self.selected_slice is not None else -1
        )
        for _ in range(2):  # again once the scroll bars the new scale needs are in place
            width = max(present(self.view.viewport()).width(), 1)
            shown = min(max(int(width // pitch), 1), total)
            scale = width / (shown * pitch)
            self.view.resetTransform()
            self.view.scale(scale, scale)
            first = 0
            if selected is not None:
                first = max(int(round((selected.rect().left() - left) / pitch)) - shown // 2, 0)
            first = min(first, total - shown)
            x0 = left + first * pitch
            height = present(self.view.viewport()).height() / scale
            y = selected.rect().center().y() if selected is not None else height / 2
            self.view.centerOn(x0 + shown * pitch / 2, y)

    def visible_scene_rect(self) -> QRectF:
        """The part of the scene the view shows."""
        return self.view.mapToScene(present(self.view.viewport()).rect()).boundingRect()

    def _draw_lanes(self, layout: GraphLayout) -> None:
        """One band per lane, as tall as its rows, with its label (kept in view)."""
        width = LABEL_W + len(layout.nodes) * (NODE_W + COL_GAP)
        rows = (
            layout.nodes.groupby("lane")["row"]
            .max()
            .reindex(range(len(layout.lanes)), fill_value=0)
        )
        heights = (rows.to_numpy() + 1) * (NODE_H + ROW_GAP) - ROW_GAP
        self.lane_tops = list(
            np.concatenate([[0.0], np.cumsum(heights + LANE_GAP)[:-1]]).astype(float)
        )
        for lane, label in enumerate(layout.lanes):  # one per lane
            y = self.lane_tops[lane]
            band = self.scene.addRect(
                QRectF(-20, y - LANE_GAP / 2, width + 40, heights[lane] + LANE_GAP),
                QPen(Qt.PenStyle.NoPen),
                QBrush(QColor("#f3f5f7" if lane % 2 == 0 else "#ffffff")),
            )
            present(band).setZValue(-1)
            text = QGraphicsSimpleTextItem(_elide(label, 40))
            text.setBrush(QBrush(QColor("#555")))
            text.setPos(0, y - LANE_GAP / 2 + 1)
            text.setToolTip(label)
            text.setZValue(5)
            self.scene.addItem(text)
            self.view.lane_labels.append(text)

    def _draw_nodes(self, layout: GraphLayout) -> dict[int, QRectF]:
        """One box per node (critical ones outlined); returns each node's rectangle."""
        rects: dict[int, QRectF] = {}
        for node in layout.nodes.itertuples(index=False):  # ≤ max_nodes
            rect = self.node_rect(int(node.column), int(node.lane), int(node.row))
            item = _NodeItem(int(node.id), rect)
            item.setBrush(QBrush(kind_color(node.kind)))
            pen = QPen(CRITICAL, 3) if node.critical else QPen(QColor("#333"), 0.8)
            item.setPen(pen)
            item.setToolTip(
                f"{node.name}\n{node.kind} · {fmt_ns(node.dur)} at {fmt_ns(node.ts)}"
                f"\nslice {node.id}" + ("\non the critical path" if node.critical else "")
            )
            item.setZValue(2)
            label = QGraphicsSimpleTextItem(_elide(node.name, 17), item)
            label.setPos(rect.x() + 4, rect.y() + 5)
            self.scene.addItem(item)
            self.node_items[int(node.id)] = item
            rects[int(node.id)] = rect
        return rects

    def _draw_edges(self, layout: GraphLayout, rects: dict[int, QRectF]) -> None:
        """The edges between the boxes (the others dimmed when a critical one is drawn)."""
        dim = bool(layout.edges["critical"].any()) if len(layout.edges) else False
        self.edge_paths = []
        for k, edge in enumerate(layout.edges.itertuples(index=False)):  # ≤ a few per node
            a, b = rects[int(edge.src)], rects[int(edge.dst)]
            item = _edge_item(a, b, str(edge.type), bool(edge.critical), dim, k % 3)
            self.scene.addItem(item)
            self.edge_paths.append((int(edge.src), int(edge.dst), item.path()))

    def _mark_selected(self, slice_id: int) -> None:
        item = self.node_items.get(slice_id)
        if item is None:
            return
        self._placing = True
        try:
            self.scene.clearSelection()
            item.setSelected(True)
        finally:
            self._placing = False

    def _selection_changed(self) -> None:
        if self._placing:
            return
        ids = [i.slice_id for i in self.scene.selectedItems() if isinstance(i, _NodeItem)]
        if ids:
            self.slices_selected.emit(self.whole_ids(sorted(ids)))


_DASH_TEXT = {
    Qt.PenStyle.SolidLine: "——",
    Qt.PenStyle.DashLine: "- - -",
    Qt.PenStyle.DotLine: "·····",
    Qt.PenStyle.DashDotLine: "-·-·",
    Qt.PenStyle.DashDotDotLine: "-··-",
}


def edge_legend_html() -> str:
    """One line saying how each edge type the graph builds is drawn, and that red is the
    critical path."""
    from explorer.analysis.graph.edges import EDGE_TYPES

    parts = [
        f'<span style="color:{color}">{_DASH_TEXT.get(style, "——")}</span>&nbsp;{kind.replace("_", " ")}'
        for kind, (color, style) in EDGE_STYLES.items()
        if kind in EDGE_TYPES
    ]
    critical = f'<span style="color:{CRITICAL.name()}"><b>━━</b></span>&nbsp;critical path'
    return "<small>" + " &nbsp; ".join([critical, *parts]) + "</small>"


def edge_path(a: QRectF, b: QRectF, lane: int = 0) -> QPainterPath:
    """From the right of ``a`` to the left of ``b`` through free space only: straight when
    ``b`` is the next box on the same row, else out into the gutter after ``a``, along the
    channel above the higher of the two boxes, and down the gutter before ``b``. ``lane``
    (0-2) shifts the channel a little so parallel edges stay apart."""
    start, end = QPointF(a.right(), a.center().y()), QPointF(b.left(), b.center().y())
    path = QPainterPath(start)
    if abs(start.y() - end.y()) < 0.5 and 0 <= end.x() - start.x() <= COL_GAP + 0.5:
        path.lineTo(end)
        return path
    shift = (lane - 1) * 3.0
    out_x = a.right() + COL_GAP / 2 + shift
    in_x = b.left() - COL_GAP / 2 + shift
    channel = min(a.top(), b.top()) - ROW_GAP / 2 + shift / 2
    for point in (
        QPointF(out_x, start.y()),
        QPointF(out_x, channel),
        QPointF(in_x, channel),
        QPointF(in_x, end.y()),
        end,
    ):
        path.lineTo(point)
    return path


def _edge_item(
    a: QRectF, b: QRectF, kind: str, critical: bool, dim: bool = False, lane: int = 0
) -> QGraphicsPathItem:
    """An edge routed by :func:`edge_path`, styled by type; the critical path thick and red,
    the other edges faded when ``dim`` (a critical path is shown)."""
    path = edge_path(a, b, lane)
    color, style = EDGE_STYLES.get(kind, ("#999999", Qt.PenStyle.SolidLine))
    faded = QColor(color)
    if dim:
        faded.setAlphaF(0.35)
    pen = QPen(CRITICAL, 3) if critical else QPen(faded, 1.2, style)
    item = QGraphicsPathItem(path)
    item.setPen(pen)
    item.setZValue(3 if critical else 1)
    item.setToolTip(kind + (" (critical path)" if critical else ""))
    return item


def _elide(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


__all__ = ["DependencyGraphPanel", "edge_legend_html", "edge_path"]

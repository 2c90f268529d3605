"""Operators panel: where the time went, per op or kernel name, for the trace, a step or a range.

The table answers "which ops dominate?" the way ``key_averages()`` does, but over any
window of the timeline: count, total, self and average time, the device time of the work
each op launched, and its share. Double-clicking a row asks the timeline to search for
that name (:attr:`OperatorsPanel.search_requested`); selecting a row highlights its slices.

:func:`operator_stats` is the whole computation, a pure vectorised function of the trace:
self time subtracts children via ``np.bincount`` over parent ids, device time follows launch
flows from runtime calls to device ops and is summed up the parent chain one depth level at a
time (a loop over depths, never over events).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from PyQt6.QtCore import QItemSelectionModel, QModelIndex, pyqtSignal, pyqtSlot
from PyQt6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QVBoxLayout,
    QWidget,
)

from explorer.trace.model import DEVICE_KINDS
from explorer.ui.dataframe_model import DataFrameModel, format_ns
from explorer.ui.panels import TracePanel, results_table, trace_steps

#: Kinds that run on a device, for the device-side share (collectives run on streams too).
DEVICE_SIDE: frozenset[str] = DEVICE_KINDS | {"collective"}

#: The kind filter: label → kinds shown (None = all).
KIND_FILTERS: dict[str, frozenset[str] | None] = {
    "All kinds": None,
    "Host ops": frozenset({"cpu_op", "fallback", "copy", "sync", "compile"}),
    "Device (kernels, copies)": DEVICE_SIDE,
    "Runtime calls": frozenset({"runtime", "sync"}),
    "Python functions": frozenset({"python"}),
    "Annotations": frozenset({"annotation", "device_annotation"}),
}

COLUMNS = ["name", "kind", "side", "count", "total_ns", "self_ns", "avg_ns", "device_ns", "share"]
_FORMATS = {
    "count": "int",
    "total_ns": "ns",
    "self_ns": "ns",
    "avg_ns": "ns",
    "device_ns": "ns",
    "share": "percent",
}
_HEADERS = {
    "total_ns": "total",
    "self_ns": "self",
    "avg_ns": "average",
    "device_ns": "device time",
}


#: Where a slice runs, as :func:`slice_sides` codes it.
SIDES: tuple[str, ...] = ("host", "device", "other")


def slice_sides(trace: Any) -> np.ndarray:
    """Where each slice runs: 0 host thread, 1 device stream (so CUDA's "Event Sync" rows
    on a device count as device time), 2 any other track (the profiler's own "PyTorch
    Profiler (0)" span, which is not work). Traces whose tracks are not typed are split
    by kind."""
    s = trace.slices
    tracks = trace.tracks
    if len(tracks) and "type" in tracks:
        kinds = tracks["type"].astype(str).to_numpy()
        if np.isin(kinds, ["host_thread", "device_stream"]).any():
            codes = np.full(int(tracks["id"].max()) + 1, 2, np.int8)
            codes[tracks["id"].to_numpy()] = np.select(
                [kinds == "host_thread", kinds == "device_stream"], [0, 1], 2
            )
            track = s["track"].to_numpy(np.int64)
            ok = (track >= 0) & (track < len(codes))
            out = np.full(len(s), 2, np.int8)
            out[ok] = codes[track[ok]]
            return out
    return s["kind"].astype(str).isin(DEVICE_SIDE).to_numpy().astype(np.int8)


def device_rows(trace: Any) -> np.ndarray:
    """Whether each slice runs on a device (see :func:`slice_sides`)."""
    return slice_sides(trace) == 1


def operator_stats(
    trace: Any, start_ns: int | None = None, end_ns: int | None = None
) -> pd.DataFrame:
    """Per slice name: ``name, kind, count, total_ns, self_ns, avg_ns, device_ns, share``.

    With a window ``[start_ns, end_ns)`` every slice is clipped to it (a slice half inside
    counts half its time, and counts once); without one the whole trace is used.

    - ``self_ns`` = time minus the part of it covered by direct children on the same track,
      so it is never negative and the ``self_ns`` of all names add up exactly to the time of
      the top-level slices (plus the bits of children that overhang their parent's end).
    - ``device_ns`` = for device ops their own time; for host slices the time of the device
      ops launched (launch flows) from inside them, at any depth.
    - ``share`` = ``self_ns`` over all host-side self time (or all device-side self time,
      for rows on device tracks), so host rows sum to 1 and device rows sum to 1; rows on
      other tracks (the profiler's own span) have none (NaN).

    A name nested in itself (recursive ops) counts its nested time in ``total_ns`` twice,
    as ``torch.profiler``'s ``key_averages`` does; ``self_ns`` never double counts.
    """
    s = trace.slices
    n = len(s)
    if n == 0:
        return pd.DataFrame({c: [] for c in COLUMNS}).astype(
            {c: np.int64 for c in ("count", "total_ns", "self_ns", "avg_ns", "device_ns")}
            | {"share": np.float64}
        )
    ts = s["ts"].to_numpy(np.int64)
    dur = s["dur"].to_numpy(np.int64)
    end = ts + dur
    if start_ns is not None or end_ns is not None:
        lo = np.int64(start_ns if start_ns is not None else ts.min())
        hi = np.int64(end_ns if end_ns is not None else end.max())
        start_ns, end_ns = int(lo), int(hi)
        clipped = np.clip(end, lo, hi) - np.clip(ts, lo, hi)
        inside = (clipped > 0) | ((dur == 0) & (ts >= lo) & (ts < hi))
    else:
        clipped = dur.copy()
        inside = np.ones(n, bool)
    clipped = np.where(inside, clipped, 0)

    parent = s["parent"].to_numpy(np.int64)
    has_parent = (parent >= 0) & inside
    # A child counts against its parent's self time only where it overlaps the parent:
    # real traces have children that overhang their parent's end by a little.
    lo_all = ts if start_ns is None else np.maximum(ts, lo)
    hi_all = end if end_ns is None else np.minimum(end, hi)
    kids = np.flatnonzero(has_parent)
    overlap = np.minimum(hi_all[kids], hi_all[parent[kids]]) - np.maximum(
        lo_all[kids], lo_all[parent[kids]]
    )
    children = np.bincount(parent[kids], weights=np.maximum(overlap, 0), minlength=n)
    self_time = clipped - children.astype(np.int64)

    kinds = s["kind"].astype(str).to_numpy()
    side = slice_sides(trace)
    on_device = side == 1
    device_time = np.where(on_device, clipped, 0).astype(np.float64)
    flows = trace.flows
    if len(flows):
        launch = (flows["type"].astype(str) == "launch").to_numpy()
        src = flows["src"].to_numpy(np.int64)[launch]
        dst = flows["dst"].to_numpy(np.int64)[launch]
        ok = (src >= 0) & (src < n) & (dst >= 0) & (dst < n)
        src, dst = src[ok], dst[ok]
        launched = np.bincount(src, weights=clipped[dst], minlength=n)
        device_time = device_time + np.where(on_device, 0.0, launched)
        depth = s["depth"].to_numpy(np.int64)
        # Sum launched device time up the parent chain, deepest level first: one
        # vectorised step per depth level.
        for level in range(int(depth.max()), 0, -1):
            rows = np.flatnonzero((depth == level) & (parent >= 0) & ~on_device)
            if len(rows):
                device_time += (
                    np.bincount(parent[rows], weights=device_time[rows], minlength=n) * ~on_device
                )

    # Group by (name, kind, side): a host annotation and its copy on a device are two rows.

    names = s["name"]
    if not isinstance(names.dtype, pd.CategoricalDtype):
        names = names.astype("category")
    name_codes = names.cat.codes.to_numpy().astype(np.int64)
    name_codes = np.where(name_codes < 0, len(names.cat.categories), name_codes)
    kind_values, kind_codes = np.unique(kinds, return_inverse=True)
    per_name = len(SIDES) * len(kind_values)  # (kind, side) pairs
    keys = name_codes * per_name + kind_codes.reshape(-1) * len(SIDES) + side
    rows = np.flatnonzero(inside)
    present, group = np.unique(keys[rows], return_inverse=True)
    group = group.reshape(-1)
    groups = len(present)
    count = np.bincount(group, minlength=groups).astype(np.int64)
    total = np.bincount(group, weights=clipped[rows], minlength=groups)
    self_sum = np.bincount(group, weights=self_time[rows], minlength=groups)
    device_sum = np.bincount(group, weights=device_time[rows], minlength=groups)
    labels = np.append(names.cat.categories.astype(str).to_numpy(), "")
    out = pd.DataFrame(
        {
            "name": labels[present // per_name],
            "kind": kind_values[(present % per_name) // len(SIDES)],
            "side": np.asarray(SIDES, dtype=object)[present % len(SIDES)],
            "count": count,
            "total_ns": np.rint(total).astype(np.int64),
            "self_ns": np.rint(self_sum).astype(np.int64),
        }
    )
    out["avg_ns"] = (out["total_ns"] // out["count"].clip(lower=1)).astype(np.int64)
    out["device_ns"] = np.rint(device_sum).astype(np.int64)
    sides = out["side"].to_numpy()
    self_ns = out["self_ns"].to_numpy(np.float64)
    denom = np.zeros(len(out))
    for name in ("host", "device"):  # "other" rows (profiler spans) get no share
        denom[sides == name] = self_ns[sides == name].sum()
    out["share"] = np.divide(self_ns, denom, out=np.full(len(out), np.nan), where=denom > 0)
    return out.sort_values("total_ns", ascending=False, kind="stable").reset_index(drop=True)


class OperatorsPanel(TracePanel):
    """Sortable per-name table for the whole trace, one step, or the range from the timeline."""

    search_requested = pyqtSignal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._steps = pd.DataFrame()
        self._range: tuple[int, int] | None = None
        self._stats = pd.DataFrame(columns=COLUMNS)
        self._following_timeline = False

        self.scope = QComboBox()
        self.scope.setToolTip(
            "Aggregate the whole trace, one step, or the range picked on the timeline"
        )
        self.scope.currentIndexChanged.connect(self._scope_changed)
        self.kind_filter = QComboBox()
        self.kind_filter.addItems(list(KIND_FILTERS))
        self.kind_filter.currentIndexChanged.connect(self._show_stats)
        self.status = QLabel("No trace")
        self.status.setWordWrap(True)

        self.model = DataFrameModel(formats=_FORMATS, headers=_HEADERS)
        self.model.set_frame(pd.DataFrame(columns=COLUMNS))
        self.table = results_table(self.model, {0: 380, 1: 80, 2: 60, 3: 70})
        self.table.doubleClicked.connect(self._double_clicked)
        self.table.selectionModel().selectionChanged.connect(self._row_selected)

        bar = QHBoxLayout()
        bar.addWidget(QLabel("Scope:"))
        bar.addWidget(self.scope, 1)
        bar.addWidget(QLabel("Show:"))
        bar.addWidget(self.kind_filter)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addLayout(bar)
        layout.addWidget(self.status)
        layout.addWidget(self.table, 1)

    # -- contract ----------------------------------------------------------------------------
    def set_trace(self, trace: Any) -> None:
        super().set_trace(trace)
        self._range = None
        self._steps = pd.DataFrame()
        self._stats = pd.DataFrame(columns=COLUMNS)
        self._fill_scopes()
        if trace is None:
            self.model.set_frame(pd.DataFrame(columns=COLUMNS))
            self.status.setText("No trace")
            return
        self.status.setText("Aggregating…")
        self.run_in_background(
            lambda: (trace_steps(trace), operator_stats(trace)), self._trace_ready, self._failed
        )

    @pyqtSlot(int, int)
    def on_range(self, start_ns: int, end_ns: int) -> None:
        """Aggregate ``[start_ns, end_ns)`` (the range dragged on the timeline)."""
        if self.trace is None:
            return
        self._range = (int(min(start_ns, end_ns)), int(max(start_ns, end_ns)))
        self._fill_scopes()
        self.scope.setCurrentIndex(self.scope.count() - 1)  # the range item; triggers compute

    @pyqtSlot(int)
    def on_selection(self, slice_id: int) -> None:
        """Select the row of the selected slice's name (without echoing a selection back)."""
        if self.trace is None or not 0 <= slice_id < len(self.trace.slices):
            return
        name = str(self.trace.slices["name"].iat[int(slice_id)])
        self.select_name(name)

    def select_name(self, name: str) -> bool:
        """Select the row of ``name`` if shown; returns whether it was found."""
        frame = self.model.frame
        if "name" not in frame or not len(frame):
            return False
        hits = np.flatnonzero(frame["name"].to_numpy() == name)
        if not len(hits):
            return False
        row = self.model.view_row(int(hits[0]))
        self._following_timeline = True
        try:
            self.table.selectionModel().select(
                self.model.index(row, 0),
                QItemSelectionModel.SelectionFlag.ClearAndSelect
                | QItemSelectionModel.SelectionFlag.Rows,
            )
            self.table.scrollTo(self.model.index(row, 0))
        finally:
            self._following_timeline = False
        return True

    # -- what is shown -----------------------------------------------------------------------
    @property
    def stats(self) -> pd.DataFrame:
        """The full aggregation of the current scope (before the kind filter)."""
        return self._stats

    def window(self) -> tuple[int, int] | None:
        """The ``[start, end)`` aggregated now, or None for the whole trace."""
        data = self.scope.currentData()
        return None if data is None else (int(data[0]), int(data[1]))

    def _fill_scopes(self) -> None:
        self.scope.blockSignals(True)
        self.scope.clear()
        self.scope.addItem("Whole trace", None)
        for row in self._steps.itertuples(index=False):  # one item per step
            label = f"Step {row.step}  ({format_ns(row.dur_ns)})"
            self.scope.addItem(label, (int(row.start_ns), int(row.end_ns)))
        if self._range is not None:
            a, b = self._range
            self.scope.addItem(f"Range {format_ns(a)} – {format_ns(b)}", (a, b))
        self.scope.blockSignals(False)

    def _trace_ready(self, result: tuple[pd.DataFrame, pd.DataFrame]) -> None:
        self._steps, stats = result
        current = self.scope.currentIndex()
        self._fill_scopes()
        if self._range is None and current <= 0:
            self._stats_ready(stats)
        else:
            self.scope.setCurrentIndex(self.scope.count() - 1)
            self._scope_changed()

    def _scope_changed(self, *_: Any) -> None:
        trace = self.trace
        if trace is None:
            return
        window = self.window()
        self.status.setText("Aggregating…")
        if window is None:
            self.run_in_background(lambda: operator_stats(trace), self._stats_ready, self._failed)
        else:
            a, b = window
            self.run_in_background(
                lambda: operator_stats(trace, a, b), self._stats_ready, self._failed
            )

    def _stats_ready(self, stats: pd.DataFrame) -> None:
        self._stats = stats
        self._show_stats()
        self.updated.emit()

    def _show_stats(self, *_: Any) -> None:
        kinds = KIND_FILTERS[self.kind_filter.currentText()]
        stats = self._stats
        shown = stats if kinds is None else stats[stats["kind"].isin(kinds)]
        self.model.set_frame(shown.reset_index(drop=True))
        window = self.window()
        where = "whole trace" if window is None else self.scope.currentText()
        self.status.setText(f"{len(shown):,} of {len(stats):,} names · {where}")

    def _failed(self, message: str) -> None:
        self.status.setText(f"Could not aggregate operators: {message}")
        self.updated.emit()

    # -- interaction -------------------------------------------------------------------------
    def slice_ids(self, name: str) -> np.ndarray:
        """Ids of the slices called ``name`` inside the current scope."""
        s = self.trace.slices
        mask = (s["name"] == name).to_numpy()
        window = self.window()
        if window is not None:
            ts = s["ts"].to_numpy()
            mask &= (ts < window[1]) & (ts + s["dur"].to_numpy() > window[0])
        return np.flatnonzero(mask).astype(np.int64)

    def _row_selected(self, *_: Any) -> None:
        if self._following_timeline or self.trace is None:
            return
        rows = self.table.selectionModel().selectedRows()
        if not rows:
            return
        name = str(self.model.row(rows[0].row())["name"])
        self.slices_selected.emit(self.slice_ids(name))

    def _double_clicked(self, index: QModelIndex) -> None:
        if not index.isValid():
            return
        self.search_requested.emit(str(self.model.row(index.row())["name"]))


__all__ = ["OperatorsPanel", "operator_stats"]

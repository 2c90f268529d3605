"""Operators panel: where the time went, per op or kernel name, for the trace, a step or a range.

The table answers "which ops dominate?" the way ``key_averages()`` does, but over any
window of the timeline: count, total, self and average time, the device time of the work
each op launched, and its share. Double-clicking a row asks the timeline to search for
that name (:attr:`OperatorsPanel.search_requested`); selecting a row highlights its slices.

:func:`explorer.analysis.operators.operator_stats` does the computation; this module only
shows it.
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

from explorer.analysis.operators import COLUMNS, DEVICE_SIDE, operator_stats
from explorer.trace_api import Trace
from explorer.ui.dataframe_model import DataFrameModel
from explorer.ui.panels import TracePanel, fit_columns, results_table, trace_steps
from explorer.ui.qt_types import present
from explorer.units import fmt_ns

#: The kind filter: label → kinds shown (None = all).
KIND_FILTERS: dict[str, frozenset[str] | None] = {
    "All kinds": None,
    "Host ops": frozenset({"cpu_op", "fallback", "copy", "sync", "compile"}),
    "Device (kernels, copies)": DEVICE_SIDE,
    "Runtime calls": frozenset({"runtime", "sync"}),
    "Python functions": frozenset({"python"}),
    "Annotations": frozenset({"annotation", "device_annotation"}),
}

_FORMATS = {
    "count": "int",
    "total_ns": "ns",
    "self_ns": "ns",
    "avg_ns": "ns",
    "device_ns": "ns",
    "self_share": "percent",
}
_HEADERS = {
    "total_ns": "total",
    "self_ns": "self",
    "avg_ns": "average",
    "device_ns": "device time",
    "self_share": "self % of side",
}
_HEADER_TIPS = {
    "self_share": "This name's self time as a share of all self time on its side (host or "
    "device, the 'side' column) in the scope shown",
    "self_ns": "Time inside this name's slices minus their children",
    "device_ns": "Device time of the work this name launched",
}


class OperatorsPanel(TracePanel):
    """Sortable per-name table for the whole trace, one step, or the range from the timeline."""

    search_requested = pyqtSignal(str)
    READS_WINDOW = True

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

        self.model = DataFrameModel(formats=_FORMATS, headers=_HEADERS, header_tips=_HEADER_TIPS)
        self.model.set_frame(pd.DataFrame(columns=COLUMNS))
        self.table = results_table(self.model, {0: 380, 1: 80, 2: 60, 3: 70})
        present(self.table.horizontalHeader()).setStretchLastSection(False)
        self.table.doubleClicked.connect(self._double_clicked)
        present(self.table.selectionModel()).selectionChanged.connect(self._row_selected)

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
    def set_trace(self, trace: Trace | None) -> None:
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
        subject = present(self.subject, "the trace")  # whole, or the steps that fit
        self.run_in_background(
            lambda: (trace_steps(subject), operator_stats(subject.data)),
            self._trace_ready,
            self._failed,
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
        trace = self.trace_with(slice_id)
        if trace is None:
            return
        name = str(trace.slices["name"].iat[int(slice_id)])
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
            present(self.table.selectionModel()).select(
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

    def scope_range(self) -> tuple[int, int] | None:
        """The ``[start, end)`` aggregated now, or None for the whole trace."""
        data = self.scope.currentData()
        return None if data is None else (int(data[0]), int(data[1]))

    def _fill_scopes(self) -> None:
        self.scope.blockSignals(True)
        self.scope.clear()
        self.scope.addItem(self.scope_label(), None)
        for row in self._steps.itertuples(index=False):  # one item per step
            label = f"Step {row.step}  ({fmt_ns(row.dur_ns)})"
            self.scope.addItem(label, (int(row.start_ns), int(row.end_ns)))
        if self._range is not None:
            a, b = self._range
            self.scope.addItem(f"Range {fmt_ns(a)} – {fmt_ns(b)}", (a, b))
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
        trace = self.subject
        if trace is None:
            return
        window = self.scope_range()
        self.status.setText("Aggregating…")
        if window is None:
            self.run_in_background(
                lambda: operator_stats(trace.data), self._stats_ready, self._failed
            )
        else:
            a, b = window
            self.run_in_background(
                lambda: operator_stats(trace.data, a, b), self._stats_ready, self._failed
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
        fit_columns(self.table, stretch=0)
        self.table.clearSelection()
        self.table.scrollToTop()  # a new scope shows its top rows, not where the last one was
        window = self.scope_range()
        where = self.scope_label().lower() if window is None else self.scope.currentText()
        analysed = self._window()
        if window is not None and analysed is not None and analysed.window is not None:
            a, w = analysed.window, window  # a range reaching past the steps that fit
            if w[0] < a.start_ns or w[1] > a.end_ns:
                where += (
                    f" · only what lies in {analysed.steps_text()}, the steps that fit in memory"
                )
        self.status.setText(f"{len(shown):,} of {len(stats):,} names · {where}")

    def _failed(self, message: str) -> None:
        self.status.setText(f"Could not aggregate operators: {message}")
        self.updated.emit()

    # -- interaction -------------------------------------------------------------------------
    def slice_ids(self, name: str) -> np.ndarray:
        """Ids (the whole trace's) of the slices called ``name`` inside the current scope."""
        assert self.subject is not None
        s = self.subject.slices
        mask = (s["name"] == name).to_numpy()
        window = self.scope_range()
        if window is not None:
            ts = s["ts"].to_numpy()
            mask &= (ts < window[1]) & (ts + s["dur"].to_numpy() > window[0])
        return self.whole_ids(np.flatnonzero(mask))

    def _row_selected(self, *_: Any) -> None:
        if self._following_timeline or self.trace is None:
            return
        rows = present(self.table.selectionModel()).selectedRows()
        if not rows:
            return
        name = str(self.model.row(rows[0].row())["name"])
        self.slices_selected.emit(self.slice_ids(name))

    def _double_clicked(self, index: QModelIndex) -> None:
        if not index.isValid():
            return
        self.search_requested.emit(str(self.model.row(index.row())["name"]))


__all__ = ["OperatorsPanel"]

"""The rank × step heatmap: one row per rank, one column per step, colour = time.

A table model over a :class:`~explorer.ui.job_model.Heatmap`: each cell shows its time and
is coloured on one scale for the whole matrix, from zero (pale) to the longest (deep red),
so a slow rank reads as a dark row and a slow step as a dark column — and 130 ms beside
142 ms look nearly alike, as they are (a scale from the shortest would paint them white
and deep red). The straggler's row
header says so and is drawn in red. Rows are selected whole; :class:`HeatmapView` emits the
selected ranks.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from PyQt6.QtCore import QAbstractTableModel, QModelIndex, Qt, pyqtSignal
from PyQt6.QtGui import QBrush, QColor, QFont, QPen
from PyQt6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QTableView,
    QWidget,
)

from explorer.ui.job_model import Heatmap
from explorer.ui.qt_types import present
from explorer.units import fmt_ns

#: The colour scale's ends: zero and the longest time in the matrix.
LOW = (255, 247, 236)
HIGH = (179, 0, 0)
STRAGGLER_RED = "#b00000"


def cell_color(value: float, lo: float, hi: float) -> QColor:
    """``value`` on the scale from ``lo`` (pale) to ``hi`` (deep red); grey when missing."""
    if np.isnan(value):
        return QColor("#e0e0e0")
    f = 0.0 if hi <= lo else (value - lo) / (hi - lo)
    return QColor(*(int(round(a + (b - a) * f)) for a, b in zip(LOW, HIGH, strict=True)))


class HeatmapModel(QAbstractTableModel):
    """Rows: ranks; columns: steps. ``Qt.UserRole`` gives a cell's nanoseconds."""

    def __init__(self, parent: Any = None) -> None:
        super().__init__(parent)
        self.map = Heatmap([], [], np.zeros((0, 0)), "")
        self.straggler: int | None = None
        self._lo, self._hi = 0.0, 0.0

    def set_heatmap(self, heatmap: Heatmap, straggler: int | None) -> None:
        self.beginResetModel()
        self.map = heatmap
        self.straggler = straggler
        finite = heatmap.values[np.isfinite(heatmap.values)]
        self._lo = min(float(finite.min()), 0.0) if len(finite) else 0.0
        self._hi = float(finite.max()) if len(finite) else 0.0
        self.endResetModel()

    def rowCount(self, parent: QModelIndex | None = None) -> int:  # noqa: N802 - Qt API
        return len(self.map.ranks)

    def columnCount(self, parent: QModelIndex | None = None) -> int:  # noqa: N802 - Qt API
        return len(self.map.steps)

    def data(self, index: QModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        value = float(self.map.values[index.row(), index.column()])
        if role == Qt.ItemDataRole.DisplayRole:
            return "" if np.isnan(value) else fmt_ns(value)
        if role == Qt.ItemDataRole.BackgroundRole:
            return QBrush(cell_color(value, self._lo, self._hi))
        if role == Qt.ItemDataRole.ForegroundRole:
            dark = not np.isnan(value) and self._hi > self._lo
            dark = dark and (value - self._lo) / (self._hi - self._lo) > 0.55
            return QBrush(QColor("white" if dark else "black"))
        if role == Qt.ItemDataRole.TextAlignmentRole:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.UserRole:
            return value
        return None

    def headerData(  # noqa: N802 - Qt API
        self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole
    ) -> Any:
        if orientation == Qt.Orientation.Horizontal:
            if role == Qt.ItemDataRole.DisplayRole:
                return f"step {self.map.steps[section]}"
            return None
        rank = self.map.ranks[section]
        mark = rank == self.straggler
        if role == Qt.ItemDataRole.DisplayRole:
            return f"rank {rank}  ◀ straggler" if mark else f"rank {rank}"
        if role == Qt.ItemDataRole.ForegroundRole and mark:
            return QBrush(QColor(STRAGGLER_RED))
        if role == Qt.ItemDataRole.FontRole and mark:
            font = QFont()
            font.setBold(True)
            return font
        return None


class _KeepColour(QStyledItemDelegate):
    """Draws a selected cell in its own colour with a frame, not the selection colour (which
    would hide the heat of exactly the ranks the user picked)."""

    def paint(self, painter: Any, option: QStyleOptionViewItem, index: QModelIndex) -> None:
        opt = QStyleOptionViewItem(option)
        selected = bool(opt.state & QStyle.StateFlag.State_Selected)
        opt.state &= ~QStyle.StateFlag.State_Selected
        super().paint(painter, opt, index)
        if selected:
            painter.save()
            painter.setPen(QPen(QColor("#1f3c88"), 3))
            painter.drawRect(opt.rect.adjusted(1, 1, -2, -2))
            painter.restore()


class HeatmapView(QTableView):
    """The heatmap table. ``ranks_selected(list)`` when the selected rows change;
    ``rank_activated(rank)`` on a double click or Enter (open its full window)."""

    ranks_selected = pyqtSignal(list)
    rank_activated = pyqtSignal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("job_heatmap")
        self.heat = HeatmapModel(self)
        self.setModel(self.heat)
        self.setItemDelegate(_KeepColour(self))
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        columns = present(self.horizontalHeader())
        columns.setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        columns.setMinimumSectionSize(60)
        present(self.verticalHeader()).setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        present(self.selectionModel()).selectionChanged.connect(self._selection_changed)
        self.activated.connect(lambda index: self.rank_activated.emit(self.rank_of(index.row())))

    def rank_of(self, row: int) -> int:
        return int(self.heat.map.ranks[row])

    def row_of(self, rank: int) -> int:
        return self.heat.map.ranks.index(rank)

    def selected_ranks(self) -> list[int]:
        rows = sorted({i.row() for i in present(self.selectionModel()).selectedRows()})
        return [self.rank_of(r) for r in rows]

    def _selection_changed(self, *_: Any) -> None:
        self.ranks_selected.emit(self.selected_ranks())

"""A Qt table model over a pandas DataFrame, so any analysis result can be shown as a table.

Analyses return DataFrames; views should not copy them into per-cell Python objects. The
model keeps one numpy array per column and formats a cell only when Qt asks for it, so a
table of a million rows costs the arrays it already had. Sorting reorders a permutation
array (a stable ``argsort`` per column), never the frame itself.

Columns may carry a *format*: ``"ns"`` (nanoseconds → ``1.25 ms``), ``"bytes"``
(→ ``3.0 MiB``), ``"percent"`` (a 0..1 share → ``12.5 %``), ``"int"`` (thousands
separators), or any callable ``value -> str``. Raw values stay available through
:data:`RAW_ROLE` (and are what sorting compares), so a sorted "total" column sorts by
nanoseconds, not by the text ``"9 µs" > "10 ms"``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd
from PyQt6.QtCore import QAbstractTableModel, QModelIndex, QObject, Qt

from explorer.units import fmt_bytes, fmt_ns, fmt_rate

#: Role under which :meth:`DataFrameModel.data` returns the unformatted cell value.
RAW_ROLE = Qt.ItemDataRole.UserRole + 1

Formatter = Callable[[Any], str]


def _missing(value: Any) -> bool:
    if value is None:
        return True
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def format_percent(share: Any) -> str:
    """A 0..1 share as ``"12.5 %"``."""
    if _missing(share):
        return ""
    return f"{float(share) * 100:.1f} %"


def format_int(n: Any) -> str:
    """An integer with thousands separators (``"1,234,567"``)."""
    if _missing(n):
        return ""
    return f"{int(n):,}"


FORMATS: dict[str, Formatter] = {
    "ns": fmt_ns,
    "bytes": fmt_bytes,
    "percent": format_percent,
    "int": format_int,
    "hex": lambda v: "" if _missing(v) else f"0x{int(v):x}",  # a memory address
    "gbps": lambda v: "" if _missing(v) else fmt_rate(float(v) * 1e9),  # GB/s, in human units
}


def _plain(value: Any) -> str:
    if _missing(value):
        return ""
    if isinstance(value, float | np.floating):
        return f"{value:.6g}" if math.isfinite(value) else str(value)
    return str(value)


class DataFrameModel(QAbstractTableModel):
    """A read-only, sortable view of a DataFrame.

    ``formats`` maps column name → a key of :data:`FORMATS` or a callable; ``headers``
    optionally renames columns for display. :meth:`source_row` turns a view row into the
    frame's positional row (what to look up after the user sorted the table), and
    :meth:`row` returns that row as a Series.
    """

    def __init__(
        self,
        frame: pd.DataFrame | None = None,
        formats: Mapping[str, str | Formatter] | None = None,
        headers: Mapping[str, str] | None = None,
        parent: QObject | None = None,
        header_tips: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(parent)
        self._formats: dict[str, Formatter] = {}
        self._headers: dict[str, str] = dict(headers or {})
        self._header_tips: dict[str, str] = dict(header_tips or {})
        self._frame = pd.DataFrame()
        self._columns: list[np.ndarray] = []
        self._order = np.zeros(0, np.int64)
        self._sort: tuple[int, Qt.SortOrder] | None = None
        self.set_formats(formats or {})
        self.set_frame(frame if frame is not None else pd.DataFrame())

    # -- data in ----------------------------------------------------------------------------
    def set_frame(self, frame: pd.DataFrame) -> None:
        """Show ``frame`` (kept by reference, never modified); re-applies the current sort."""
        self.beginResetModel()
        self._frame = frame
        self._columns = [frame.iloc[:, i].to_numpy() for i in range(frame.shape[1])]
        self._order = np.arange(len(frame), dtype=np.int64)
        if self._sort is not None and self._sort[0] < len(self._columns):
            self._order = self._sorted_order(*self._sort)
        else:
            self._sort = None
        self.endResetModel()

    def set_formats(self, formats: Mapping[str, str | Formatter]) -> None:
        """Set how columns are displayed (see the module docstring)."""
        resolved: dict[str, Formatter] = {}
        for column, fmt in formats.items():
            if isinstance(fmt, str):
                if fmt not in FORMATS:
                    raise ValueError(f"unknown column format {fmt!r}; use one of {sorted(FORMATS)}")
                resolved[column] = FORMATS[fmt]
            else:
                resolved[column] = fmt
        self._formats = resolved
        if self._columns:
            self.dataChanged.emit(
                self.index(0, 0), self.index(self.rowCount() - 1, self.columnCount() - 1)
            )

    @property
    def frame(self) -> pd.DataFrame:
        """The frame as given (unsorted)."""
        return self._frame

    def sorted_frame(self) -> pd.DataFrame:
        """The frame in the order the view shows it."""
        return self._frame.iloc[self._order]

    # -- row mapping -------------------------------------------------------------------------
    def source_row(self, view_row: int) -> int:
        """Positional row in :attr:`frame` shown at ``view_row``."""
        return int(self._order[view_row])

    def view_row(self, source_row: int) -> int:
        """Where the frame's positional row ``source_row`` is shown, or -1."""
        hits = np.flatnonzero(self._order == source_row)
        return int(hits[0]) if len(hits) else -1

    def row(self, view_row: int) -> pd.Series:
        """The frame row shown at ``view_row``."""
        return self._frame.iloc[self.source_row(view_row)]

    # -- QAbstractTableModel -----------------------------------------------------------------
    def rowCount(self, parent: QModelIndex | None = None) -> int:  # noqa: N802 - Qt API
        if parent is not None and parent.isValid():
            return 0
        return len(self._order)

    def columnCount(self, parent: QModelIndex | None = None) -> int:  # noqa: N802 - Qt API
        if parent is not None and parent.isValid():
            return 0
        return len(self._columns)

    def data(self, index: QModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        column = index.column()
        value = self._columns[column][self._order[index.row()]]
        if role == Qt.ItemDataRole.DisplayRole:
            name = str(self._frame.columns[column])
            fmt = self._formats.get(name)
            return fmt(value) if fmt is not None else _plain(value)
        if role == RAW_ROLE:
            return value.item() if isinstance(value, np.generic) else value
        if role == Qt.ItemDataRole.ToolTipRole:
            name = str(self._frame.columns[column])
            if name in self._formats and not _missing(value):
                return f"{self._formats[name](value)} ({_plain(value)})"
            return _plain(value)
        if role == Qt.ItemDataRole.TextAlignmentRole:
            if self._is_numeric(column):
                return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            return int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        return None

    def headerData(  # noqa: N802 - Qt API
        self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole
    ) -> Any:
        if role not in (Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.ToolTipRole):
            return None
        if orientation == Qt.Orientation.Horizontal:
            if section >= len(self._columns):
                return None
            name = str(self._frame.columns[section])
            if role == Qt.ItemDataRole.ToolTipRole:
                return self._header_tips.get(name)
            return self._headers.get(name, name)
        if role == Qt.ItemDataRole.ToolTipRole:
            return None
        return str(section + 1)

    def sort(self, column: int, order: Qt.SortOrder = Qt.SortOrder.AscendingOrder) -> None:
        """Sort by a column's raw values (stable; missing values last either way)."""
        if column < 0 or column >= len(self._columns):
            return
        self.layoutAboutToBeChanged.emit()
        self._sort = (column, order)
        self._order = self._sorted_order(column, order)
        self.layoutChanged.emit()

    # -- internals ---------------------------------------------------------------------------
    def _is_numeric(self, column: int) -> bool:
        return self._columns[column].dtype.kind in "iufb"

    def _sorted_order(self, column: int, order: Qt.SortOrder) -> np.ndarray:
        """Stable order by the column's raw values (ties keep frame order either way);
        text compares case-insensitively, categories once per category, not per row."""
        keys, missing = _sort_keys(self._frame.iloc[:, column])
        descending = order == Qt.SortOrder.DescendingOrder
        order_arr = np.argsort(-keys if descending else keys, kind="stable").astype(np.int64)
        if missing.any():
            order_arr = np.concatenate(
                [order_arr[~missing[order_arr]], order_arr[missing[order_arr]]]
            )
        return order_arr


def _sort_keys(series: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Numbers that sort like the column (signed, so negating reverses), and where it is missing."""
    if isinstance(series.dtype, pd.CategoricalDtype):
        labels = pd.Series(series.cat.categories.astype(str)).str.lower().to_numpy(dtype=str)
        rank = np.unique(labels, return_inverse=True)[1].reshape(-1).astype(np.int64)
        codes = series.cat.codes.to_numpy()
        return np.where(codes >= 0, rank[np.maximum(codes, 0)], 0), codes < 0
    values = series.to_numpy()
    if values.dtype.kind == "b":
        return values.astype(np.int8), np.zeros(len(values), bool)
    if values.dtype.kind in "iu":
        return values.astype(np.int64 if values.dtype.kind == "i" else np.float64), np.zeros(
            len(values), bool
        )
    if values.dtype.kind == "f":
        return values, np.isnan(values)
    # Anything else (object text): rank the distinct values once, then look rows up.
    codes, uniques = pd.factorize(series, use_na_sentinel=True)
    labels = pd.Series(np.asarray(uniques, dtype=object)).astype(str).str.lower()
    rank = np.unique(labels.to_numpy(dtype=str), return_inverse=True)[1].reshape(-1)
    rank = rank.astype(np.int64)
    return np.where(codes >= 0, rank[np.maximum(codes, 0)] if len(rank) else 0, 0), codes < 0

"""DataFrameModel: formats cells for people, sorts by raw values, maps view rows back."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np
import pandas as pd
import pytest
from PyQt6.QtCore import Qt
from PyQt6.QtWidgets import QTableView

from explorer.ui.dataframe_model import (
    RAW_ROLE,
    DataFrameModel,
    format_percent,
)
from explorer.units import fmt_bytes, fmt_ns


@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (0, "0 ns"),
        (830, "830 ns"),
        (1_250, "1.25 µs"),
        (12_500_000, "12.5 ms"),
        (250_000_000, "250 ms"),
        (3_000_000_000, "3.00 s"),
        (-2_000, "-2.00 µs"),
        (999_999_999, "1.00 s"),
        (999_400, "1.00 ms"),
        (None, ""),
        (np.nan, ""),
    ],
)
def test_fmt_ns(ns, text):
    assert fmt_ns(ns) == text


def test_format_bytes_and_percent():
    assert fmt_bytes(512) == "512 B"
    assert fmt_bytes(1536) == "1.50 KiB"
    assert fmt_bytes(3 << 30) == "3.00 GiB"
    assert fmt_bytes(-(1 << 20)) == "-1.00 MiB"
    assert format_percent(0.125) == "12.5 %"


def _frame() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "name": pd.Categorical(["b_op", "a_op", "c_op", None]),
            "total": np.array([9_000, 10_000_000, 500, 7], np.int64),
            "share": [0.1, 0.8, np.nan, 0.05],
        }
    )


def test_display_raw_and_tooltip(qtbot):
    model = DataFrameModel(_frame(), formats={"total": "ns", "share": "percent"})
    assert model.rowCount() == 4 and model.columnCount() == 3
    idx = model.index(1, 1)
    assert model.data(idx) == "10.0 ms"
    assert model.data(idx, RAW_ROLE) == 10_000_000
    assert "10000000" in model.data(idx, Qt.ItemDataRole.ToolTipRole)
    assert model.data(model.index(2, 2)) == ""  # NaN shows empty, not "nan"
    assert model.data(model.index(3, 0)) == ""
    assert model.headerData(1, Qt.Orientation.Horizontal) == "total"
    align = model.data(idx, Qt.ItemDataRole.TextAlignmentRole)
    assert align & int(Qt.AlignmentFlag.AlignRight)


def test_sort_numeric_by_raw_value_not_text(qtbot):
    model = DataFrameModel(_frame(), formats={"total": "ns"})
    model.sort(1, Qt.SortOrder.DescendingOrder)
    totals = [model.data(model.index(r, 1), RAW_ROLE) for r in range(4)]
    assert totals == [10_000_000, 9_000, 500, 7]
    assert model.source_row(0) == 1
    assert model.row(0)["name"] == "a_op"
    assert model.view_row(1) == 0
    model.sort(1, Qt.SortOrder.AscendingOrder)
    assert [model.data(model.index(r, 1), RAW_ROLE) for r in range(4)] == [
        7,
        500,
        9_000,
        10_000_000,
    ]


def test_sort_missing_last_and_text(qtbot):
    model = DataFrameModel(_frame())
    model.sort(2, Qt.SortOrder.DescendingOrder)
    shares = [model.data(model.index(r, 2), RAW_ROLE) for r in range(4)]
    assert shares[:3] == [0.8, 0.1, 0.05] and np.isnan(shares[3])
    model.sort(0, Qt.SortOrder.AscendingOrder)
    names = [model.data(model.index(r, 0)) for r in range(4)]
    assert names == ["a_op", "b_op", "c_op", ""]


def test_set_frame_keeps_sort_and_headers(qtbot):
    model = DataFrameModel(_frame(), headers={"total": "Total time"})
    model.sort(1, Qt.SortOrder.DescendingOrder)
    bigger = pd.concat([_frame(), _frame().assign(total=[1, 2, 3, 20_000_000])], ignore_index=True)
    model.set_frame(bigger)
    assert model.rowCount() == 8
    assert model.data(model.index(0, 1), RAW_ROLE) == 20_000_000
    assert model.headerData(1, Qt.Orientation.Horizontal) == "Total time"
    assert model.sorted_frame()["total"].iloc[0] == 20_000_000


def test_unknown_format_is_rejected():
    with pytest.raises(ValueError, match="unknown column format"):
        DataFrameModel(_frame(), formats={"total": "parsecs"})


def test_in_a_sorting_table_view(qtbot):
    view = QTableView()
    qtbot.addWidget(view)
    view.setSortingEnabled(True)
    model = DataFrameModel(_frame(), formats={"total": "ns"})
    view.setModel(model)
    view.sortByColumn(1, Qt.SortOrder.DescendingOrder)
    assert model.data(model.index(0, 1)) == "10.0 ms"
    empty = DataFrameModel()
    view.setModel(empty)
    assert empty.rowCount() == 0 and empty.columnCount() == 0


def test_sort_is_stable_both_ways_and_categories_case_insensitive(qtbot):
    frame = pd.DataFrame(
        {
            "name": pd.Categorical(["b", "A", "c", "a", None]),
            "count": np.array([2, 1, 2, 1, 2], np.uint32),
            "flag": [True, False, True, False, True],
            "text": ["x", "Y", None, "y", "X"],
        }
    )
    model = DataFrameModel(frame)
    model.sort(1, Qt.SortOrder.DescendingOrder)  # ties keep frame order
    assert [model.source_row(r) for r in range(5)] == [0, 2, 4, 1, 3]
    model.sort(0, Qt.SortOrder.AscendingOrder)
    assert [model.source_row(r) for r in range(5)] == [1, 3, 0, 2, 4]
    model.sort(0, Qt.SortOrder.DescendingOrder)
    assert [model.source_row(r) for r in range(5)] == [2, 0, 1, 3, 4]  # missing stays last
    model.sort(2, Qt.SortOrder.DescendingOrder)
    assert [model.source_row(r) for r in range(5)] == [0, 2, 4, 1, 3]
    model.sort(3, Qt.SortOrder.AscendingOrder)
    assert [model.source_row(r) for r in range(5)] == [0, 4, 1, 3, 2]

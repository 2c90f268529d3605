"""Operators panel on real traces: totals match the slices table, scopes, and interaction."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from PyQt6.QtCore import Qt

import explorer
from explorer.analysis.operators import operator_stats
from explorer.trace.model import DEVICE_KINDS
from explorer.ui.dataframe_model import RAW_ROLE
from explorer.ui.panels.operators import OperatorsPanel
from tests.conftest import shared_trace_files

AMD = "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz"
DEVICE = DEVICE_KINDS | {"collective"}


@pytest.fixture(scope="module")
def amd(shared_traces):
    return explorer.load(shared_traces / AMD)


@pytest.fixture
def panel(qtbot, amd):
    p = OperatorsPanel()
    qtbot.addWidget(p)
    p.resize(900, 500)
    p.show()
    with qtbot.waitSignal(p.updated, timeout=20_000):
        p.set_trace(amd)
    return p


@pytest.mark.parametrize("path", shared_trace_files(), ids=lambda p: p.name[:40])
def test_stats_partition_every_shared_trace(path):
    """On every real trace: counts are the slices table's but for the calls that are the
    only child of a call of their name (one call, as the TensorBoard plugin counts it),
    totals never exceed it (a call inside a call of the same name counts once), self time
    never negative. The exact values are checked against a brute force in
    tests/analysis/test_operators.py."""
    trace = explorer.load(path)
    stats = operator_stats(trace)
    s = trace.slices
    names = s["name"].astype(str).tolist()
    kinds = s["kind"].astype(str).tolist()
    parents = s["parent"].tolist()
    sides = trace.sides().tolist()
    kids = [0] * len(s)
    for i, p in enumerate(parents):
        if p >= 0 and kinds[i] not in ("runtime", "sync"):
            kids[p] += 1
    merged = sum(
        1
        for i, p in enumerate(parents)
        if p >= 0
        and kids[p] == 1
        and (names[p], kinds[p], sides[p]) == (names[i], kinds[i], sides[i])
    )
    assert int(stats["count"].sum()) == len(s) - merged
    assert int(stats["total_ns"].sum()) <= int(s["dur"].sum())
    assert (stats["self_ns"] >= 0).all()
    assert (stats["device_ns"] >= 0).all()
    for side in ("host", "device"):
        rows = stats["side"] == side
        if stats.loc[rows, "self_ns"].sum() > 0:
            assert stats.loc[rows, "self_share"].sum() == pytest.approx(1.0)
    assert stats.loc[stats["side"] == "other", "self_share"].isna().all()


def test_profiler_span_is_not_host_work(amd):
    """The profiler's own "PyTorch Profiler (0)" span sits on its own track: listed, but
    outside the host share so it cannot claim half the host time."""
    stats = operator_stats(amd)
    row = stats[stats["name"] == "PyTorch Profiler (0)"].iloc[0]
    assert row["side"] == "other" and np.isnan(row["self_share"])
    host = stats[stats["side"] == "host"]
    assert host["self_share"].sum() == pytest.approx(1.0)


def test_device_time_follows_launch_flows(amd):
    """hipLaunchKernel's device time is exactly the time of the ops its calls launched."""
    stats = operator_stats(amd)
    s, f = amd.slices, amd.flows
    launch = f[f["type"] == "launch"]
    launchers = (s["name"] == "hipLaunchKernel").to_numpy()[launch["src"].to_numpy()]
    expected = int(s["dur"].to_numpy()[launch["dst"].to_numpy()[launchers]].sum())
    row = stats[(stats["name"] == "hipLaunchKernel") & (stats["kind"] == "runtime")].iloc[0]
    assert expected > 0
    assert int(row["device_ns"]) == expected
    kernels = stats[stats["kind"] == "kernel"]
    assert (kernels["device_ns"] == kernels["total_ns"]).all()


def test_panel_shows_whole_trace(panel, amd):
    stats = operator_stats(amd)
    model = panel.model
    assert model.rowCount() == len(stats)
    shown = model.frame
    assert int(shown["total_ns"].sum()) == int(stats["total_ns"].sum())
    assert panel.scope_range() is None
    assert "names" in panel.status.text()
    assert panel.scope.count() >= 2  # whole trace + the trace's steps


def test_step_scope_clips_to_the_step(qtbot, panel, amd):
    steps = amd.steps()
    step = steps.iloc[0]
    with qtbot.waitSignal(panel.updated, timeout=20_000):
        panel.scope.setCurrentIndex(1)
    lo, hi = int(step["start_ns"]), int(step["end_ns"])
    assert panel.scope_range() == (lo, hi)
    s = amd.slices
    clipped = np.clip(s["ts"] + s["dur"], lo, hi) - np.clip(s["ts"], lo, hi)
    pd.testing.assert_frame_equal(panel.stats, operator_stats(amd, lo, hi))
    assert int(panel.stats["total_ns"].sum()) <= int(clipped.sum())
    assert int(panel.stats["count"].sum()) == int(
        (clipped > 0).sum() + ((s["dur"] == 0) & (s["ts"] >= lo) & (s["ts"] < hi)).sum()
    )


def test_range_from_timeline(qtbot, panel, amd):
    lo, hi = 1_000_000, 3_000_000
    with qtbot.waitSignal(panel.updated, timeout=20_000):
        panel.on_range(hi, lo)  # reversed on purpose: a drag to the left
    assert panel.scope_range() == (lo, hi)
    assert panel.scope.currentText().startswith("Range")
    expected = operator_stats(amd, lo, hi)
    pd.testing.assert_frame_equal(panel.stats, expected)
    assert int(panel.stats["total_ns"].max()) <= hi - lo


def test_sort_by_header_and_kind_filter(qtbot, panel):
    header = panel.table.horizontalHeader()
    col = list(panel.model.frame.columns).index("count")
    panel.table.sortByColumn(col, Qt.SortOrder.DescendingOrder)
    counts = [
        panel.model.data(panel.model.index(r, col), RAW_ROLE) for r in range(panel.model.rowCount())
    ]
    assert counts == sorted(counts, reverse=True)
    assert header.sortIndicatorSection() == col
    panel.kind_filter.setCurrentText("Device (kernels, copies)")
    kinds = set(panel.model.frame["kind"])
    assert kinds and kinds <= DEVICE
    assert panel.model.rowCount() < len(panel.stats)


def test_double_click_requests_search(qtbot, panel):
    index = panel.model.index(0, 0)
    name = panel.model.data(index)
    rect = panel.table.visualRect(index)
    with qtbot.waitSignal(panel.search_requested, timeout=2_000) as blocker:
        # A real double click is press, release, then the double-click event.
        qtbot.mouseClick(panel.table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
        qtbot.mouseDClick(panel.table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert blocker.args == [name]


def test_click_row_selects_its_slices(qtbot, panel, amd):
    row = int(np.flatnonzero(panel.model.sorted_frame()["name"].to_numpy() == "hipLaunchKernel")[0])
    rect = panel.table.visualRect(panel.model.index(row, 0))
    panel.table.scrollTo(panel.model.index(row, 0))
    rect = panel.table.visualRect(panel.model.index(row, 0))
    with qtbot.waitSignal(panel.slices_selected, timeout=2_000) as blocker:
        qtbot.mouseClick(panel.table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    ids = blocker.args[0]
    assert isinstance(ids, np.ndarray) and len(ids) == 12
    assert set(amd.slices["name"].to_numpy()[ids].astype(str)) == {"hipLaunchKernel"}


def test_timeline_selection_selects_row_without_echo(qtbot, panel, amd):
    sid = int(np.flatnonzero((amd.slices["name"] == "aten::mse_loss_backward").to_numpy())[0])
    with qtbot.assertNotEmitted(panel.slices_selected):
        panel.on_selection(sid)
    rows = panel.table.selectionModel().selectedRows()
    assert len(rows) == 1
    assert panel.model.row(rows[0].row())["name"] == "aten::mse_loss_backward"


def test_no_trace_clears(qtbot, panel):
    panel.set_trace(None)
    assert panel.model.rowCount() == 0
    assert panel.status.text() == "No trace"
    panel.on_range(0, 10)  # no trace: ignored, no crash
    panel.on_selection(3)


def test_background_results_arrive_on_the_ui_thread_and_stale_ones_are_dropped(qtbot):
    """The panels' runner: work runs in a pool thread, ``done`` runs on the UI thread, and
    only the latest request's result is delivered."""
    import threading
    import time

    p = OperatorsPanel()
    qtbot.addWidget(p)
    seen: list[tuple[str, bool]] = []
    workers: list[bool] = []

    def slow() -> str:
        workers.append(threading.current_thread() is threading.main_thread())
        time.sleep(0.3)
        return "old"

    def fast() -> str:
        workers.append(threading.current_thread() is threading.main_thread())
        return "new"

    def done(result: str) -> None:
        seen.append((result, threading.current_thread() is threading.main_thread()))

    p.run_in_background(slow, done)
    p.run_in_background(fast, done)
    qtbot.waitUntil(lambda: not p.busy(), timeout=5_000)
    assert workers == [False, False]
    assert seen == [("new", True)]
    errors: list[str] = []
    p.run_in_background(lambda: 1 / 0, done, errors.append)
    qtbot.waitUntil(lambda: bool(errors), timeout=5_000)
    assert "ZeroDivisionError" in errors[0]


def test_table_starts_in_the_analysis_order(panel):
    """Before the user sorts, rows stay largest total first (not alphabetical)."""
    totals = [
        panel.model.data(panel.model.index(r, 4), RAW_ROLE) for r in range(panel.model.rowCount())
    ]
    assert panel.model.frame.columns[4] == "total_ns"
    assert totals == sorted(totals, reverse=True)
    assert panel.table.horizontalHeader().sortIndicatorSection() == -1


def test_columns_fit_names_elide_at_the_end_and_a_range_shows_its_top_rows(
    window, open_trace, shared_trace, qtbot
) -> None:
    """A real NVIDIA trace in the window: every number column is at least as wide as its
    header and its top values (no ``devi…tion``); names elide at the end with the whole name
    as tooltip; the share column says of what; a range picked after scrolling shows the top
    of its own table."""
    from PyQt6.QtCore import Qt

    open_trace(
        window,
        shared_trace("critical_path__alexnet__benchmark_result_2869224_1695835535_trace.json.gz"),
    )
    panel = window.panels["operators"]
    window.docks["operators"].raise_()
    qtbot.waitUntil(lambda: panel.model.rowCount() > 20, timeout=30000)
    table, model = panel.table, panel.model
    header = table.horizontalHeader()
    fm, hfm = table.fontMetrics(), header.fontMetrics()
    for column in range(1, model.columnCount()):
        title = str(model.headerData(column, Qt.Orientation.Horizontal))
        assert header.sectionSize(column) >= hfm.horizontalAdvance(title), title
        for row in range(min(model.rowCount(), 50)):
            text = str(model.data(model.index(row, column)))
            assert header.sectionSize(column) >= fm.horizontalAdvance(text), (title, text)
    assert table.textElideMode() == Qt.TextElideMode.ElideRight
    names = model.frame["name"].astype(str)
    longest = int(names.str.len().idxmax())
    index = model.index(model.view_row(longest), 0)
    assert model.data(index, Qt.ItemDataRole.ToolTipRole) == names.iat[longest]
    share = list(model.frame.columns).index("self_share")
    assert "%" in str(model.headerData(share, Qt.Orientation.Horizontal))
    assert "side" in model.headerData(share, Qt.Orientation.Horizontal, Qt.ItemDataRole.ToolTipRole)

    table.scrollToBottom()
    assert table.verticalScrollBar().value() > 0
    a, b = window.timeline.visible_range()
    with qtbot.waitSignal(panel.updated, timeout=30000):
        window.timeline.range_selected.emit(int(a + (b - a) * 0.2), int(a + (b - a) * 0.6))
    assert panel.scope_range() is not None
    assert table.verticalScrollBar().value() == 0
    assert table.rowAt(0) == 0

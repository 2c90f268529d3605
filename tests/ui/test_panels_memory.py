"""Memory panel on a real torch.profiler run (profile_memory=True, CPU) and on a real
trace without memory events."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
import pytest
from PyQt6.QtCore import QPointF, Qt

import explorer
from explorer.analysis.memory import memory_timeline
from explorer.analysis.memory_view import allocation_lifetimes
from explorer.ui.panels.memory import PLOT_MIN_H, MemoryPanel
from explorer.units import fmt_bytes

KEPT_BYTES = [4096 * (i + 1) for i in range(3)]  # float32 tensors kept alive to the end


def _workload(steps: int, keep: list) -> None:
    import torch

    x = torch.randn(128, 128)
    for i in range(steps):
        y = (x @ x).relu()
        _ = y.sum()
        keep.append(torch.empty(1024 * (i + 1)))  # never freed while profiling: a "leak"


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    """A real CPU profile with memory events (not synthetic)."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    keep: list = []
    path = tmp_path_factory.mktemp("mem") / "memory.pt.trace.json"
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        _workload(3, keep)
    prof.export_chrome_trace(str(path))
    del keep, torch
    return explorer.load(path)


@pytest.fixture
def panel(qtbot, profiled):
    p = MemoryPanel()
    qtbot.addWidget(p)
    p.resize(1000, 700)
    p.show()
    with qtbot.waitSignal(p.updated, timeout=20_000):
        p.set_trace(profiled)
    return p


def test_curve_and_peak_match_memory_events(panel, profiled):
    mem = profiled.memory
    assert len(mem) > 0
    curves = panel.data.curves
    assert set(curves["device"]) == {"cpu"}
    peak = panel.data.peaks.iloc[0]
    assert int(peak["peak_bytes"]) == int(mem["total_allocated"].max())
    assert int(peak["ts"]) == int(
        mem["ts"].to_numpy()[np.argmax(mem["total_allocated"].to_numpy())]
    )
    items = panel.plot.listDataItems()
    curve_items = [i for i in items if isinstance(i, pg.PlotDataItem)]
    _, y = curve_items[0].getOriginalDataset()
    assert y.max() * panel.y_scale == pytest.approx(float(mem["total_allocated"].max()))
    unit = {1: "B", 1 << 10: "KiB", 1 << 20: "MiB", 1 << 30: "GiB"}[panel.y_scale]
    assert 1 <= y.max() < 1024 and unit in panel.plot.getAxis("left").labelText
    markers = [i for i in panel.plot.plotItem.items if isinstance(i, pg.ScatterPlotItem)]
    assert any(m.objectName() == "peak:cpu" for m in markers)
    assert "peak" in panel.status.text()


def test_never_freed_lists_the_kept_tensors(panel, profiled):
    leaks = panel.leak_model.frame
    assert set(KEPT_BYTES) <= set(leaks["bytes"].tolist())
    assert leaks["freed_at"].isna().all()
    assert panel.leak_model.data(panel.leak_model.index(0, 5)) == ""  # "freed at": never
    assert (leaks["bytes"].diff().dropna() <= 0).all()  # largest first
    lifetimes = allocation_lifetimes(profiled)
    freed = lifetimes[lifetimes["free_ts"] >= 0]
    assert (freed["free_ts"] >= freed["alloc_ts"]).all()
    assert len(leaks) == int((lifetimes["free_ts"] < 0).sum())
    # every allocation is either freed in the trace or listed as never freed
    assert int(freed["bytes"].sum()) + int(leaks["bytes"].sum()) == int(
        profiled.memory["bytes"].clip(lower=0).sum()
    )
    assert set(leaks["op"]) - {""}, "allocations are attributed to the op that made them"


def test_click_on_plot_lists_live_allocations(qtbot, panel, profiled):
    mem = profiled.memory
    ts = int(mem["ts"].iloc[len(mem) // 2])
    view = panel.plot.plotItem.vb
    panel.plot.setXRange(0, profiled.span_ns / 1e9, padding=0)
    qtbot.wait(50)  # let the view box apply the new range before mapping a point into it
    (_, _), (y0, y1) = view.viewRange()
    scene_pos = view.mapViewToScene(QPointF(ts / 1e9, (y0 + y1) / 2))
    widget_pos = panel.plot.mapFromScene(scene_pos)
    qtbot.mouseClick(panel.plot.viewport(), Qt.MouseButton.LeftButton, pos=widget_pos)
    assert panel.live_ts is not None
    assert abs(panel.live_ts - ts) < profiled.span_ns / 200  # within a pixel or two
    live = panel.live_model.frame
    # independent check: replay the events up to that time
    seen = mem[mem["ts"] <= panel.live_ts]
    alive_bytes = int(seen["bytes"].sum())
    assert int(live["bytes"].sum()) == alive_bytes
    assert "Alive at" in panel.tabs.tabText(0)
    assert (live["alloc_ts"] <= panel.live_ts).all()
    freed = live["freed_at"].dropna()
    assert (freed > panel.live_ts).all()


def test_selecting_an_allocation_selects_its_op_and_life(qtbot, panel):
    panel.tabs.setCurrentIndex(1)
    table, model = panel.leak_table, panel.leak_model
    rect = table.visualRect(model.index(0, 0))
    with (
        qtbot.waitSignal(panel.slices_selected, timeout=2_000) as sel,
        qtbot.waitSignal(panel.range_requested, timeout=2_000) as rng,
    ):
        qtbot.mouseClick(table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    row = model.row(0)
    assert sel.args[0].tolist() == [int(row["slice"])]
    assert rng.args == [int(row["alloc_ts"]), int(row["alloc_ts"]) + int(row["lifetime_ns"])]


def test_follows_timeline_zoom(panel):
    panel.on_range(2_000_000, 5_000_000)
    lo, hi = panel.visible_range_ns()
    assert abs(lo - 2_000_000) < 1_000 and abs(hi - 5_000_000) < 1_000


def test_trace_without_memory_says_so(qtbot, shared_traces):
    trace = explorer.load(shared_traces / "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    assert len(trace.memory) == 0
    assert len(memory_timeline(trace)) == 0
    p = MemoryPanel()
    qtbot.addWidget(p)
    with qtbot.waitSignal(p.updated, timeout=20_000):
        p.set_trace(trace)
    assert "no memory events" in p.status.text()
    assert p.plot.isHidden()
    assert p.live_model.rowCount() == 0 and p.leak_model.rowCount() == 0
    assert p.show_live_at(1000).empty
    p.set_trace(None)
    assert p.status.text() == "No trace"


def test_synthetic_memory_growth_ground_truth(qtbot, tmp_path):
    """SYNTHETIC trace (Explorer's scenario generator): the leak it injects is exactly what
    the "Never freed" tab lists for that device and op; every device gets a curve and a peak."""
    from explorer import scenarios

    trace = explorer.load(scenarios.write("memory_growth", tmp_path / "memory_growth.json"))
    assert trace.synthetic
    truth = trace.metadata["explorer_injected"][0]
    p = MemoryPanel()
    qtbot.addWidget(p)
    with qtbot.waitSignal(p.updated, timeout=20_000):
        p.set_trace(trace)
    leaks = p.leak_model.frame
    mine = leaks[(leaks["device"] == truth["device"]) & (leaks["op"] == truth["op"])]
    assert int(mine["bytes"].sum()) == truth["leaked_bytes"]
    assert len(mine) == truth["allocations"]
    file, line = truth["source_line"]
    assert set(mine["source"]) == {f"{file}:{line}"}
    devices = set(p.data.curves["device"])
    assert truth["device"] in devices
    assert set(p.data.peaks["device"]) == devices
    markers = {i.objectName() for i in p.plot.plotItem.items if isinstance(i, pg.ScatterPlotItem)}
    assert markers == {f"peak:{d}" for d in devices}
    for device, curve in p.data.curves.groupby("device"):
        peak = p.data.peaks.set_index("device").loc[device]
        assert int(peak["peak_bytes"]) == int(curve["allocated"].max())


def test_zoom_from_timeline_before_data_arrives_is_kept(qtbot, profiled):
    """The main window syncs the zoom as soon as a trace opens; the plot must keep that range
    when its (background) data lands rather than auto-ranging over the whole trace."""
    p = MemoryPanel()
    qtbot.addWidget(p)
    with qtbot.waitSignal(p.updated, timeout=20_000):
        p.set_trace(profiled)
        p.on_range(1_000_000, 3_000_000)  # arrives while the worker is still reading
    lo, hi = p.visible_range_ns()
    assert abs(lo - 1_000_000) < 1_000 and abs(hi - 3_000_000) < 1_000


def test_timeline_memory_rows_show_the_panels_curves(qtbot, tmp_path, window, open_trace):
    """A trace whose allocator events carry no ``Total Allocated`` (older profilers, other
    vendors): the timeline's memory row and the Memory panel show one curve — the running
    sum of the events' bytes, computed here from the file itself — not ``max 1 B``."""
    import json

    from tests.ui.conftest import kineto_document

    doc = kineto_document(steps=4)
    mem = [e for e in doc["traceEvents"] if e.get("name") == "[memory]"]
    for e in mem:
        del e["args"]["Total Allocated"]
        del e["args"]["Total Reserved"]
    path = tmp_path / "no_totals.pt.trace.json"
    path.write_text(json.dumps(doc))
    expected = np.cumsum([e["args"]["Bytes"] for e in sorted(mem, key=lambda e: e["ts"])])

    open_trace(window, path)
    panel = window.panels["memory"]
    qtbot.waitUntil(lambda: panel.data is not None, timeout=30000)
    layout = window.timeline.layout_
    rows = [s for s in layout.series if s.label == "allocated cuda:0"]
    assert len(rows) == 1
    assert rows[0].values.tolist() == expected.tolist()
    curve = panel.data.curves[panel.data.curves["device"] == "cuda:0"]
    assert curve["allocated"].tolist() == expected.tolist()
    assert rows[0].ts.tolist() == curve["ts"].tolist()


def test_alive_table_says_what_was_allocated_before_the_trace_began(qtbot):
    """A real run (sample_traces/) whose allocator already held ~1 MiB when recording began:
    at the first memory event the table lists one block, and the note says how much of the
    total was allocated before the trace — the allocator's own total (read from the file)
    minus that block."""
    import gzip
    import json
    from pathlib import Path

    path = (
        Path(__file__).resolve().parents[2]
        / "sample_traces"
        / "cpu_item_every_step.pt.trace.json.gz"
    )
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    mem = sorted((e for e in events if e.get("name") == "[memory]"), key=lambda e: e["ts"])
    first = mem[0]["args"]
    assert first["Bytes"] > 0, "the first event is an allocation"
    before = int(first["Total Allocated"]) - int(first["Bytes"])
    assert before > 0

    p = MemoryPanel()
    qtbot.addWidget(p)
    p.resize(1000, 400)
    p.show()
    trace = explorer.load(path)
    with qtbot.waitSignal(p.updated, timeout=20_000):
        p.set_trace(trace)
    frame = p.show_live_at(int(trace.memory["ts"].min()))
    assert frame["bytes"].tolist() == [int(first["Bytes"])]
    assert p.live_note.isVisible()

    assert f"{fmt_bytes(before)} of the {fmt_bytes(int(first['Total Allocated']))}" in (
        p.live_note.text()
    )
    assert "before the trace began" in p.live_note.text()
    assert p.plot.height() >= PLOT_MIN_H, "the plot is never squeezed to a few pixels"


def test_peak_labels_stay_inside_the_plot(qtbot):
    """Real runs (sample_traces/), including ones whose peak is near either end: every peak
    label lies wholly inside the plot's drawing area."""
    from pathlib import Path

    samples = sorted((Path(__file__).resolve().parents[2] / "sample_traces").glob("*.json.gz"))
    assert samples
    for path in samples:
        p = MemoryPanel()
        qtbot.addWidget(p)
        p.resize(700, 320)
        p.show()
        with qtbot.waitSignal(p.updated, timeout=20_000):
            p.set_trace(explorer.load(path))
        qtbot.wait(20)
        area = p.plot.plotItem.vb.sceneBoundingRect()
        assert p._peak_labels, path.name
        for label in p._peak_labels:
            box = label.mapRectToScene(label.boundingRect())
            assert area.contains(box), f"{path.name}: {label.toPlainText()} clipped"


@pytest.mark.parametrize("height", [PLOT_MIN_H + 20, 400])
def test_axis_title_and_peak_label_are_inside_the_plot(qtbot, panel, height):
    """However short the plot, the left axis' title and each peak label are drawn whole:
    the title inside the axis, the label inside the plotted area (not cut at its top)."""
    panel.resize(1000, height + 200)
    panel.plot.setFixedHeight(height)
    qtbot.wait(50)
    panel.plot.grab()  # laid out and painted
    axis = panel.plot.getAxis("left")
    title = axis.label.mapRectToScene(axis.label.boundingRect())
    shown = panel.plot.mapToScene(panel.plot.viewport().rect()).boundingRect()
    band = axis.sceneBoundingRect()
    assert shown.contains(title), (title, shown)  # not cut at the widget's left edge
    assert band.top() <= title.top() and title.bottom() <= band.bottom(), (title, band)
    view = panel.plot.plotItem.vb.sceneBoundingRect()
    labels = [i for i in panel.plot.plotItem.items if isinstance(i, pg.TextItem)]
    assert labels, "a peak label is drawn"
    for label in labels:
        box = label.sceneBoundingRect()
        assert view.contains(box), (label.toPlainText(), box, view)


def test_addresses_read_in_hex(panel):
    model = panel.live_model
    col = list(model.frame.columns).index("addr")
    addr = int(model.frame["addr"].iloc[0])
    text = model.data(model.index(0, col))
    assert text == f"0x{addr:x}"

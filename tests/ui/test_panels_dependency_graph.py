"""Dependency graph panel on real NVIDIA traces: neighbourhoods, whole steps, the critical
path drawn, the node cap announced, and clicks selecting slices."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import explorer
from explorer.ui.panels.dependency_graph import CRITICAL, DependencyGraphPanel
from tests.analysis.test_graph_layout import ALEXNET, _bfs
from tests.ui.conftest import click_graph_node

EVENT_SYNC = "critical_path__cuda_event_sync__event_sync_trace.json.gz"


@pytest.fixture(scope="module")
def alexnet(shared_traces):
    return explorer.load(shared_traces / ALEXNET)


@pytest.fixture
def panel(qtbot):
    p = DependencyGraphPanel()
    qtbot.addWidget(p)
    p.resize(1000, 600)
    p.show()
    return p


def _load(qtbot, panel, trace):
    with qtbot.waitSignal(panel.updated, timeout=30_000):
        panel.set_trace(trace)


def test_around_selection_shows_launch_and_critical_path(qtbot, panel, alexnet):
    _load(qtbot, panel, alexnet)
    s, f = alexnet.slices, alexnet.flows
    kernel = int(np.flatnonzero((s["kind"] == "kernel").to_numpy())[5])
    launch = f[(f["type"] == "launch") & (f["dst"] == kernel)]
    launcher = int(launch["src"].iat[0])
    with qtbot.waitSignal(panel.updated, timeout=30_000):
        panel.on_selection(kernel)
    layout = panel.layout_data
    ids = set(layout.nodes["id"].tolist())
    graph = alexnet.dependency_graph(step=None)
    assert ids == _bfs(graph.edges, kernel, panel.hops.value())
    assert launcher in ids
    assert kernel in panel.node_items and panel.node_items[kernel].isSelected()
    launch_edges = layout.edges[(layout.edges["src"] == launcher) & (layout.edges["dst"] == kernel)]
    assert list(launch_edges["type"].astype(str)) == ["launch"]
    # time flows left to right: columns follow start times
    assert (np.diff(layout.nodes["ts"].to_numpy()) >= 0).all()
    assert (np.diff(layout.nodes["column"].to_numpy()) == 1).all()
    critical = layout.nodes[layout.nodes["critical"]]
    assert len(critical) > 0
    cp = set(np.asarray(alexnet.critical_path().slices).tolist())
    assert set(critical["id"].tolist()) == ids & cp
    item = panel.node_items[int(critical["id"].iat[0])]
    assert item.pen().color() == CRITICAL
    assert "critical path" in panel.status.text()


def test_more_hops_show_more(qtbot, panel, alexnet):
    _load(qtbot, panel, alexnet)
    kernel = int(np.flatnonzero((alexnet.slices["kind"] == "kernel").to_numpy())[5])
    with qtbot.waitSignal(panel.updated, timeout=30_000):
        panel.on_selection(kernel)
    few = len(panel.layout_data.nodes)
    with qtbot.waitSignal(panel.updated, timeout=30_000):
        panel.hops.setValue(5)
    assert len(panel.layout_data.nodes) > few


def test_whole_step_is_capped_and_says_so(qtbot, panel, alexnet):
    _load(qtbot, panel, alexnet)
    panel.max_nodes.blockSignals(True)
    panel.max_nodes.setValue(50)
    panel.max_nodes.blockSignals(False)
    with qtbot.waitSignal(panel.updated, timeout=30_000):
        panel.mode.setCurrentIndex(1)  # whole step
    layout = panel.layout_data
    total = len(alexnet.dependency_graph(step=int(panel.step.currentData())).nodes)
    assert layout.total_nodes == total > 50
    assert len(layout.nodes) == len(panel.node_items) == 50
    assert f"showing 50 of {total:,} nodes" in panel.status.text()
    assert layout.nodes["critical"].all()  # critical-path nodes are kept first


def test_click_node_selects_slice(qtbot, panel, shared_traces):
    trace = explorer.load(shared_traces / EVENT_SYNC)
    _load(qtbot, panel, trace)
    with qtbot.waitSignal(panel.updated, timeout=30_000):
        panel.mode.setCurrentIndex(1)
    target = int(panel.layout_data.nodes["id"].iat[len(panel.layout_data.nodes) // 2])
    assert click_graph_node(qtbot, panel, target) == [target]


def test_selection_that_is_not_a_node(qtbot, panel, alexnet):
    _load(qtbot, panel, alexnet)
    graph = alexnet.dependency_graph()
    outside = np.setdiff1d(np.arange(len(alexnet.slices)), np.asarray(graph.nodes))
    assert len(outside)
    with qtbot.waitSignal(panel.updated, timeout=30_000):
        panel.on_selection(int(outside[0]))
    assert "not a node" in panel.status.text()
    assert len(panel.node_items) == 1


def test_legend_names_every_edge_type_the_graph_builds(panel):
    from explorer.analysis.graph.edges import EDGE_TYPES

    text = panel.legend.text()
    assert "critical path" in text
    for kind in EDGE_TYPES:
        if kind != "duration":  # a leaf's own duration is drawn as the node, not an edge
            assert kind.replace("_", " ") in text


def test_no_trace(qtbot, panel):
    panel.set_trace(None)
    assert panel.status.text() == "No trace"
    panel.on_selection(0)
    panel.on_range(0, 1)
    assert not panel.node_items


def test_layered_layout_edges_never_cross_a_node(qtbot, panel, alexnet):
    """A real NVIDIA trace, 4 hops around a kernel (host threads and streams): one lane per
    track, nested ops on rows below their parents, and every edge, sampled along its whole
    drawn path, stays outside every node box (so never through a label); the critical path
    is drawn over faded non-critical edges."""
    from explorer.ui.panels.dependency_graph import CRITICAL

    _load(qtbot, panel, alexnet)
    kernel = int(np.flatnonzero((alexnet.slices["kind"] == "kernel").to_numpy())[5])
    panel.hops.blockSignals(True)
    panel.hops.setValue(4)
    panel.hops.blockSignals(False)
    with qtbot.waitSignal(panel.updated, timeout=30_000):
        panel.on_selection(kernel)
    layout = panel.layout_data
    nodes = layout.nodes
    assert len(nodes) >= 15 and len(layout.lanes) >= 2
    tracks = alexnet.slices["track"].to_numpy()[nodes["id"].to_numpy()]
    assert (pd.Series(tracks).groupby(nodes["lane"].to_numpy()).nunique() == 1).all()
    # A node's row grows with its nesting depth inside its lane.
    depth = alexnet.slices["depth"].to_numpy()[nodes["id"].to_numpy()]
    for lane in np.unique(nodes["lane"]):
        sel = nodes["lane"].to_numpy() == lane
        pairs = pd.DataFrame({"d": depth[sel], "r": nodes["row"].to_numpy()[sel]})
        pairs = pairs.drop_duplicates().sort_values("d")
        assert pairs["d"].is_unique and pairs["r"].is_monotonic_increasing
        assert pairs["r"].tolist() == list(range(len(pairs)))
    rects = {i: item.rect() for i, item in panel.node_items.items()}
    assert len(panel.edge_paths) == len(layout.edges) > 10
    for src, dst, path in panel.edge_paths:
        for k in range(1, 200):
            point = path.pointAtPercent(k / 200)
            for node, rect in rects.items():
                inside = rect.adjusted(1.5, 1.5, -1.5, -1.5).contains(point)
                assert not inside, f"edge {src}->{dst} crosses node {node} at {point}"
    from PyQt6.QtWidgets import QGraphicsPathItem

    paths = [i for i in panel.scene.items() if isinstance(i, QGraphicsPathItem)]
    critical = [i for i in paths if i.pen().color() == CRITICAL]
    faded = [i for i in paths if i.pen().color() != CRITICAL and i.pen().color().alphaF() < 0.5]
    assert critical and faded
    assert min(i.zValue() for i in critical) > max(i.zValue() for i in faded)


@pytest.mark.parametrize("width", [700, 1000, 1500])
def test_no_node_is_cut_at_the_views_edges(qtbot, panel, alexnet, width):
    """Around a selection in the middle of a wide graph, the view shows whole columns:
    every node is either wholly inside what the view shows or wholly outside it."""
    panel.resize(width, 600)
    _load(qtbot, panel, alexnet)
    s = alexnet.slices
    kernel = int(np.flatnonzero((s["kind"] == "kernel").to_numpy())[40])
    panel.hops.setValue(4)
    with qtbot.waitSignal(panel.updated, timeout=30_000):
        panel.on_selection(kernel)
    assert len(panel.node_items) > 8, "a graph wider than the view"
    shown = panel.visible_scene_rect()
    inside = 0
    for item in panel.node_items.values():
        rect = item.rect()
        overlap = rect.intersected(shown)
        cut = not overlap.isEmpty() and overlap.width() < rect.width() - 0.5
        assert not cut, (item.toolTip().splitlines()[0], rect, shown)
        inside += overlap.width() >= rect.width() - 0.5
    assert inside >= 3
    assert panel.node_items[kernel].rect().intersects(shown), "the selection is in view"

"""The dependency graph's layout (what the panel draws), without Qt: neighbourhoods against a
plain breadth-first search, device work placed in its launcher's step, and the capped layout
of every real shared trace (nodes, lanes, edges, critical flags)."""

from __future__ import annotations

import numpy as np
import pytest

import explorer
from explorer.analysis.graph_layout import graph_layout, neighbourhood
from tests.conftest import shared_trace_files

ALEXNET = "critical_path__alexnet__benchmark_result_2869224_1695835535_trace.json.gz"


@pytest.fixture(scope="module")
def alexnet(shared_traces):
    return explorer.load(shared_traces / ALEXNET)


def _bfs(edges, center: int, hops: int) -> set[int]:
    """Plain breadth-first search over the edge list, to check the vectorised one."""
    adjacent: dict[int, set[int]] = {}
    for a, b in zip(edges["src"].tolist(), edges["dst"].tolist(), strict=True):
        if a != b:
            adjacent.setdefault(a, set()).add(b)
            adjacent.setdefault(b, set()).add(a)
    seen, frontier = {center}, {center}
    for _ in range(hops):
        frontier = {n for f in frontier for n in adjacent.get(f, ())} - seen
        seen |= frontier
    return seen


def test_neighbourhood_matches_breadth_first_search(alexnet):
    graph = alexnet.dependency_graph()
    kernel = int(np.flatnonzero((alexnet.slices["kind"] == "kernel").to_numpy())[5])
    for hops in (1, 2, 4):
        got = neighbourhood(graph.edges, kernel, hops)
        assert set(got.index.tolist()) == _bfs(graph.edges, kernel, hops)
        assert got[kernel] == 0 and got.max() <= hops


def test_device_op_running_in_the_next_step_is_found(tmp_path):
    """SYNTHETIC trace (scenario generator, steady training loop with queued work): a kernel
    launched at the end of one step that runs during the next belongs to its launcher's step,
    so centring on it shows it with its launch edge instead of "not a node"."""
    from explorer import scenarios

    trace = explorer.load(scenarios.write("clean", tmp_path / "clean.json"))
    assert trace.synthetic
    steps = trace.steps()
    starts = steps["start_ns"].to_numpy()
    ts = trace.slices["ts"].to_numpy()
    launch = trace.flows[trace.flows["type"] == "launch"]
    src, dst = launch["src"].to_numpy(), launch["dst"].to_numpy()
    crossing = np.searchsorted(starts, ts[src], "right") != np.searchsorted(
        starts, ts[dst], "right"
    )
    # The graph covers the steps (launches before the first step are not in it).
    crossing &= ts[src] >= starts[0]
    assert crossing.any()
    for launcher, kernel in list(zip(src[crossing], dst[crossing], strict=True))[:3]:
        layout = graph_layout(trace, None, int(kernel), 1, 300)
        ids = set(layout.nodes["id"].tolist())
        assert {int(kernel), int(launcher)} <= ids, layout.notes
        assert not layout.notes


@pytest.mark.parametrize("path", shared_trace_files(), ids=lambda p: p.name[:40])
def test_layout_of_every_shared_trace(path):
    """Whole first step of every real trace (NVIDIA, AMD, MTIA, CPU-only): capped, edges only
    between drawn nodes, one lane per track, critical flags agree with the critical path."""
    trace = explorer.load(path)
    step = int(trace.steps()["step"].iat[0])
    layout = graph_layout(trace, step, None, 2, 100)
    nodes = layout.nodes
    assert len(nodes) == min(100, layout.total_nodes)
    ids = set(nodes["id"].tolist())
    assert set(layout.edges["src"]) <= ids and set(layout.edges["dst"]) <= ids
    assert (layout.edges["src"] != layout.edges["dst"]).all()
    tracks = trace.slices["track"].to_numpy()[nodes["id"].to_numpy()]
    assert len(layout.lanes) == len(set(tracks.tolist()))
    assert nodes.groupby("lane")["id"].apply(lambda i: len(set(tracks[i.index]))).eq(1).all()
    cp = set(np.asarray(trace.critical_path(step=step).slices).tolist())
    assert set(nodes.loc[nodes["critical"], "id"].tolist()) == ids & cp

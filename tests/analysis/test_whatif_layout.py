"""A replay lays its search's matrix out from the edges sorted once per graph (issue 28):
the moved timeline is the one the sort per replay gives, on real traces, for the fixes a
report replays; and the graph's point ids (a lookup table) are the binary search's."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

import explorer
from explorer.analysis.whatif import fix_mask, prepare, reach, replay_graph, replay_graph_of
from tests.conftest import SAMPLE_TRACES, shared_trace_files

SAMPLES = sorted(SAMPLE_TRACES.glob("*.pt.trace.json.gz"))
KINDS = ("sync_stall", "launch_bound", "input_stall", "communication")


def _moved(path: Path) -> int:
    """Replay each fix both ways and compare; returns how many slice ends moved."""
    trace = explorer.load(path).data
    graph = replay_graph_of(trace)
    if len(graph.nodes) == 0:
        return 0
    e = graph.edges
    u, v = graph.point_edges()
    at = np.searchsorted(graph.nodes, e["src"].to_numpy())
    assert np.array_equal(u, 2 * at + e["src_point"].to_numpy())
    at = np.searchsorted(graph.nodes, e["dst"].to_numpy())
    assert np.array_equal(v, 2 * at + e["dst_point"].to_numpy())
    laid = prepare(graph)
    assert laid.by_pair is not None  # no pair of points is joined twice in these graphs
    sorted_each_time = dataclasses.replace(laid, by_pair=None)
    moved = 0
    assert graph.arrays is not None
    for kind in KINDS:
        factor = np.where(reach(trace, fix_mask(trace, kind), kind != "launch_bound"), 0.0, 1.0)
        ts, end = replay_graph(laid, factor)
        ts0, end0 = replay_graph(sorted_each_time, factor)
        assert np.array_equal(ts, ts0) and np.array_equal(end, end0)
        moved += int(np.count_nonzero(end != graph.arrays.end))
    return moved


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name.split(".")[0])
def test_a_replay_laid_out_once_is_the_one_sorted_each_time_on_sample_traces(
    path: Path,
) -> None:
    assert _moved(path) > 0


def test_a_replay_laid_out_once_is_the_one_sorted_each_time_on_shared_traces(
    shared_traces: Path,
) -> None:
    assert sum(_moved(p) for p in shared_trace_files()) > 0

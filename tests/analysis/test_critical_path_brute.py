"""The critical path's route search against brute force: a plain longest-path DP over a
topological order on real traces' graphs, and every path enumerated on generated DAGs."""

from __future__ import annotations

import graphlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import explorer
from explorer.analysis.critical_path import critical_path, longest_work_path, path_costs
from explorer.analysis.dependency_graph import dependency_graph

SMALL_SHARED = (
    "critical_path__cuda_event_sync__event_sync_trace.json.gz",
    "critical_path__cuda_event_sync_multi_stream__event_sync_trace.json.gz",
    "call_stack__backward_thread.json",
    "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "cpu_only__rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
    "execution_trace__benchmark_simple_add_trace.json.gz",
    "triton_example__triton_example.json.gz",
    # hand-offs between threads and devices on older traces
    "trace_file_list__inference_rank_1.json.gz",
    "critical_path__alexnet__benchmark_result_2869224_1695835535_trace.json.gz",
    "mtia_inference_trace__mtia_inference_rank_0.json.gz",  # 47 threads, 12 queues
)
SAMPLES = sorted((Path(__file__).parents[2] / "sample_traces").glob("*.json.gz"))


def dp_most_work(point_time, u, v, cost) -> int:
    """Most work a route can carry: ``work[p] = max over edges q->p of work[q] + span -
    cost``, 0 at roots, in a topological order (graphlib) — no Dijkstra, no tie-breaking."""
    preds: dict[int, list[tuple[int, float]]] = {p: [] for p in range(len(point_time))}
    for a, b, c in zip(u.tolist(), v.tolist(), np.asarray(cost).tolist(), strict=True):
        preds[b].append((a, c))
    order = graphlib.TopologicalSorter({p: {q for q, _ in preds[p]} for p in preds})
    work: dict[int, float] = {}
    for p in order.static_order():
        ins = preds[p]
        work[p] = max(work[q] + (point_time[p] - point_time[q]) - c for q, c in ins) if ins else 0.0
    return int(round(max(work.values()))) if work else 0


def all_paths_most_work(point_time, u, v, cost) -> int:
    """Most work over every path from every root, enumerated one by one (tiny graphs)."""
    out: dict[int, list[tuple[int, float]]] = {p: [] for p in range(len(point_time))}
    has_in = set(v.tolist())
    for a, b, c in zip(u.tolist(), v.tolist(), np.asarray(cost).tolist(), strict=True):
        out[a].append((b, c))
    best = 0.0
    stack = [(r, 0.0) for r in range(len(point_time)) if r not in has_in]
    while stack:
        p, w = stack.pop()
        best = max(best, w)
        stack += [(q, w + point_time[q] - point_time[p] - c) for q, c in out[p]]
    return int(round(best))


def route_work(point_time, u, v, cost, points, at) -> int:
    """Work the fast route carries, checked to be a real route from a root."""
    if len(points) < 2:
        return 0
    assert (u[at] == points[:-1]).all() and (v[at] == points[1:]).all()
    assert points[0] not in set(v.tolist())  # it starts at a root
    return int(round(point_time[points[-1]] - point_time[points[0]] - float(cost[at].sum())))


def _check_trace(trace, step) -> None:
    c = path_costs(trace, dependency_graph(trace, step))
    points, at = longest_work_path(c.point_time, c.u, c.v, c.cost)
    fast = route_work(c.point_time, c.u, c.v, c.cost, points, at)
    assert fast == dp_most_work(c.point_time, c.u, c.v, c.cost)
    # The path reported is that route: its waiting is what its edges cost.
    cp = critical_path(trace, step)
    assert cp.length_ns - fast == int(round(float(c.cost[at].sum())))


@pytest.mark.parametrize("name", SMALL_SHARED)
def test_fast_route_matches_dp_on_small_real_traces(shared_traces: Path, name: str) -> None:
    trace = explorer.load(shared_traces / name)
    _check_trace(trace, None)
    steps = trace.steps()
    if steps["slice"].iat[0] >= 0:
        for step in steps["step"].tolist()[:2]:
            _check_trace(trace, int(step))


@pytest.mark.slow
@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name.split(".")[0])
def test_fast_route_matches_dp_on_sample_traces(path: Path) -> None:
    trace = explorer.load(path)
    _check_trace(trace, None)
    _check_trace(trace, int(trace.steps()["step"].iat[-1]))


@st.composite
def dags(draw):
    """Points at non-decreasing integer times; edges from earlier to later points (by
    index, so no cycles), each costing between nothing and its whole span."""
    n = draw(st.integers(2, 8))
    times = np.array(sorted(draw(st.lists(st.integers(0, 30), min_size=n, max_size=n))))
    pairs = draw(
        st.lists(
            st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)).filter(lambda p: p[0] < p[1]),
            max_size=16,
        )
    )
    u = np.array([a for a, _ in pairs], np.int64)
    v = np.array([b for _, b in pairs], np.int64)
    frac = draw(st.lists(st.sampled_from([0.0, 0.5, 1.0]), min_size=len(u), max_size=len(u)))
    cost = np.floor((times[v] - times[u]) * np.array(frac, float))
    return times.astype(np.int64), u, v, cost


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(dags())
def test_fast_route_matches_every_path_on_generated_dags(dag) -> None:
    point_time, u, v, cost = dag
    points, at = longest_work_path(point_time, u, v, cost)
    fast = route_work(point_time, u, v, cost, points, at)
    assert fast == all_paths_most_work(point_time, u, v, cost)
    assert fast == dp_most_work(point_time, u, v, cost)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(dags())
def test_edges_in_pair_order_skip_the_sort_and_match_every_path(dag) -> None:
    """Edges given sorted by (u, v), each pair once (the cheapest), as a graph's come: the
    search skips its sort and still finds the route with the most work."""
    point_time, u, v, cost = dag
    order = np.lexsort((cost, v, u))
    keep = (
        order[np.r_[True, (np.diff(u[order]) != 0) | (np.diff(v[order]) != 0)]] if len(u) else order
    )
    su, sv, sc = u[keep], v[keep], cost[keep]
    points, at = longest_work_path(point_time, su, sv, sc)
    fast = route_work(point_time, su, sv, sc, points, at)
    assert fast == all_paths_most_work(point_time, u, v, cost)
    assert fast == dp_most_work(point_time, su, sv, sc)


# --- The cross-thread case: the path follows the work from thread to thread -----------------

TRACKS = {  # generated work goes on: the step's thread, the autograd engine's, a stream
    "main": {"pid": 1, "tid": 1, "cat": "cpu_op"},
    "engine": {"pid": 1, "tid": 2, "cat": "cpu_op"},
    "stream": {"pid": 0, "tid": 7, "cat": "kernel"},
}


@st.composite
def sequential_work(draw):
    """Work that moves between threads and the device: leaf slices one after another in
    time, each on a track drawn at random, with a gap of at least 1 us between any two
    (no two tracks busy at once, no boundaries shared)."""
    n = draw(st.integers(1, 9))
    where = draw(st.lists(st.sampled_from(sorted(TRACKS)), min_size=n, max_size=n))
    durs = draw(st.lists(st.integers(1, 40), min_size=n, max_size=n))
    gaps = draw(st.lists(st.integers(1, 40), min_size=n + 1, max_size=n + 1))
    out, t = [], 0
    for k, (track, dur) in enumerate(zip(where, durs, strict=True)):
        t += gaps[k]
        out.append((track, t, dur))
        t += dur
    return out, t + gaps[-1]


def _events(work, span):
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1,
         "ts": 0, "dur": span},
    ]  # fmt: skip
    for k, (track, ts, dur) in enumerate(work):
        where = TRACKS[track]
        args = {"stream": 7, "device": 0} if track == "stream" else {}
        events.append(
            {"ph": "X", "cat": where["cat"], "name": f"{track}_{k}", "pid": where["pid"],
             "tid": where["tid"], "ts": ts, "dur": dur, "args": args}
        )  # fmt: skip
    # The engine's thread shows up in the trace even when no work lands on it.
    events.append(
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "pt_autograd_0"}}
    )
    return events


@pytest.mark.slow
@settings(max_examples=120, deadline=None)
@given(sequential_work())
def test_path_carries_all_work_done_one_track_at_a_time(case) -> None:
    # synthetic: the only thing the oracle reads is the intervals. At every instant at most
    # one track works and the step's thread records nothing but the step around it, so the
    # route that follows the work carries every slice whole: the path is the step, its
    # work the sum of the slices, split as the breakdown splits it, the rest idle.
    from explorer.trace.build import trace_from_events

    work, span = case
    trace = trace_from_events(_events(work, span), {"synthetic": True})
    cp = critical_path(trace, 1)
    summary = dict(zip(cp.summary["category"], cp.summary["ns"], strict=True))
    host = 1000 * sum(d for track, _, d in work if track != "stream")
    device = 1000 * sum(d for track, _, d in work if track == "stream")
    assert cp.length_ns == 1000 * span
    assert summary["host_compute"] == host
    assert summary["device_compute"] == device
    assert summary["idle_gap"] == 1000 * span - host - device
    # ... and the fast search found it on the graph: the plain DP agrees.
    _check_trace(trace, 1)

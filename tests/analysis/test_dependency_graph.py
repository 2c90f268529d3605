"""The dependency graph on real traces (NVIDIA, AMD, MTIA, with an Execution Trace) and on
small synthetic traces built in memory (labelled synthetic below)."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import explorer
from explorer.analysis.dependency_graph import dependency_graph
from explorer.analysis.graph.edges import EDGE_TYPES
from explorer.trace.build import trace_from_events
from explorer.trace_api import Trace


def _load(shared_traces: Path, name: str) -> Trace:
    return explorer.load(shared_traces / name)


def _points(trace, ids, point):
    ts = trace.slices["ts"].to_numpy()
    end = ts + trace.slices["dur"].to_numpy()
    return np.where(point == 1, end[ids], ts[ids])


def _named(trace, ids):
    return trace.slices["name"].astype(str).to_numpy()[ids]


def _edges_named(trace, graph, kind):
    e = graph.edges[graph.edges["type"] == kind]
    return list(
        zip(_named(trace, e["src"].to_numpy()), _named(trace, e["dst"].to_numpy()), strict=True)
    )


def test_every_edge_weighs_the_time_between_its_points(shared_traces: Path) -> None:
    from tests.conftest import shared_trace_files

    for path in shared_trace_files():
        trace = explorer.load(path)
        g = dependency_graph(trace)
        e = g.edges
        t_src = _points(trace, e["src"].to_numpy(), e["src_point"].to_numpy())
        t_dst = _points(trace, e["dst"].to_numpy(), e["dst_point"].to_numpy())
        assert (e["weight"].to_numpy() >= 0).all(), path.name
        assert np.array_equal(t_dst - t_src, e["weight"].to_numpy()), path.name
        assert set(e["type"].astype(str)) <= set(EDGE_TYPES)
        assert np.isin(e["src"], g.nodes).all() and np.isin(e["dst"], g.nodes).all(), path.name
        # No two edges join the same two points.
        key = e[["src", "dst", "src_point", "dst_point"]]
        assert not key.duplicated().any(), path.name


def test_cuda_syncs_tie_the_host_to_the_device_work_it_waited_for(shared_traces: Path) -> None:
    trace = _load(shared_traces, "critical_path__cuda_event_sync__event_sync_trace.json.gz")
    g = dependency_graph(trace)
    sync = _edges_named(trace, g, "sync")
    # cudaEventSynchronize waited for the kernel recorded by cudaEventRecord (correlation
    # 1533, on stream 7: the spin kernel launched just before the record).
    assert ("at::cuda::(anonymous namespace)::spin_kernel(long)", "cudaEventSynchronize") in sync
    # A pageable device-to-host copy blocks the cudaMemcpyAsync call that issued it.
    assert ("Memcpy DtoH (Device -> Pageable)", "cudaMemcpyAsync") in sync
    # The device's "Stream Sync" record ends the host's cudaStreamSynchronize.
    assert ("Stream Sync", "cudaStreamSynchronize") in sync
    # cudaEventQuery does not block: no wait edge into it.
    assert not [s for s in sync if s[1] == "cudaEventQuery"]
    launches = _edges_named(trace, g, "launch")
    assert sum(1 for s, _ in launches if s == "cudaLaunchKernel") == 4
    order = _edges_named(trace, g, "stream_order")
    assert len(order) == 5  # 6 records on stream 7, in order


def test_stream_wait_event_orders_work_across_streams(shared_traces: Path) -> None:
    trace = _load(
        shared_traces, "critical_path__cuda_event_sync_multi_stream__event_sync_trace.json.gz"
    )
    g = dependency_graph(trace)
    e = g.edges[g.edges["type"] == "cross_stream"]
    assert len(e) == 1
    s = trace.slices
    src, dst = int(e["src"].iloc[0]), int(e["dst"].iloc[0])
    # The sgemm on stream 20 (launched before cudaEventRecord corr 1385) -> stream 24.
    assert s["stream"].iat[src] == 20 and s["name"].iat[src] == "ampere_sgemm_128x64_nn"
    assert s["stream"].iat[dst] == 24


def test_mtia_event_waits_tie_to_the_records_they_wait_for(shared_traces: Path) -> None:
    trace = _load(shared_traces, "mtia_inference_trace__mtia_inference_rank_0.json.gz")
    g = dependency_graph(trace)
    e = g.edges[g.edges["type"] == "cross_stream"]
    s = trace.slices
    waits = np.flatnonzero(s["name"].astype(str).to_numpy() == "event_wait")
    assert len(e) == len(waits) == 48
    src, dst = e["src"].to_numpy(), e["dst"].to_numpy()
    assert set(_named(trace, src)) == {"event_record"}
    assert set(_named(trace, dst)) == {"event_wait"}
    wait_on = np.array([trace.args(i)["wait_on_stream"] for i in dst])
    assert np.array_equal(s["stream"].to_numpy()[src], wait_on)
    assert [trace.args(i)["seq_num"] for i in src] == [trace.args(i)["seq_num"] for i in dst]


def test_forward_backward_edges_follow_the_profiler_flows(shared_traces: Path) -> None:
    trace = _load(shared_traces, "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    g = dependency_graph(trace)
    fb = g.edges[g.edges["type"] == "fwdbwd"]
    flows = trace.flows[trace.flows["type"] == "fwdbwd"]
    assert len(fb) == len(flows) > 0
    assert set(fb["src"]) == set(flows["src"]) and set(fb["dst"]) == set(flows["dst"])


def test_execution_trace_adds_tensor_data_dependencies(shared_traces: Path) -> None:
    trace = explorer.load(
        shared_traces / "execution_trace__benchmark_simple_add_trace.json.gz",
        execution_trace=shared_traces / "execution_trace__benchmark_simple_add_et.json.gz",
    )
    g = dependency_graph(trace)
    data = _edges_named(trace, g, "data")
    # torch.add reads the two tensors the two aten::rand calls wrote (ET tensors 6 and 11).
    assert data.count(("aten::rand", "aten::add")) == 4  # 2 inputs x (warmup + measure)
    assert ("aten::empty", "aten::fill_") in data


def _synthetic(events):
    return trace_from_events(events, {"synthetic": True})


def test_sequence_numbers_give_forward_backward_without_flows() -> None:
    # synthetic: a forward op on the main thread, its backward op on the autograd thread
    events = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::mul",
            "pid": 1,
            "tid": 1,
            "ts": 0,
            "dur": 10,
            "args": {"Sequence number": 7},
        },
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::add",
            "pid": 1,
            "tid": 1,
            "ts": 20,
            "dur": 10,
            "args": {"Sequence number": 8},
        },
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "MulBackward0",
            "pid": 1,
            "tid": 2,
            "ts": 50,
            "dur": 10,
            "args": {"Sequence number": 7},
        },
    ]
    trace = _synthetic(events)
    g = dependency_graph(trace)
    assert _edges_named(trace, g, "fwdbwd") == [("aten::mul", "MulBackward0")]


def test_a_step_graph_holds_the_step_and_the_work_it_launched(shared_traces: Path) -> None:
    trace = _load(shared_traces, "critical_path__cuda_event_sync__event_sync_trace.json.gz")
    steps = trace.steps()
    assert steps["step"].tolist() == [100]
    g = dependency_graph(trace, step=100)
    lo, hi = g.window
    assert (lo, hi) == (int(steps["start_ns"].iloc[0]), int(steps["end_ns"].iloc[0]))
    kinds = set(trace.slices["kind"].astype(str).to_numpy()[g.nodes])
    assert {"kernel", "memcpy", "cpu_op", "runtime"} <= kinds
    with pytest.raises(explorer.ExplorerError, match="step 3 is not in"):
        dependency_graph(trace, step=3)


def test_launches_from_two_threads_serialised_by_the_runtime_lock() -> None:
    # synthetic: thread 2's launch starts the moment thread 1's returns (it was blocked on
    # the runtime's lock); thread 1's next launch, 50 us later, is not tied to anything
    events = [
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": 0,
            "dur": 10,
        },
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 2,
            "ts": 10.5,
            "dur": 10,
        },
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": 70,
            "dur": 10,
        },
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaGetDevice",
            "pid": 1,
            "tid": 2,
            "ts": 80.2,
            "dur": 1,
        },
    ]
    trace = _synthetic(events)
    g = dependency_graph(trace)
    lock = g.edges[g.edges["type"] == "runtime_lock"]
    assert len(lock) == 1
    ts = trace.slices["ts"].to_numpy()
    assert (ts[lock["src"].iat[0]], ts[lock["dst"].iat[0]]) == (0, 10_500)
    assert lock["weight"].iat[0] == 500


def test_collector_events_from_a_real_cpu_run_join_the_graph(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    with explorer.collect(tmp_path) as run:
        x = torch.randn(32, 32)
        for _ in range(2):
            (x @ x).sum().item()
            run.step()
    trace = explorer.load(run.trace_path)
    g = dependency_graph(trace)
    s = trace.slices
    syncs = np.flatnonzero(s["cat"].astype(str).to_numpy() == "explorer_sync")
    assert len(syncs) >= 2 and np.isin(syncs, g.nodes).all()
    e = g.edges
    # Each .item() sync is reached from the slice it ran inside and leads back out of it.
    into = e[e["dst"].isin(syncs) & (e["type"] != "duration")]
    out_of = e[e["src"].isin(syncs) & (e["type"] != "duration")]
    assert set(into["dst"]) == set(syncs) and set(out_of["src"]) == set(syncs)
    from explorer.analysis.critical_path import critical_path

    for step in trace.steps()["step"]:
        cp = critical_path(trace, int(step))
        assert cp.length_ns == int(cp.edges["weight"].sum()) > 0


def test_a_built_graph_keeps_only_the_columns_its_readers_read(sample_traces: Path) -> None:
    """The graph holds the slices' times, tracks and kinds its path search, description and
    replays read, not the columns only its builders read (a first report's graph held four
    of the parse's slice-length columns through the path and the replays): reading one
    fails rather than reads another's rows, and the path and a replay still come out."""
    from explorer.analysis.critical_path import critical_path
    from explorer.analysis.graph.nodes import BUILD_ONLY, slice_arrays
    from explorer.analysis.whatif import replay_graph

    trace = explorer.load(sample_traces / "cpu_transformer.pt.trace.json.gz")
    g = dependency_graph(trace)
    built = slice_arrays(trace)
    a = g.arrays
    assert a is not None and a.n == built.n == len(trace.slices)
    for name in ("ts", "end", "track", "host", "device", "node"):
        assert np.array_equal(getattr(a, name), getattr(built, name)), name
    for name in BUILD_ONLY:
        assert len(getattr(built, name)) == a.n and len(getattr(a, name)) == 0, name
        with pytest.raises(IndexError):
            getattr(a, name)[g.nodes]
    assert critical_path(trace).length_ns > 0
    ts, end = replay_graph(g, np.full(a.n, 0.5))
    assert (end - ts >= 0).all() and (end[g.nodes] <= a.end[g.nodes]).all()


def test_hand_offs_found_a_few_stretches_at_a_time_make_the_same_graph(
    sample_traces: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The waiting stretches are matched against each track's work a piece at a time (a
    million at once made the graph build's peak): three at a time, the graph is the one
    found all at once, edge for edge, on real traces with hand-offs between threads."""
    from explorer.analysis.graph import thread_edges

    for name in ("neuron_cnn.pt.trace.json.gz", "ddp_4rank_broadcast_chain/rank0.pt.trace.json.gz"):
        whole = dependency_graph(explorer.load(sample_traces / name)).edges
        handoffs = int((whole["type"] == "handoff").sum())
        monkeypatch.setattr(thread_edges, "STRETCHES_AT_ONCE", 3)
        pieces = dependency_graph(explorer.load(sample_traces / name)).edges
        monkeypatch.undo()
        assert handoffs > 3, name  # more stretches matched than one piece holds
        assert whole.equals(pieces), name


def test_edge_ids_keep_their_integer_width_until_narrowed() -> None:
    """Ids given as int32 arrays are kept as given (no int64 copy between: two of them were
    the hand-offs' peak); ids given as lists or int64 become the narrowest width that
    holds them, and the table is the same either way."""
    from explorer.analysis.graph.edges import END, START, EdgeList

    src, dst = np.array([0, 2, 4], np.int32), np.array([1, 3, 5], np.int32)
    narrow, wide = EdgeList(), EdgeList()
    narrow.add("duration", src, dst, START, END)
    wide.add("duration", src.tolist(), dst.astype(np.int64), START, END)
    assert narrow.src[0] is src and narrow.src[0].dtype == np.int32
    assert wide.src[0].dtype == np.int32 and wide.dst[0].dtype == np.int32
    ts, end = np.arange(6, dtype=np.int64) * 10, np.arange(6, dtype=np.int64) * 10 + 5
    a, _ = narrow.to_frame(ts, end)
    b, _ = wide.to_frame(ts, end)
    assert a.equals(b) and a["weight"].tolist() == [15, 15, 15]


# --- Each host thread is one chain; its stretches belong to the innermost open slice -----


def test_each_host_thread_is_one_unbroken_chain(sample_traces: Path) -> None:
    trace = explorer.load(sample_traces / "cpu_transformer.pt.trace.json.gz")
    g = dependency_graph(trace)
    a = g.arrays
    e = g.edges
    along = e[e["type"].astype(str).isin(["duration", "nest", "sibling", "thread_order"])]
    host = a.host[along["src"].to_numpy()]
    along = along[host]
    track = a.track[along["src"].to_numpy()]
    for tr in np.unique(track):
        ids = np.flatnonzero(a.node & a.host & (a.track == tr))
        # From the thread's first start to its last end, every ns is on exactly one edge.
        span = int(a.end[ids].max() - a.ts[ids].min())
        assert int(along["weight"].to_numpy()[track == tr].sum()) == span


@st.composite
def _one_thread(draw):
    """Up to 7 slices on one thread, overlapping any way (nested, crossing, equal)."""
    n = draw(st.integers(1, 7))
    out = []
    for _ in range(n):
        t = draw(st.integers(0, 20))
        out.append((t, draw(st.integers(0, 10))))
    return out


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(_one_thread())
def test_innermost_open_matches_a_scan(slices) -> None:
    from explorer.analysis.graph.host_edges import innermost_open, thread_points
    from explorer.analysis.graph.nodes import slice_arrays

    events = [
        {"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": t, "dur": d}
        for i, (t, d) in enumerate(slices)
    ]
    trace = trace_from_events(events, {"synthetic": True})
    arrays = slice_arrays(trace)
    points = thread_points(arrays, np.flatnonzero(arrays.node & arrays.host))
    got = innermost_open(points)
    # Scan: after point k, the open slices are those whose start is at or before k and
    # whose end is after it; the innermost is the one that started last.
    pos = {}
    for k, (sl, is_end) in enumerate(
        zip(points.slice.tolist(), points.is_end.tolist(), strict=True)
    ):
        pos[(sl, is_end)] = k
    for k in range(len(points.slice)):
        open_ = [
            (pos[(sl, False)], sl)
            for sl in set(points.slice.tolist())
            if pos[(sl, False)] <= k < pos[(sl, True)]
        ]
        assert got[k] == (max(open_)[1] if open_ else -1)
    # and the order itself is time order, ends before starts at one instant
    assert (np.diff(points.t) >= 0).all()


def test_nested_threads_take_the_bracket_search_and_agree_with_the_general_one(
    sample_traces: Path,
) -> None:
    """A thread whose slices nest properly is answered by the depth search; one with
    crossing slices (torch.profiler's CPU traces have some) falls to the general one, and
    both give the general search's answer."""
    from explorer.analysis.graph import host_edges
    from explorer.analysis.graph.nodes import slice_arrays

    nested = [
        {"ph": "X", "cat": "cpu_op", "name": n, "pid": 1, "tid": 1, "ts": t, "dur": d}
        for n, t, d in (("step", 0, 100), ("fwd", 5, 40), ("mm", 10, 5), ("add", 15, 0),
                        ("bwd", 50, 45), ("mm", 50, 45), ("idle-then", 110, 5))
    ]  # fmt: skip
    crossing = explorer.load(sample_traces / "cpu_transformer.pt.trace.json.gz").data
    for trace, is_nested in ((trace_from_events(nested, {"synthetic": True}), True),
                             (crossing, False)):  # fmt: skip
        points = host_edges.host_points(slice_arrays(trace))
        fast = host_edges._innermost_if_nested(points)
        assert (fast is not None) == is_nested
        general = host_edges._innermost_by_search(points)
        assert np.array_equal(host_edges.innermost_open(points), general)
        if fast is not None:
            assert np.array_equal(fast, general)


def test_device_work_launched_before_the_capture_is_in_no_steps_graph() -> None:
    # synthetic (issue 23 §1): two host steps [0, 100) and [100, 200) us; on stream 7 a
    # kernel [5, 60) whose correlation matches no runtime call (the tail of the iteration
    # running when the profiler started), one [60, 90) launched at 10 us, one [110, 140)
    # launched at 105 us.
    host, gpu = {"pid": 1, "tid": 1}, {"pid": 0, "tid": 7}

    def x(name, cat, ts, dur, where, **args):  # noqa: ANN001, ANN202
        return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, **where, "args": args}

    ev = [
        x("ProfilerStep#0", "user_annotation", 0, 100, host),
        x("ProfilerStep#1", "user_annotation", 100, 100, host),
        x("tail", "kernel", 5, 55, gpu, device=0, stream=7, correlation=1),
        x("cudaLaunchKernel", "cuda_runtime", 10, 5, host, correlation=2),
        x("k0", "kernel", 60, 30, gpu, device=0, stream=7, correlation=2),
        x("cudaLaunchKernel", "cuda_runtime", 105, 5, host, correlation=3),
        x("k1", "kernel", 110, 30, gpu, device=0, stream=7, correlation=3),
    ]
    trace = trace_from_events(ev, {"synthetic": True})
    names = trace.slices["name"].astype(str).to_numpy()
    from explorer.analysis.critical_path import critical_path

    for step, kernel in ((0, "k0"), (1, "k1")):
        g = dependency_graph(trace, step)
        on_device = set(names[g.nodes[trace.on_device()[g.nodes]]])
        assert on_device == {kernel}
        cp = critical_path(trace, step)
        assert cp.summary.set_index("category")["ns"]["device_compute"] == 30_000


def _same_points(got, want) -> None:
    for f in ("slice", "is_end", "t", "track"):
        assert np.array_equal(getattr(got, f), getattr(want, f)), f


def test_host_points_sorted_once_then_merged_are_the_full_sort(shared_traces: Path) -> None:
    """The hand-offs read the host threads' points sorted once, with the device streams'
    merged in: the same order as sorting all of them (and, where one track has points of
    both sets, the fallback sorts again)."""
    from explorer.analysis.graph.host_edges import host_points, thread_points, with_points
    from explorer.analysis.graph.nodes import slice_arrays

    trace = _load(
        shared_traces, "critical_path__alexnet__benchmark_result_2869224_1695835535_trace.json.gz"
    )
    a = slice_arrays(trace)
    host = np.flatnonzero(a.node & a.host)
    dev = np.flatnonzero(a.node & a.device & (a.stream >= 0))
    assert len(host) > 100 and len(dev) > 100
    _same_points(with_points(host_points(a), a, dev), thread_points(a, np.r_[host, dev]))
    # every other host slice added to the rest: the same threads on both sides
    _same_points(with_points(thread_points(a, host[::2]), a, host[1::2]), thread_points(a, host))


@pytest.mark.parametrize("seed", range(30))
def test_packed_edge_table_is_the_five_key_sort_s(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The edge table built from packed keys (one integer sort) is the one the five-key
    stable sort builds: same rows, order, kept type of duplicate pairs, weights and drops
    — on random edges with many duplicates and edges back in time, their times checked in
    chunks of 3 edges for the one and at once for the other."""
    import pandas as pd

    from explorer.analysis.graph import edges as graph_edges

    rng = np.random.default_rng(seed)
    n, m = int(rng.integers(1, 80)), int(rng.integers(0, 400))
    ts = np.sort(rng.integers(0, 100, n))
    end = ts + rng.integers(0, 30, n)
    built = graph_edges.EdgeList()
    for _ in range(4):
        k = m // 4
        kind = EDGE_TYPES[int(rng.integers(0, len(EDGE_TYPES)))]
        points = rng.integers(0, 2, (2, k))
        built.add(kind, rng.integers(0, n, k), rng.integers(0, n, k), points[0], points[1])
    again = copy.deepcopy(built)  # to_frame lets go of the builders' arrays
    # the packed table's times checked a few edges at a time, the sorted one's at once
    monkeypatch.setattr(graph_edges, "TIMES_CHUNK", 3)
    packed, packed_dropped = built.to_frame(ts, end)
    assert not built.src  # let go
    monkeypatch.setattr(graph_edges, "TIMES_CHUNK", 1 << 18)
    monkeypatch.setattr(graph_edges, "_packed_edges", lambda *_: None)
    sorted_, sorted_dropped = again.to_frame(ts, end)
    pd.testing.assert_frame_equal(packed, sorted_)
    assert packed_dropped == sorted_dropped

"""The model built from events in memory: nesting, B/E pairing, counters, flows, kinds."""

from __future__ import annotations

import numpy as np

from explorer.trace.build import trace_from_events


def X(name, ts, dur, tid=1, pid=1, cat="cpu_op", **args):
    return {
        "ph": "X",
        "name": name,
        "cat": cat,
        "pid": pid,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": args,
    }


def test_nesting_with_ties_and_zero_length_slices() -> None:
    t = trace_from_events(
        [
            X("outer", 0, 100),
            X("same_span", 0, 100),
            X("a", 10, 20),
            X("z0", 15, 0),
            X("z1", 15, 0),
            X("b", 30, 10),
            X("after", 100, 5),
            X("other_thread", 0, 50, tid=2),
        ]
    )
    s = t.slices.set_index(t.slices["name"].astype(str))
    assert s.loc["outer", "depth"] == 0 and s.loc["same_span", "depth"] == 1
    assert s.loc["a", "depth"] == 2 and s.loc["z0", "depth"] == 3 and s.loc["z1", "depth"] == 3
    assert s.loc["b", "depth"] == 2  # starts when a ends: a sibling, not a child
    assert s.loc["after", "depth"] == 0  # starts exactly when outer ends
    assert s.loc["other_thread", "depth"] == 0
    names = t.slices["name"].astype(str).tolist()
    parent = t.slices["parent"].to_numpy()
    assert names[parent[names.index("z1")]] == "a"
    assert names[parent[names.index("a")]] == "same_span"
    assert s.loc["a", "ts"] == 10_000 and s.loc["a", "dur"] == 20_000  # µs → ns


def test_begin_end_pairs_nest_and_unmatched_are_reported() -> None:
    ev = [
        {"ph": "B", "name": "outer", "pid": 1, "tid": 1, "ts": 0},
        {"ph": "B", "name": "inner", "pid": 1, "tid": 1, "ts": 5},
        {"ph": "E", "pid": 1, "tid": 1, "ts": 8},
        {"ph": "E", "pid": 1, "tid": 1, "ts": 10},
        {"ph": "B", "name": "never_closed", "pid": 1, "tid": 1, "ts": 20},
        X("end_marker", 30, 1),
    ]
    t = trace_from_events(ev)
    s = t.slices.set_index(t.slices["name"].astype(str))
    assert s.loc["outer", "dur"] == 10_000 and s.loc["inner", "dur"] == 3_000
    assert s.loc["inner", "depth"] == 1
    assert s.loc["never_closed", "dur"] == 11_000  # closed at the end of the trace
    assert any("no matching 'E'" in w for w in t.metadata["warnings"])


def test_counters_become_counter_tracks() -> None:
    ev = [X("op", 0, 10)] + [
        {
            "ph": "C",
            "name": "CPU",
            "pid": 1,
            "tid": 0,
            "ts": i,
            "cat": "explorer_system",
            "args": {"process": 10.0 * i, "system": 50.0},
        }
        for i in range(4)
    ]
    t = trace_from_events(ev)
    ct = t.tracks[t.tracks["type"] == "counter"]
    assert sorted(ct["label"]) == ["CPU process", "CPU system"]
    proc = t.counters[t.counters["track"] == ct[ct["label"] == "CPU process"]["id"].iat[0]]
    assert proc["value"].tolist() == [0.0, 10.0, 20.0, 30.0]


def test_launch_flows_from_correlation_without_flow_events() -> None:
    ev = [
        X("aten::mm", 0, 50, **{"External id": 7}),
        X("cudaLaunchKernel", 10, 5, cat="cuda_runtime", correlation=99, **{"External id": 7}),
        X("gemm_kernel", 30, 40, pid=0, tid=7, cat="kernel", correlation=99, device=0, stream=7),
        X(
            "Memcpy DtoH (Device -> Pinned)",
            80,
            10,
            pid=0,
            tid=7,
            cat="gpu_memcpy",
            device=0,
            stream=7,
            bytes=4096,
        ),
    ]
    t = trace_from_events(ev)
    s = t.slices
    names = s["name"].astype(str).tolist()
    f = t.flows
    assert len(f) == 1 and f["type"].iat[0] == "launch"
    assert names[f["src"].iat[0]] == "cudaLaunchKernel" and names[f["dst"].iat[0]] == "gemm_kernel"
    mc = s.iloc[names.index("Memcpy DtoH (Device -> Pinned)")]
    assert (mc["copy_kind"], mc["src_mem"], mc["dst_mem"], mc["bytes"]) == (
        "DtoH",
        "Device",
        "Pinned",
        4096,
    )
    dev = t.tracks[t.tracks["type"] == "device_stream"]
    assert dev["device"].tolist() == [0] and dev["stream"].tolist() == [7]
    assert np.array_equal(t.slices["external_id"].to_numpy()[:2], [7, 7])


def test_explicit_flows_bind_to_enclosing_and_next_slices() -> None:
    ev = [
        X("fwd", 0, 10),
        X("bwd", 100, 10, tid=2),
        {"ph": "s", "id": 1, "cat": "fwdbwd", "name": "fwdbwd", "pid": 1, "tid": 1, "ts": 0},
        {
            "ph": "f",
            "id": 1,
            "cat": "fwdbwd",
            "name": "fwdbwd",
            "pid": 1,
            "tid": 2,
            "ts": 95,
        },  # next slice
    ]
    t = trace_from_events(ev)
    names = t.slices["name"].astype(str).tolist()
    assert [(names[a], names[b]) for a, b in zip(t.flows["src"], t.flows["dst"], strict=True)] == [
        ("fwd", "bwd")
    ]
    assert t.flows["type"].iat[0] == "fwdbwd"


def test_collector_categories_map_to_kinds() -> None:
    ev = [
        X("x", 0, 1, cat=c)
        for c in (
            "explorer_copy",
            "explorer_sync",
            "explorer_fallback",
            "explorer_compile",
            "mystery",
        )
    ]
    kinds = trace_from_events(ev).slices["kind"].astype(str).tolist()
    assert sorted(kinds) == sorted(["copy", "sync", "fallback", "compile", "other"])


def test_empty_event_array_and_chunk_boundaries() -> None:
    from explorer.trace.decode import EventChunks

    assert len(trace_from_events([]).slices) == 0
    # Chunks split between events whatever the spacing, and cover every event once.
    text = b'[ {"ph":"X","name":"a","ts":1,"dur":1} ,\n {"ph":"X","name":"b","ts":2,"dur":1},{"ph":"X","name":"c","ts":3,"dur":1}\n]'
    chunks = list(EventChunks.of(text, size=2))
    assert [start for start, _ in chunks] == [0, 2]
    import json

    assert [[e["name"] for e in json.loads(bytes(c))] for _, c in chunks] == [["a", "b"], ["c"]]


def test_flow_ids_written_as_strings() -> None:
    ev = [
        X("a", 0, 5),
        X("b", 10, 5, tid=2),
        X("c", 20, 5),
        X("d", 30, 5, tid=2),
        {"ph": "s", "id": "0xab", "cat": "fwdbwd", "name": "f", "pid": 1, "tid": 1, "ts": 0},
        {
            "ph": "f",
            "id": "0xab",
            "cat": "fwdbwd",
            "name": "f",
            "pid": 1,
            "tid": 2,
            "ts": 10,
            "bp": "e",
        },
        {"ph": "s", "id": "step-7", "cat": "custom", "name": "f", "pid": 1, "tid": 1, "ts": 20},
        {
            "ph": "f",
            "id": "step-7",
            "cat": "custom",
            "name": "f",
            "pid": 1,
            "tid": 2,
            "ts": 30,
            "bp": "e",
        },
    ]
    t = trace_from_events(ev)
    names = t.slices["name"].astype(str).tolist()
    got = {(names[a], names[b], ty, fid) for a, b, ty, fid in t.flows.itertuples(index=False)}
    assert ("a", "b", "fwdbwd", 0xAB) in got
    other = [g for g in got if g[0] == "c"]
    assert len(other) == 1 and other[0][1] == "d" and other[0][2] == "other" and other[0][3] < -1

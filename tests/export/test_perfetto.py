"""The .pftrace export, checked by reading the file back packet by packet."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

import explorer
from explorer.export import to_perfetto
from explorer.export.results import CRITICAL_PATH_ROW, FINDINGS_ROW, Results, report_path
from explorer.scenarios import write as write_scenario
from explorer.trace.build import trace_from_events
from tests.export.conftest import sample_files, shared_files
from tests.export.pftrace_check import check

TRACES = shared_files() + sample_files()


def expected_slices(trace: explorer.Trace) -> Counter:
    """(name, absolute start, duration) of every slice and instant of the trace."""
    start = int(trace.metadata["start_ns"])
    sl = trace.slices
    out = Counter(
        zip(sl["name"].astype(str), (sl["ts"] + start).tolist(), sl["dur"].tolist(), strict=True)
    )
    inst = trace.instants
    out.update(
        zip(inst["name"].astype(str), (inst["ts"] + start).tolist(), [0] * len(inst), strict=True)
    )
    return out


def exported_slices(parsed, explorer_rows: set[int]) -> Counter:
    return Counter((n, t, d) for u, n, t, d in parsed.completed if u not in explorer_rows)


def explorer_uuids(parsed) -> set[int]:
    group = {u for u, d in parsed.descriptors.items() if d.name == "Explorer" and not d.parent_uuid}
    return {u for u, d in parsed.descriptors.items() if d.parent_uuid in group}


def valid_flow_count(trace: explorer.Trace) -> int:
    f = trace.flows
    n = len(trace.slices)
    ok = (
        (f["src"] >= 0) & (f["dst"] >= 0) & (f["src"] < n) & (f["dst"] < n) & (f["src"] != f["dst"])
    )
    return int(ok.sum())


def assert_faithful(trace: explorer.Trace, out: Path) -> None:
    """Everything in the trace is in the file, exactly once, and nothing else but
    Explorer's own rows."""
    summary = to_perfetto(trace, out)
    parsed = check(out)
    rows = explorer_uuids(parsed)
    assert exported_slices(parsed, rows) == expected_slices(trace)
    assert summary.slices == len(trace.slices)
    assert parsed.slices == len(trace.slices) + len(trace.instants) + summary.result_slices
    result_count = sum(1 for u, *_ in parsed.completed if u in rows)
    assert result_count == summary.result_slices
    assert parsed.counters == len(trace.counters) + 2 * len(trace.memory)
    assert parsed.flows == summary.flows >= valid_flow_count(trace)
    assert summary.bytes == out.stat().st_size


@pytest.mark.slow
@pytest.mark.skipif(not TRACES, reason="../shared/traces is absent and sample_traces/ is empty")
@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name[:40])
def test_every_real_trace_exports_faithfully(path: Path, tmp_path: Path) -> None:
    trace = explorer.load(path, use_cache=False)
    assert_faithful(trace, tmp_path / "out.pftrace")


def test_torch_profiler_run_keeps_shapes_sources_and_memory(torch_trace, tmp_path: Path) -> None:
    out = tmp_path / "cpu.pftrace"
    assert_faithful(torch_trace, out)
    parsed = check(out)
    anns = parsed.annotations
    assert any("Input Dims" in a and "[32, 64]" in str(a["Input Dims"]) for a in anns)
    # the MLP's addmm was called from this test file: its line is on the slice
    sources = [str(a.get("source", "")) for a in anns]
    assert any("conftest.py:" in s for s in sources), sources[:20]
    # the allocator's totals are counters on their own rows, in bytes
    mem_rows = [d for d in parsed.descriptors.values() if d.HasField("counter")]
    assert any("memory allocated" in d.name for d in mem_rows)
    assert parsed.counters == 2 * len(torch_trace.memory) > 0


def test_overlapping_slices_go_to_sibling_rows_not_dropped(tmp_path: Path) -> None:
    # Three kernels on one stream, each starting 1 µs before the previous one ends (the
    # clock-rounding pattern of real GPU traces), and a child escaping its parent on a thread.
    events = [
        {
            "ph": "X",
            "cat": "kernel",
            "name": f"k{i}",
            "pid": 0,
            "tid": 7,
            "ts": 10 * i,
            "dur": 11,
            "args": {"stream": 7, "device": 0, "correlation": 100 + i},
        }
        for i in range(3)
    ] + [
        {"ph": "X", "cat": "cpu_op", "name": "outer", "pid": 1, "tid": 1, "ts": 0, "dur": 10},
        {"ph": "X", "cat": "cpu_op", "name": "escapes", "pid": 1, "tid": 1, "ts": 5, "dur": 10},
    ]
    trace = explorer.Trace(trace_from_events(events, {"synthetic": True}))
    out = tmp_path / "overlap.pftrace"
    summary = to_perfetto(trace, out, results=Results())
    parsed = check(out)
    assert summary.lane_tracks == 2
    assert exported_slices(parsed, set()) == expected_slices(trace)
    overlap_rows = [d.name for d in parsed.descriptors.values() if "(overlap 1)" in d.name]
    assert len(overlap_rows) == 2
    by_name = {n: u for u, n, _, _ in parsed.completed}
    assert by_name["k0"] == by_name["k2"] != by_name["k1"]
    assert by_name["outer"] != by_name["escapes"]


def test_flows_link_launch_to_kernel_and_are_annotated(tmp_path: Path) -> None:
    events = [
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": 0,
            "dur": 5,
            "args": {"correlation": 42, "External id": 9},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "gemm",
            "pid": 0,
            "tid": 7,
            "ts": 8,
            "dur": 20,
            "args": {"correlation": 42, "stream": 7, "device": 0, "grid": [4, 1, 1]},
        },
        # skewed clock: this kernel starts before the call that launched it
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": 40,
            "dur": 5,
            "args": {"correlation": 43},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "relu",
            "pid": 0,
            "tid": 7,
            "ts": 39,
            "dur": 3,
            "args": {"correlation": 43, "stream": 7, "device": 0},
        },
    ]
    trace = explorer.Trace(trace_from_events(events, {"synthetic": True}))
    assert len(trace.flows) == 2
    out = tmp_path / "flows.pftrace"
    summary = to_perfetto(trace, out, results=Results())
    parsed = check(out)  # checks every flow begins before it terminates
    assert parsed.flows == summary.flows == 2
    gemm = next(a for a in parsed.annotations if a.get("kind") == "kernel" and "grid" in a)
    assert gemm["correlation"] == 42 and gemm["grid"] == "[4,1,1]"


def test_a_graph_launch_with_many_kernels_keeps_every_flow(tmp_path: Path) -> None:
    # one cudaGraphLaunch, twelve kernels: more flow ids on one packet than the fixed columns
    events = [
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaGraphLaunch",
            "pid": 1,
            "tid": 1,
            "ts": 0,
            "dur": 5,
            "args": {"correlation": 42},
        },
    ] + [
        {
            "ph": "X",
            "cat": "kernel",
            "name": f"k{i}",
            "pid": 0,
            "tid": 7,
            "ts": 10 + 3 * i,
            "dur": 2,
            "args": {"correlation": 42, "stream": 7, "device": 0},
        }
        for i in range(12)
    ]
    trace = explorer.Trace(trace_from_events(events, {"synthetic": True}))
    assert len(trace.flows) == 12
    out = tmp_path / "graph.pftrace"
    summary = to_perfetto(trace, out, results=Results())
    parsed = check(out)
    assert parsed.flows == summary.flows == 12
    assert {b[1] for _, b in parsed.flow_ends.values()} == {f"k{i}" for i in range(12)}
    assert {a[1] for a, _ in parsed.flow_ends.values()} == {"cudaGraphLaunch"}
    assert exported_slices(parsed, set()) == expected_slices(trace)


def test_flow_between_a_slice_and_an_instant_starting_together(tmp_path: Path) -> None:
    # a zero-length marker launched at the same ns as the slice it flows to
    events = [
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": 10,
            "dur": 0,
            "args": {"correlation": 7},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "k",
            "pid": 0,
            "tid": 7,
            "ts": 10,
            "dur": 4,
            "args": {"correlation": 7, "stream": 7, "device": 0},
        },
    ]
    trace = explorer.Trace(trace_from_events(events, {"synthetic": True}))
    assert len(trace.flows) == 1
    out = tmp_path / "same_ns.pftrace"
    to_perfetto(trace, out, results=Results())
    assert check(out).flows == 1  # begun before it terminates, in file order


def test_findings_and_critical_path_rows(tmp_path: Path) -> None:
    path = write_scenario("sync_storm", tmp_path / "sync_storm.json", steps=4)
    trace = explorer.load(path, use_cache=False)
    assert trace.synthetic
    out = tmp_path / "sync.pftrace"
    summary = to_perfetto(trace, out)
    parsed = check(out)
    found = trace.findings()
    assert found, "the sync_storm scenario must produce findings"
    assert parsed.slices_on(FINDINGS_ROW) == len(found)
    titles = {n for u, n, _, _ in parsed.completed if parsed.track_name(u) == FINDINGS_ROW}
    assert found[0].title in titles
    # each finding points at its evidence slices (those starting after the finding does)
    start = int(trace.metadata["start_ns"])
    sl = trace.slices
    top = found[0]
    t0 = min((a for a, _ in top.ranges), default=0)
    evidence = {
        (int(sl["ts"].iat[e]) + start, str(sl["name"].iat[e]))
        for e in top.evidence[:32]
        if int(sl["ts"].iat[e]) > t0
    }
    linked = {b for a, b in parsed.flow_ends.values() if a[1] == top.title}
    assert evidence and linked == evidence
    finding_anns = [a for a in parsed.annotations if "recommendation" in a]
    assert {a["title"] for a in finding_anns} == {f.title for f in found}
    cp = report_path(trace.data)
    assert parsed.slices_on(CRITICAL_PATH_ROW) == len(cp.segments) > 0
    assert summary.result_slices == len(found) + len(cp.segments)
    assert_path_runs(trace, parsed, cp)


def assert_path_runs(trace: explorer.Trace, parsed, cp) -> None:
    """The "Critical path" row holds the path as runs that tile it exactly (start to end,
    no gap, no overlap), each on a track of the trace with the slices it passes through."""
    start = int(trace.metadata["start_ns"])
    path_rows = {u for u in explorer_uuids(parsed) if parsed.track_name(u) == CRITICAL_PATH_ROW}
    runs = sorted((t, d) for u, _, t, d in parsed.completed if u in path_rows)
    assert runs[0][0] == start + cp.start_ns
    assert runs[-1][0] + runs[-1][1] == start + cp.end_ns
    assert all(a + d == b for (a, d), (b, _) in zip(runs, runs[1:], strict=False))
    assert sum(d for _, d in runs) == cp.length_ns
    labels = set(trace.tracks["label"].astype(str))
    run_args = [a for a in parsed.annotations if "top ops" in a or ("on" in a and "slices" in a)]
    assert len(run_args) == len(runs)
    assert all(a["on"] in labels and int(a["slices"]) >= 0 for a in run_args)
    # the path's time on its slices, each counted once in the run it holds time in
    e = cp.edges
    held = e[(e["owner"] >= 0) & (e["weight"] > 0)]
    assert sum(int(a["slices"]) for a in run_args) >= held["owner"].nunique()


def test_the_critical_path_crossing_tracks_becomes_flows(
    shared_traces: Path, tmp_path: Path
) -> None:
    """Where the path moves to another thread or stream (a launch, a sync, a stream
    waiting on another), an arrow joins the two original slices; its steps along one
    thread are the run itself, not arrows."""
    path = shared_traces / "critical_path__cuda_event_sync_multi_stream__event_sync_trace.json.gz"
    trace = explorer.load(path, use_cache=False)
    cp = report_path(trace.data)
    track = trace.slices["track"].to_numpy()
    e = cp.edges[cp.edges["src"] != cp.edges["dst"]]
    src, dst = e["src"].to_numpy(), e["dst"].to_numpy()
    crossing = track[src] != track[dst]
    kinds = set(e["type"].astype(str)[crossing])
    assert crossing.any() and {"launch", "sync"} <= kinds, kinds
    out = tmp_path / "deps.pftrace"
    summary = to_perfetto(trace, out)
    parsed = check(out)
    start = int(trace.metadata["start_ns"])
    sl = trace.slices

    def end(i: int) -> tuple[int, str]:
        return int(sl["ts"].iat[i]) + start, str(sl["name"].iat[i])

    ends = set(parsed.flow_ends.values())
    for a, b in zip(src[crossing], dst[crossing], strict=True):
        assert (end(a), end(b)) in ends or (end(b), end(a)) in ends, (a, b)
    along = {(end(a), end(b)) for a, b in zip(src[~crossing], dst[~crossing], strict=True)}
    own = {(end(a), end(b)) for a, b in zip(trace.flows["src"], trace.flows["dst"], strict=True)}
    assert not (along - own) & ends  # no arrow for a step along one thread
    assert summary.flows == len(parsed.flow_ends) < valid_flow_count(trace) + len(e)
    assert_path_runs(trace, parsed, cp)


def test_size_is_well_under_the_json(tmp_path: Path) -> None:
    src = write_scenario("launch_bound", tmp_path / "lb.json", steps=6)
    trace = explorer.load(src, use_cache=False)
    out = tmp_path / "lb.pftrace"
    to_perfetto(trace, out, results=Results())
    assert out.stat().st_size <= 0.5 * src.stat().st_size


def test_counter_samples_sit_on_counter_rows_beside_their_process(tmp_path: Path) -> None:
    # host CPU % and device utilisation samples as Explorer's collector writes them
    events = (
        [
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::mm",
                "pid": 11,
                "tid": 11,
                "ts": 0,
                "dur": 50,
            },
            {"ph": "M", "name": "process_name", "pid": 11, "tid": 0, "args": {"name": "train.py"}},
        ]
        + [
            {
                "ph": "C",
                "cat": "explorer_system",
                "name": "process CPU %",
                "pid": 11,
                "ts": 10 * i,
                "args": {"process CPU %": 50.0 + i},
            }
            for i in range(5)
        ]
        + [
            {
                "ph": "C",
                "cat": "explorer_system",
                "name": "GPU 0 utilisation %",
                "pid": 11,
                "ts": 10 * i,
                "args": {"GPU 0 utilisation %": 90.0 - i},
            }
            for i in range(3)
        ]
    )
    trace = explorer.Trace(trace_from_events(events, {"synthetic": True}))
    assert len(trace.counters) == 8
    out = tmp_path / "counters.pftrace"
    summary = to_perfetto(trace, out, results=Results())
    parsed = check(out)  # checks counter values only on counter rows
    assert parsed.counters == summary.counter_samples == 8
    rows = {d.uuid: d for d in parsed.descriptors.values() if d.HasField("counter")}
    process = next(u for u, d in parsed.descriptors.items() if d.process.pid == 11)
    assert {d.name for d in rows.values()} == {"process CPU %", "GPU 0 utilisation %"}
    assert all(d.parent_uuid == process for d in rows.values())
    start = int(trace.metadata["start_ns"])
    cpu = sorted(
        t for t, ty, u, *_ in parsed.events if u in rows and rows[u].name == "process CPU %"
    )
    labels = trace.tracks["label"].astype(str).to_numpy()[trace.counters["track"].to_numpy()]
    expect = trace.counters["ts"].to_numpy()[labels == "process CPU %"]
    assert cpu == sorted(start + int(t) for t in expect) and len(cpu) == 5


def test_empty_trace_is_still_a_valid_file(tmp_path: Path) -> None:
    trace = explorer.Trace(trace_from_events([], {"synthetic": True}))
    out = tmp_path / "empty.pftrace"
    summary = to_perfetto(trace, out)
    parsed = check(out)
    assert summary.slices == parsed.slices == 0


@pytest.mark.parametrize("chunk", [2, 1 << 16])
def test_shape_args_are_each_slice_s_own_json_text_of_those_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    """The shape args exported per slice are its args' values for those keys, as the file
    wrote them — checked against each slice's args decoded on their own; a key that is only
    a value's text or a nested object's key, or args without any key, give nothing; chunks
    of 2 slices split rows with and without keys across the reads (each chunk decoding
    only the keys its text names)."""
    import json

    from explorer.export import perfetto_annotations as pa_

    def op(ts: int, name: str, args: dict) -> dict:
        return {"ph": "X", "pid": 1, "tid": 1, "ts": ts, "dur": 5, "name": name, "args": args}

    events = [
        op(0, "aten::mm", {"Input Dims": [[32, 64], [64, 8]], "Input type": ["float", "float"]}),
        op(10, "aten::add", {"note": "grid", "Sequence number": 3}),
        op(20, "plain", {}),
        op(30, "aten::relu", {"Input Dims": [[32, 64]], "Concrete Inputs": ["", "1"]}),
        op(40, "kernel", {"grid": [128, 1, 1], "block": [256, 1, 1], "dtype": "bf16"}),
        op(50, "aten::mm", {"Input Dims": [[32, 64], [64, 8]], "Collective name": "none"}),
        op(60, "aten::cat", {"Concrete Inputs": ['"grid"', ""], "x": {"block": [1]}}),
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    monkeypatch.setattr(pa_, "ARGS_CHUNK", chunk)
    trace = explorer.load(path, use_cache=False).data
    got = pa_._shape_args(trace)
    expected: dict[str, dict[int, str]] = {}
    for i in range(len(trace.slices)):
        for key, value in trace.args_store.get(i).items():
            if key in pa_.SHAPE_ARGS:
                expected.setdefault(key, {})[i] = json.dumps(value)
    assert set(got) == set(expected) == {
        "Input Dims", "Input type", "Concrete Inputs", "grid", "block", "dtype", "Collective name"
    }  # fmt: skip
    for key, (codes, uniques) in got.items():
        have = {i: uniques[c] for i, c in enumerate(codes.tolist()) if c >= 0}
        assert have == expected[key], key


@pytest.mark.parametrize(
    "name", ["cpu_slow_dataloader.pt.trace.json.gz", "neuron_cnn.pt.trace.json.gz"]
)
def test_an_export_with_the_path_in_a_child_is_the_one_made_alone(
    name: str, tmp_path: Path
) -> None:
    """``explorer export`` with the critical path found in a forked child, which makes the
    graph's inputs first and sends them back for the findings here (``Ahead.take_early``),
    writes the same bytes as an export made in one process; so does the report after it."""
    import os
    import subprocess
    import sys

    from tests.conftest import SAMPLE_TRACES

    root = Path(__file__).resolve().parents[2]
    trace = SAMPLE_TRACES / name
    out: dict[str, tuple[bytes, str]] = {}
    for workers in ("1", "0"):
        cache = tmp_path / f"cache{workers}"
        env = {
            **os.environ,
            "PYTHONPATH": str(root),
            "EXPLORER_CACHE_DIR": str(cache),
            "EXPLORER_ANALYSIS_WORKERS": workers,
        }
        target = tmp_path / f"x{workers}.pftrace"

        def cli(*args: str) -> str:
            proc = subprocess.run(
                [sys.executable, "-m", "explorer", *args],
                env=env,  # noqa: B023 - run at once, in this iteration
                capture_output=True,
                text=True,
                timeout=300,
                cwd=root,
            )
            assert proc.returncode == 0, proc.stderr[-2000:]
            return proc.stdout

        cli("info", str(trace))  # the tables cached first, as an export after a load
        cli("export", str(trace), "-o", str(target))
        out[workers] = (target.read_bytes(), cli("report", str(trace), "--format", "json"))
    assert out["1"][0] == out["0"][0]
    assert out["1"][1] == out["0"][1]
    assert len(out["1"][0]) > 10_000

"""Memory analysis on the memory_growth scenario, on hand-built allocator sequences, on a real
CPU torch.profiler run with ``profile_memory=True``, and on the real traces (which carry no
``[memory]`` events: every function must answer with empty tables, not fail)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

import explorer
from explorer.analysis import memory as M
from explorer.scenarios import write
from explorer.scenarios.workload import LINES, TRAIN_FILE
from explorer.trace.build import trace_from_events

STEPS = 6
MIB = 1 << 20


@pytest.fixture(scope="module")
def growth(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, explorer.Trace]:
    path = write("memory_growth", tmp_path_factory.mktemp("mem") / "growth.json.gz", steps=STEPS)
    with gzip.open(path, "rb") as f:
        doc = json.loads(f.read())
    return doc, explorer.load(path, use_cache=False)


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> explorer.Trace:
    path = write("clean", tmp_path_factory.mktemp("mem") / "clean.json", steps=STEPS)
    return explorer.load(path, use_cache=False)


# -- the memory_growth scenario -------------------------------------------------------------------
def test_timeline_is_the_allocator_totals_in_time_order(growth):
    doc, trace = growth
    mem = [e for e in doc["traceEvents"] if e.get("name") == "[memory]"]
    mem.sort(key=lambda e: e["ts"])
    tl = M.memory_timeline(trace)
    assert list(tl.columns) == ["device", "ts", "allocated", "reserved"]
    assert list(tl["allocated"]) == [e["args"]["Total Allocated"] for e in mem]
    assert list(tl["reserved"]) == [e["args"]["Total Reserved"] for e in mem]
    assert set(tl["device"]) == {"cuda:0", "cpu"}
    assert (np.diff(tl["ts"].to_numpy()) >= 0).all()
    cuda = tl[tl["device"] == "cuda:0"]
    assert (cuda["reserved"] >= cuda["allocated"]).all()


def test_growth_per_step_is_the_leak_per_step(growth):
    doc, trace = growth
    injected = doc["explorer_injected"][0]
    g = M.growth_per_step(trace)
    cuda = g[g["device"] == "cuda:0"].sort_values("step")
    assert list(cuda["step"]) == list(range(STEPS))
    assert set(np.diff(cuda["allocated_at_end"].to_numpy())) == {injected["bytes_per_step"]}
    assert injected["bytes_per_step"] == 16 * MIB
    cpu = g[g["device"] == "cpu"]
    assert (cpu["allocated_at_end"] == 0).all()  # host batches are freed once copied


def test_leak_suspects_are_the_never_freed_clones_largest_first(growth):
    doc, trace = growth
    injected = doc["explorer_injected"][0]
    sus = M.leak_suspects(trace)
    assert list(sus.columns)[:7] == ["device", "addr", "bytes", "alloc_ts", "op", "file", "line"]
    assert (np.diff(sus["bytes"].to_numpy()) <= 0).all()
    clones = sus.iloc[: injected["allocations"]]
    assert injected["allocations"] == STEPS
    assert set(clones["op"]) == {"aten::clone"}
    assert set(zip(clones["file"], clones["line"], strict=True)) == {
        (TRAIN_FILE, LINES["remember"])
    }
    assert int(clones["bytes"].sum()) == injected["leaked_bytes"]
    assert sorted(clones["step"]) == list(range(STEPS))
    # the only other survivor is the batch prefetched in the last step for the step after it
    rest = sus.iloc[injected["allocations"] :]
    assert len(rest) == 1 and rest["step"].iloc[0] == STEPS - 1
    assert (rest["file"].iloc[0], rest["line"].iloc[0]) == (TRAIN_FILE, LINES["to_device"])
    assert rest["op"].iloc[0] == "aten::_to_copy"  # credited past aten::empty_strided


def test_peak_is_what_is_alive_then(growth):
    _, trace = growth
    p = M.peaks(trace)
    tl = M.memory_timeline(trace)
    row = p[p["device"] == "cuda:0"].iloc[0]
    cuda = tl[tl["device"] == "cuda:0"]
    assert row["peak_bytes"] == cuda["allocated"].max()
    assert row["ts"] == cuda["ts"].to_numpy()[np.argmax(cuda["allocated"].to_numpy())]
    # live allocations at the peak + memory allocated before profiling = the peak, exactly
    mem = trace.memory
    first = mem[mem["device_type"] == 1].iloc[0]
    before_profiling = int(first["total_allocated"] - first["bytes"])
    live = M.live_allocations(trace, int(row["ts"]))
    assert (
        int(live.loc[live["device"] == "cuda:0", "bytes"].sum()) + before_profiling
        == row["peak_bytes"]
    )
    top = M.peak_contributors(trace)
    top_cuda = top[top["device"] == "cuda:0"]
    assert top_cuda.iloc[0]["op"] == "aten::clone" and top_cuda.iloc[0]["line"] == LINES["remember"]
    assert int(top_cuda["bytes"].sum()) <= row["peak_bytes"]


def test_live_allocations_pair_allocs_with_frees(growth):
    _, trace = growth
    a = M.allocations(trace)
    freed = a[a["free_ts"] >= 0]
    assert (freed["free_ts"] >= freed["alloc_ts"]).all()
    # at any time, no address is alive twice on one device
    for ts in np.linspace(0, trace.span_ns, 7).astype(np.int64):
        live = M.live_allocations(trace, int(ts))
        assert not live.duplicated(["device", "addr"]).any()
        assert (live["alloc_ts"] <= ts).all()


def test_finding_inputs_report_growth_and_its_line(growth, clean):
    doc, trace = growth
    per_step = doc["explorer_injected"][0]["bytes_per_step"]
    row = M.memory_finding_inputs(trace).set_index("device").loc["cuda:0"]
    assert row["growth_bytes"] == (STEPS - 1) * per_step
    assert row["growing_steps"] == STEPS - 1
    assert row["leaked_bytes"] == (STEPS - 1) * per_step  # made before the last step
    assert row["top_line"] == (TRAIN_FILE, LINES["remember"], "remember")
    calm = M.memory_finding_inputs(clean).set_index("device")
    assert (calm["growth_bytes"] == 0).all() and (calm["leaked_bytes"] == 0).all()
    assert calm.loc["cuda:0", "top_line"] is None


def test_without_totals_the_timeline_is_the_running_sum(growth):
    doc, _ = growth
    events = []
    for e in doc["traceEvents"]:
        if e.get("name") == "[memory]":
            e = {**e, "args": {k: v for k, v in e["args"].items() if not k.startswith("Total")}}
        events.append(e)
    trace = trace_from_events(events, {k: v for k, v in doc.items() if k != "traceEvents"})
    tl = M.memory_timeline(trace)
    mem = trace.memory.sort_values("ts", kind="stable")
    cuda = tl[tl["device"] == "cuda:0"]
    want = np.cumsum(mem.loc[mem["device_type"] == 1, "bytes"].to_numpy())
    assert list(cuda["allocated"]) == list(want)
    assert (cuda["reserved"] == cuda["allocated"]).all()
    g = M.growth_per_step(trace)
    assert set(np.diff(g.loc[g["device"] == "cuda:0", "allocated_at_end"])) == {16 * MIB}


# -- hand-built allocator sequences ------------------------------------------------------------------
def _mem(ts: float, addr: int, nbytes: int, total: int) -> dict:
    return {
        "ph": "i",
        "s": "t",
        "name": "[memory]",
        "cat": "cpu_instant_event",
        "pid": 1,
        "tid": 1,
        "ts": ts,
        "args": {
            "Device Type": 1,
            "Device Id": 2,
            "Addr": addr,
            "Bytes": nbytes,
            "Total Allocated": total,
            "Total Reserved": 1 << 30,
        },
    }


def test_reused_address_is_two_allocations():
    events = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::empty",
            "pid": 1,
            "tid": 1,
            "ts": 0.5,
            "dur": 1,
        },
        _mem(1.0, 0xA0, 100, 100),
        _mem(2.0, 0xA0, -100, 0),
        _mem(3.0, 0xA0, 300, 300),
        _mem(4.0, 0xB0, 50, 350),
        _mem(5.0, 0xB0, 70, 420),  # lost free: re-allocated without a free in between
    ]
    trace = trace_from_events(events)
    t = trace.memory["ts"].to_numpy()  # the loader's clock
    a = M.allocations(trace)
    assert list(a["bytes"]) == [100, 300, 50, 70]
    assert list(a["free_ts"]) == [t[1], -1, t[4], -1]
    assert list(a["device"].unique()) == ["cuda:2"]
    # a primitive with no caller keeps its own name; outside every op there is none
    assert list(a["op"]) == ["aten::empty", "", "", ""] and (a["line"] == -1).all()
    assert M.live_allocations(trace, int(t[1]) + 1).empty
    assert list(M.live_allocations(trace, int(t[4]))["bytes"]) == [300, 70]
    assert list(M.leak_suspects(trace)["bytes"]) == [300, 70]
    assert M.peaks(trace)["peak_bytes"].tolist() == [420]


# -- a real CPU run ----------------------------------------------------------------------------------
def keep_features(x, store):
    store.append(x * 2)


def transient(x):
    import torch

    return float(torch.relu(x @ x).sum())


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> explorer.Trace:
    """Five steps that each keep a 256 KiB tensor alive, recorded by torch.profiler."""
    torch = pytest.importorskip("torch")  # tests/analysis collects and runs without torch
    from torch.profiler import ProfilerActivity, profile, record_function

    store: list = []
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, with_stack=True) as prof:
        for i in range(5):
            with record_function(f"ProfilerStep#{i}"):
                x = torch.randn(32, 32)
                transient(x)
                keep_features(torch.ones(256, 256), store)
    path = tmp_path_factory.mktemp("torch") / "cpu_memory.json"
    prof.export_chrome_trace(str(path))
    return explorer.load(path, use_cache=False)


def test_real_cpu_run_growth_and_leak_line(profiled):
    trace = profiled
    assert len(trace.memory) > 10
    g = M.growth_per_step(trace)
    assert list(g["device"].unique()) == ["cpu"]
    assert set(np.diff(g["allocated_at_end"].to_numpy())) == {256 * 256 * 4}
    sus = M.leak_suspects(trace)
    mine = sus[sus["function"] == "keep_features"]
    assert len(mine) == 5 and (mine["bytes"] == 256 * 256 * 4).all()
    assert set(mine["line"]) == {keep_features.__code__.co_firstlineno}
    assert all(Path(f).name == Path(__file__).name for f in mine["file"])
    assert set(mine["op"]) == {"aten::mul"}
    row = M.memory_finding_inputs(trace).iloc[0]
    assert row["growth_bytes"] == 4 * 256 * 256 * 4 and row["top_line"][2] == "keep_features"
    # the timeline is torch's own running total
    tl = M.memory_timeline(trace)
    assert tl["allocated"].max() == M.peaks(trace)["peak_bytes"].iloc[0]
    assert (tl["allocated"] >= 0).all()


# -- real traces without memory events ----------------------------------------------------------------
def test_traces_without_memory_events_give_empty_answers(shared_traces: Path):
    for name in (
        "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz",
        "critical_path__alexnet__benchmark_result_2869224_1695835535_trace.json.gz",
        "cpu_only__rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
    ):
        trace = explorer.load(shared_traces / name)
        assert len(trace.memory) == 0
        assert M.memory_timeline(trace).empty and M.peaks(trace).empty
        assert M.leak_suspects(trace).empty and M.growth_per_step(trace).empty
        assert M.live_allocations(trace, 0).empty and M.peak_contributors(trace).empty
        assert M.memory_finding_inputs(trace).empty

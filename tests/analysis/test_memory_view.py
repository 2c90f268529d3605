"""What the memory panel shows, computed without Qt (explorer.analysis.memory_view), on the
real CPU runs in sample_traces/ and on the memory_growth scenario: every figure is checked
against a replay of the trace's own [memory] events."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

import explorer
from explorer.analysis.memory import alive_at, leak_suspects, live_allocations
from explorer.analysis.memory_view import (
    TABLE_COLUMNS,
    allocated_before_trace,
    allocation_lifetimes,
    memory_data,
    table_frame,
)
from tests.conftest import SAMPLE_TRACES

SAMPLES = sorted(SAMPLE_TRACES.glob("*.json.gz"))


def _events(path):
    doc = json.loads(gzip.decompress(path.read_bytes()))
    return sorted(
        (e for e in doc["traceEvents"] if e.get("name") == "[memory]"), key=lambda e: e["ts"]
    )


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_peaks_and_curves_are_the_allocator_totals(path):
    trace = explorer.load(path)
    data = memory_data(trace)
    assert len(data.curves), "the sample runs were recorded with profile_memory=True"
    # one peak per device, in the curves' (device) order, at the first highest total
    assert data.peaks["device"].tolist() == sorted(set(data.curves["device"])) == list(data.lines)
    for peak in data.peaks.itertuples(index=False):
        curve = data.curves[data.curves["device"] == peak.device]
        top = int(curve["allocated"].max())
        assert int(peak.peak_bytes) == top
        assert int(peak.ts) == int(curve["ts"].to_numpy()[np.argmax(curve["allocated"].to_numpy())])
        x, y, _ = data.lines[peak.device]
        assert y.max() == top and x.min() * 1e9 == pytest.approx(curve["ts"].min())
    cpu = [e for e in _events(path) if e["args"].get("Device Type", 0) == 0]
    if cpu:
        assert int(data.peaks.set_index("device").at["cpu", "peak_bytes"]) == max(
            int(e["args"]["Total Allocated"]) for e in cpu
        )


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_every_allocation_is_freed_or_never_freed_and_alive_bytes_replay(path):
    trace = explorer.load(path)
    data = memory_data(trace)
    lifetimes = data.allocations
    freed = lifetimes[lifetimes["free_ts"] >= 0]
    assert (freed["free_ts"] >= freed["alloc_ts"]).all()
    assert (data.leaks["free_ts"] < 0).all() and len(data.leaks) == int(
        (lifetimes["free_ts"] < 0).sum()
    )
    assert (data.leaks["bytes"].diff().dropna() <= 0).all()  # largest first
    assert data.leaks["bytes"].tolist() == leak_suspects(trace)["bytes"].tolist()
    mem = trace.memory
    assert int(lifetimes["bytes"].sum()) == int(mem["bytes"].clip(lower=0).sum())
    # what the "alive at" table lists at a moment: a replay of the events up to then, one
    # live block per (device, address); a free of memory allocated before the trace frees
    # nothing the trace saw, an address allocated again ends its earlier block
    events = mem.sort_values("ts", kind="stable")
    rows = list(
        zip(
            events["ts"].tolist(), events["device_type"].tolist(), events["device"].tolist(),
            events["addr"].tolist(), events["bytes"].tolist(), strict=True,
        )
    )  # fmt: skip
    ts = np.sort(mem["ts"].to_numpy(np.int64))
    for t in ts[:: max(1, len(ts) // 7)]:
        live: dict[tuple[int, int, int], int] = {}
        for when, dtype, dev, addr, nbytes in rows:
            if when > t:
                break
            if nbytes > 0:
                live[(dtype, dev, addr)] = nbytes
            else:
                live.pop((dtype, dev, addr), None)
        alive = alive_at(lifetimes, int(t))
        assert int(alive["bytes"].sum()) == sum(live.values())
        assert sorted(alive["bytes"].tolist()) == sorted(live.values())
        assert (alive["alloc_ts"] <= t).all()
        assert ((alive["free_ts"] < 0) | (alive["free_ts"] > t)).all()
        assert alive["bytes"].tolist() == live_allocations(trace, int(t))["bytes"].tolist()
        frame = table_frame(alive, int(trace.span_ns))
        assert list(frame.columns) == TABLE_COLUMNS
        assert (frame["lifetime_ns"] >= 0).all()
        assert frame["freed_at"].isna().tolist() == (alive["free_ts"] < 0).tolist()


def test_what_the_allocator_held_before_the_trace_began():
    """cpu_item_every_step: the allocator already held memory when recording began, so at
    the first event the curve holds more than the one allocation the trace saw."""
    path = SAMPLE_TRACES / "cpu_item_every_step.pt.trace.json.gz"
    first = _events(path)[0]["args"]
    assert first["Bytes"] > 0
    trace = explorer.load(path)
    data = memory_data(trace)
    t = int(trace.memory["ts"].min())
    alive = alive_at(data.allocations, t)
    assert alive["bytes"].tolist() == [first["Bytes"]]
    held = int(first["Total Allocated"])
    assert allocated_before_trace(data, alive, t) == [("cpu", held, held - first["Bytes"])]
    # once every allocation the trace made is alive and none before it, nothing is missing
    assert allocated_before_trace(data, alive.iloc[:0], t - 1) == []


def test_synthetic_leak_is_what_never_freed_lists(tmp_path):
    """SYNTHETIC trace (Explorer's scenario generator): the leak it injects is exactly the
    never-freed allocations of its device and op, with the injected source line."""
    from explorer import scenarios

    trace = explorer.load(scenarios.write("memory_growth", tmp_path / "memory_growth.json"))
    assert trace.synthetic
    truth = trace.metadata["explorer_injected"][0]
    leaks = memory_data(trace).leaks
    mine = leaks[(leaks["device"] == truth["device"]) & (leaks["op"] == truth["op"])]
    assert int(mine["bytes"].sum()) == truth["leaked_bytes"]
    assert len(mine) == truth["allocations"]
    file, line = truth["source_line"]
    assert set(mine["source"]) == {f"{file}:{line}"}
    assert set(allocation_lifetimes(trace)["source"]) >= {f"{file}:{line}"}

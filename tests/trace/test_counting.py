"""What the reader gives each slice so it is counted where it belongs: a copy's device, a
zero-length runtime call's op, and a trace of memory events only (hand-built traces of
cases real profilers write)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import explorer
from explorer.analysis.operators import operator_stats
from explorer.trace.build import trace_from_events

HOST = {"pid": 100, "tid": 100}
GPU = {"pid": 0, "tid": 7}


def _x(name: str, cat: str, ts: float, dur: float, where: dict, **args) -> dict:
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, **where, "args": args}


def test_a_copy_without_a_device_arg_takes_its_tracks_device() -> None:
    """A memcpy/memset whose args lack ``device`` (only ``correlation`` and ``stream``) ran
    on its stream's device: its launch pairs with it, so the op that launched it gets its
    device time (it had 0, while the step window did include the copy)."""
    ev = [
        _x("ProfilerStep#1", "user_annotation", 0, 100, HOST),
        _x("aten::copy_", "cpu_op", 1, 20, HOST),
        _x("cudaMemcpyAsync", "cuda_runtime", 2, 5, HOST, correlation=5),
        _x("Memcpy HtoD (Pinned -> Device)", "gpu_memcpy", 10, 8, GPU, correlation=5, stream=7),
        _x("aten::fill_", "cpu_op", 30, 20, HOST),
        _x("cudaMemsetAsync", "cuda_runtime", 31, 5, HOST, correlation=6),
        _x("Memset (Device)", "gpu_memset", 40, 3, GPU, correlation=6),
        _x("aten::mm", "cpu_op", 50, 10, HOST),
        _x("cudaLaunchKernel", "cuda_runtime", 51, 2, HOST, correlation=7),
        _x("gemm", "kernel", 55, 10, {"pid": 1, "tid": 7}, device=1, stream=7, correlation=7),
    ]
    t = trace_from_events(ev)
    s = t.slices
    dev = dict(zip(s["name"].astype(str), s["device"], strict=True))
    assert dev["Memcpy HtoD (Pinned -> Device)"] == 0 and dev["Memset (Device)"] == 0
    assert dev["gemm"] == 1 and dev["aten::copy_"] == -1  # args win; host slices have none
    stats = operator_stats(t).set_index("name")
    assert stats.loc["aten::copy_", "device_ns"] == 8_000
    assert stats.loc["aten::fill_", "device_ns"] == 3_000
    assert stats.loc["aten::mm", "device_ns"] == 10_000


def test_a_zero_length_call_on_an_op_boundary_belongs_to_the_op_its_external_id_names() -> None:
    """A zero-length ``cudaGetDevice`` at the instant ``aten::empty`` ends and ``aten::add``
    begins, whose ``External id`` is aten::empty's, is aten::empty's child (by time alone it
    went to aten::add, or to no op at all at a trace's last op's end)."""
    ev = [
        _x("aten::empty", "cpu_op", 0, 10, HOST, **{"External id": 1}),
        _x("cudaGetDevice", "cuda_runtime", 10, 0, HOST, **{"External id": 1}),
        _x("aten::add", "cpu_op", 10, 10, HOST, **{"External id": 2}),
        _x("cudaLaunchKernel", "cuda_runtime", 12, 2, HOST, **{"External id": 2}),
        _x("cudaStreamIsCapturing", "cuda_runtime", 20, 0, HOST, **{"External id": 2}),
        _x("cudaGetDevice", "cuda_runtime", 20, 0, HOST, **{"External id": 9}),  # no op 9
    ]
    t = trace_from_events(ev)
    s = t.slices
    names = s["name"].astype(str).tolist()
    parent_name = [names[p] if p >= 0 else "" for p in s["parent"]]
    got = list(zip(names, s["external_id"], parent_name, strict=True))
    assert ("cudaGetDevice", 1, "aten::empty") in got
    assert ("cudaStreamIsCapturing", 2, "aten::add") in got
    assert ("cudaGetDevice", 9, "") in got  # names no op: left where time put it
    assert ("cudaLaunchKernel", 2, "aten::add") in got
    depth = dict(zip(names, s["depth"], strict=False))
    assert depth["cudaStreamIsCapturing"] == 1


def test_a_trace_of_memory_events_only_loads_and_says_so(tmp_path: Path) -> None:
    """A ``profile_memory`` capture with no activity events (five ``[memory]`` instants)
    loads, has its memory timeline, and warns "only memory events (5)"; it used to be
    refused as "holds no events"."""
    events = [
        {"ph": "i", "s": "t", "name": "[memory]", "cat": "cpu_instant_event", "pid": 1,
         "tid": 1, "ts": 10 + i,
         "args": {"Device Type": 1, "Device Id": 0, "Addr": 1000 + i, "Bytes": 1024,
                  "Total Allocated": 1024 * (i + 1), "Total Reserved": 2**20}}
        for i in range(5)
    ]  # fmt: skip
    path = tmp_path / "memory_only.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    t = explorer.load(path)
    assert len(t.slices) == 0 and len(t.memory) == 5
    assert any("only memory events (5)" in w for w in t.metadata["warnings"])
    from explorer.analysis.memory import memory_timeline

    tl = memory_timeline(t.data)
    assert len(tl) and int(tl["allocated"].max()) == 5 * 1024


@pytest.mark.parametrize("verb", ["info", "report"])
def test_the_cli_reads_a_memory_only_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], verb: str
) -> None:
    from explorer.cli.main import main

    events = [
        {"ph": "i", "s": "t", "name": "[memory]", "cat": "cpu_instant_event", "pid": 1,
         "tid": 1, "ts": 10, "args": {"Device Type": 0, "Device Id": -1, "Addr": 1,
                                      "Bytes": 64, "Total Allocated": 64}}
    ]  # fmt: skip
    path = tmp_path / "memory_only.json"
    path.write_text(json.dumps({"traceEvents": events}))
    assert main([verb, str(path)]) == 0
    captured = capsys.readouterr()
    assert "only memory events (1)" in captured.out + captured.err

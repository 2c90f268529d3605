"""The Chrome JSON export: valid JSON, and ``explorer.load`` reads back the same trace."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import explorer
from explorer.export import to_chrome
from explorer.export.results import Results, report_path
from explorer.scenarios import write as write_scenario
from tests.export.conftest import sample_files, shared_files

TRACES = shared_files() + sample_files()


def slice_set(trace: explorer.Trace) -> Counter:
    sl = trace.slices
    label = trace.tracks["label"].astype(str).to_numpy()[sl["track"].to_numpy()]
    return Counter(
        zip(sl["name"].astype(str), sl["ts"].tolist(), sl["dur"].tolist(), label, strict=True)
    )


def flow_set(trace: explorer.Trace) -> Counter:
    f = trace.flows
    return Counter(zip(f["src"].tolist(), f["dst"].tolist(), f["type"].astype(str), strict=True))


def assert_round_trip(trace: explorer.Trace, out: Path) -> explorer.Trace:
    to_chrome(trace, out, results=Results())
    back = explorer.load(out, use_cache=False)
    assert back.metadata["start_ns"] == trace.metadata["start_ns"]
    assert slice_set(back) == slice_set(trace)
    assert flow_set(back) == flow_set(trace)
    assert back.tracks["label"].tolist() == trace.tracks["label"].tolist()
    assert len(back.instants) == len(trace.instants)
    assert back.counters["value"].tolist() == trace.counters["value"].tolist()
    assert back.rank == trace.rank
    # args survive byte for byte (spot-check a spread of slices)
    for i in np.linspace(0, len(trace.slices) - 1, num=min(25, len(trace.slices)), dtype=int):
        assert back.args(int(i)) == trace.args(int(i))
    return back


@pytest.mark.slow
@pytest.mark.skipif(not TRACES, reason="../shared/traces is absent and sample_traces/ is empty")
@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name[:40])
def test_every_real_trace_round_trips(path: Path, tmp_path: Path) -> None:
    trace = explorer.load(path, use_cache=False)
    assert_round_trip(trace, tmp_path / "out.json.gz")


def test_torch_profiler_run_round_trips_with_memory(torch_trace, tmp_path: Path) -> None:
    back = assert_round_trip(torch_trace, tmp_path / "cpu.json")
    cols = ["ts", "device_type", "device", "addr", "bytes", "total_allocated", "total_reserved"]
    assert len(torch_trace.memory) > 0
    assert back.memory[cols].equals(torch_trace.memory[cols])
    json.loads((tmp_path / "cpu.json").read_bytes())  # plain JSON any tool can read


def test_results_become_an_explorer_process(tmp_path: Path) -> None:
    src = write_scenario("input_stall", tmp_path / "stall.json", steps=4)
    trace = explorer.load(src, use_cache=False)
    out = tmp_path / "stall_export.json.gz"
    summary = to_chrome(trace, out)
    doc = json.loads(gzip.decompress(out.read_bytes()))
    assert doc["synthetic"] is True  # synthetic data stays labelled synthetic
    rows = [e for e in doc["traceEvents"] if e.get("pid") == "Explorer" and e["ph"] == "X"]
    assert len(rows) == summary.result_slices > 0
    found = trace.findings()
    titles = {e["name"] for e in rows if e["tid"] == "Findings"}
    assert titles == {f.title for f in found}
    first = next(e for e in rows if e["name"] == found[0].title)
    assert first["args"]["recommendation"] == found[0].recommendation
    path = [e for e in rows if e["tid"] == "Critical path"]
    cp = report_path(trace.data)
    assert len(path) == len(cp.segments) > 0  # one slice per run, not per path slice
    runs = sorted((round(e["ts"] * 1000), round(e["dur"] * 1000)) for e in path)
    assert runs[0][0] == cp.start_ns  # ts from the trace's start (baseTimeNanoseconds)
    assert sum(d for _, d in runs) == cp.length_ns  # the runs tile the path exactly
    assert all(a + d == b for (a, d), (b, _) in zip(runs, runs[1:], strict=False))
    labels = set(trace.tracks["label"].astype(str))
    assert all(e["args"]["on"] in labels and e["args"]["slices"] >= 0 for e in path)
    assert summary.result_slices == len(found) + len(path)
    back = explorer.load(out, use_cache=False)
    assert len(back.slices) == len(trace.slices) + summary.result_slices
    # the top finding's flows reach its evidence slices (those starting after it)
    evidence = [e for e in doc["traceEvents"] if e.get("cat") == "explorer_evidence"]
    assert evidence and len({e["id"] for e in evidence}) == len(evidence) // 2
    file_ids = {
        e["id"]
        for e in doc["traceEvents"]
        if e["ph"] in "sf" and e.get("cat") != "explorer_evidence"
    }
    assert not file_ids & {e["id"] for e in evidence}

"""Which step a slice or a moment belongs to (explorer.analysis.slice_steps), against a plain
Python replay of the rule on real traces: host slices by their start, device work by the
start of the host call that launched it (launch flow, else correlation id), else its own."""

from __future__ import annotations

import bisect

import numpy as np
import pytest

import explorer
from explorer.analysis.slice_steps import slice_steps, step_at, step_rows
from tests.conftest import SAMPLE_TRACES, shared_trace_files


def _step_of_time(steps, t: int) -> int:
    """The old hit test of the timeline's step strip, one time at a time."""
    hit = steps[(steps["start_ns"] <= t) & (steps["end_ns"] > t)]
    return -1 if hit.empty else int(hit["step"].iat[0])


def _oracle(trace) -> list[int]:
    s = trace.slices
    ts = s["ts"].astype(int).tolist()
    kind = s["kind"].astype(str).tolist()
    tracks = trace.tracks.set_index("id")["type"].astype(str).to_dict()
    on_device = [tracks.get(t) == "device_stream" for t in s["track"].tolist()]
    launched_by: dict[int, int] = {}
    f = trace.flows
    for src, dst, typ in zip(
        f["src"].tolist(), f["dst"].tolist(), f["type"].astype(str), strict=True
    ):
        if typ == "launch":
            launched_by[int(dst)] = int(src)
    host_call: dict[int, int] = {}
    for i, (c, k) in enumerate(zip(s["correlation"].tolist(), kind, strict=True)):
        if c >= 0 and not on_device[i] and k in ("runtime", "sync"):
            host_call.setdefault(int(c), i)
    st = trace.steps().sort_values("start_ns")
    starts, ends = st["start_ns"].tolist(), st["end_ns"].tolist()
    numbers = st["step"].tolist()
    out = []
    for i, c in enumerate(s["correlation"].tolist()):
        anchor = launched_by.get(i)
        if anchor is None and on_device[i] and c >= 0:
            anchor = host_call.get(int(c))
        t = ts[anchor] if anchor is not None else ts[i]
        k = bisect.bisect_right(starts, t) - 1
        out.append(int(numbers[k]) if k >= 0 and t < ends[k] else -1)
    return out


def _real_traces():
    return [*shared_trace_files(), *sorted(SAMPLE_TRACES.glob("*.json.gz"))]


@pytest.mark.parametrize("path", _real_traces(), ids=lambda p: p.name[:40])
def test_slice_steps_match_the_rule_replayed_slice_by_slice(path):
    trace = explorer.load(path)
    got = slice_steps(trace)
    assert got.dtype == np.int64 and len(got) == len(trace.slices)
    assert got.tolist() == _oracle(trace)
    assert set(got.tolist()) <= set(trace.steps()["step"].tolist()) | {-1}


def test_kernel_queued_at_a_steps_end_is_that_steps_work(tmp_path):
    """SYNTHETIC trace (scenario generator, steady loop with queued work): kernels launched
    late in step N that run in step N+1's host range are step N's; host slices keep the step
    their start is in."""
    from explorer import scenarios

    trace = explorer.load(scenarios.write("clean", tmp_path / "clean.json"))
    assert trace.synthetic
    steps = trace.steps()
    ts = trace.slices["ts"].to_numpy()
    launch = trace.flows[trace.flows["type"] == "launch"]
    src, dst = launch["src"].to_numpy(), launch["dst"].to_numpy()
    by_time = step_at(steps, ts)
    crossing = (by_time[src] != by_time[dst]) & (by_time[src] >= 0)
    assert crossing.any()
    got = slice_steps(trace)
    assert (got[dst[crossing]] == by_time[src[crossing]]).all()
    assert (got[dst[crossing]] != by_time[dst[crossing]]).all()
    host = np.setdiff1d(np.arange(len(ts)), dst)
    assert (got[host] == by_time[host]).all()


def test_times_at_every_step_edge_match_the_strips_hit_test(sample_traces):
    trace = explorer.load(sample_traces / "cpu_cnn.pt.trace.json.gz")
    for steps in (trace.steps(), _attributed(trace)):
        assert len(steps) > 1
        edges = np.concatenate([steps["start_ns"], steps["end_ns"]])
        times = np.unique(np.concatenate([edges - 1, edges, edges + 1]))
        assert step_at(steps, times).tolist() == [_step_of_time(steps, int(t)) for t in times]
        rows = step_rows(steps, times)
        inside = rows >= 0
        assert (steps["step"].to_numpy()[rows[inside]] == step_at(steps, times)[inside]).all()
    assert step_at(steps.iloc[:0], times).tolist() == [-1] * len(times)
    assert step_at(steps, int(steps["start_ns"].iat[0])).tolist() == [int(steps["step"].iat[0])]


def _attributed(trace):
    from explorer.analysis.steps import attributed_steps

    return attributed_steps(trace.data)

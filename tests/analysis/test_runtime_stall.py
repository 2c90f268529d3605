"""``runtime_stall``: one runtime call holding the device idle is the finding, on the real
traces where it is the dominant problem, and on hand-built ones where it is or is not."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import explorer
from explorer.analysis.findings import findings
from explorer.trace.build import trace_from_events
from explorer.trace_api import Trace

ALEXNET = "critical_path__alexnet__benchmark_result_2869224_1695835535_trace.json.gz"
AMD = "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz"


def _device_idle_in(trace, i: int) -> int:
    """ns of slice ``i`` during which no device op runs — from the intervals alone."""
    s = trace.slices
    dev = trace.on_device() & (s["kind"].astype(str) != "sync").to_numpy()
    a = s["ts"].to_numpy()[dev]
    b = a + s["dur"].to_numpy()[dev]
    lo, hi = int(s["ts"].iat[i]), int(s["ts"].iat[i] + s["dur"].iat[i])
    a, b = np.clip(a, lo, hi), np.clip(b, lo, hi)
    order = np.argsort(a)
    busy, reach = 0, lo
    for x, y in zip(a[order], b[order], strict=True):
        busy += max(0, y - max(x, reach))
        reach = max(reach, y)
    return hi - lo - busy


@pytest.mark.parametrize(
    ("name", "call"), [(ALEXNET, "cudaDeviceGetStreamPriorityRange"), (AMD, "hipLaunchKernel")]
)
def test_the_stall_is_the_first_finding(shared_traces: Path, name: str, call: str) -> None:
    trace = explorer.load(shared_traces / name)
    s = trace.slices
    runtime = np.flatnonzero((s["kind"].astype(str) == "runtime").to_numpy())
    # The trace's longest runtime call, found from the raw slices.
    longest = int(runtime[np.argmax(s["dur"].to_numpy()[runtime])])
    assert str(s["name"].iat[longest]) == call
    found = findings(trace)
    f = found[0]
    assert f.kind == "runtime_stall", [x.title for x in found]
    assert f.evidence[0] == longest and call in f.title
    assert "warm up before profiling" in f.recommendation.lower()
    # It holds the device idle for the time it ran with nothing on the device (the other
    # calls named add theirs: on AlexNet a 6 s cudaFree and a 3 s first cudaLaunchKernel).
    assert f.time_lost_ns >= _device_idle_in(trace, longest) > 0.02 * f.time_lost_ns / f.share
    assert f.time_lost_ns == sum(_device_idle_in(trace, d["slice"]) for d in f.details["calls"])
    # "Kernels are short" no longer claims that time: the two add up to the breakdown's
    # host-bound idle at most (no time in two findings).
    from explorer.analysis.breakdown import breakdown

    host_bound = int(breakdown(trace).query("category == 'host_bound'")["ns"].sum())
    lost = {x.kind: x.time_lost_ns for x in found}
    assert lost["runtime_stall"] + lost.get("launch_bound", 0) <= host_bound


def _x(name: str, cat: str, ts: float, dur: float, where: dict, **args) -> dict:
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, **where, "args": args}


HOST, GPU = {"pid": 1, "tid": 1}, {"pid": 0, "tid": 7}


def _steps(first_malloc_us: float) -> Trace:
    """synthetic: four 1 ms steps of ten 90 us kernels each; step 0 opens with a cudaMalloc
    of ``first_malloc_us`` before its first launch (the device idle meanwhile)."""
    ev, corr, t = [], 0, 0.0
    for k in range(4):
        start = t
        if k == 0:
            ev.append(_x("cudaMalloc", "cuda_runtime", t, first_malloc_us, HOST))
            t += first_malloc_us
        for _ in range(10):
            corr += 1
            ev.append(_x("cudaLaunchKernel", "cuda_runtime", t, 5, HOST, correlation=corr))
            ev.append(_x("gemm", "kernel", t + 6, 90, GPU, device=0, stream=7, correlation=corr))
            t += 100
        ev.append(_x(f"ProfilerStep#{k}", "user_annotation", start, t - start, HOST))
    return Trace(trace_from_events(ev))


def test_a_long_first_call_is_a_runtime_stall_and_a_short_one_is_not() -> None:
    t = _steps(2_000)  # 2 ms of 6 ms of steps: a third of the time, in one call
    (f,) = [f for f in findings(t) if f.kind == "runtime_stall"]
    malloc = int(np.flatnonzero((t.slices["name"] == "cudaMalloc").to_numpy())[0])
    assert f.evidence == [malloc] and f.steps == [0]
    assert f.time_lost_ns == 2_000_000 and f.share == pytest.approx(2 / 6)
    assert f.title.startswith("Runtime stall: one cudaMalloc call holds cuda:0 idle for 2")
    # 20 us in a 4 ms run: 0.5%, under the 2% every finding needs.
    assert not [f for f in findings(_steps(20)) if f.kind == "runtime_stall"]


def test_no_runtime_stall_on_cpu_traces(sample_traces: Path) -> None:
    from explorer.analysis.findings import thresholds

    trace = explorer.load(sample_traces / "cpu_slow_dataloader.pt.trace.json.gz")
    assert "runtime_stall" not in thresholds(trace)
    assert "runtime_stall" not in {f.kind for f in findings(trace)}

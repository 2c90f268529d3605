"""The breakdown partitions each step exactly, with the documented priorities.

Hand-built traces (Chrome events in µs, built through the reader's own code path) give
known answers; a brute-force rasteriser checks the interval sweep on random intervals.
"""

from __future__ import annotations

import numpy as np
import pytest

from explorer.analysis.breakdown import (
    CATEGORIES,
    _covered,
    breakdown,
    breakdown_wide,
    sweep,
    track_device_labels,
)
from explorer.errors import UsageError
from explorer.scenarios import SCENARIOS, generate
from explorer.trace.build import trace_from_events
from explorer.trace_api import Trace

HOST = {"pid": 100, "tid": 100}
GPU = {"pid": 0, "tid": 7}


def _x(name: str, cat: str, ts: float, dur: float, where: dict, **args) -> dict:
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, **where, "args": args}


def _device_trace() -> Trace:
    """One 50 µs step on one GPU, each category planted at a known place (synthetic)."""
    ev = [
        _x("ProfilerStep#3", "user_annotation", 0, 50, HOST),
        _x("gemm", "kernel", 0, 10, GPU, device=0, stream=7),  # compute 0-10
        _x(
            "Memcpy HtoD (Pinned -> Device)", "gpu_memcpy", 5, 15, GPU, device=0, stream=7
        ),  # copy 10-20 exposed
        _x("ncclKernel_AllReduce", "kernel", 25, 5, GPU, device=0, stream=7),  # comm 25-30
        _x(
            "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
            "user_annotation",
            20,
            5,
            HOST,
        ),
        _x("aten::stack", "cpu_op", 21, 2, HOST),  # inside the loader: still input
        _x("cudaStreamSynchronize", "cuda_runtime", 30, 10, HOST),  # sync 30-40
        _x("aten::add", "cpu_op", 40, 4, HOST),  # host busy 40-44, right after the sync
    ]
    return trace_from_events(ev, cls=Trace)


def test_known_answer_on_a_hand_built_device_step() -> None:
    t = _device_trace()
    bd = breakdown(t)
    got = dict(zip(bd["category"].astype(str), bd["ns"], strict=True))
    assert set(bd["device"]) == {"cuda:0"}
    assert got == {
        "compute": 10_000,
        "data_movement": 10_000,
        "communication": 5_000,
        "host_bound": 5_000,  # the DataLoader window 20-25
        # 30-40 host blocked in the sync, then 40-44 refilling the drained queue: the idle
        # run after a sync is its cost (until the trace's last boundary; no device work
        # follows here, so the last 6 µs with nothing on either side are other idle)
        "sync_stall": 14_000,
        "compile": 0,
        "other_idle": 6_000,
    }


def test_categories_partition_every_step_exactly() -> None:
    for name in SCENARIOS:
        doc = generate(name, steps=3, seed=1)
        t = trace_from_events(
            doc["traceEvents"], {k: v for k, v in doc.items() if k != "traceEvents"}, cls=Trace
        )
        bd = breakdown(t)
        assert (bd["ns"] >= 0).all()
        sums = bd.groupby(["step", "device"])["ns"].sum()
        dur = t.steps().set_index("step")["dur_ns"]
        for (step, _dev), ns in sums.items():
            assert ns == dur[step], name
        assert list(bd["category"].cat.categories) == list(CATEGORIES)


def test_host_mode_on_a_cpu_only_trace() -> None:
    ev = [
        _x("ProfilerStep#0", "user_annotation", 0, 100, HOST),
        _x(
            "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__",
            "user_annotation",
            0,
            30,
            HOST,
        ),
        _x("aten::mm", "cpu_op", 30, 40, HOST),
        _x("c10d::allreduce_", "cpu_op", 70, 10, HOST),
    ]
    t = trace_from_events(ev, cls=Trace)
    assert track_device_labels(t) == {}
    w = breakdown_wide(t).iloc[0]
    assert w["device"] == "host"
    # c10d ops are cpu_op in the file; on the CPU they are the communication
    got = (w["host_bound"], w["compute"], w["communication"], w["other_idle"])
    assert got == (30_000, 40_000, 10_000, 20_000)
    assert sum(w[c] for c in CATEGORIES) == 100_000


def test_step_selection_and_unknown_step() -> None:
    t = _device_trace()
    assert set(breakdown(t, step=3)["step"]) == {3}
    with pytest.raises(UsageError, match="step 9 is not in the trace"):
        breakdown(t, step=9)


@pytest.mark.parametrize("seed", range(6))
def test_sweep_matches_a_brute_force_rasteriser(seed: int) -> None:
    """Random overlapping intervals of 4 priorities: per-ns painting agrees with the sweep."""
    rng = np.random.default_rng(seed)
    n = 60
    starts = rng.integers(0, 400, n)
    ends = starts + rng.integers(1, 60, n)
    codes = rng.integers(0, 4, n)
    bounds, seg = sweep(starts, ends, codes, 4)
    paint = np.full(500, -1)
    for k in (3, 2, 1, 0):  # lower code wins: paint it last
        for s, e in zip(starts[codes == k], ends[codes == k], strict=True):
            paint[s:e] = k
    windows = rng.integers(0, 480, (20, 2))
    a = windows.min(axis=1)
    b = windows.max(axis=1) + 1
    for k in range(4):
        got = _covered(bounds, seg == k, a, b)
        want = [int((paint[x:y] == k).sum()) for x, y in zip(a, b, strict=True)]
        assert got.tolist() == want


def test_two_devices_each_partition_the_step() -> None:
    """One process driving two GPUs: each gets its own rows, each summing to the step."""
    gpu1 = {"pid": 1, "tid": 7}
    ev = [
        _x("ProfilerStep#0", "user_annotation", 0, 100, HOST),
        _x("gemm", "kernel", 0, 60, GPU, device=0, stream=7),
        _x("gemm", "kernel", 50, 20, gpu1, device=1, stream=7),
        _x("aten::mm", "cpu_op", 0, 100, HOST),
    ]
    w = breakdown_wide(trace_from_events(ev, cls=Trace)).set_index("device")
    assert list(w.index) == ["cuda:0", "cuda:1"]
    assert (w.loc["cuda:0", "compute"], w.loc["cuda:0", "host_bound"]) == (60_000, 40_000)
    assert (w.loc["cuda:1", "compute"], w.loc["cuda:1", "host_bound"]) == (20_000, 80_000)


@pytest.mark.parametrize(
    "events",
    [
        [],
        [{"ph": "X", "name": "a", "cat": "cpu_op", "ts": 0, "dur": 0, **HOST}],
        [_x("k", "kernel", 0, 5, GPU, device=0, stream=7)],
    ],
    ids=["empty", "zero-length", "device-only"],
)
def test_degenerate_traces_still_partition(events: list[dict]) -> None:
    t = trace_from_events(events, cls=Trace)
    bd = breakdown(t)
    assert (bd["ns"] >= 0).all()
    assert (
        bd.groupby(["step", "device"])["ns"].sum().tolist()
        == t.steps()["dur_ns"].tolist() * bd["device"].nunique()
    )


def test_synchronous_copy_calls_block_whatever_the_memory(shared_traces) -> None:  # noqa: ANN001
    """ROCm's hipMemcpyWithStream blocks the host even though its trace does not say
    'Pageable': the device idle right after such a copy is data movement, not host time."""
    import explorer
    from explorer.analysis.breakdown import synchronous_copies

    t = explorer.load(shared_traces / "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    sync = synchronous_copies(t)
    mc = (t.slices["kind"] == "memcpy").to_numpy()
    assert sync[mc].all() and not sync[~mc].any()
    b = t.breakdown()
    dm = b[(b["step"] == 1) & (b["category"] == "data_movement")]["ns"].sum()
    copy_time = t.slices.loc[mc, "dur"].sum()
    assert dm > copy_time  # the copies plus the idle they cause

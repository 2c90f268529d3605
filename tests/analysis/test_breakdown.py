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
from explorer.analysis.steps import select_steps
from explorer.errors import UsageError
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
    return Trace(trace_from_events(ev))


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


LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def _random_gpu_run(seed: int) -> list[dict]:
    """Three back-to-back steps of random host work (ops launching kernels, DataLoader
    fetches, stream syncs, gaps) and the kernels they launch on one in-order stream, plus
    unlaunched copies and NCCL kernels on other streams. Integer µs (synthetic)."""
    rng = np.random.default_rng(seed)
    # the iteration the profiler caught mid-way: a kernel launched before step 0
    pre = int(rng.integers(5, 30))
    ev: list[dict] = [
        _x("cudaLaunchKernel", "cuda_runtime", 0, 1, HOST, correlation=0),
        _x("gemm", "kernel", 1, pre, GPU, device=0, stream=7, correlation=0),
    ]
    t, corr, stream_free = 3, 0, 1 + pre
    for step in range(3):
        start = t
        for _ in range(int(rng.integers(4, 9))):
            what = rng.choice(["op", "op", "loader", "sync", "gap"])
            d = int(rng.integers(2, 12))
            if what == "op":  # an op with a launch inside; the kernel runs when the stream frees
                ev.append(_x("aten::mm", "cpu_op", t, d, HOST))
                corr += 1
                ev.append(_x("cudaLaunchKernel", "cuda_runtime", t + 1, 1, HOST, correlation=corr))
                k0 = max(t + 2 + int(rng.integers(0, 3)), stream_free)
                kd = int(rng.integers(1, 15))
                ev.append(_x("gemm", "kernel", k0, kd, GPU, device=0, stream=7, correlation=corr))
                stream_free = k0 + kd + int(rng.integers(0, 3))
            elif what == "loader":
                ev.append(_x(LOADER, "user_annotation", t, d, HOST))
                ev.append(_x("aten::stack", "cpu_op", t + 1, max(d - 2, 1), HOST))
            elif what == "sync":
                ev.append(_x("cudaStreamSynchronize", "cuda_runtime", t, d, HOST))
            t += d + int(rng.integers(0, 3))
        ev.append(_x(f"ProfilerStep#{step}", "user_annotation", start, t - start, HOST))
    for _ in range(4):  # copies and collectives on their own streams, launched by nobody
        a = int(rng.integers(0, t))
        copy = {"pid": 0, "tid": 8}
        ev.append(_x("Memcpy HtoD (Pinned -> Device)", "gpu_memcpy", a, int(rng.integers(1, 9)),
                     copy, device=0, stream=8))  # fmt: skip
        b = int(rng.integers(0, t))
        ev.append(_x("ncclKernel_AllReduce", "kernel", b, int(rng.integers(1, 9)),
                     {"pid": 0, "tid": 9}, device=0, stream=9))  # fmt: skip
    return ev


def _brute_force(ev: list[dict]) -> dict[int, dict[str, int]]:
    """The documented rules applied one µs at a time, from the raw events: per step, µs of
    each category in its window (the host range, widened to the kernels it launched, and
    starting once the device is done with work launched before it)."""
    end = max(e["ts"] + e["dur"] for e in ev) + 1
    reason = np.full(end, "", dtype=object)

    def cover(pred) -> np.ndarray:  # noqa: ANN001
        m = np.zeros(end, bool)
        for e in ev:
            if pred(e):
                m[e["ts"] : e["ts"] + e["dur"]] = True
        return m

    on_gpu = lambda e: e["pid"] == 0  # noqa: E731
    layers = [  # (category, covered), first wins
        ("compute", cover(lambda e: on_gpu(e) and e["name"] == "gemm")),
        ("communication", cover(lambda e: on_gpu(e) and e["name"].startswith("nccl"))),
        ("data_movement", cover(lambda e: on_gpu(e) and e["name"].startswith("Memcpy"))),
        ("sync_stall", cover(lambda e: e["name"] == "cudaStreamSynchronize")),
        ("host_input", cover(lambda e: e["name"] == LOADER)),
        ("host_busy", cover(lambda e: not on_gpu(e) and not e["name"].startswith("Profiler"))),
    ]
    for cat, covered in reversed(layers):
        reason[covered] = cat
    # an idle run (device idle: host busy or idle) that starts as a sync returns is the
    # drained queue refilling: sync stall, until device work resumes or the recorded
    # activity ends (step annotations are not activity)
    last = max(e["ts"] + e["dur"] for e in ev if not e["name"].startswith("Profiler"))
    sync_ends = {e["ts"] + e["dur"] for e in ev if e["name"] == "cudaStreamSynchronize"}
    idle = (reason == "host_busy") | (reason == "")
    t = 0
    while t < end:
        if idle[t] and (t == 0 or not idle[t - 1]):
            u = t
            while u < last and idle[u]:
                u += 1
            if t in sync_ends:
                reason[t:u] = "sync_stall"
            t = max(u, t + 1)
        else:
            t += 1
    category = {"host_input": "host_bound", "host_busy": "host_bound", "": "other_idle"}
    launch_ts = {e["args"]["correlation"]: e["ts"] for e in ev if e["cat"] == "cuda_runtime"
                 and "correlation" in e["args"]}  # fmt: skip
    steps = sorted((e["ts"], e["ts"] + e["dur"], int(e["name"].split("#")[1]))
                   for e in ev if e["name"].startswith("ProfilerStep#"))  # fmt: skip
    out: dict[int, dict[str, int]] = {}
    prev_end, prev_h1 = None, -(10**9)

    def launched_ends(a: int, b: int) -> list[int]:
        return [
            e["ts"] + e["dur"]
            for e in ev
            if on_gpu(e)
            and e["args"].get("correlation") in launch_ts
            and a <= launch_ts[e["args"]["correlation"]] < b
        ]

    for h0, h1, n in steps:
        before = launched_ends(prev_h1, h0)  # launched outside any step, just before this one
        w0 = max([h0, *before] + ([prev_end] if prev_end is not None else []))
        w1 = max([h1, w0, *launched_ends(h0, h1)])
        prev_end, prev_h1 = w1, h1
        per = dict.fromkeys(CATEGORIES, 0)
        for r in reason[w0:w1]:
            per[category.get(r, r)] += 1000  # µs → ns
        out[n] = per
    return out


@pytest.mark.parametrize("seed", range(8))
def test_breakdown_matches_a_per_microsecond_classifier(seed: int) -> None:
    """Random GPU runs where kernels spill past their step: every category of every step
    equals the documented rules applied µs by µs to the raw events, in a window that holds
    the kernels the step launched (an independent computation: no sweep, no flows table)."""
    ev = _random_gpu_run(seed)
    want = _brute_force(ev)
    wide = breakdown_wide(Trace(trace_from_events(ev))).set_index("step")
    assert set(wide["device"]) == {"cuda:0"}
    for step, per in want.items():
        assert {c: int(wide.loc[step, c]) for c in CATEGORIES} == per, (seed, step)


def test_a_step_owns_the_kernels_it_launched() -> None:
    """Identical steps whose kernels run late (the device lags the host by a constant):
    charged by launch, each step's compute is the same; by host window it was not."""
    ev = []
    for n in range(4):
        h0 = n * 100
        ev.append(_x(f"ProfilerStep#{n}", "user_annotation", h0, 100, HOST))
        for k in range(3):  # three 25 µs kernels per step, launched at 10, 20, 30 µs
            c = n * 10 + k
            ev.append(_x("cudaLaunchKernel", "cuda_runtime", h0 + 10 * (k + 1), 2, HOST,
                         correlation=c))  # fmt: skip
            # the stream starts step n's work at 60 + 100n µs: 15 µs of it spill into n+1
            ev.append(_x("gemm", "kernel", h0 + 60 + 25 * k, 25, GPU, device=0, stream=7,
                         correlation=c))  # fmt: skip
    w = breakdown_wide(Trace(trace_from_events(ev))).set_index("step")
    assert w["compute"].tolist() == [75_000] * 4
    # the windows tile the run: step 0 runs from its start to its last kernel's end
    # (135 µs), each later step from the previous one's last kernel to its own (100 µs)
    total = w[list(CATEGORIES)].sum(axis=1)
    assert total.tolist() == [135_000, 100_000, 100_000, 100_000]


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
    t = Trace(trace_from_events(ev))
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
@pytest.mark.parametrize("priorities", [1, 4, 60])
def test_sweep_matches_a_brute_force_rasteriser(seed: int, priorities: int) -> None:
    """Random overlapping intervals (some empty) of 1, 4 or 60 priorities — the sweep's
    pass per code and its power-of-two passes, which it picks by the count: per-ns painting
    agrees with it, segment by segment and over random windows."""
    rng = np.random.default_rng(seed)
    n = 60 if priorities < 60 else 400
    starts = rng.integers(0, 400, n)
    ends = starts + rng.integers(0, 60, n)
    codes = rng.integers(0, priorities, n)
    bounds, seg = sweep(starts, ends, codes, priorities)
    paint = np.full(500, -1)
    for k in range(priorities - 1, -1, -1):  # lower code wins: paint it last
        for s, e in zip(starts[codes == k], ends[codes == k], strict=True):
            paint[s:e] = k
    assert [int(paint[a]) for a in bounds[:-1]] == seg.tolist()
    assert all((paint[a:b] == paint[a]).all() for a, b in zip(bounds[:-1], bounds[1:], strict=True))
    windows = rng.integers(0, 480, (20, 2))
    a = windows.min(axis=1)
    b = windows.max(axis=1) + 1
    for k in range(min(priorities, 4)):
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
    w = breakdown_wide(Trace(trace_from_events(ev))).set_index("device")
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
    t = Trace(trace_from_events(events))
    bd = breakdown(t)
    assert (bd["ns"] >= 0).all()
    assert (
        bd.groupby(["step", "device"])["ns"].sum().tolist()
        == select_steps(t, attributed=True)["dur_ns"].tolist() * bd["device"].nunique()
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


@pytest.mark.parametrize("name", ["clean", "input_stall", "sync_storm", "launch_bound"])
def test_identical_steps_show_the_same_compute(name: str) -> None:
    """A steady-state run (synthetic scenario, no jitter: every step launches the same
    kernels) whose device lags the host, caught mid-run by the profiler: by host window the
    steps' compute differed by 10-14%; charged to the launching step it is the same, and
    equals the kernels each step launched (merged, as they run on one stream)."""
    from explorer.scenarios import generate

    doc = generate(name, steps=6, seed=0, jitter=0.0)
    t = trace_from_events(doc["traceEvents"], {k: v for k, v in doc.items() if k != "traceEvents"})
    compute = breakdown_wide(t).set_index("step")["compute"]
    assert compute.max() - compute.min() <= 0.02 * compute.median()
    # independent: the union of the kernels whose launch lies in each step's host range
    ev = doc["traceEvents"]
    launch = {e["args"]["correlation"]: e["ts"] for e in ev if e.get("cat") == "cuda_runtime"
              and "correlation" in e.get("args", {})}  # fmt: skip
    steps = sorted((e["ts"], e["ts"] + e["dur"], int(e["name"].split("#")[1]))
                   for e in ev if str(e.get("name", "")).startswith("ProfilerStep#")
                   and e.get("cat") == "user_annotation")  # fmt: skip
    for h0, h1, n in steps:
        iv = sorted(
            (e["ts"], e["ts"] + e["dur"])
            for e in ev
            if e.get("cat") == "kernel" and h0 <= launch.get(e["args"].get("correlation"), -1) < h1
        )
        union, cur = 0.0, None
        for a, b in iv:
            if cur is None or a > cur[1]:
                union += 0 if cur is None else cur[1] - cur[0]
                cur = [a, b]
            else:
                cur[1] = max(cur[1], b)
        union += 0 if cur is None else cur[1] - cur[0]
        assert abs(compute[n] - union * 1000) <= 0.01 * compute[n], (n, compute[n], union)

"""What a slice is, decided once (explorer.analysis.classify): the consumers agree on every
real trace, and the name rules hold on hand-built traces of the cases real traces showed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import explorer
from explorer.analysis.attribution import frame_codes, launcher
from explorer.analysis.breakdown import (
    DEVICE_REASONS,
    HOST_REASONS,
    breakdown,
    device_slice_reasons,
    host_slice_reasons,
)
from explorer.analysis.by_source import by_source
from explorer.analysis.classify import classes
from explorer.analysis.findings import findings
from explorer.analysis.steps import attributed_steps
from explorer.job.collectives import collective_slices
from explorer.trace.build import trace_from_events
from explorer.trace.columns import category_values
from explorer.trace_api import Trace
from tests.conftest import SAMPLE_TRACES, SHARED_TRACES, shared_trace_files

HOST = {"pid": 100, "tid": 100}
GPU = {"pid": 0, "tid": 7}

SAMPLES = sorted(p for p in SAMPLE_TRACES.rglob("*.json.gz"))
TRACELENS = sorted((SHARED_TRACES / "tracelens").glob("*.json.gz"))
TRACES = [*SAMPLES, *shared_trace_files(), *(p for p in TRACELENS if p.stat().st_size < 500_000)]
#: Device-family names a communication kernel carries (an independent spelling).
COMM_FAMILY = ("nccl", "rccl", "hccl", "msccl", "oneccl")


def _outermost(trace: explorer.Trace, mask: np.ndarray) -> np.ndarray:
    parent = trace.slices["parent"].to_numpy(np.int64)
    inner = np.zeros(len(mask), bool)
    inner[parent >= 0] = mask[parent[parent >= 0]]
    return mask & ~inner


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name[:40])
def test_every_consumer_reads_the_same_classes(path: Path) -> None:
    """The breakdown's reasons, the by-source stall column, the sync finding's count, the
    communication finding's evidence and the job's collectives all say what classes() says,
    on every sample and shared trace."""
    t = explorer.load(path)
    td = t.data
    cls = classes(td)
    s = t.slices
    kind = category_values(s["kind"])
    host = td.on_host()
    assert cls.device_mode == (not td.device_tracks().empty)
    # Breakdown: host sync outranks every host reason, so its slices are exactly the sync
    # column's (whole-step spans and labels give no reason at all).
    table = [r for r, _ in (DEVICE_REASONS if cls.device_mode else HOST_REASONS)]
    code = host_slice_reasons(td, cls.device_mode)
    eligible = host & ~cls.span & (kind != "other") & (kind != "device_annotation")
    assert np.array_equal(code == table.index("host_sync"), cls.host_sync & eligible)
    assert np.array_equal(
        code == table.index("host_compile"), cls.compile & eligible & ~cls.host_sync
    )
    dev_code = device_slice_reasons(td)
    on_dev = td.on_device()
    assert np.array_equal(on_dev & (dev_code == 1), cls.device_collective)
    # By source: the stalls are the outermost syncs that have a user line.
    outer_sync = _outermost(t, cls.host_sync)
    line = frame_codes(td)[0]
    bs = by_source(td)
    with_line = outer_sync & (line >= 0)
    dur = s["dur"].to_numpy(np.int64)
    if len(bs):  # a trace with no user line has no table
        assert int(bs["sync_count"].sum()) == int(with_line.sum())
        assert int(bs["stall_ns"].sum()) == int(dur[with_line].sum())
    # The findings: the sync count is the outermost syncs inside the steps; the
    # communication evidence is collectives only.
    st = attributed_steps(td)
    ts = s["ts"].to_numpy(np.int64)
    in_steps = np.zeros(len(s), bool)
    for a, b in zip(st["start_ns"], st["end_ns"], strict=True):
        in_steps |= (ts >= a) & (ts < b)
    for f in findings(td):
        if f.kind == "sync_stall":
            assert f.details["sync_count"] == int((outer_sync & in_steps).sum())
        if f.kind == "communication":
            assert f.evidence and cls.collective[np.array(f.evidence)].all()
    assert cls.collective[collective_slices(td)].all()


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name[:40])
def test_communication_is_a_communication_library_on_real_traces(path: Path) -> None:
    """Independent of the rules' regexes: device communication is a kernel whose name is a
    communication family's, or one launched straight from a host collective op; an op whose
    name only mentions a collective's word (aten::broadcast_tensors, numpy's
    _broadcast_to_dispatcher) is not a collective."""
    t = explorer.load(path)
    td = t.data
    cls = classes(td)
    names = t.slices["name"].astype(str).to_numpy()
    parent = t.slices["parent"].to_numpy(np.int64)
    src = launcher(td)
    for i in np.flatnonzero(cls.device_collective):
        by_name = any(f in names[i].lower() for f in COMM_FAMILY)
        by_launch = src[i] >= 0 and parent[src[i]] >= 0 and cls.host_collective[parent[src[i]]]
        assert by_name or by_launch, names[i]
    words = ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast")
    for i in np.flatnonzero(cls.host_collective):
        name = names[i]
        flat = name.lower().replace("_", "")
        library = name.split(":")[0].lower().lstrip("_") in (
            "c10d", "c10d_functional", "gloo", "nccl", "rccl", "hccl", "mpi", "ucc",
        ) or name in ("record_param_comms",) or name.startswith("ProcessGroup")  # fmt: skip
        assert library or any(w in flat for w in words), name
        assert not name.startswith("aten::"), name
        assert not any(w in name for w in ("broadcast_to", "broadcast_tensors")), name


@pytest.mark.slow
@pytest.mark.parametrize("path", TRACELENS, ids=lambda p: p.name[:40])
def test_communication_agrees_with_tracelens(path: Path) -> None:
    """TraceLens's GPU timeline (../shared/traces/tracelens/*.gpu_timeline.csv) counts as
    communication the kernels named like NCCL/RCCL collectives: Explorer's device
    collectives' busy time and its exposed communication are its total and exposed comm
    (an elementwise ``*broadcast*`` kernel counted as communication put 0.5-0.6 ms there
    on inference traces)."""
    import csv

    with (path.parent / path.name.replace(".json.gz", ".gpu_timeline.csv")).open() as f:
        theirs = {r["type"]: float(r["time ms"]) * 1e6 for r in csv.DictReader(f)}
    t = explorer.load(path)
    cls = classes(t.data)
    s = t.slices
    ts = s["ts"].to_numpy(np.int64)[cls.device_collective]
    end = ts + s["dur"].to_numpy(np.int64)[cls.device_collective]
    busy, reach = 0, None
    for a, b in sorted(zip(ts.tolist(), end.tolist(), strict=True)):
        busy += max(b - max(a, reach if reach is not None else a), 0)
        reach = b if reach is None else max(reach, b)
    assert abs(busy - theirs["total_comm_time"]) <= 1_000
    bd = breakdown(t)
    exposed = int(bd.loc[bd["category"] == "communication", "ns"].sum())
    assert abs(exposed - theirs["exposed_comm_time"]) <= 1_000


def _x(name: str, cat: str, ts: float, dur: float, where: dict, **args) -> dict:
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, **where, "args": args}


def _by_category(t: Trace) -> dict[str, int]:
    bd = breakdown(t)
    return dict(zip(bd["category"].astype(str), bd["ns"].astype(int), strict=True))


def test_a_broadcast_elementwise_kernel_is_compute_and_nccl_is_communication() -> None:
    """ROCm's ``type_specialized_broadcast_kernel_launcher`` (an aten::mul kernel) held the
    word "broadcast" and was counted as exposed communication (0.5-0.6 ms on real inference
    traces); it is compute. NCCL's kernels, and a kernel launched straight from a collective
    op whatever its name, are communication (synthetic)."""
    kernel = (
        "void at::native::type_specialized_broadcast_kernel_launcher<0>::apply<"
        "at::native::binary_internal::MulFunctor<float> >(long)"
    )
    ev = [
        _x("ProfilerStep#1", "user_annotation", 0, 100, HOST),
        _x("aten::mul", "cpu_op", 1, 5, HOST),
        _x("hipLaunchKernel", "cuda_runtime", 2, 2, HOST, correlation=1),
        _x(kernel, "kernel", 10, 20, GPU, device=0, stream=7, correlation=1),
        _x("nccl:all_reduce", "cpu_op", 30, 5, HOST),
        _x("hipLaunchKernel", "cuda_runtime", 31, 2, HOST, correlation=2),
        _x(
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            "kernel",
            40,
            10,
            GPU,
            device=0,
            stream=7,
            correlation=2,
        ),  # fmt: skip
        _x("c10d::allreduce_", "cpu_op", 50, 5, HOST),
        _x("hipLaunchKernel", "cuda_runtime", 51, 2, HOST, correlation=3),
        _x("custom_ring_step", "kernel", 60, 10, GPU, device=0, stream=7, correlation=3),
    ]
    t = Trace(trace_from_events(ev))
    names = t.slices["name"].astype(str).to_numpy()
    cls = classes(t.data)
    assert not cls.collective[names == kernel].any()
    assert cls.device_collective[np.char.startswith(names.astype(str), "ncclDevKernel")].all()
    assert cls.device_collective[names == "custom_ring_step"].all()
    got = _by_category(t)
    assert got["compute"] == 20_000
    assert got["communication"] == 20_000


def test_gloo_on_a_gpu_trace_is_communication_not_host_bound() -> None:
    """A gloo collective runs on the host: with the device idle, that time is
    communication, as on a CPU trace — while NCCL's host op only enqueues its kernel
    (synthetic)."""
    ev = [
        _x("ProfilerStep#1", "user_annotation", 0, 100, HOST),
        _x("aten::mm", "cpu_op", 0, 10, HOST),
        _x("cudaLaunchKernel", "cuda_runtime", 1, 2, HOST, correlation=1),
        _x("gemm", "kernel", 5, 10, GPU, device=0, stream=7, correlation=1),
        _x("c10d::allreduce_", "cpu_op", 20, 40, HOST),
        _x("gloo:all_reduce", "user_annotation", 21, 38, HOST),
    ]
    t = Trace(trace_from_events(ev))
    got = _by_category(t)
    assert got["communication"] == 40_000
    assert got["host_bound"] == 5_000  # aten::mm's time after its kernel ended, 15-20
    kinds = {f.kind for f in findings(t.data)}
    assert "communication" in kinds


def test_enumerate_datapipe_is_input_like_the_dataloader() -> None:
    """``enumerate(DataPipe)#...`` (torchdata) is the input pipeline (synthetic)."""
    ev = [
        _x("ProfilerStep#1", "user_annotation", 0, 100, HOST),
        _x("enumerate(DataPipe)#ShardingFilterIterDataPipe", "user_annotation", 0, 30, HOST),
        _x("aten::stack", "cpu_op", 5, 10, HOST),
        _x("aten::mm", "cpu_op", 40, 10, HOST),
        _x("cudaLaunchKernel", "cuda_runtime", 41, 2, HOST, correlation=1),
        _x("gemm", "kernel", 45, 20, GPU, device=0, stream=7, correlation=1),
    ]
    t = Trace(trace_from_events(ev))
    cls = classes(t.data)
    names = t.slices["name"].astype(str).to_numpy()
    assert cls.input[names == "aten::stack"].all()
    assert "input_stall" in {f.kind for f in findings(t.data)}


def test_pytorch_1_9_names_are_first_class() -> None:
    """PyTorch 1.9 files ``ProfilerStep#N`` under ``Operator`` and names the backward
    nodes with no ``autograd::engine::evaluate_function`` wrapper: the step is a span, not
    an operator (by source counts the ops under it), and the backward nodes are the
    autograd engine's (synthetic, in the old categories of
    ../shared/traces/trace_file_list__inference_rank_1.json.gz)."""
    engine = {"pid": 100, "tid": 200}
    ev = [
        _x("ProfilerStep#5", "Operator", 0, 100, HOST),
        _x("aten::mm", "Operator", 1, 10, HOST),
        _x("MmBackward", "Operator", 20, 30, engine),
        _x("aten::mm", "Operator", 21, 10, engine),
        _x("AccumulateGrad", "Operator", 60, 5, engine),
        _x("aten::add_", "Operator", 61, 2, engine),
    ]
    t = Trace(trace_from_events(ev))
    cls = classes(t.data)
    names = t.slices["name"].astype(str).to_numpy()
    assert cls.span[names == "ProfilerStep#5"].all()
    assert not cls.operator[names == "ProfilerStep#5"].any()
    assert cls.operator[names == "aten::mm"].all()
    assert sorted(names[cls.autograd]) == ["AccumulateGrad", "MmBackward"]
    assert t.steps()["step"].tolist() == [5]


def test_the_sync_count_counts_sync_slices_on_the_mtia_trace(shared_traces: Path) -> None:
    """../shared/traces/mtia_inference_trace__mtia_inference_rank_0.json.gz has 274 sync
    slices (226 runtime syncs on the host, 48 event waits on the device); the finding said
    300 host syncs: it also counted 75 ``aten::item`` calls that make no runtime call (they
    read host tensors). An .item() counts only when it makes a runtime call."""
    t = explorer.load(shared_traces / "mtia_inference_trace__mtia_inference_rank_0.json.gz")
    s = t.slices
    host = t.data.on_host()
    kind = s["kind"].astype(str).to_numpy()
    sync_slices = host & (kind == "sync")
    want = int(_outermost(t, sync_slices).sum())  # synchronize inside synchronize: one wait
    (f,) = [f for f in findings(t.data) if f.kind == "sync_stall"]
    assert f.details["sync_count"] == want
    assert want <= int((kind == "sync").sum())
    names = s["name"].astype(str).to_numpy()
    assert not classes(t.data).host_sync[names == "aten::item"].any()

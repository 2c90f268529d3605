"""Every real trace in ../shared/traces (NVIDIA, AMD, MTIA, distributed, CPU-only) goes
through steps, breakdown, findings, by_source and the report in every format, and the
breakdown invariants hold on data nobody here wrote."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import explorer
from explorer.analysis.breakdown import CATEGORIES
from explorer.analysis.detectors import FINDING_KINDS
from explorer.report import render
from tests.conftest import SHARED_TRACES, shared_trace_files

TRACES = shared_trace_files()
pytestmark = pytest.mark.skipif(
    not TRACES, reason="../shared/traces is absent (not part of a user's clone)"
)


@pytest.fixture(scope="module")
def traces() -> dict[str, explorer.Trace]:
    return {p.name: explorer.load(p) for p in TRACES}


def _union_ns(intervals: list[tuple[int, int]], a: int, b: int) -> int:
    """Length of the union of ``intervals`` inside ``[a, b)``, merged one by one."""
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted((max(s, a), min(e, b)) for s, e in intervals if e > a and s < b):
        if cur_e is None or s > cur_e:
            total += 0 if cur_e is None else cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + (0 if cur_e is None else cur_e - cur_s)


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name[:40])
def test_breakdown_partitions_every_step_on_every_device(path: Path, traces: dict) -> None:
    """Each step's window holds its host range and does not overlap the next; the categories
    fill it; compute is the kernels' busy time there, merged interval by interval."""
    from explorer.analysis.breakdown import track_device_labels
    from explorer.analysis.classify import DMA_NAMES
    from explorer.analysis.steps import select_steps

    t = traces[path.name]
    st = select_steps(t, attributed=True)
    assert len(st) >= 1 and (st["dur_ns"] >= 0).all()
    assert (st["start_ns"] >= st["host_start_ns"]).all()
    assert (st["end_ns"] >= st["host_end_ns"]).all()
    assert (st["start_ns"].to_numpy()[1:] >= st["end_ns"].to_numpy()[:-1]).all()
    bd = t.breakdown()
    assert (bd["ns"] >= 0).all(), "negative time in a category"
    assert set(bd["category"].astype(str)) == set(CATEGORIES)
    sums = bd.groupby(["step", "device"])["ns"].sum()
    dur = st.set_index("step")["dur_ns"]
    assert len(sums) == len(st) * bd["device"].nunique()
    for (step, _device), ns in sums.items():
        assert ns == dur[step]
    devices = set(bd["device"])
    assert devices == {"host"} if t.device_tracks().empty else all(":" in d for d in devices)
    s = t.slices
    for label in devices - {"host"}:
        tracks = [tid for tid, lab in track_device_labels(t).items() if lab == label]
        names = s["name"].astype(str)
        kern = (
            s["track"].isin(tracks)
            & s["kind"].isin(["kernel", "fallback"])
            & ~names.str.contains(DMA_NAMES)
        )
        iv = list(zip(s.loc[kern, "ts"], s.loc[kern, "ts"] + s.loc[kern, "dur"], strict=True))
        got = bd[(bd["device"] == label) & (bd["category"] == "compute")].set_index("step")["ns"]
        for r in st.itertuples():
            assert got[r.step] == _union_ns(iv, r.start_ns, r.end_ns), (label, r.step)


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name[:40])
def test_findings_are_ranked_well_formed_and_point_at_real_slices(path: Path, traces: dict) -> None:
    t = traces[path.name]
    found = t.findings()
    lost = [f.time_lost_ns for f in found]
    assert lost == sorted(lost, reverse=True)
    for f in found:
        assert f.kind in FINDING_KINDS
        assert 0.0 <= f.share <= 1.0 and f.time_lost_ns >= 0
        assert all(0 <= i < len(t.slices) for i in f.evidence)
        assert all(a < b for a, b in f.ranges)
        assert set(f.steps) <= set(t.steps()["step"])
        assert f.explanation and f.recommendation
        json.dumps(f.to_dict())
    src = t.by_source()
    assert (src[["host_ns", "device_ns", "stall_ns", "copy_bytes"]] >= 0).all().all()


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name[:40])
def test_report_renders_in_every_format(path: Path, traces: dict) -> None:
    t = traces[path.name]
    text = render(t, "text")
    assert "Where the step time went" in text
    doc = json.loads(render(t, "json"))
    assert doc["schema_version"] == 2 and doc["synthetic"] is False
    for s in doc["steps"]:
        for cats in s["breakdown"].values():
            assert sum(cats.values()) == s["dur_ns"]
    assert render(t, "markdown").startswith("# Explorer report")
    html = render(t, "html")
    assert html.startswith("<!DOCTYPE html>") and "<script" not in html and "<svg" in html


def test_device_labels_follow_the_vendor(traces: dict) -> None:
    labels = {name: set(t.breakdown()["device"]) for name, t in traces.items()}
    assert labels["mtia_inference_trace__mtia_inference_rank_0.json.gz"] == {"mtia:17"}
    assert labels["nccl_parser_config__nccl_data.json.gz"] == {"cuda:0"}
    assert labels["rank_non_gpu__rank_non_gpu.json.gz"] == {"host"}
    # ROCm's profiler files HIP calls as cuda_runtime: the device is named as ROCm names it
    assert labels["amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz"] == {"rocm:2"}


def _exposed_ns(
    target: list[tuple[int, int]], hiding: list[tuple[int, int]], a: int, b: int
) -> int:
    """ns inside [a, b) covered by ``target`` and not by ``hiding``: a sweep over the
    boundaries with two counters."""
    events = sorted(
        [(s, 0, 1) for s, _ in target] + [(e, 0, -1) for _, e in target]
        + [(s, 1, 1) for s, _ in hiding] + [(e, 1, -1) for _, e in hiding]
    )  # fmt: skip
    depth, total, prev = [0, 0], 0, None
    for t, which, d in events:
        if prev is not None and depth[0] > 0 and depth[1] == 0:
            lo, hi = max(prev, a), min(t, b)
            total += max(hi - lo, 0)
        depth[which] += d
        prev = t
    return total


def test_distributed_rank_shows_exposed_communication(traces: dict) -> None:
    """sampled_rank-0 spends a quarter of its steps in NCCL kernels with nothing else on
    the GPU: the communication finding names them, and its time is the collectives' time
    not hidden behind compute kernels, swept here from the slices."""
    from explorer.analysis.steps import select_steps

    t = traces["timeline_analysis__sampled_rank-0.json.gz"]
    comm = [f for f in t.findings() if f.kind == "communication"]
    assert len(comm) == 1
    s = t.slices
    on_gpu = s["track"].isin(t.device_tracks()["id"]).to_numpy()
    kind = s["kind"].astype(str).to_numpy()
    ends = (s["ts"] + s["dur"]).to_numpy()

    def spans(mask: np.ndarray) -> list[tuple[int, int]]:
        return list(zip(s["ts"].to_numpy()[mask], ends[mask], strict=True))

    coll, kern = spans(on_gpu & (kind == "collective")), spans(on_gpu & (kind == "kernel"))
    st = select_steps(t, attributed=True)
    want = sum(
        _exposed_ns(coll, kern, a, b) for a, b in zip(st["start_ns"], st["end_ns"], strict=True)
    )
    assert want > 0.2 * st["dur_ns"].sum()
    assert comm[0].time_lost_ns == want
    names = t.slices["name"].to_numpy()[np.array(comm[0].evidence)].astype(str)
    assert all("nccl" in n.lower() for n in names)


def test_shared_folder_is_where_the_readme_says() -> None:
    assert (SHARED_TRACES / "README.md").exists()


def test_mtia_dma_is_data_movement_and_event_waits_are_not_compute(traces: dict) -> None:
    """MTIA's command processor files DMA and waits as ``mtia_ccp_events``: the breakdown
    counts ``dma_request`` as data movement and ``event_wait`` never as compute."""
    t = traces["mtia_inference_trace__mtia_inference_rank_0.json.gz"]
    bd = t.breakdown()
    cats = dict(zip(bd["category"].astype(str), bd["ns"], strict=True))
    s = t.slices
    dma = (s["name"] == "dma_request").to_numpy()
    assert 0 < cats["data_movement"] <= int(s["dur"].to_numpy()[dma].sum())
    kernels = (s["kind"] == "kernel").to_numpy() & ~dma
    assert cats["compute"] <= int(s["dur"].to_numpy()[kernels].sum())


def test_advice_names_the_backend_of_the_trace(traces: dict) -> None:
    """An MTIA trace's sync finding speaks of torch.mtia, never of CUDA; a ROCm trace's
    launch-bound advice speaks of HIP graphs (through torch.cuda, as ROCm's PyTorch does)."""
    mtia = traces["mtia_inference_trace__mtia_inference_rank_0.json.gz"]
    (sync,) = [f for f in mtia.findings() if f.kind == "sync_stall"]
    words = f"{sync.title} {sync.explanation} {sync.recommendation}"
    assert "torch.mtia.synchronize()" in words and "cuda" not in words.lower()
    amd = traces["amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz"]
    (launch,) = [f for f in amd.findings() if f.kind == "launch_bound"]
    assert launch.device == "rocm:2" and "HIP graphs" in launch.recommendation
    assert "CUDA graphs" not in launch.recommendation


def test_compile_why_is_a_sentence_not_a_dump() -> None:
    """Dynamo's texts (hints, debug context, guard dumps whose paths are cut to a width)
    become one sentence each: what broke or which guard failed, in which frame, where."""
    from explorer.analysis.detectors.compilation import why_sentence

    brk = why_sentence({
        "event": "graph_break", "frame": "forward", "source_file": "/home/me/train.py",
        "source_line": 142,
        "reason": "Unsupported Tensor.item() call with capture_scalar_outputs=False\n"
                  "  Explanation: Dynamo does not support tracing `Tensor.item()`.\n"
                  "  Developer debug context: call_method TensorVariable() item () {}",
    })  # fmt: skip
    assert brk == (
        "The graph breaks in forward() at train.py:142: Unsupported Tensor.item() call "
        "with capture_scalar_outputs=False."
    )
    rec = why_sentence({
        "event": "recompile", "frame": "torch_dynamo_resume_in_forward_at_142",
        "source_file": "/home/me/train.py", "source_line": 142,
        "reason": "1/0: ___stack0 == 0.23428410291671753   # if h.mean().item() > 0.25:  "
                  "# ork/main/scripts/train.py:142 in torch_dynamo_resume_in_forward_at_142\n"
                  "User stack trace:\n  File \"/home/me/train.py\", line 142",
    })  # fmt: skip
    assert rec == (
        "The rest of forward() after the break at line 142 is recompiled at train.py:142 "
        "because the guard `___stack0 == 0.2343` failed (a value it was specialised on changed)."
    )
    assert why_sentence({"event": "compile", "frame": "forward"}) == ""

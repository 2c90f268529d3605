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


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name[:40])
def test_breakdown_partitions_every_step_on_every_device(path: Path, traces: dict) -> None:
    t = traces[path.name]
    st = t.steps()
    bd = t.breakdown()
    assert len(st) >= 1 and (st["dur_ns"] >= 0).all()
    assert (bd["ns"] >= 0).all(), "negative time in a category"
    assert set(bd["category"].astype(str)) == set(CATEGORIES)
    sums = bd.groupby(["step", "device"])["ns"].sum()
    dur = st.set_index("step")["dur_ns"]
    assert len(sums) == len(st) * bd["device"].nunique()
    for (step, _device), ns in sums.items():
        assert ns == dur[step]
    devices = set(bd["device"])
    assert devices == {"host"} if t.device_tracks().empty else all(":" in d for d in devices)


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


def test_distributed_rank_shows_exposed_communication(traces: dict) -> None:
    """sampled_rank-0 spends a quarter of its steps in NCCL kernels with nothing else on
    the GPU: the communication finding names them, and its time equals the category."""
    t = traces["timeline_analysis__sampled_rank-0.json.gz"]
    comm = [f for f in t.findings() if f.kind == "communication"]
    assert len(comm) == 1
    bd = t.breakdown()
    assert comm[0].time_lost_ns == int(bd.loc[bd["category"] == "communication", "ns"].sum())
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

"""Every real trace in ../shared/traces loads, keeps every duration event, and satisfies
the model's invariants (nesting, ordering, ids)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

import explorer

SHARED_TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "traces"
TRACES = sorted(
    p
    for p in (SHARED_TRACES.iterdir() if SHARED_TRACES.is_dir() else [])
    if p.name.endswith((".json", ".json.gz")) and not p.name.endswith("_et.json.gz")
)
pytestmark = pytest.mark.skipif(
    not TRACES, reason="../shared/traces is absent (not part of a user's clone)"
)


def _events(path: Path) -> list[dict]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as f:
        doc = json.load(f)
    return doc if isinstance(doc, list) else doc["traceEvents"]


def _duration_events(events: list[dict]) -> int:
    return sum(e.get("ph") == "X" for e in events) + sum(e.get("ph") == "B" for e in events)


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name[:40])
def test_loads_every_duration_event(path: Path) -> None:
    trace = explorer.load(path, use_cache=False)
    assert len(trace.slices) == _duration_events(_events(path))
    assert trace.metadata["warnings"] == []


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name[:40])
def test_invariants(path: Path) -> None:
    t = explorer.load(path, use_cache=False)
    s = t.slices
    ts, dur, track = s["ts"].to_numpy(), s["dur"].to_numpy(), s["track"].to_numpy()
    assert ts.dtype == np.int64 and dur.dtype == np.int64
    assert (dur >= 0).all() and (ts >= 0).all()
    # Sorted by (track, ts): each track's rows are contiguous and in time order.
    assert (np.diff(track) >= 0).all()
    same = np.diff(track) == 0
    assert (np.diff(ts)[same] >= 0).all()
    # Parents are on the same track, earlier in the table, one level up, and enclose the child.
    p = s["parent"].to_numpy()
    has = np.flatnonzero(p >= 0)
    assert (p[has] < has).all()
    assert (track[p[has]] == track[has]).all()
    depth = s["depth"].to_numpy()
    assert (depth[p[has]] == depth[has] - 1).all()
    assert (depth[p < 0] == 0).all()
    assert (ts[p[has]] <= ts[has]).all()
    # Every track id and flow endpoint is valid.
    assert set(np.unique(track)) <= set(t.tracks["id"])
    if len(t.flows):
        assert (
            t.flows["src"].between(0, len(s) - 1).all()
            and t.flows["dst"].between(0, len(s) - 1).all()
        )
    assert list(t.tracks["id"]) == list(range(len(t.tracks)))


def test_kinds_across_eras_and_vendors(shared_traces: Path) -> None:
    amd = explorer.load(shared_traces / "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    kinds = set(amd.slices["kind"].astype(str))
    assert {"cpu_op", "runtime", "kernel", "memcpy", "annotation", "device_annotation"} <= kinds
    old = explorer.load(shared_traces / "trace_file_list__inference_rank_1.json.gz")
    assert {"runtime", "kernel"} <= set(old.slices["kind"].astype(str))
    mtia = explorer.load(shared_traces / "mtia_inference_trace__mtia_inference_rank_0.json.gz")
    assert (mtia.slices["kind"] == "kernel").sum() > 1000
    dev = mtia.device_tracks()
    assert len(dev) >= 10 and (dev["device"] == 17).all()
    triton = explorer.load(shared_traces / "triton_example__triton_example.json.gz")
    drv = triton.slices[triton.slices["cat"] == "cuda_driver"]
    assert len(drv) == 1 and (drv["kind"] == "runtime").all()


def test_memcpy_direction_and_launch_flows(shared_traces: Path) -> None:
    t = explorer.load(shared_traces / "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz")
    s = t.slices
    mc = s[s["kind"] == "memcpy"]
    assert set(mc["copy_kind"].astype(str)) <= {"HtoD", "DtoH", "DtoD"} and "HtoD" in set(
        mc["copy_kind"]
    )
    launches = t.flows[t.flows["type"] == "launch"]
    assert len(launches) > 0
    assert (s["kind"].to_numpy()[launches["src"]] == "runtime").all()
    dev_tracks = set(t.device_tracks()["id"])
    assert set(s["track"].to_numpy()[launches["dst"]]) <= dev_tracks
    assert (t.flows["type"] == "fwdbwd").sum() > 0


def test_sync_kinds(shared_traces: Path) -> None:
    t = explorer.load(shared_traces / "critical_path__cuda_event_sync__event_sync_trace.json.gz")
    syncs = t.slices[t.slices["kind"] == "sync"]
    names = set(syncs["name"].astype(str))
    assert any("Synchronize" in n for n in names) or "Event Sync" in names


def test_execution_trace_attached_in_directory(shared_traces: Path, tmp_path: Path) -> None:
    for name in (
        "execution_trace__benchmark_simple_add_trace.json.gz",
        "execution_trace__benchmark_simple_add_et.json.gz",
    ):
        (tmp_path / name).write_bytes((shared_traces / name).read_bytes())
    t = explorer.load(tmp_path)
    et = t.execution_trace
    assert et is not None and (et["slice"] >= 0).sum() > 10
    matched = et[et["slice"] >= 0]
    names = t.slices["name"].astype(str).to_numpy()[matched["slice"]]
    assert (names == matched["name"].to_numpy()).all()


def test_shared_dir_is_read_only_and_still_loads() -> None:
    # The cache never writes beside the trace: the shared folder is read-only.
    t = explorer.load(SHARED_TRACES / "trace_compare__base__base.json.gz")
    assert len(t.slices) == 33


def test_rocm_copies_get_bytes_from_their_launch_and_no_guessed_memory_kind(
    shared_traces: Path,
) -> None:
    t = explorer.load(
        shared_traces / "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz", use_cache=False
    )
    mc = t.slices[t.slices["kind"] == "memcpy"]
    assert len(mc) == 2
    assert (mc["bytes"] == 2560).all()  # hipMemcpyWithStream's "size": "2560"
    assert set(mc["src_mem"].astype(str)) == {
        "Host"
    }  # "(Host -> Device)": pinned or not is unknown

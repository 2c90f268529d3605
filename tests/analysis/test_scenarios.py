"""The scenario generator writes valid Kineto traces whose injected amounts are really there.

Every injected ``time_lost_ns`` is re-measured here from the *loaded* trace's tables, with
code independent of the generator's own bookkeeping, so a generator that claimed a stall it
did not write (or wrote one it did not claim) fails.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import explorer
from explorer.errors import UsageError
from explorer.scenarios import SCENARIOS, generate, write, write_large
from explorer.scenarios.simulator import LAUNCH_CALLS
from explorer.scenarios.workload import DATALOADER_NEXT, LINES, TRAIN_FILE
from explorer.trace.source import user_frames

EXPECTED_KIND: dict[str, list[str]] = {
    "clean": [],
    "input_stall": ["input_stall"],
    "pageable_copies": ["memcpy_stall"],
    "sync_storm": ["sync_stall"],
    "cpu_fallback": ["cpu_fallback"],
    "launch_bound": ["launch_bound"],
    "compile_pause": ["compile"],
    "memory_growth": ["memory"],
    "input_and_sync": ["input_stall", "sync_stall"],
    "input_sync_pageable": ["input_stall", "sync_stall", "memcpy_stall"],
}
DEVICE_KINDS = ["kernel", "memcpy", "memset"]


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[dict, explorer.Trace]]:
    """Every scenario generated, written gzipped, and loaded back."""
    d = tmp_path_factory.mktemp("scenarios")
    out = {}
    for name in SCENARIOS:
        path = write(name, d / f"{name}.json.gz", steps=6, seed=3)
        with gzip.open(path, "rb") as f:
            doc = json.loads(f.read())
        out[name] = (doc, explorer.load(path, use_cache=False))
    return out


# -- measuring the loaded trace, independently of the generator --------------------------------
class Busy:
    """Union of the device's busy intervals (all streams) from the loaded slices."""

    def __init__(self, trace: explorer.Trace) -> None:
        s = trace.slices
        dev = s[s["kind"].isin(DEVICE_KINDS)]
        st = dev["ts"].to_numpy(np.int64)
        en = st + dev["dur"].to_numpy(np.int64)
        o = np.argsort(st)
        st, en = st[o], en[o]
        merged: list[list[int]] = []
        for a, b in zip(st.tolist(), en.tolist(), strict=True):
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        self.iv = np.asarray(merged, np.int64)

    def idle(self, a: int, b: int) -> int:
        s = np.clip(self.iv[:, 0], a, b)
        e = np.clip(self.iv[:, 1], a, b)
        return int((b - a) - (e - s).sum())

    def gap_at(self, t: int) -> int:
        """Length of the idle gap containing ``t`` (0 when busy, or when nothing follows)."""
        k = int(np.searchsorted(self.iv[:, 0], t, side="right")) - 1
        if k >= 0 and self.iv[k, 1] > t:
            return 0
        if k + 1 >= len(self.iv):
            return 0
        prev_end = int(self.iv[k, 1]) if k >= 0 else t
        return int(self.iv[k + 1, 0]) - prev_end


def in_steps(trace: explorer.Trace, ts: np.ndarray) -> np.ndarray:
    st = trace.steps()
    a = st["start_ns"].to_numpy()
    b = st["end_ns"].to_numpy()
    return ((ts[:, None] >= a[None, :]) & (ts[:, None] < b[None, :])).any(axis=1)


def named(trace: explorer.Trace, name: str):
    s = trace.slices
    return s[s["name"].astype(str) == name]


def device_ops_launched_within(trace: explorer.Trace, a: int, b: int):
    """Device ops whose runtime launch call lies in the host window [a, b]."""
    s = trace.slices
    rt = s[(s["kind"] == "runtime") & (s["ts"] >= a) & (s["ts"] + s["dur"] <= b)]
    dev = s[s["kind"].isin(DEVICE_KINDS)]
    return dev[dev["correlation"].isin(rt["correlation"])].sort_values("ts")


def measure(name: str, trace: explorer.Trace) -> int:
    """The injected amount of scenario ``name``, measured on the loaded trace."""
    busy = Busy(trace)
    s = trace.slices
    if name == "input_stall":
        dl = named(trace, DATALOADER_NEXT)
        dl = dl[in_steps(trace, dl["ts"].to_numpy())]
        return sum(busy.idle(a, a + d) for a, d in zip(dl["ts"], dl["dur"], strict=True))
    if name == "pageable_copies":
        c = s[(s["kind"] == "memcpy") & (s["src_mem"] == "Pageable") & (s["copy_kind"] == "HtoD")]
        c = c[in_steps(trace, c["ts"].to_numpy())]
        return sum(d + busy.gap_at(a + d) for a, d in zip(c["ts"], c["dur"], strict=True))
    if name == "sync_storm":
        sy = named(trace, "cudaStreamSynchronize")
        return sum(busy.gap_at(a + d) for a, d in zip(sy["ts"], sy["dur"], strict=True))
    if name == "cpu_fallback":  # the op the device could not run (a cpu_op in every variant)
        ops = named(trace, "aten::linalg_eig")
        ops = ops[ops["cat"].astype(str) == "cpu_op"]
        total = 0
        for a, d in zip(ops["ts"], ops["dur"], strict=True):
            dev = device_ops_launched_within(trace, a, a + d)
            assert list(dev["copy_kind"]) == ["DtoH", "HtoD"]
            end = int(dev["ts"].iloc[-1] + dev["dur"].iloc[-1])
            total += end + busy.gap_at(end) - int(dev["ts"].iloc[0])
        return total
    if name == "launch_bound":
        frames = named(trace, f"{TRAIN_FILE}({LINES['compute_metrics']}): compute_metrics")
        total = 0
        for a, d in zip(frames["ts"], frames["dur"], strict=True):
            ops = device_ops_launched_within(trace, a, a + d)
            total += busy.idle(int(ops["ts"].min()), int((ops["ts"] + ops["dur"]).max()))
        return total
    if name == "compile_pause":
        comp = s[s["cat"].astype(str) == "explorer_compile"]
        if comp.empty:  # a plain torch trace: dynamo's own annotation
            return int(named(trace, "_compile.compile_inner (dynamo_timed)")["dur"].sum())
        return sum(
            int(d)
            for i, d in zip(comp.index, comp["dur"], strict=True)
            if trace.args(i).get("event") == "compile"
        )
    raise AssertionError(name)


# -- the document ------------------------------------------------------------------------------
def test_every_contract_scenario_exists():
    assert set(SCENARIOS) == set(EXPECTED_KIND)


@pytest.mark.parametrize("name", list(EXPECTED_KIND))
def test_document_is_labelled_synthetic_with_its_injection(name: str, written):
    doc, trace = written[name]
    assert doc["synthetic"] is True and trace.synthetic
    assert doc["traceName"] == f"synthetic:{name}" == trace.metadata["traceName"]
    assert doc["schemaVersion"] == 1 and doc["deviceProperties"] and doc["baseTimeNanoseconds"] > 0
    kinds = [e["kind"] for e in doc["explorer_injected"]]
    assert kinds == EXPECTED_KIND[name]
    for e in doc["explorer_injected"]:
        assert e["time_lost_ns"] >= 0 and e["steps"] and e["definition"]
        assert e["source_line"][0] == TRAIN_FILE and e["source_line"][1] == LINES[e["function"]]


@pytest.mark.parametrize("name", list(EXPECTED_KIND))
def test_events_are_consistent(name: str, written):
    doc, _ = written[name]
    ev = doc["traceEvents"]
    assert all(e.get("dur", 0) >= 0 for e in ev if e["ph"] == "X")
    for cat in ("ac2g", "fwdbwd"):
        s = Counter(e["id"] for e in ev if e.get("cat") == cat and e["ph"] == "s")
        f = Counter(e["id"] for e in ev if e.get("cat") == cat and e["ph"] == "f")
        assert s == f and max(s.values()) == 1, cat
    device = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    dev_corr = Counter(e["args"]["correlation"] for e in device)
    launches = [e for e in ev if e.get("cat") == "cuda_runtime" and e["name"] in LAUNCH_CALLS]
    assert sorted(dev_corr) == sorted(e["args"]["correlation"] for e in launches)
    assert max(dev_corr.values()) == 1
    # each flow end sits on its device op (same id, same time, same stream)
    f_at = {e["id"]: (e["ts"], e["tid"]) for e in ev if e.get("cat") == "ac2g" and e["ph"] == "f"}
    assert all(f_at[e["args"]["correlation"]] == (e["ts"], e["args"]["stream"]) for e in device)
    # ops on one stream never overlap: the simulated device runs a stream in order
    for stream in {e["tid"] for e in device}:
        on = sorted(
            (round(e["ts"] * 1000), round(e["ts"] * 1000) + round(e["dur"] * 1000))
            for e in device
            if e["tid"] == stream
        )
        assert all(b[0] >= a[1] for a, b in zip(on, on[1:], strict=False))
    mem = [e for e in ev if e.get("name") == "[memory]"]
    assert mem and all(
        {"Device Type", "Device Id", "Addr", "Bytes", "Total Allocated", "Total Reserved"}
        <= set(e["args"])
        and e["ph"] == "i"
        for e in mem
    )
    names = {
        (e["name"], str(e["args"].get("name", e["args"].get("labels"))))
        for e in ev
        if e["ph"] == "M"
    }
    assert ("process_labels", "GPU 0") in names and ("thread_name", "stream 7 ") in names


@pytest.mark.parametrize("name", list(EXPECTED_KIND))
def test_loaded_trace_has_steps_flows_and_no_negative_time(name: str, written):
    doc, trace = written[name]
    s = trace.slices
    assert (s["dur"] >= 0).all()
    assert list(trace.steps()["step"]) == list(range(6))
    n_launch = sum(
        1
        for e in doc["traceEvents"]
        if e.get("cat") == "cuda_runtime" and e["name"] in LAUNCH_CALLS
    )
    assert (trace.flows["type"] == "launch").sum() == n_launch
    assert (trace.flows["type"] == "fwdbwd").sum() == 6 * 8
    assert len(trace.memory) == sum(1 for e in doc["traceEvents"] if e.get("name") == "[memory]")
    assert set(trace.tracks["type"].astype(str)) >= {"host_thread", "device_stream"}


# -- the ground truth ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name", [n for n, k in EXPECTED_KIND.items() if len(k) == 1 and k != ["memory"]]
)
def test_injected_time_is_what_the_trace_shows(name: str, written):
    doc, trace = written[name]
    injected = doc["explorer_injected"][0]
    measured = measure(name, trace)
    assert injected["time_lost_ns"] > 1_000_000  # a pathology worth finding
    assert abs(measured - injected["time_lost_ns"]) <= 200, (measured, injected["time_lost_ns"])
    assert sum(v for _, v in injected["per_step"]) == injected["time_lost_ns"]
    # ranges are on the loaded trace's clock: each lies inside the trace
    span = trace.span_ns
    assert all(0 <= a <= b <= span for a, b in injected["ranges"])


def test_clean_device_is_never_idle_inside_a_step(written):
    _, trace = written["clean"]
    busy = Busy(trace)
    st = trace.steps()
    idle = sum(busy.idle(a, b) for a, b in zip(st["start_ns"], st["end_ns"], strict=True))
    assert idle == 0
    # and the input copy runs on its own stream, fully overlapped by compute
    s = trace.slices
    copies = s[(s["kind"] == "memcpy") & (s["src_mem"] == "Pinned")]
    assert len(copies) == 7 and copies["stream"].nunique() == 1
    kernels = s[s["kind"] == "kernel"]
    assert int(copies["stream"].iloc[0]) not in set(kernels["stream"])


def test_pathologies_are_what_the_clean_run_lacks(written):
    """Each scenario differs from clean in the thing it injects (its own share of the run)."""
    _, clean = written["clean"]
    for name in ("input_stall", "sync_storm", "launch_bound", "compile_pause"):
        _, trace = written[name]
        assert (
            trace.steps()["dur_ns"].sum()
            > clean.steps()["dur_ns"].sum() + measure(name, trace) * 0.9
        )


@pytest.mark.parametrize(
    ("name", "slice_name"),
    [
        ("input_stall", DATALOADER_NEXT),
        ("pageable_copies", "cudaMemcpyAsync"),
        ("sync_storm", "cudaStreamSynchronize"),
        ("cpu_fallback", "aten::linalg_eig"),
        ("compile_pause", "torch.compile: compiled_block"),
        ("launch_bound", "aten::mul_"),
    ],
)
def test_source_line_resolves_to_the_injected_line(name: str, slice_name: str, written):
    doc, trace = written[name]
    want = doc["explorer_injected"][0]["source_line"]
    frames = user_frames(trace)
    ids = named(trace, slice_name).index.to_numpy()
    got = {(str(frames["file"].iat[i]), int(frames["line"].iat[i])) for i in ids}
    assert (want[0], want[1]) in got


@pytest.mark.parametrize("name", ["cpu_fallback", "compile_pause"])
def test_plain_torch_variant_keeps_the_truth_without_collector_events(name: str, tmp_path: Path):
    path = write(name, tmp_path / f"{name}.json", steps=4, collector_events=False)
    doc = json.loads(path.read_text())
    assert not any(str(e.get("cat", "")).startswith("explorer_") for e in doc["traceEvents"])
    assert doc["explorer_scenario"]["collector_events"] is False
    trace = explorer.load(path, use_cache=False)
    injected = doc["explorer_injected"][0]["time_lost_ns"]
    assert abs(measure(name, trace) - injected) <= 200
    with_collector = generate(name, steps=4)["explorer_injected"][0]["time_lost_ns"]
    assert abs(with_collector - injected) <= 0.01 * injected  # the same pathology either way


# -- API behaviour -------------------------------------------------------------------------------
def test_generation_is_deterministic_and_seeded():
    a = generate("sync_storm", steps=3, seed=5)
    assert a == generate("sync_storm", steps=3, seed=5)
    b = generate("sync_storm", steps=3, seed=6)
    assert a["explorer_injected"][0]["time_lost_ns"] != b["explorer_injected"][0]["time_lost_ns"]


def test_scale_grows_the_model_and_steps_the_trace():
    small = generate("launch_bound", steps=2)
    big = generate("launch_bound", steps=2, scale=3)
    assert len(big["traceEvents"]) > 2.5 * len(small["traceEvents"])
    assert big["explorer_scenario"]["scale"] == 3
    assert len(generate("clean", steps=5)["traceEvents"]) > len(
        generate("clean", steps=2)["traceEvents"]
    )


def test_bad_requests_are_user_errors(tmp_path: Path):
    with pytest.raises(UsageError, match="unknown scenario 'nope'"):
        generate("nope")
    with pytest.raises(UsageError):
        generate("clean", steps=0)
    with pytest.raises(UsageError):
        write("nope", tmp_path / "x.json")


def test_plain_and_gzip_files_hold_the_same_trace(tmp_path: Path):
    a = explorer.load(write("cpu_fallback", tmp_path / "a.json", steps=2), use_cache=False)
    b = explorer.load(write("cpu_fallback", tmp_path / "b.json.gz", steps=2), use_cache=False)
    assert a.slices[["ts", "dur", "name"]].equals(b.slices[["ts", "dur", "name"]])


def test_write_large_writes_at_least_the_events_asked_for(tmp_path: Path):
    path = write_large(tmp_path / "big.json.gz", n_events=40_000, scenario="input_stall")
    with gzip.open(path, "rb") as f:
        doc = json.loads(f.read())
    ev = doc["traceEvents"]
    assert len(ev) >= 40_000 and doc["synthetic"] is True
    n_steps = doc["explorer_scenario"]["steps"]
    trace = explorer.load(path, use_cache=False)
    assert len(trace.steps()) == n_steps
    # the repeated steps are exact copies shifted in time: same length, no stream overlap
    assert trace.steps()["dur_ns"].nunique() == 1
    s = trace.slices
    dev = s[s["kind"].isin(DEVICE_KINDS)].sort_values(["stream", "ts"])
    for _, g in dev.groupby("stream"):
        ts = g["ts"].to_numpy()
        assert (ts[1:] >= (ts + g["dur"].to_numpy())[:-1]).all()
    launches = sum(1 for e in ev if e.get("cat") == "cuda_runtime" and e["name"] in LAUNCH_CALLS)
    assert (trace.flows["type"] == "launch").sum() == launches
    # the injected amount is the steady step's, times the steps: measure it
    measured = measure("input_stall", trace)
    assert abs(measured - doc["explorer_injected"][0]["time_lost_ns"]) <= 0.01 * measured

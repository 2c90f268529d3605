"""Explorer against Holistic Trace Analysis on every real trace we have.

HTA's temporal breakdown is over its own window: from the first to the last GPU event it
keeps (with ``include_last_profiler_step=True``: every event launched by a host call up to
the last profiler step's end; with fewer than two steps, every GPU event). There it splits
time into compute (union of computation kernels), non-compute (the rest of the union of all
its GPU events) and idle. Explorer's breakdown timeline over the same window gives the same
three: ``dev_compute``, ``dev_comm + dev_copy`` (the device busy with anything but compute)
and the rest (the device idle, whatever the host does).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.peers import explorer_figures as ef
from tests.peers.allowed import allowed
from tests.peers.conftest import Cache, trace_id, trace_params

#: Tight: 1% of the peer's figure or 1 µs, whichever is larger.
REL, ABS_NS = 0.01, 1000


def close(ours: float, theirs: float) -> bool:
    return abs(ours - theirs) <= max(ABS_NS, REL * abs(theirs))


def us(ns: float) -> str:
    return f"{ns / 1000:.1f} µs"


def _compared(figure: str, path: Path) -> None:
    a = allowed(figure, trace_id(path))
    assert a is None, f"{figure} is on the allow-list for this trace: {a.reason}"


@pytest.mark.parametrize("trace_path", trace_params(), indirect=True)
def test_hta_and_explorer_agree_on_which_traces_have_device_work(
    trace_path: Path, peers: Cache
) -> None:
    hta = peers.hta_of(trace_path)
    assert not hta.error.startswith("HTA cannot parse"), hta.error
    trace = peers.explorer_of(trace_path)
    labels = ef.device_labels(trace)
    if hta.error:  # HTA keeps no GPU event
        busy = ef.device_slices(trace)
        busy = busy[busy["cls"] != "wait"]
        launched = busy[busy["launched"]]
        assert launched.empty, (
            f"HTA keeps no GPU event, Explorer has {len(launched)} launched device slices"
        )
    else:
        assert labels, f"HTA keeps {len(hta.events)} GPU events, Explorer has no device"


def _hta_params(figure: str) -> list:
    return [p for p in trace_params() if allowed(figure, trace_id(p.values[0])) is None]


@pytest.mark.parametrize("trace_path", _hta_params("hta.temporal"), indirect=True)
def test_temporal_breakdown_over_htas_window(trace_path: Path, peers: Cache) -> None:
    """Compute, non-compute and idle time over HTA's window, all devices of the rank."""
    _compared("hta.temporal", trace_path)
    hta = peers.hta_of(trace_path)
    if hta.error:
        return  # no GPU events: the test above holds Explorer to the same
    trace = peers.explorer_of(trace_path)
    got: dict[str, int] = {}
    for label in ef.device_labels(trace):
        for reason, ns in ef.reasons_over(trace, label, *hta.window).items():
            got[reason] = got.get(reason, 0) + ns
    window = hta.window[1] - hta.window[0]
    compute = got.get("dev_compute", 0)
    non_compute = got.get("dev_comm", 0) + got.get("dev_copy", 0)
    idle = window - compute - non_compute
    rows = [
        ("window", window, hta.kernel_time_ns),
        ("compute", compute, hta.compute_ns),
        ("non-compute", non_compute, hta.non_compute_ns),
        ("idle", idle, hta.idle_ns),
    ]
    bad = [f"{n}: Explorer {us(a)} vs HTA {us(b)}" for n, a, b in rows if not close(a, b)]
    assert not bad, "; ".join(bad)


@pytest.mark.parametrize("trace_path", _hta_params("hta.temporal"), indirect=True)
def test_profiled_steps_compute_matches_hta(trace_path: Path, peers: Cache) -> None:
    """The compute of all profiled steps (``trace.breakdown()``, summed over steps and devices)
    is HTA's compute time where HTA counts exactly the steps' work: a trace with at least two
    profiler steps (HTA then keeps only device work launched from the host up to the last
    step's end, and drops work whose launch is not in the trace)."""
    _compared("hta.temporal", trace_path)
    hta = peers.hta_of(trace_path)
    if hta.error or len(hta.iterations) < 2:
        return  # one step or none: HTA keeps every GPU event, launched or not
    trace = peers.explorer_of(trace_path)
    steps = ef.step_windows(trace)
    if not steps["name"].astype(str).str.startswith("ProfilerStep").all():
        return
    launched_before = _launched_outside_steps(trace, steps)
    bd = trace.breakdown()
    compute = int(bd.loc[bd["category"] == "compute", "ns"].sum())
    expected = hta.compute_ns - launched_before
    assert close(compute, expected), (
        f"compute over the {len(steps)} profiled steps: Explorer {us(compute)} vs HTA "
        f"{us(hta.compute_ns)} (less {us(launched_before)} launched before the first step)"
    )


def _launched_outside_steps(trace, steps) -> float:
    """Compute-kernel time launched before the first step: HTA counts it (it keeps whatever the
    host launched up to the last step's end), Explorer's profiled steps do not (it belongs to
    no step)."""
    s = trace.slices
    f = trace.flows
    f = f[f["type"] == "launch"]
    if f.empty:
        return 0.0
    off = ef.file_clock(trace)
    host_ts = s["ts"].to_numpy(np.int64)[f["src"].to_numpy()] + off
    outside = host_ts < steps["start"].min()
    dst = f["dst"].to_numpy()[outside]
    kind = s["kind"].to_numpy()[dst]
    return float(s["dur"].to_numpy()[dst][kind == "kernel"].sum())


#: HTA's kernel type -> the class Explorer's breakdown gives the same device event.
HTA_TYPE_TO_CLASS = {
    "COMPUTATION": "compute",
    "COMMUNICATION": "communication",
    "MEMORY": "data_movement",
}


@pytest.mark.parametrize("trace_path", _hta_params("hta.kernel_types"), indirect=True)
def test_kernel_type_breakdown_event_by_event(trace_path: Path, peers: Cache) -> None:
    """Every GPU event HTA keeps is a device slice in Explorer (same start and duration, ns)
    of the class HTA gives it, and the per-type totals agree (HTA's kernel-type breakdown:
    summed durations, not unions). HTA's OTHER (names it cannot type) is not compared."""
    _compared("hta.kernel_types", trace_path)
    hta = peers.hta_of(trace_path)
    if hta.error:
        return
    ours = ef.device_slices(peers.explorer_of(trace_path))
    at = ef.match_events(hta.events, ours)
    m = hta.events.copy()
    m["cls"] = np.where(at >= 0, ours["cls"].to_numpy()[np.maximum(at, 0)], None)
    missing = m[at < 0]
    assert missing.empty, (
        f"{len(missing)} of HTA's {len(hta.events)} GPU events are no device slice in "
        f"Explorer, e.g. {missing['name'].head(3).tolist()}"
    )
    typed = m[m["type"].isin(list(HTA_TYPE_TO_CLASS))]
    wrong = typed[typed["cls"] != typed["type"].map(HTA_TYPE_TO_CLASS)]
    detail = (
        wrong.groupby(["type", "cls"])
        .agg(n=("dur", "size"), dur=("dur", "sum"), e=("name", "first"))
        .reset_index()
    )
    assert wrong.empty, "classified differently (HTA type -> Explorer class): " + "; ".join(
        f"{r.type} -> {r.cls}: {r.n} events, {us(r.dur)}, e.g. {r.e[:70]!r}"
        for r in detail.itertuples()
    )
    # the totals over Explorer's own selection of the same work: every device slice (with
    # two or more steps, those launched from the host by the last step's end, as HTA keeps)
    trace = peers.explorer_of(trace_path)
    kept = ours
    if len(hta.iterations) >= 2:
        kept = ours[ours["launched"] & (ours["launch_ts"] <= _last_step_end(trace))]
    for t, cls in HTA_TYPE_TO_CLASS.items():
        theirs = hta.kernel_type_ns.get(t, 0.0)
        mine = float(kept.loc[kept["cls"] == cls, "dur"].sum())
        assert close(mine, theirs), f"{t}: Explorer {us(mine)} vs HTA {us(theirs)}"


def _last_step_end(trace) -> int:
    """The last ProfilerStep's host end on the file clock (HTA's cut-off for launches)."""
    st = trace.steps()
    return int(st["end_ns"].max()) + ef.file_clock(trace)

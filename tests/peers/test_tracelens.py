"""Explorer against TraceLens's published reports on the eleven traces in
``../shared/traces/tracelens/`` (read its README for the definitions).

TraceLens looks only at device work whose launch is in the trace (``kernel``, ``gpu_memcpy``,
``gpu_memset`` linked to a runtime call by an ``ac2g`` flow), over the whole trace: from
the first such event's start to the last one's end. Explorer's breakdown timeline over that
window gives the same partition: compute (kernels), exposed communication, exposed copies,
the rest idle. TraceLens files memsets under computation, Explorer under data movement, so
computation is compared together with the exposed copies (computation + exposed memcpy in
TraceLens is kernels, memsets and memcpys less communication: Explorer's compute + copies).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import SHARED_TRACES
from tests.peers import explorer_figures as ef
from tests.peers.allowed import allowed
from tests.peers.conftest import Cache, trace_params
from tests.peers.peers import raw_events, tracelens_report
from tests.peers.test_hta import close, us

TRACELENS = SHARED_TRACES / "tracelens"
TRACES = sorted(TRACELENS.glob("*.json.gz")) if TRACELENS.is_dir() else []


def _launched_device_work(peers: Cache, path: Path):
    ds = ef.device_slices(peers.explorer_of(path))
    return ds[ds["launched"] & ds["kind"].isin(["kernel", "memcpy", "memset", "collective"])]


def test_every_tracelens_trace_has_its_report(shared_traces: Path) -> None:
    assert len(TRACES) == 11
    assert all(tracelens_report(p) is not None for p in TRACES)


@pytest.mark.parametrize(
    "trace_path",
    [p for p in trace_params(TRACES) if not allowed("tracelens.gpu_timeline", p.values[0].name)],
    indirect=True,
)
def test_gpu_timeline(trace_path: Path, peers: Cache) -> None:
    rep = tracelens_report(trace_path)
    tl = {k: v * 1e6 for k, v in rep.timeline_ms.items()}  # ms -> ns
    work = _launched_device_work(peers, trace_path)
    start, end = int(work["ts"].min()), int((work["ts"] + work["dur"]).max())
    trace = peers.explorer_of(trace_path)
    got: dict[str, int] = {}
    for label in ef.device_labels(trace):
        for reason, ns in ef.reasons_over(trace, label, start, end).items():
            got[reason] = got.get(reason, 0) + ns
    compute_copy = got["dev_compute"] + got["dev_copy"]
    busy = compute_copy + got["dev_comm"]
    rows = [
        ("total", end - start, tl["total_time"]),
        ("computation + exposed memcpy", compute_copy, tl["computation_time"]
         + tl["exposed_memcpy_time"]),
        ("exposed comm", got["dev_comm"], tl["exposed_comm_time"]),
        ("busy", busy, tl["busy_time"]),
        ("idle", (end - start) - busy, tl["idle_time"]),
    ]  # fmt: skip
    bad = [f"{n}: Explorer {us(a)} vs TraceLens {us(b)}" for n, a, b in rows if not close(a, b)]
    assert not bad, "; ".join(bad)


@pytest.mark.parametrize("trace_path", trace_params(TRACES), indirect=True)
def test_kernel_summary(trace_path: Path, peers: Cache) -> None:
    """Per kernel name: how many ran and their summed time."""
    rep = tracelens_report(trace_path)
    k = rep.kernels.groupby("Kernel name").agg(
        n=("Kernel duration (µs)_count", "sum"), t=("Kernel duration (µs)_sum", "sum")
    )
    work = _launched_device_work(peers, trace_path)
    work = work[work["kind"].isin(["kernel", "collective"])]  # its kernels: no memcpy/memset
    ours = work.groupby("name").agg(n=("dur", "size"), t=("dur", "sum"))
    bad = []
    for name, row in k.iterrows():
        if name not in ours.index:
            bad.append(f"{name[:60]!r}: {int(row['n'])} in TraceLens, none in Explorer")
            continue
        mine = ours.loc[name]
        if int(mine["n"]) != int(row["n"]) or not close(float(mine["t"]), row["t"] * 1000):
            bad.append(
                f"{name[:60]!r}: Explorer {int(mine['n'])} x, {us(mine['t'])} vs TraceLens "
                f"{int(row['n'])} x, {row['t']:.1f} µs"
            )
    extra = sorted(set(ours.index) - set(k.index))
    if extra:
        bad.append(f"{len(extra)} kernel names Explorer has and TraceLens does not: {extra[:3]}")
    assert not bad, f"{len(bad)} differences: " + "; ".join(bad[:6])


@pytest.mark.parametrize(
    "trace_path",
    trace_params(
        [p for p in TRACES if tracelens_report(p) and tracelens_report(p).ops is not None]
    ),
    indirect=True,
)
def test_ops_summary(trace_path: Path, peers: Cache) -> None:
    """Per op that launches kernels: the device time of its whole subtree (Explorer's
    Operators ``device_ns``; TraceLens's ``total_subtree_kernel_time_sum``)."""
    ops = tracelens_report(trace_path).ops
    trace = peers.explorer_of(trace_path)
    table = ef.operators(trace)
    table = table[table["side"] == "host"].groupby("name")["device_ns"].sum()
    table = table.sub(pd.Series(_without_whole_flow(trace, trace_path), dtype=float), fill_value=0)
    if allowed("tracelens.ops_summary", trace_path.name):
        table = table.sub(pd.Series(_outside_direct_launchers(trace), dtype=float), fill_value=0)
    bad = []
    for row in ops.itertuples():
        mine = float(table.get(row.name, np.nan))
        theirs = float(row.total_subtree_kernel_time_sum) * 1000
        if not close(mine, theirs):
            bad.append(f"{row.name!r}: Explorer {us(mine)} vs TraceLens {us(theirs)}")
    assert not bad, f"{len(bad)} of {len(ops)} ops differ: " + "; ".join(bad[:6])


def _outside_direct_launchers(trace) -> dict[str, int]:
    """Per op name, the device time Explorer gives it from launches under a call of the name
    that launches no kernel itself: TraceLens's ops_summary holds only calls with direct
    kernels (each with its subtree), so an ``aten::where`` whose kernels come from its
    ``aten::fill_`` and inner ``aten::where`` is no row; only the inner one is. Each name
    is charged once per launch, as the Operators table counts a name's time once."""
    s = trace.slices
    f = trace.flows[trace.flows["type"] == "launch"]
    names = s["name"].astype(str).to_numpy()
    parent = s["parent"].to_numpy()
    direct = set(parent[f["src"].to_numpy()].tolist())  # calls whose runtime call launched
    out: dict[str, int] = {}
    for src, dst in zip(f["src"].to_numpy(), f["dst"].to_numpy(), strict=True):
        under, launching, p = set(), set(), parent[src]
        while p >= 0:
            under.add(names[p])
            if p in direct:
                launching.add(names[p])
            p = parent[p]
        for n in under - launching:
            out[n] = out.get(n, 0) + int(s["dur"].iat[dst])
    return out


def _without_whole_flow(trace, path: Path) -> dict[str, int]:
    """Per op name, the device time Explorer gives it from launches that TraceLens does not
    see: device work whose ``ac2g`` flow has no start (``s``) in the file, although the
    runtime call with its correlation id is there (the 5 memsets of the normalization-layer
    trace). TraceLens counts only whole flows (its README); Explorer links by correlation.
    Each name is charged once per launch, as the Operators table counts a name's time once."""
    # An ac2g flow's start: a fwdbwd flow may share its id (the first memset's id 6 here).
    starts = {
        e.get("id") for e in raw_events(path) if e.get("ph") == "s" and e.get("cat") == "ac2g"
    }
    s = trace.slices
    f = trace.flows[trace.flows["type"] == "launch"]
    names = s["name"].astype(str).to_numpy()
    parent = s["parent"].to_numpy()
    corr = s["correlation"].to_numpy()
    out: dict[str, int] = {}
    for src, dst in zip(f["src"].to_numpy(), f["dst"].to_numpy(), strict=True):
        if corr[dst] in starts:
            continue
        seen, p = set(), src
        while p >= 0:
            seen.add(names[p])
            p = parent[p]
        for n in seen:
            out[n] = out.get(n, 0) + int(s["dur"].iat[dst])
    return out

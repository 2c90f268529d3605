"""Per op or kernel name: where the time went, for the trace, a step or a time range.

This answers "which ops dominate?" the way ``key_averages()`` does, but over any window of
the timeline: count, total, self and average time, the device time of the work each op
launched, and its share. Self time subtracts children via ``np.bincount`` over parent ids,
device time follows launch flows from runtime calls to device ops and is summed up the
parent chain one depth level at a time (a loop over depths, never over events).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from explorer.trace.model import DEVICE_KINDS, TraceData

#: Kinds that run on a device, for the device-side share.
DEVICE_SIDE: frozenset[str] = DEVICE_KINDS

#: Columns of :func:`operator_stats`.
COLUMNS = ["name", "kind", "side", "count", "total_ns", "self_ns", "avg_ns", "device_ns", "share"]

#: Where a slice runs, as :func:`slice_sides` codes it.
SIDES: tuple[str, ...] = ("host", "device", "other")


def slice_sides(trace: TraceData) -> np.ndarray:
    """Where each slice runs: 0 host thread, 1 device stream (so CUDA's "Event Sync" rows
    on a device count as device time), 2 any other row (the profiler's own span, which is
    not work). See :meth:`~explorer.trace.model.TraceData.sides`."""
    return trace.sides()


def device_rows(trace: TraceData) -> np.ndarray:
    """Whether each slice runs on a device (see :func:`slice_sides`)."""
    return slice_sides(trace) == 1


def operator_stats(
    trace: TraceData, start_ns: int | None = None, end_ns: int | None = None
) -> pd.DataFrame:
    """Per slice name: ``name, kind, count, total_ns, self_ns, avg_ns, device_ns, share``.

    With a window ``[start_ns, end_ns)`` every slice is clipped to it (a slice half inside
    counts half its time, and counts once); without one the whole trace is used.

    - ``self_ns`` = time minus the part of it covered by direct children on the same track,
      so it is never negative and the ``self_ns`` of all names add up exactly to the time of
      the top-level slices (plus the bits of children that overhang their parent's end).
    - ``device_ns`` = for device ops their own time; for host slices the time of the device
      ops launched (launch flows) from inside them, at any depth.
    - ``share`` = ``self_ns`` over all host-side self time (or all device-side self time,
      for rows on device tracks), so host rows sum to 1 and device rows sum to 1; rows on
      other tracks (the profiler's own span) have none (NaN).

    A name nested in itself (recursive ops) counts its nested time in ``total_ns`` twice,
    as ``torch.profiler``'s ``key_averages`` does; ``self_ns`` never double counts.
    """
    s = trace.slices
    n = len(s)
    if n == 0:
        return pd.DataFrame({c: [] for c in COLUMNS}).astype(
            {c: np.int64 for c in ("count", "total_ns", "self_ns", "avg_ns", "device_ns")}
            | {"share": np.float64}
        )
    ts = s["ts"].to_numpy(np.int64)
    dur = s["dur"].to_numpy(np.int64)
    end = ts + dur
    if start_ns is not None or end_ns is not None:
        lo = np.int64(start_ns if start_ns is not None else ts.min())
        hi = np.int64(end_ns if end_ns is not None else end.max())
        start_ns, end_ns = int(lo), int(hi)
        clipped = np.clip(end, lo, hi) - np.clip(ts, lo, hi)
        inside = (clipped > 0) | ((dur == 0) & (ts >= lo) & (ts < hi))
    else:
        clipped = dur.copy()
        inside = np.ones(n, bool)
    clipped = np.where(inside, clipped, 0)

    parent = s["parent"].to_numpy(np.int64)
    has_parent = (parent >= 0) & inside
    # A child counts against its parent's self time only where it overlaps the parent:
    # real traces have children that overhang their parent's end by a little.
    lo_all = ts if start_ns is None else np.maximum(ts, lo)
    hi_all = end if end_ns is None else np.minimum(end, hi)
    kids = np.flatnonzero(has_parent)
    overlap = np.minimum(hi_all[kids], hi_all[parent[kids]]) - np.maximum(
        lo_all[kids], lo_all[parent[kids]]
    )
    children = np.bincount(parent[kids], weights=np.maximum(overlap, 0), minlength=n)
    self_time = clipped - children.astype(np.int64)

    kinds = s["kind"].astype(str).to_numpy()
    side = slice_sides(trace)
    on_device = side == 1
    device_time = np.where(on_device, clipped, 0).astype(np.float64)
    flows = trace.flows
    if len(flows):
        launch = (flows["type"].astype(str) == "launch").to_numpy()
        src = flows["src"].to_numpy(np.int64)[launch]
        dst = flows["dst"].to_numpy(np.int64)[launch]
        ok = (src >= 0) & (src < n) & (dst >= 0) & (dst < n)
        src, dst = src[ok], dst[ok]
        launched = np.bincount(src, weights=clipped[dst], minlength=n)
        device_time = device_time + np.where(on_device, 0.0, launched)
        depth = s["depth"].to_numpy(np.int64)
        # Sum launched device time up the parent chain, deepest level first: one
        # vectorised step per depth level.
        for level in range(int(depth.max()), 0, -1):
            rows = np.flatnonzero((depth == level) & (parent >= 0) & ~on_device)
            if len(rows):
                device_time += (
                    np.bincount(parent[rows], weights=device_time[rows], minlength=n) * ~on_device
                )

    # Group by (name, kind, side): a host annotation and its copy on a device are two rows.

    names = s["name"]
    if not isinstance(names.dtype, pd.CategoricalDtype):
        names = names.astype("category")
    name_codes = names.cat.codes.to_numpy().astype(np.int64)
    name_codes = np.where(name_codes < 0, len(names.cat.categories), name_codes)
    kind_values, kind_codes = np.unique(kinds, return_inverse=True)
    per_name = len(SIDES) * len(kind_values)  # (kind, side) pairs
    keys = name_codes * per_name + kind_codes.reshape(-1) * len(SIDES) + side
    rows = np.flatnonzero(inside)
    present, group = np.unique(keys[rows], return_inverse=True)
    group = group.reshape(-1)
    groups = len(present)
    count = np.bincount(group, minlength=groups).astype(np.int64)
    total = np.bincount(group, weights=clipped[rows], minlength=groups)
    self_sum = np.bincount(group, weights=self_time[rows], minlength=groups)
    device_sum = np.bincount(group, weights=device_time[rows], minlength=groups)
    labels = np.append(names.cat.categories.astype(str).to_numpy(), "")
    out = pd.DataFrame(
        {
            "name": labels[present // per_name],
            "kind": kind_values[(present % per_name) // len(SIDES)],
            "side": np.asarray(SIDES, dtype=object)[present % len(SIDES)],
            "count": count,
            "total_ns": np.rint(total).astype(np.int64),
            "self_ns": np.rint(self_sum).astype(np.int64),
        }
    )
    out["avg_ns"] = (out["total_ns"] // out["count"].clip(lower=1)).astype(np.int64)
    out["device_ns"] = np.rint(device_sum).astype(np.int64)
    sides = out["side"].to_numpy()
    self_ns = out["self_ns"].to_numpy(np.float64)
    denom = np.zeros(len(out))
    for name in ("host", "device"):  # "other" rows (profiler spans) get no share
        denom[sides == name] = self_ns[sides == name].sum()
    out["share"] = np.divide(self_ns, denom, out=np.full(len(out), np.nan), where=denom > 0)
    return out.sort_values("total_ns", ascending=False, kind="stable").reset_index(drop=True)

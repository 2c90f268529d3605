"""Per op or kernel name: where the time went, for the trace, a step or a time range.

This answers "which ops dominate?" the way ``key_averages()`` does, but over any window of
the timeline: count, total, self and average time, the device time of the work each op
launched, and its share of self time. Self time subtracts the union of a slice's children
(sorted runs and a running maximum, no per-slice loop); device time follows launch flows
from runtime calls to device ops and is summed up the parent chain one depth level at a
time (a loop over depths, never over events). An op nested in itself (``aten::div`` inside
``aten::div``) counts its time and device time once.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from explorer.trace.columns import category_in, dense_ranks
from explorer.trace.model import DEVICE_KINDS, TraceData
from explorer.trace.nesting import segmented_running_max

#: Kinds that run on a device, for the device-side share.
DEVICE_SIDE: frozenset[str] = DEVICE_KINDS

#: Columns of :func:`operator_stats`.
COLUMNS = [
    "name",
    "kind",
    "side",
    "count",
    "total_ns",
    "self_ns",
    "avg_ns",
    "device_ns",
    "self_share",
]

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
    """Per slice name: ``name, kind, side, count, total_ns, self_ns, avg_ns, device_ns,
    self_share``.

    With a window ``[start_ns, end_ns)`` every slice is clipped to it (a slice half inside
    counts half its time, and counts once); without one the whole trace is used.

    - ``count`` = calls: a call that is the only child of a call of the same name is part
      of it, Python frames and runtime calls between them aside (``aten::div`` whose one
      child is an ``aten::div``, or whose backend's frames hold one: one call, as
      ``torch.autograd.profiler``'s ``_remove_dup_nodes`` and the TensorBoard plugin merge
      them); every other slice is a call.
    - ``total_ns`` = the time the name was running on each track, summed over tracks: a
      call nested in another call of the same name (``aten::div`` inside ``aten::div``,
      a recursive Python function) adds nothing, so the outer call is counted once.
      ``avg_ns`` is ``total_ns / count``.
    - ``self_ns`` = each call's time minus the union of its direct children's (children
      lie inside their parent, see :func:`explorer.trace.nesting.nest`), so it is never
      negative; at most ``total_ns`` (calls of a name that overlap on a track without one
      holding the other, as MTIA's ``synchronize`` do, would count the overlap twice).
    - ``device_ns`` = for device ops their own time; for host slices the time of the
      device ops launched (launch flows) from inside them, at any depth, counted once per
      name: a call inside a call of the same name adds nothing.
    - ``self_share`` = ``self_ns`` over the summed ``self_ns`` of every row on the same
      side (all host rows, or all device rows), so host rows sum to 1 and device rows sum
      to 1; rows on other tracks (the profiler's own span) have none (NaN).
    """
    s = trace.slices
    if len(s) == 0:
        return pd.DataFrame({c: [] for c in COLUMNS}).astype(
            {c: np.int64 for c in ("count", "total_ns", "self_ns", "avg_ns", "device_ns")}
            | {"self_share": np.float64}
        )
    a, b, inside = _window(s, start_ns, end_ns)
    side = slice_sides(trace)
    keys, labels = _group_keys(s, side)
    # the slices that count: all of them without a window, as a slice (no copies)
    rows: slice | np.ndarray = slice(None) if inside.all() else np.flatnonzero(inside)
    present, group = dense_ranks(keys[rows])
    groups = len(present)
    parent = s["parent"].to_numpy(np.int64)
    # Each per-slice array is let go once summed into its groups: the Operators panel's
    # job ran beside the viewer's analyses with ~105 MB of them on the synthetic
    # 1M-event trace.
    outer = ~_inside_same_key(keys, parent)[rows]
    calls = ~_merged_calls(trace, keys, parent)[rows]
    del keys
    clipped = np.where(inside, b - a, 0)
    self_time = clipped - _children_time(parent, inside, a, b).astype(np.int64)
    self_sum = np.bincount(group, weights=self_time[rows], minlength=groups)
    del self_time
    device_time = _device_time(trace, side == 1, clipped, parent)
    del clipped, parent, side
    device_sum = np.bincount(group[outer], weights=device_time[rows][outer], minlength=groups)
    del device_time, outer
    count = np.bincount(group[calls], minlength=groups).astype(np.int64)
    del calls
    track = s["track"].to_numpy(np.int64)
    total = _time_once(group, groups, track[rows], int(track.max()) + 1, a[rows], b[rows])
    out = pd.DataFrame(
        {
            **labels(present),
            "count": count,
            "total_ns": np.rint(total).astype(np.int64),
            # Calls of one name that overlap on a track without one holding the other
            # (MTIA's synchronize) would count the overlap twice: self never exceeds total.
            "self_ns": np.rint(np.minimum(self_sum, total)).astype(np.int64),
        }
    )
    out["avg_ns"] = (out["total_ns"] // out["count"].clip(lower=1)).astype(np.int64)
    out["device_ns"] = np.rint(device_sum).astype(np.int64)
    out["self_share"] = _self_shares(out)
    return out.sort_values("total_ns", ascending=False, kind="stable").reset_index(drop=True)


def _merged_calls(trace: TraceData, keys: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Per slice: is it the only child (runtime calls aside) of a slice with its key? Such
    a call is its parent's, counted once. Python frames and runtime calls between them are
    looked through, as the op tree of ``torch.autograd.profiler`` and the TensorBoard
    plugin (which holds neither) does: an op whose backend runs it from Python inside its
    runtime call (``aten::relu`` -> the backend's frames -> ``nrtExecute`` -> ``aten::relu``,
    the neuron test backend's fallback) is one call."""
    kind = trace.slices["kind"]
    between = category_in(kind, ("python", "runtime"))
    up = _caller(parent, between)
    has = (up >= 0) & ~between
    kids = np.bincount(up[has & ~category_in(kind, ("sync",))], minlength=len(keys))
    out = np.zeros(len(keys), bool)
    out[has] = (keys[up[has]] == keys[has]) & (kids[up[has]] == 1)
    return out


def _caller(parent: np.ndarray, between: np.ndarray) -> np.ndarray:
    """Per slice, its nearest enclosing slice that is not ``between`` (-1: none)."""
    up = parent.copy()
    todo = np.flatnonzero(up >= 0)
    todo = todo[between[up[todo]]]
    while len(todo):
        up[todo] = parent[up[todo]]
        todo = todo[up[todo] >= 0]
        todo = todo[between[up[todo]]]
    return up


def _window(
    s: pd.DataFrame, start_ns: int | None, end_ns: int | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each slice clipped to ``[start_ns, end_ns)`` (the whole trace when both are None):
    its start and end there, and whether it counts (some time inside, or a zero-length
    slice at a point inside)."""
    ts = s["ts"].to_numpy(np.int64)
    dur = s["dur"].to_numpy(np.int64)
    end = ts + dur
    if start_ns is None and end_ns is None:
        return ts, end, np.ones(len(ts), bool)
    lo = np.int64(start_ns if start_ns is not None else ts.min())
    hi = np.int64(end_ns if end_ns is not None else end.max())
    a, b = np.clip(ts, lo, hi), np.clip(end, lo, hi)
    inside = (b - a > 0) | ((dur == 0) & (ts >= lo) & (ts < hi))
    return a, b, inside


def _children_time(
    parent: np.ndarray, inside: np.ndarray, a: np.ndarray, b: np.ndarray
) -> np.ndarray:
    """Per slice, the union of its direct children's (clipped) time: what self time
    subtracts (siblings may overlap one another where a trace is not well nested)."""
    kids = np.flatnonzero((parent >= 0) & inside)
    kids = kids[np.lexsort((a[kids], parent[kids]))]
    parts = _union_parts(parent[kids], a[kids], b[kids])
    return np.bincount(parent[kids], weights=parts, minlength=len(parent))


def _device_time(
    trace: TraceData, on_device: np.ndarray, clipped: np.ndarray, parent: np.ndarray
) -> np.ndarray:
    """Per slice: for device ops their own (clipped) time; for host slices the time of
    the device ops launched from inside them (launch flows), at any depth."""
    n = len(clipped)
    device_time = np.where(on_device, clipped, 0).astype(np.float64)
    flows = trace.flows
    if not len(flows):
        return device_time
    launch = np.asarray(flows["type"] == "launch")
    src = flows["src"].to_numpy(np.int64)[launch]
    dst = flows["dst"].to_numpy(np.int64)[launch]
    ok = (src >= 0) & (src < n) & (dst >= 0) & (dst < n)
    src, dst = src[ok], dst[ok]
    launched = np.bincount(src, weights=clipped[dst], minlength=n)
    device_time = device_time + np.where(on_device, 0.0, launched)
    depth = trace.slices["depth"].to_numpy(np.int64)
    # Sum launched device time up the parent chain, deepest level first: one
    # vectorised step per depth level.
    for level in range(int(depth.max()), 0, -1):
        rows = np.flatnonzero((depth == level) & (parent >= 0) & ~on_device)
        if len(rows):
            device_time += (
                np.bincount(parent[rows], weights=device_time[rows], minlength=n) * ~on_device
            )
    return device_time


def _group_keys(
    s: pd.DataFrame, side: np.ndarray
) -> tuple[np.ndarray, Callable[[np.ndarray], dict[str, np.ndarray]]]:
    """Each slice's group, (name, kind, side) as one integer (a host annotation and its
    copy on a device are two rows), and the function turning group keys back into the
    ``name``, ``kind`` and ``side`` columns."""
    names = s["name"]
    if not isinstance(names.dtype, pd.CategoricalDtype):
        names = names.astype("category")
    name_codes = names.cat.codes.to_numpy().astype(np.int64)
    name_codes = np.where(name_codes < 0, len(names.cat.categories), name_codes)
    # Kinds numbered in the order of their text, each distinct kind once (not a string per
    # slice: 0.4 s and ~100 MB on a million slices); a missing kind reads "nan", as text.
    kinds = (
        s["kind"]
        if isinstance(s["kind"].dtype, pd.CategoricalDtype)
        else s["kind"].astype("category")
    )
    kind_text = np.append(kinds.cat.categories.astype(str).to_numpy(object), "nan")
    kind_values, kind_rank = np.unique(kind_text, return_inverse=True)
    kind_codes = kind_rank.reshape(-1)[kinds.cat.codes.to_numpy()]
    per_name = len(SIDES) * len(kind_values)  # (kind, side) pairs
    keys = name_codes * per_name + kind_codes.astype(np.int64) * len(SIDES) + side
    name_labels = np.append(names.cat.categories.astype(str).to_numpy(), "")

    def labels(present: np.ndarray) -> dict[str, np.ndarray]:
        return {
            "name": name_labels[present // per_name],
            "kind": kind_values[(present % per_name) // len(SIDES)],
            "side": np.asarray(SIDES, dtype=object)[present % len(SIDES)],
        }

    return keys, labels


def _time_once(
    group: np.ndarray, groups: int, track: np.ndarray, tracks: int, a: np.ndarray, b: np.ndarray
) -> np.ndarray:
    """Per group (``groups`` of them), the time its calls ran counted once: the union of
    its calls on each track (ids below ``tracks``), summed over tracks."""
    run = group.astype(np.int64) * tracks  # (group, track) as one key
    run += track
    by_track = np.lexsort((a, run))
    run = run[by_track]
    once = np.empty(len(group))
    once[by_track] = _union_parts(run, a[by_track], b[by_track])
    del run, by_track
    return np.bincount(group, weights=once, minlength=groups)


def _self_shares(out: pd.DataFrame) -> np.ndarray:
    """Each row's self time over its side's (host rows sum to 1, device rows sum to 1);
    "other" rows (profiler spans) get none (NaN)."""
    sides = out["side"].to_numpy()
    self_ns = out["self_ns"].to_numpy(np.float64)
    denom = np.zeros(len(out))
    for name in ("host", "device"):
        denom[sides == name] = self_ns[sides == name].sum()
    return np.divide(self_ns, denom, out=np.full(len(out), np.nan), where=denom > 0)


def _union_parts(run: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """What each interval adds to the union of its run's intervals. Elements must be
    sorted by (run, start); the parts of a run add up to the length of its union."""
    if len(run) == 0:
        return np.zeros(0)
    first = np.r_[True, run[1:] != run[:-1]]
    segment = np.cumsum(first)
    segment -= 1
    reach = segmented_running_max(end, segment)
    del segment
    before = np.empty_like(reach)
    before[1:] = reach[:-1]
    del reach
    before[first] = start[first]
    # max(end - max(start, before), 0), in place
    np.maximum(before, start, out=before)
    np.subtract(end, before, out=before)
    np.maximum(before, 0, out=before)
    return before.astype(np.float64)


def _inside_same_key(keys: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Whether each slice has an ancestor with the same key (a call nested in a call of
    the same name). One vectorised step per level of ancestry, over the slices still
    climbing."""
    out = np.zeros(len(keys), bool)
    live = np.flatnonzero(parent >= 0)
    anc = parent[live]
    while len(live):
        same = keys[anc] == keys[live]
        out[live[same]] = True
        up = parent[anc]
        keep = ~same & (up >= 0)
        live, anc = live[keep], up[keep]
    return out

"""One row per user source line: what the work it started cost.

Columns (ns are int64; a line only appears when something is attributed to it):

- ``host_ns``: *exclusive* host time of the line: each instant of each host thread goes to
  the deepest slice running then, and that slice's line gets it. Nested or overlapping
  slices are never counted twice, so the column sums to at most the threads' busy time.
- ``device_ns``: duration of the device work (kernels, copies, collectives) launched from
  the line — through the launching runtime call, see :mod:`explorer.analysis.attribution`.
- ``stall_ns``: host time blocked in synchronisations called from the line (outermost sync
  slices only: ``.item()`` → ``_local_scalar_dense`` → ``cudaStreamSynchronize`` counts once).
- ``copy_bytes``: bytes moved by device copies launched from the line (or by the collector's
  host-side copy events when the trace has no device copies).
- ``fallback_count``: CPU fallbacks recorded at the line; ``sync_count``: outermost syncs.
- ``count``: outermost operators (``cpu_op`` slices not inside another op) called there.

Sorted by ``host_ns + device_ns``, heaviest first. In a window of a trace
(:mod:`explorer.trace.window`), only the time inside the window counts: the slices that
enclose it keep their whole durations, and are clipped to it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from explorer.analysis.attribution import frame_codes
from explorer.analysis.breakdown import sweep
from explorer.analysis.classify import classes
from explorer.trace.memo import memoised
from explorer.trace.model import TraceData

BY_SOURCE_COLUMNS = [
    "file", "line", "function", "host_ns", "device_ns", "stall_ns",
    "copy_bytes", "fallback_count", "sync_count", "count",
]  # fmt: skip


@memoised("by_source", depends_on=("frame_codes", "launcher", "slice_classes"))
def by_source(trace: TraceData) -> pd.DataFrame:
    """Per user line: host, device and stall time, copy bytes, fallbacks, syncs, op count."""
    code, frames = frame_codes(trace)
    nf = len(frames)
    s = trace.slices
    if nf == 0:
        return pd.DataFrame({c: [] for c in BY_SOURCE_COLUMNS})
    ts, end = _times(trace)
    dur = end - ts
    parent = s["parent"].to_numpy(np.int64)
    on_dev = trace.on_device()
    host = trace.on_host()
    has_parent = parent >= 0

    def per_line(mask: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        m = mask & (code >= 0)
        w = None if weights is None else weights[m].astype(float)
        return np.bincount(code[m], weights=w, minlength=nf).astype(np.int64)

    # kinds compared per category, not per row (object compares over 1M slices: ~0.1 s)
    work_kinds = trace.kind_in("kernel", "memcpy", "memset", "collective")
    is_sync = classes(trace).host_sync
    # A sync inside another (aten::item under the collector's .item() event, with Python
    # frames between them) is the same wait: count the outermost only.
    under_sync = trace.inherit_down(is_sync, keep=is_sync)  # a sync or inside one
    in_sync = np.zeros(len(s), bool)
    in_sync[has_parent] = under_sync[parent[has_parent]]
    outer_sync = is_sync & host & ~in_sync
    is_op = classes(trace).operator
    parent_op = np.zeros(len(s), bool)
    parent_op[has_parent] = is_op[parent[has_parent]]
    memcpy = trace.kind_in("memcpy")
    copy_bytes_src = memcpy if memcpy.any() else trace.kind_in("copy")
    nbytes = np.maximum(s["bytes"].to_numpy(np.int64), 0)

    out = frames.copy()
    out["line"] = out["line"].astype(np.int64)
    out["host_ns"] = _exclusive_host_ns(trace, ts, end, code, host, nf)
    out["device_ns"] = per_line(on_dev & work_kinds, dur)
    out["stall_ns"] = per_line(outer_sync, dur)
    out["copy_bytes"] = per_line(copy_bytes_src, nbytes)
    out["fallback_count"] = per_line(trace.kind_in("fallback"))
    out["sync_count"] = per_line(outer_sync)
    out["count"] = per_line(is_op & ~parent_op & host)
    out = out.iloc[np.argsort(-(out["host_ns"] + out["device_ns"]).to_numpy(), kind="stable")]
    out = out.reset_index(drop=True)[BY_SOURCE_COLUMNS]
    return out


def _times(trace: TraceData) -> tuple[np.ndarray, np.ndarray]:
    """Each slice's start and end, clipped to the trace's window when it is one."""
    ts = trace.slices["ts"].to_numpy(np.int64)
    end = ts + trace.slices["dur"].to_numpy(np.int64)
    w = trace.window
    if w is None:
        return ts, end
    return np.clip(ts, w.start_ns, w.end_ns), np.clip(end, w.start_ns, w.end_ns)


def _exclusive_host_ns(
    trace: TraceData,
    starts: np.ndarray,
    ends: np.ndarray,
    code: np.ndarray,
    host: np.ndarray,
    nf: int,
) -> np.ndarray:
    """Per frame code, host time during which a slice of that line was the deepest running
    on its thread (:func:`exclusive_ns` summed by line)."""
    own = exclusive_ns(trace, host, starts, ends)
    ok = (own > 0) & (code >= 0)
    return np.bincount(code[ok], weights=own[ok], minlength=nf).astype(np.int64)


def exclusive_ns(
    trace: TraceData,
    mask: np.ndarray,
    starts: np.ndarray | None = None,
    ends: np.ndarray | None = None,
) -> np.ndarray:
    """Per slice (all ids; 0 outside ``mask``): the time it was the deepest slice of
    ``mask`` running on its thread. Nested slices are never counted twice, so over one
    thread the values sum to the time some slice of ``mask`` runs. One sweep over all
    tracks (shifted apart in time), then one search to find which slice of its depth holds
    each segment."""
    s = trace.slices
    if starts is None or ends is None:
        starts, ends = _times(trace)
    ids = np.flatnonzero(mask)
    out = np.zeros(len(s), np.int64)
    if len(ids) == 0:
        return out
    # (Every array here is per slice or per segment, a million of each: each one that is
    # not made, or is let go before the sweep, is 8-16 MB less at this analysis's peak.)
    ts = starts[ids]
    end = ends[ids]
    span = int(end.max()) - int(min(ts.min(), 0)) + 1
    shift = s["track"].to_numpy(np.int64)[ids] * span
    a = ts + shift
    b = end + shift
    del ts, end, shift
    depth = s["depth"].to_numpy()[ids]  # the table's narrow ints: widened where multiplied
    top = int(depth.max())
    bounds, seg = sweep(a, b, top - depth, top + 1)  # deeper slices win
    del b
    # Which slice of its depth holds each segment: the last of that depth to start at or
    # before it (ties: the latest id) — found for every depth in one search over the slices
    # ordered by (depth, start), where the times and depths pack into one int64 key.
    low = int(a.min())
    width = max(int(a.max()), int(bounds[-1])) - low + 1
    if (top + 1) * width < np.iinfo(np.int64).max // 2 and int(depth.min()) >= 0:
        mine = np.flatnonzero(seg >= 0)
        held = top - seg[mine]
        del seg
        seg_len = bounds[mine + 1] - bounds[mine]
        query = held * width + (bounds[mine] - low)
        del mine
        order = np.lexsort((a, depth))  # stable: equal starts stay in id order
        key = depth[order].astype(np.int64) * width + (a[order] - low)
        k = np.searchsorted(key, query, side="right") - 1
        del key, query
        ok = k >= 0
        ok[ok] = depth[order[k[ok]]] == held[ok]
        np.add.at(out, ids[order[k[ok]]], seg_len[ok])
        return out
    seg_len = np.diff(bounds)
    for d in range(top + 1):
        mine = np.flatnonzero(seg == top - d)
        if len(mine) == 0:
            continue
        at_d = np.flatnonzero(depth == d)
        order = at_d[np.argsort(a[at_d], kind="stable")]
        k = np.searchsorted(a[order], bounds[mine], side="right") - 1
        ok = k >= 0
        owner = ids[order[k[ok]]]
        np.add.at(out, owner, seg_len[mine][ok])
    return out

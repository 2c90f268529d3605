"""One row per user source line: what the work it started cost.

Columns (ns are int64; a line only appears when something is attributed to it):

- ``host_ns``: *self* time of host slices attributed to the line (a slice's duration
  minus its children's), so nested ops are never counted twice and the column sums to
  at most the host's busy time.
- ``device_ns``: duration of the device work (kernels, copies, collectives) launched from
  the line — through the launching runtime call, see :mod:`explorer.analysis.attribution`.
- ``stall_ns``: host time blocked in synchronisations called from the line (outermost sync
  slices only: ``.item()`` → ``_local_scalar_dense`` → ``cudaStreamSynchronize`` counts once).
- ``copy_bytes``: bytes moved by device copies launched from the line (or by the collector's
  host-side copy events when the trace has no device copies).
- ``fallback_count``: CPU fallbacks recorded at the line; ``sync_count``: outermost syncs.
- ``count``: outermost operators (``cpu_op`` slices not inside another op) called there.

Sorted by ``host_ns + device_ns``, heaviest first.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from explorer.analysis.attribution import frame_codes
from explorer.analysis.breakdown import SYNC_OPS, name_flags
from explorer.trace.model import TraceData

BY_SOURCE_COLUMNS = [
    "file", "line", "function", "host_ns", "device_ns", "stall_ns",
    "copy_bytes", "fallback_count", "sync_count", "count",
]  # fmt: skip


def by_source(trace: TraceData) -> pd.DataFrame:
    """Per user line: host, device and stall time, copy bytes, fallbacks, syncs, op count."""
    if "by_source" in trace.cache:
        return trace.cache["by_source"]
    code, frames = frame_codes(trace)
    nf = len(frames)
    s = trace.slices
    if nf == 0:
        out = pd.DataFrame({c: [] for c in BY_SOURCE_COLUMNS})
        trace.cache["by_source"] = out
        return out
    dur = s["dur"].to_numpy(np.int64)
    parent = s["parent"].to_numpy(np.int64)
    kind = s["kind"].to_numpy().astype(object)
    dev_track = np.zeros(int(trace.tracks["id"].max()) + 1, bool)
    dev_track[trace.device_tracks()["id"].to_numpy()] = True
    on_dev = dev_track[s["track"].to_numpy()]
    has_parent = parent >= 0

    child_sum = np.bincount(parent[has_parent], weights=dur[has_parent], minlength=len(s))
    self_ns = np.maximum(dur - child_sum.astype(np.int64), 0)

    def per_line(mask: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        m = mask & (code >= 0)
        w = None if weights is None else weights[m].astype(float)
        return np.bincount(code[m], weights=w, minlength=nf).astype(np.int64)

    work_kinds = np.isin(kind, ["kernel", "memcpy", "memset", "collective"])
    is_sync = (kind == "sync") | name_flags(trace, SYNC_OPS)
    parent_sync = np.zeros(len(s), bool)
    parent_sync[has_parent] = is_sync[parent[has_parent]]
    outer_sync = is_sync & ~on_dev & ~parent_sync
    is_op = kind == "cpu_op"
    parent_op = np.zeros(len(s), bool)
    parent_op[has_parent] = is_op[parent[has_parent]]
    copy_bytes_src = (kind == "memcpy") if (kind == "memcpy").any() else (kind == "copy")
    nbytes = np.maximum(s["bytes"].to_numpy(np.int64), 0)

    out = frames.copy()
    out["line"] = out["line"].astype(np.int64)
    out["host_ns"] = per_line(~on_dev, self_ns)
    out["device_ns"] = per_line(on_dev & work_kinds, dur)
    out["stall_ns"] = per_line(outer_sync, dur)
    out["copy_bytes"] = per_line(copy_bytes_src, nbytes)
    out["fallback_count"] = per_line(kind == "fallback")
    out["sync_count"] = per_line(outer_sync)
    out["count"] = per_line(is_op & ~parent_op & ~on_dev)
    out = out.iloc[np.argsort(-(out["host_ns"] + out["device_ns"]).to_numpy(), kind="stable")]
    out = out.reset_index(drop=True)[BY_SOURCE_COLUMNS]
    trace.cache["by_source"] = out
    return out

"""What the time a slice holds on the critical path is: the breakdown's reasons, per slice.

The path names its time with the same classifier the breakdown uses
(:func:`~explorer.analysis.breakdown.host_slice_reasons` and
:func:`~explorer.analysis.breakdown.device_slice_reasons`), so a ``gloo:all_reduce`` that is
communication in the breakdown is communication on the path, and compile time is compile
time in both. On a host thread a slice inherits the highest-priority reason of the slices
around it — an ``aten::mm`` run while dynamo traces the frame is compile time — as the
breakdown's sweep gives an instant the first reason that covers it.

The path adds one distinction the breakdown does not draw: a runtime call that launches
device work is launch overhead; one that launches nothing (``cudaMalloc``, ``cudaFree``,
``cudaGetDevice``...) is host runtime.
"""

from __future__ import annotations

import numpy as np

from explorer.analysis.breakdown import (
    DEVICE_REASONS,
    HOST_REASONS,
    device_slice_reasons,
    host_slice_reasons,
    name_flags,
)
from explorer.analysis.graph.edges import PATH_CATEGORIES
from explorer.analysis.graph.nodes import SliceArrays
from explorer.trace.kinds import COLLECTIVE
from explorer.trace.model import TraceData

#: Path category of each breakdown reason of host time.
HOST_REASON_CATEGORY: dict[str, str] = {
    "host_sync": "sync_wait",
    "host_compile": "compile",
    "host_fallback": "host_compute",
    "host_input": "host_compute",
    "host_comm": "communication",
    "host_copy": "data_movement",
    "host_compute": "host_compute",
    "host_busy": "host_compute",
}
#: Path category of each breakdown reason of device time.
DEVICE_REASON_CATEGORY: dict[str, str] = {
    "dev_compute": "device_compute",
    "dev_comm": "communication",
    "dev_copy": "data_movement",
    "dev_wait": "sync_wait",
}


def slice_categories(trace: TraceData, arrays: SliceArrays, launches: np.ndarray) -> np.ndarray:
    """Index into :data:`PATH_CATEGORIES` of the time each slice holds on the path.

    ``launches``: per slice, whether it is a runtime call that launches device work.
    """
    n = arrays.n
    out = np.full(n, PATH_CATEGORIES.index("host_compute"), np.int64)
    if n == 0:
        return out
    device_mode = bool(arrays.device.any())
    table = DEVICE_REASONS if device_mode else HOST_REASONS
    host_code = _inherited(host_slice_reasons(trace, device_mode), arrays.parent)
    lookup = np.array(
        [PATH_CATEGORIES.index(HOST_REASON_CATEGORY.get(r, "host_compute")) for r, _ in table]
        + [PATH_CATEGORIES.index("host_compute")],
        np.int64,
    )
    out[:] = lookup[host_code]  # code -1 -> the host_compute appended above
    # Runtime calls doing plain host work: launch overhead when they launch, else runtime.
    plain = np.isin(out, [PATH_CATEGORIES.index("host_compute")]) & (arrays.kind == "runtime")
    out[plain & launches] = PATH_CATEGORIES.index("launch_overhead")
    out[plain & ~launches] = PATH_CATEGORIES.index("host_runtime")
    # Device traces rank host time by the device's reasons, which have no host collective:
    # a gloo op on the host is communication all the same, as in a CPU trace's breakdown.
    comm = name_flags(trace, COLLECTIVE) | (arrays.kind == "collective")
    out[comm & np.isin(out, [PATH_CATEGORIES.index("host_compute")])] = PATH_CATEGORIES.index(
        "communication"
    )
    dev_code = device_slice_reasons(trace)
    dev_lookup = np.array(
        [
            PATH_CATEGORIES.index(DEVICE_REASON_CATEGORY.get(r, "device_compute"))
            for r, _ in DEVICE_REASONS
        ]
        + [PATH_CATEGORIES.index("device_compute")],
        np.int64,
    )
    on_device = arrays.device
    out[on_device] = dev_lookup[dev_code[on_device]]
    return out


def _inherited(code: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Each slice's code, or its nearest-priority ancestor's when that one ranks higher
    (a smaller non-negative code), as the breakdown's sweep ranks overlapping slices.
    Parents come before their children in id order; one pass per nesting level."""
    out = code.copy()
    rank = np.where(out >= 0, out, np.iinfo(np.int64).max)
    has_parent = np.flatnonzero(parent >= 0)
    if len(has_parent) == 0:
        return out
    # Walk down: a child takes its parent's rank when smaller. Repeating until nothing
    # changes covers any depth; each pass is one vectorised gather.
    p = parent[has_parent]
    while True:
        better = rank[p] < rank[has_parent]
        if not better.any():
            break
        rank[has_parent[better]] = rank[p[better]]
    return np.where(rank == np.iinfo(np.int64).max, -1, rank)

"""What the time on the critical path is: the breakdown's reasons, instant by instant.

The path names its time with the same classifier the breakdown uses
(:func:`~explorer.analysis.breakdown.host_slice_reasons` and
:func:`~explorer.analysis.breakdown.device_slice_reasons`), so a ``gloo:all_reduce`` that is
communication in the breakdown is communication on the path, and compile time is compile
time in both: on a host thread, an instant is what the breakdown's sweep says it is on
that thread (an ``aten::mm`` run while dynamo traces the frame is compile time).

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
    sweep,
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


def time_categories(
    trace: TraceData,
    arrays: SliceArrays,
    owner: np.ndarray,
    at_ns: np.ndarray,
    launches: np.ndarray,
) -> np.ndarray:
    """Index into :data:`PATH_CATEGORIES` of the time slice ``owner[i]`` holds at instant
    ``at_ns[i]``.

    On a host thread it is the breakdown's reason for that instant on that thread: the
    highest-priority reason among the slices covering it there (:func:`sweep` over
    :func:`host_slice_reasons`, one thread at a time) — so an op run while dynamo traces a
    frame is compile time, as in the breakdown, whatever the parent column says. A device
    slice is what :func:`device_slice_reasons` says it is. ``launches``: per slice, whether
    it launched device work (a runtime call that did is launch overhead, one that did not
    is host runtime).
    """
    owner = np.asarray(owner, np.int64)
    at_ns = np.asarray(at_ns, np.int64)
    host_compute = PATH_CATEGORIES.index("host_compute")
    out = np.full(len(owner), host_compute, np.int64)
    if len(owner) == 0 or arrays.n == 0:
        return out
    device_mode = bool(arrays.device.any())
    table = DEVICE_REASONS if device_mode else HOST_REASONS
    lookup = np.array(
        [PATH_CATEGORIES.index(HOST_REASON_CATEGORY.get(r, "host_compute")) for r, _ in table]
        + [host_compute],
        np.int64,
    )
    code = host_slice_reasons(trace, device_mode)
    on_host = arrays.host[owner]
    for track in np.unique(arrays.track[owner[on_host]]):
        q = np.flatnonzero(on_host & (arrays.track[owner] == track))
        mine = np.flatnonzero((arrays.track == track) & (code >= 0))
        bounds, seg = sweep(arrays.ts[mine], arrays.end[mine], code[mine], len(table))
        i = np.searchsorted(bounds, at_ns[q], side="right") - 1
        ok = (i >= 0) & (i < len(seg))
        c = np.full(len(q), -1, np.int64)
        c[ok] = seg[i[ok]]
        out[q] = lookup[c]  # -1 -> the host_compute appended above
    # A host collective is communication in device traces too (the device's reasons rank
    # host time without one), as it is in a CPU trace's breakdown.
    comm = name_flags(trace, COLLECTIVE)[owner] | (arrays.kind[owner] == "collective")
    out[on_host & comm & (out == host_compute)] = PATH_CATEGORIES.index("communication")
    # Runtime calls doing plain host work: launch overhead when they launch, else runtime.
    plain = on_host & (out == host_compute) & (arrays.kind[owner] == "runtime")
    out[plain & launches[owner]] = PATH_CATEGORIES.index("launch_overhead")
    out[plain & ~launches[owner]] = PATH_CATEGORIES.index("host_runtime")
    dev_lookup = np.array(
        [
            PATH_CATEGORIES.index(DEVICE_REASON_CATEGORY.get(r, "device_compute"))
            for r, _ in DEVICE_REASONS
        ]
        + [PATH_CATEGORIES.index("device_compute")],
        np.int64,
    )
    on_device = arrays.device[owner]
    out[on_device] = dev_lookup[device_slice_reasons(trace)[owner[on_device]]]
    return out

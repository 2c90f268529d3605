"""Device-side edges: runtime call -> the device op it launched, and the order of ops on
each device stream or queue."""

from __future__ import annotations

import numpy as np
import pandas as pd

from explorer.analysis.graph.edges import END, START, EdgeList
from explorer.analysis.graph.nodes import SliceArrays


def launches(edges: EdgeList, arrays: SliceArrays, launcher: np.ndarray) -> None:
    """Runtime call start -> device op start (the launch delay), and, where the call only
    returned after a copy or memset it launched finished (a synchronous ``cudaMemcpy``, a
    pageable ``cudaMemcpyAsync``), copy end -> call end: the host waited for it. (A kernel
    that finishes before its launch call returns was fast, not waited for.)"""
    dst = np.flatnonzero(launcher >= 0)
    src = launcher[dst]
    ok = arrays.node[src] & arrays.node[dst]
    src, dst = src[ok], dst[ok]
    edges.add("launch", src, dst, START, START)
    is_copy = arrays.kind_in(("memcpy", "memset"), dst)
    blocking = (arrays.end[dst] <= arrays.end[src]) & arrays.device[dst] & is_copy
    edges.add("sync", dst[blocking], src[blocking], END, END)


def device_work_mask(arrays: SliceArrays) -> np.ndarray:
    """Device nodes that are work (not waits): kernels, copies, memsets, collectives."""
    return arrays.node & arrays.device & ~arrays.kind_in(("sync",))


def stream_order(edges: EdgeList, arrays: SliceArrays) -> None:
    """Consecutive ops on each device stream/queue track: a stream runs its work in order.

    Slices on a device track with no stream (CUDA's per-device row of ``Event Sync`` and
    ``Context Sync`` records) are not ordered against each other.
    """
    ids = np.flatnonzero(arrays.node & arrays.device & (arrays.stream >= 0))
    if len(ids) < 2:
        return
    ids = ids[np.lexsort((arrays.ts[ids], arrays.track[ids]))]
    same = arrays.track[ids[1:]] == arrays.track[ids[:-1]]
    a, b = ids[:-1][same], ids[1:][same]
    edges.add("stream_order", a, b, np.where(arrays.end[a] <= arrays.ts[b], END, START), START)


#: A launch call lasting this many times its name's unblocked duration (the 10th
#: percentile: when the device is far behind, most launches block) was blocked...
QUEUE_BLOCK_FACTOR = 4
#: ...and it was released by the device op that finished at most this long before it
#: returned (or its name's unblocked duration, when longer).
QUEUE_RELEASE_NS = 5_000


def queue_backpressure(
    edges: EdgeList,
    arrays: SliceArrays,
    launcher: np.ndarray,
    name_codes: np.ndarray,
    work: np.ndarray,
) -> None:
    """A launch blocked on a full device queue: op end -> launch call end (type ``queue``).

    A runtime's launch queue is bounded; when the device is far behind, a launch call waits
    until an earlier op finishes and frees a slot. The trace shows it as a launch call many
    times longer than its name's unblocked duration that returns just after some device op
    ends. Both
    conditions are required, so a launch that merely overlaps a kernel's end gets no edge.
    """
    launched = np.flatnonzero(launcher >= 0)
    calls = np.unique(launcher[launched])
    calls = calls[arrays.node[calls] & arrays.host[calls]]
    if len(calls) == 0:
        return
    dur = arrays.end[calls] - arrays.ts[calls]
    codes = name_codes[calls]
    usual = pd.Series(dur).groupby(codes).transform(lambda d: d.quantile(0.1)).to_numpy()
    long = dur > QUEUE_BLOCK_FACTOR * np.maximum(usual, 1)
    calls, usual = calls[long], usual[long]
    if len(calls) == 0:
        return
    from explorer.analysis.graph.sync_edges import last_ending

    cand = np.flatnonzero(work)
    release = np.maximum(usual, QUEUE_RELEASE_NS)
    lo = np.maximum(arrays.ts[calls], arrays.end[calls] - release)
    src = last_ending(
        cand, arrays.end[cand], arrays.stream[cand], np.full(len(calls), -1), lo, arrays.end[calls]
    )
    ok = src >= 0
    edges.add("queue", src[ok], calls[ok], END, END)

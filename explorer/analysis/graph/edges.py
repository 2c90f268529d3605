"""Edges of the dependency graph, and the one place that knows what each type costs.

An edge joins two *points* in time: the start or the end of a slice. ``src -> dst`` means
"``dst`` could not happen before ``src``". Its ``weight`` is the time that passes along it,
``t(dst point) - t(src point)``, never negative — so any path through the graph is contiguous
in time and its length is exactly the time from its first point to its last. A host
thread is one chain: an edge from each start or end on it to the next, typed by what the
thread was in between (a leaf's ``duration``, a parent's time before, between or after its
children, idle); each device op has its ``duration`` edge.

What makes one path *critical* among paths of equal length is how much of it is waiting
rather than work: :data:`WAIT_TYPES` edges (idle gaps, launch queueing, syncs) cost their
weight when the critical path picks its route, and so does the own time of a wait, of a
call blocked on the device, and of an annotation or Python frame (see
:func:`~explorer.analysis.critical_path.path_costs`); work costs nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from explorer.analysis.graph.nodes import id_dtype
from explorer.trace.order import lexsort

START = np.int8(0)
END = np.int8(1)

#: Every edge type, in the order of the ``type`` column's categories.
EDGE_TYPES: tuple[str, ...] = (
    "duration",  # a leaf slice's own start -> end; a device op's start -> end
    "nest",  # parent start -> first child start; last child end -> parent end (self time)
    "sibling",  # one child's end -> the next child's start inside a parent (self time)
    "thread_order",  # one top-level op's end -> the next's start on a host thread (idle gap)
    "launch",  # runtime call start -> the device op it launched (launch delay)
    "stream_order",  # device op end -> next op start on the same stream/queue (device idle)
    "cross_stream",  # event recorded on one stream -> the op that waited for it on another
    "sync",  # device op end -> end of the host call that blocked on it
    "queue",  # device op end -> end of a launch call blocked on the full launch queue
    "fwdbwd",  # forward op -> its backward op (autograd)
    "data",  # Execution Trace tensor: producer op -> consumer op
    "runtime_lock",  # a launch on one thread released -> a launch on another thread starts
    "handoff",  # a track recording nothing -> the first work on another track in that time
    "handback",  # ... that track's last work in that time -> the end of the waiting stretch
)
# Explorer's collector records its copy, sync and fallback events on the thread that made
# them, around (or, for fallbacks, at) the ops they serve, so they join the graph through
# nesting and thread order like any host slice; an ``explorer_sync`` is a host sync call.

#: Edge types whose time is waiting, not work: they cost their weight on the critical path.
WAIT_TYPES: frozenset[str] = frozenset(
    {
        "thread_order",
        "launch",
        "stream_order",
        "cross_stream",
        "sync",
        "fwdbwd",
        "data",
        "runtime_lock",
        "handoff",
        "handback",
    }
)

#: Edge types inferred from what was busy rather than recorded as a dependency: a track that
#: records nothing may have waited for work elsewhere meanwhile
#: (:mod:`~explorer.analysis.graph.thread_edges`). The critical path may follow them; a
#: what-if replay must not delay anything by them.
INFERRED_TYPES: frozenset[str] = frozenset({"handoff", "handback"})

#: Critical-path summary categories; every path edge lands in exactly one. What a slice's
#: time is comes from the breakdown's classifier (:mod:`explorer.analysis.graph.categories`).
PATH_CATEGORIES: tuple[str, ...] = (
    "host_compute",
    "compile",
    "input",  # the input pipeline: DataLoader / input code, as the breakdown's host_input
    "host_runtime",  # runtime calls that launch nothing: allocation, queries, device setup
    "launch_overhead",
    "device_compute",
    "data_movement",
    "communication",
    "sync_wait",
    "idle_gap",
)

#: Category of edge types whose time does not belong to one slice's kind.
TYPE_CATEGORY: dict[str, str] = {
    "thread_order": "idle_gap",
    "launch": "launch_overhead",
    "stream_order": "idle_gap",
    "cross_stream": "sync_wait",
    "sync": "sync_wait",
    "queue": "sync_wait",
    "fwdbwd": "idle_gap",
    "data": "idle_gap",
    "runtime_lock": "launch_overhead",
    # "handoff", "handback": what the waiting track was doing then, as the breakdown says
    # (:func:`~explorer.analysis.critical_path._categorised`); idle on a device stream
}


@dataclass
class EdgeList:
    """Edges collected from the builders as arrays, turned into one table at the end."""

    src: list[np.ndarray] = field(default_factory=list)
    dst: list[np.ndarray] = field(default_factory=list)
    src_point: list[np.ndarray] = field(default_factory=list)
    dst_point: list[np.ndarray] = field(default_factory=list)
    type: list[np.ndarray] = field(default_factory=list)

    def add(self, kind: str, src, dst, src_point, dst_point) -> None:  # noqa: ANN001
        """Add edges of one type; points may be scalars (START/END) or arrays. Slice ids
        are kept as int32 until :meth:`to_frame` (held from the first builder to the
        last: half the bytes, :func:`~explorer.analysis.graph.nodes.id_dtype`); ids too wide
        for int32 stay int64."""
        src, dst = _ids(src), _ids(dst)  # as given where integers: no int64 copy between
        n = len(src)
        if n == 0:
            return
        ids_as = id_dtype(max(int(src.max()), int(dst.max())))
        src, dst = src.astype(ids_as, copy=False), dst.astype(ids_as, copy=False)
        self.src.append(src)
        self.dst.append(dst)
        self.src_point.append(np.broadcast_to(np.asarray(src_point, np.int8), n).copy())
        self.dst_point.append(np.broadcast_to(np.asarray(dst_point, np.int8), n).copy())
        self.type.append(np.full(n, EDGE_TYPES.index(kind), np.int8))

    def to_frame(self, ts: np.ndarray, end: np.ndarray) -> tuple[pd.DataFrame, int]:
        """One table of all edges with weights; edges that would run back in time are
        re-anchored at the source's start when that makes them consistent, else dropped.

        Returns the table and how many edges were dropped (clock skew in the trace). The
        builders' arrays are let go once joined (the list is empty after), the ids stay
        in the builders' width until packed, the points' times go before the packing, and
        each temporary the packing needs is let go as soon as it is used: on the synthetic
        1M-event trace (1.6M edges) the join took 107 MB over the builders' arrays where
        it now takes about half — the peak of the graph's build, the viewer's highest.
        """
        if not self.src:
            src = dst = np.empty(0, np.int64)
            sp = dp = codes = np.empty(0, np.int8)
        else:
            src, dst = np.concatenate(self.src), np.concatenate(self.dst)
            sp, dp = np.concatenate(self.src_point), np.concatenate(self.dst_point)
            codes = np.concatenate(self.type)
            for parts in (self.src, self.dst, self.src_point, self.dst_point, self.type):
                parts.clear()
        keep = _forward_in_time(src, sp, dst, dp, ts, end)
        dropped = int(len(keep) - np.count_nonzero(keep))
        # The same two points joined twice (e.g. a launch seen both as a flow and by
        # correlation): keep the first type listed. In (src, src point, dst, dst point,
        # type) order.
        columns: list[np.ndarray] = [src, sp, dst, dp, codes]
        del src, sp, dst, dp, codes  # the packing lets go of each as it is used
        packed = _packed_edges(len(ts), columns, keep)
        if packed is not None:
            src, sp, dst, dp, codes = packed
        else:
            src, sp, dst, dp, codes = (a[keep] for a in columns)
            columns.clear()
            src, dst = src.astype(id_dtype(len(ts))), dst.astype(id_dtype(len(ts)))
            key = lexsort((codes, dp, dst, sp, src))
            src, dst, sp, dp, codes = (a[key] for a in (src, dst, sp, dp, codes))
            dup = np.zeros(len(src), bool)
            if len(src) > 1:
                dup[1:] = (
                    (src[1:] == src[:-1])
                    & (dst[1:] == dst[:-1])
                    & (sp[1:] == sp[:-1])
                    & (dp[1:] == dp[:-1])
                )
            src, dst, sp, dp, codes = (a[~dup] for a in (src, dst, sp, dp, codes))
        del keep
        weight = point_times(dst, dp, ts, end)
        weight -= point_times(src, sp, ts, end)
        frame = pd.DataFrame(
            {
                "src": src,
                "dst": dst,
                "type": pd.Categorical.from_codes(codes, categories=list(EDGE_TYPES)),
                "weight": weight.astype(np.int64, copy=False),
                "src_point": sp,
                "dst_point": dp,
            },
            copy=False,  # fresh arrays: not copied again into one block (0.08 s on 1.6M)
        )
        return frame, dropped


def _ids(values: object) -> np.ndarray:
    """Slice ids as an integer array: ``values`` itself when it is one (an int32 gather of
    the points' slices stays int32 until narrowed or kept), else as int64. Copied to int64
    first, the hand-offs' ids were the graph build's peak (2 x 8 bytes an edge)."""
    a = np.asarray(values)
    return a if a.dtype.kind in "iu" else a.astype(np.int64)


def _forward_in_time(
    src: np.ndarray,
    sp: np.ndarray,
    dst: np.ndarray,
    dp: np.ndarray,
    ts: np.ndarray,
    end: np.ndarray,
) -> np.ndarray:
    """Which edges to keep: those that run forward in time, once an edge back in time
    from its source's end is re-anchored at the source's start where that fits (``sp``
    is changed in place), and that join two different points. :data:`TIMES_CHUNK` edges
    at a time: their points' times were two arrays of the edges' length at the join."""
    keep = np.empty(len(src), bool)
    for lo in range(0, len(src), TIMES_CHUNK):
        part = slice(lo, lo + TIMES_CHUNK)
        s_ids, s_pts, d_ids = src[part], sp[part], dst[part]
        t_src, t_dst = point_times(s_ids, s_pts, ts, end), point_times(d_ids, dp[part], ts, end)
        late = np.flatnonzero(t_src > t_dst)
        if len(late):  # back in time from its source's end: from its start, if that fits
            at_start = ts[s_ids[late]]
            fits = late[at_start <= t_dst[late]]
            s_pts[fits] = START  # a view of ``sp``
            t_src[fits] = ts[s_ids[fits]]
        keep[part] = (t_src <= t_dst) & ~((s_ids == d_ids) & (s_pts == dp[part]))
    return keep


#: Edges :func:`_forward_in_time` times at a time.
TIMES_CHUNK = 1 << 18


def point_times(ids: np.ndarray, points: np.ndarray, ts: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The time of each point: slice ``ids[i]``'s end where ``points[i]`` is :data:`END`,
    else its start — gathered in place (``np.where`` over both gathers held three arrays of
    the edges' length)."""
    out = ts[ids]
    at_end = np.flatnonzero(points == END)
    out[at_end] = end[ids[at_end]]
    return out


def _packed_edges(
    n: int, columns: list[np.ndarray], keep: np.ndarray
) -> tuple[np.ndarray, ...] | None:
    """The edges ``keep`` picks of ``columns`` (src, src point, dst, dst point, type), in
    (src, src point, dst, dst point, type) order, the first type of each pair of points
    only, as ``(src, sp, dst, dp, codes)``: each edge packed into one int64 and the keys
    sorted (numpy's vectorised sort of plain integers: a fifth of a five-key stable
    argsort on 1.6M edges). ``columns`` is emptied as the key is built, in place, so that
    no column outlives its part of it. None (``columns`` untouched) when the slice ids are
    too wide to pack."""
    bits = max(int(n).bit_length(), 1)
    type_bits = max(len(EDGE_TYPES) - 1, 1).bit_length()
    if 2 * bits + 2 + type_bits > 63:
        return None
    key = columns.pop(0)[keep].astype(np.int64)
    for shift in (1, bits, 1, type_bits):  # then sp, dst, dp, codes below the bits so far
        key <<= shift
        key |= columns.pop(0)[keep]
    key.sort(kind="stable")  # timsort: the edges come in runs in order (0.10 -> 0.005 s on 1.6M)
    first = np.ones(len(key), bool)
    if len(key) > 1:  # a new pair of points where the bits above the type differ
        first[1:] = np.bitwise_xor(key[1:], key[:-1]) >> type_bits != 0
    key = key[first]
    del first
    # each column read off the key's low bits, the key shifted down in place after
    codes = key.astype(np.int8) & np.int8((1 << type_bits) - 1)
    key >>= type_bits
    dp = key.astype(np.int8) & np.int8(1)
    key >>= 1
    ids_as = id_dtype(n)  # low bits first: no int64 temporary for the narrower ids
    dst = key.astype(ids_as) & ids_as((1 << bits) - 1)
    key >>= bits
    sp = key.astype(np.int8) & np.int8(1)
    key >>= 1
    return key.astype(ids_as, copy=False), sp, dst, dp, codes

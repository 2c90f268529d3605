"""Host-side edges: each thread as one chain through time (durations, nesting, the order
of ops), forward -> backward, and the runtime lock that serialises launches from several
threads."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from explorer.analysis.graph.edges import END, START, EdgeList
from explorer.analysis.graph.nodes import SliceArrays, id_dtype
from explorer.trace.order import lexsort_ties, stable_argsort

#: A launch that starts this soon after another thread's launch returns is taken to have
#: waited for the runtime's lock (the CUDA runtime serialises launches per context).
RUNTIME_LOCK_GAP_NS = 1_000

_LAUNCH_CALL = r"Launch|launch|Memcpy|Memset|memcpy|memset|enqueue|runFunction"


@dataclass(frozen=True)
class ThreadPoints:
    """Every start and end of some host slices, in order per thread: by track, then time
    (at one instant: ends before starts, inner ends before outer ones, outer starts before
    inner ones, a zero-length slice's end just after its start). ``slice``/``is_end``/
    ``t``/``track`` per point."""

    slice: np.ndarray
    is_end: np.ndarray
    t: np.ndarray
    track: np.ndarray

    def track_ranges(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(track, lo, hi)``: the points of ``track[i]`` are ``[lo[i], hi[i])`` (they
        are sorted by track: one pass, no sort)."""
        n = len(self.track)
        if n == 0:
            none = np.zeros(0, np.int64)
            return self.track[:0], none, none
        lo = np.flatnonzero(np.r_[True, self.track[1:] != self.track[:-1]])
        return self.track[lo], lo, np.r_[lo[1:], n].astype(np.int64)

    def last_before(self, track: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Index of the last point on ``track`` before ``t`` (an end at ``t`` counts, a
        start at ``t`` does not), or -1."""
        out = np.full(len(t), -1, np.int64)
        ends_so_far = np.r_[0, np.cumsum(self.is_end)]
        for tr in np.unique(track):
            lo, hi = np.searchsorted(self.track, [tr, tr + 1])
            q = np.flatnonzero(track == tr)
            first_at = lo + np.searchsorted(self.t[lo:hi], t[q], side="left")
            past_at = lo + np.searchsorted(self.t[lo:hi], t[q], side="right")
            # At one instant the ends come first: step over them.
            k = first_at + (ends_so_far[past_at] - ends_so_far[first_at]) - 1
            ok = k >= lo
            out[q[ok]] = k[ok]
        return out

    def first_after(self, track: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Index of the first point on ``track`` at or after ``t``, or -1."""
        out = np.full(len(t), -1, np.int64)
        for tr in np.unique(track):
            lo, hi = np.searchsorted(self.track, [tr, tr + 1])
            q = np.flatnonzero(track == tr)
            k = lo + np.searchsorted(self.t[lo:hi], t[q], side="left")
            ok = k < hi
            out[q[ok]] = k[ok]
        return out


def thread_points(arrays: SliceArrays, ids: np.ndarray) -> ThreadPoints:
    """The points of slices ``ids``, sorted per thread (see :class:`ThreadPoints`).

    Sorted by track and time; the tie-breakers at one instant are made for the tied
    points only (:func:`~explorer.trace.order.lexsort_ties`), and each column is let go
    once gathered in order: on the synthetic 1M-event trace this took ~95 MB over its
    result, the largest of the graph's builders, where it now takes about half."""
    ids = np.asarray(ids, np.int64)
    k = len(ids)
    # slice and track ids as int32 where they fit: the chains and the hand-offs hold two
    # sets of points at once (~100 MB of them on a million slices in int64)
    ids_as = id_dtype(arrays.n)
    pt_slice = np.concatenate([ids, ids]).astype(ids_as, copy=False)
    is_end = np.r_[np.zeros(k, bool), np.ones(k, bool)]
    t = np.concatenate([arrays.ts[ids], arrays.end[ids]])
    track = np.tile(arrays.track[ids].astype(ids_as, copy=False), 2)

    def tie_breakers(rows: np.ndarray) -> list[np.ndarray]:
        # At one instant: ends first (the later-started, inner one first), then starts
        # (the longer, outer one first); a zero-length slice's end right after its start.
        end_ = rows >= k  # rows [0, k) are the starts of ``ids``, [k, 2k) their ends
        sid = ids[rows - k * end_]
        start_, dur = arrays.ts[sid], arrays.end[sid] - arrays.ts[sid]
        group = np.where(end_ & (dur > 0), 0, 1)
        inner_first = np.where(group == 0, -start_, -dur)
        return [np.where(end_, -sid, sid), end_, inner_first, group]

    order = lexsort_ties(track, t, tie_breakers)
    # each column freed as soon as its ordered copy exists
    slices = pt_slice[order]
    del pt_slice
    ends = is_end[order]
    del is_end
    times = t[order]
    del t
    tracks = track[order]
    del track
    return ThreadPoints(slices, ends, times, tracks)


def stretch_owner(after: np.ndarray, point_slice: np.ndarray, is_end: np.ndarray) -> np.ndarray:
    """The slice whose own time follows each point on its thread (-1: the thread is idle):
    ``after[slice, 0]`` after a slice's start (the slice itself, unless it lasts no
    time), ``after[slice, 1]`` after its end — as :func:`thread_chains` returns them."""
    return after[point_slice, np.asarray(is_end, np.int64)]


def innermost_open(points: ThreadPoints) -> np.ndarray:
    """Per point, the slice whose own time follows it: of the slices open on its thread
    just after it, the one that started last (-1: none open, the thread is idle).

    Exact for any overlaps, without a stack: in the order of their starts, it is the last
    slice started at or before the point that ends after it — found for every point at
    once by binary lifting over a range-maximum table of the slices' end positions.
    """
    nested = _innermost_if_nested(points)
    return nested if nested is not None else _innermost_by_search(points)


def _innermost_by_search(points: ThreadPoints) -> np.ndarray:
    """:func:`innermost_open` for any overlaps: the binary lifting its docstring tells."""
    n = len(points.slice)
    # Start and end position of every slice (the points are in order: positions).
    # Slice ids are small non-negative ints: a presence table and a lookup rank them in
    # linear time (a hash-based np.unique of a million ids took 0.65 s).
    present = np.zeros(int(points.slice.max()) + 1 if n else 0, bool)
    present[points.slice] = True
    ids = np.flatnonzero(present)
    lookup = np.cumsum(present) - 1
    rank = lookup[points.slice]
    # positions as int32 where they fit: the range-maximum table below holds a copy of
    # the ends per level (21 levels of a million slices: 84 MB rather than 168)
    pos = id_dtype(n)
    pos_start = np.empty(len(ids), pos)
    pos_end = np.empty(len(ids), pos)
    pos_start[rank[~points.is_end]] = np.flatnonzero(~points.is_end)
    pos_end[rank[points.is_end]] = np.flatnonzero(points.is_end)
    by_start = np.argsort(pos_start, kind="stable")
    si, ei, slices = pos_start[by_start], pos_end[by_start], ids[by_start]
    # Just after its start a slice is the last one started and still open (it ends later):
    # a start's answer is its own slice, so only the ends are searched.
    out = points.slice.copy()
    k = np.flatnonzero(points.is_end).astype(pos)
    r = np.searchsorted(si, k, side="right").astype(pos)  # slices [0, r) started by k
    # table[L][i] = max(ei[i : i + 2**L]); skip whole blocks from the right that all end
    # by k: what is left ends with the last slice still open after k.
    table = [ei]
    while (1 << len(table)) <= len(ei):
        prev = table[-1]
        half = 1 << (len(table) - 1)
        table.append(np.maximum(prev[:-half], prev[half:]))
    for level in range(len(table) - 1, -1, -1):
        size = 1 << level
        can = r >= size
        block_max = np.full(len(k), np.iinfo(pos).max, pos)
        block_max[can] = table[level][r[can] - size]
        r = np.where(can & (block_max <= k), r - size, r)
    ok = r > 0
    ok[ok] = ei[r[ok] - 1] > k[ok]
    out[k] = np.where(ok, slices[np.maximum(r - 1, 0)], -1)
    return out


def _innermost_if_nested(points: ThreadPoints) -> np.ndarray | None:
    """:func:`innermost_open` where every thread's slices nest properly (what a profiler
    records nearly always): None where some overlap without nesting.

    Then each thread's points are balanced brackets, and just after an end the innermost
    open slice is the one started last at the depth left open: per end, one binary search
    among the starts ordered by (depth, position) — two sorts, where the general search
    takes a pass per level of a range-maximum table (0.2 s on 1M events). Nesting is
    proper exactly when every end closes the slice started last at its own depth, which
    the same search checks.
    """
    n = len(points.slice)
    if n == 0:
        return None
    step = np.where(points.is_end, np.int8(-1), np.int8(1))
    # after each point (threads are balanced: 0 between them); int32 where it fits
    depth = np.cumsum(step, dtype=id_dtype(n))
    del step
    starts = np.flatnonzero(~points.is_end)
    ends = np.flatnonzero(points.is_end)
    if len(starts) != len(ends) or depth.min() < 0:
        return None
    # Cheap first (most overlapping traces fail it): a slice ends at the depth it began.
    began = np.zeros(int(points.slice.max()) + 1, np.int64)
    began[points.slice[starts]] = depth[starts]
    if not np.array_equal(began[points.slice[ends]], depth[ends] + 1):
        return None
    by_depth = starts[stable_argsort(depth[starts])]
    key = depth[by_depth].astype(np.int64) * (n + 1) + by_depth  # int64: depth may be int32

    def last_start(level: np.ndarray, before: np.ndarray) -> np.ndarray:
        """Per query, the last start before position ``before`` with depth ``level`` (-1)."""
        at = np.searchsorted(key, level.astype(np.int64) * (n + 1) + before) - 1
        found = at >= 0
        found[found] = depth[by_depth[at[found]]] == level[found]
        return np.where(found, by_depth[np.maximum(at, 0)], -1)

    # Proper nesting: each end closes the slice started last at the depth it closes.
    closes = last_start(depth[ends] + 1, ends)
    if (
        not np.array_equal(points.slice[np.maximum(closes, 0)], points.slice[ends])
        or (closes < 0).any()
    ):
        return None
    out = points.slice.copy()
    open_at = last_start(depth[ends], ends)
    out[ends] = np.where(open_at >= 0, points.slice[np.maximum(open_at, 0)], -1)
    return out


def host_points(arrays: SliceArrays) -> ThreadPoints:
    """The points of the graph's host slices, sorted per thread: the host threads' chains
    (:func:`thread_chains`) and their waiting stretches read the same sort."""
    return thread_points(arrays, np.flatnonzero(arrays.node & arrays.host))


def with_points(points: ThreadPoints, arrays: SliceArrays, ids: np.ndarray) -> ThreadPoints:
    """``points`` with the points of slices ``ids`` added, in the order :func:`thread_points`
    gives them: where no track has points of both, one stable sort by track of the two
    sorted sets (within a track the order is one set's own); else all sorted again."""
    more = thread_points(arrays, ids)
    if np.intersect1d(points.track_ranges()[0], more.track_ranges()[0]).size:
        return thread_points(arrays, np.concatenate([np.sort(points.slice[~points.is_end]), ids]))
    # No track in both: each track's points are one set's run, and the merged order is
    # those runs by track id, joined per column (an argsort of the joined tracks and a
    # gather of each joined column held ~40 MB more on the synthetic 1M-event trace).
    sets = (points, more)
    runs = sorted(
        (int(track), which, int(lo), int(hi))
        for which, p in enumerate(sets)
        for track, lo, hi in zip(*p.track_ranges(), strict=True)
    )

    def joined(column: str) -> np.ndarray:
        parts = [getattr(sets[which], column)[lo:hi] for _, which, lo, hi in runs]
        return np.concatenate(parts or [getattr(points, column)[:0]])

    return ThreadPoints(joined("slice"), joined("is_end"), joined("t"), joined("track"))


def thread_chains(
    edges: EdgeList,
    arrays: SliceArrays,
    until: int | None = None,
    points: ThreadPoints | None = None,
) -> np.ndarray:
    """Each host thread as one chain through time: an edge from every start or end of a
    slice on it to the next one (and each device op's ``duration``). Between two points the thread is in one stretch — a
    leaf's duration (``duration``), a parent's time before its first child or after its
    last (``nest``), between two children (``sibling``), or idle between top-level slices
    (``thread_order``).

    Nothing the thread did can be skipped: a route along the thread passes through every
    slice it ran, however the slices overlap (the Python tracer records frames that start
    inside one annotation and end inside the next), so a container never stands in for
    the work inside it.

    With ``until`` (a step's end), the chains stop there: what a thread does after the
    step — the rest of a frame that began in it — is not the step's.

    Returns ``after``: per slice, whose own time follows its start (``[:, 0]``) and its
    end (``[:, 1]``) — the innermost slice open (:func:`innermost_open`): after an end
    the parent, or, where slices overlap rather than nest, whichever started last.
    """
    if points is None:
        points = host_points(arrays)
    first = np.r_[True, points.track[1:] != points.track[:-1]]
    own = innermost_open(points)
    after = np.full((arrays.n, 2), -1, id_dtype(arrays.n))
    after[points.slice, points.is_end.astype(np.int64)] = own

    # positions as int32 where they fit (the chain's edges are the largest builder's)
    k = np.flatnonzero(~first[1:]).astype(id_dtype(len(first)), copy=False)
    del first
    if until is not None:
        k = k[points.t[k + 1] <= until]
    a, a_end = points.slice[k], points.is_end[k]
    b, b_end = points.slice[k + 1], points.is_end[k + 1]
    owner = own[k]
    own_leaf = (a == b) & ~a_end & b_end
    nest = ~own_leaf & (a_end == b_end)
    sibling = ~own_leaf & ~nest & (owner >= 0)
    idle = ~own_leaf & ~nest & (owner < 0)
    for kind, m in (
        ("duration", own_leaf),
        ("nest", nest),
        ("sibling", sibling),
        ("thread_order", idle),
    ):
        edges.add(kind, a[m], b[m], np.where(a_end[m], END, START), np.where(b_end[m], END, START))
    # Device ops (and anything else off the host threads) are their own durations.
    off_host = np.flatnonzero(arrays.node & ~arrays.host)
    edges.add("duration", off_host, off_host, START, END)
    after[off_host, 0] = off_host
    return after


def forward_backward(edges: EdgeList, arrays: SliceArrays, flows: pd.DataFrame) -> None:
    """Forward op -> backward op, from ``fwdbwd`` flows, else from autograd sequence numbers
    (the forward op is the first slice with a number; the backward op is the first slice on
    another thread that carries the same number after it)."""
    node = arrays.node
    if len(flows):
        fb = np.asarray(flows["type"] == "fwdbwd")
        if fb.any():
            src = flows["src"].to_numpy(np.int64)[fb]
            dst = flows["dst"].to_numpy(np.int64)[fb]
            ok = node[src] & node[dst]
            edges.add("fwdbwd", src[ok], dst[ok], END, START)
            return
    ids = np.flatnonzero(node & arrays.host & (arrays.seq >= 0))
    if len(ids) < 2:
        return
    order = np.lexsort((arrays.ts[ids], arrays.seq[ids]))
    ids = ids[order]
    seq, track = arrays.seq[ids], arrays.track[ids]
    group_start = np.ones(len(ids), bool)
    group_start[1:] = seq[1:] != seq[:-1]
    head = np.maximum.accumulate(np.where(group_start, np.arange(len(ids)), 0))
    fwd = ids[head]
    other_thread = track != track[head]
    # The first slice of each group on another thread: its backward op.
    cand = np.flatnonzero(other_thread)
    if len(cand) == 0:
        return
    first_in_group = np.ones(len(cand), bool)
    first_in_group[1:] = head[cand[1:]] != head[cand[:-1]]
    bwd = cand[first_in_group]
    edges.add("fwdbwd", fwd[bwd], ids[bwd], END, START)


def launch_call_mask(names: pd.Categorical) -> np.ndarray:
    """True for slices whose name is a launch-type runtime call; decided once per name."""
    cats = pd.Series(names.categories.astype(str))
    hit = np.append(cats.str.contains(_LAUNCH_CALL, regex=True).to_numpy(), False)
    return hit[names.codes]  # code -1 (no name) -> the False appended above


def runtime_lock(edges: EdgeList, arrays: SliceArrays, is_launch_call: np.ndarray) -> None:
    """A launch-type runtime call that starts within :data:`RUNTIME_LOCK_GAP_NS` of another
    thread's launch call returning waited for the runtime's lock: edge end -> start."""
    calls = np.flatnonzero(
        arrays.node & arrays.host & arrays.kind_in(("runtime",)) & is_launch_call
    )
    if len(calls) < 2 or len(np.unique(arrays.track[calls])) < 2:
        return
    calls = calls[np.argsort(arrays.ts[calls], kind="stable")]
    a, b = calls[:-1], calls[1:]
    gap = arrays.ts[b] - arrays.end[a]
    hit = (arrays.track[a] != arrays.track[b]) & (gap >= 0) & (gap <= RUNTIME_LOCK_GAP_NS)
    edges.add("runtime_lock", a[hit], b[hit], END, START)

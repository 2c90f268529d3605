"""Which sibling row ("lane") of its track each slice goes on, so that every row is
properly nested.

Perfetto and Chrome draw a track as a stack of begin/end pairs: a slice that starts inside
another but ends after it cannot be drawn there. Real traces have such slices (clock
rounding between back-to-back kernels, async annotations on a thread), and dropping or
clipping them would hide time. They go onto sibling rows of the same track instead.

A slice goes on its parent's lane when it nests there (the parent from
:func:`explorer.trace.nesting.nest`, the nearest slice that contains it), so a
``ProfilerStep#N`` that begins inside a Python frame and outlives it moves to a sibling lane
*with* the forward and backward work it contains, and stays the bar above them.

Checking costs a few vectorised passes; only the stretches of a track where an overlap was
found are walked (a greedy first-fit over lanes, the parent's lane first), so a clean
million-slice trace never enters the Python loop — and in such a stretch only the slices
that cross another are walked one by one (:func:`_first_fit`): with Python stacks one
stretch is a whole thread, and walking all its slices took 2 s of an export of a
1M-slice trace made of the shared H100 trace, for a few dozen crossings.
"""

from __future__ import annotations

import numpy as np

from explorer.trace.nesting import improperly_nested, range_reduce, segmented_running_max


def assign_lanes(
    track: np.ndarray, ts: np.ndarray, dur: np.ndarray, parent: np.ndarray | None = None
) -> np.ndarray:
    """Lane of each slice (0 = the track's own row). Sorted by ``(track, ts, -dur)``.

    Every lane of every track is properly nested; no slice is dropped or shortened.
    Where a track is already well nested every slice stays in lane 0. ``parent`` (slice
    ids in the same order, -1 for none) makes each slice try its parent's lane first.
    """
    track = np.asarray(track)
    ts = np.asarray(ts, np.int64)
    end = ts + np.asarray(dur, np.int64)
    n = len(ts)
    lanes = np.zeros(n, np.int32)
    bad = improperly_nested(track, ts, end)
    if not bad.any():
        return lanes
    # Cut each track into stretches where nothing is open across the cut, and re-lay only
    # the stretches holding an overlap. A parent is open when its children start, so it
    # is always in their stretch.
    new_track = np.ones(n, bool)
    new_track[1:] = track[1:] != track[:-1]
    open_until = segmented_running_max(end, np.cumsum(new_track) - 1)
    cut = new_track.copy()
    cut[1:] |= ts[1:] >= open_until[:-1]
    bounds = np.r_[np.flatnonzero(cut), n]
    stretch = np.cumsum(cut) - 1
    parent = np.full(n, -1, np.int64) if parent is None else np.asarray(parent, np.int64)
    for s in np.unique(stretch[bad]):
        lo, hi = int(bounds[s]), int(bounds[s + 1])
        local = parent[lo:hi] - lo
        lanes[lo:hi] = _first_fit(
            ts[lo:hi], end[lo:hi], np.where(local >= 0, local, -1), bad[lo:hi]
        )
    return lanes


def _first_fit(
    ts: np.ndarray, end: np.ndarray, parent: np.ndarray, bad: np.ndarray | None = None
) -> np.ndarray:
    """Greedy lanes for one stretch: each slice goes on its parent's lane (``parent`` is a
    position in the stretch, -1 for none) when it nests there, else on the first lane
    where it nests. ``bad``: per slice, whether a later-starting one escapes it
    (:func:`~explorer.trace.nesting.improperly_nested`; found here when not given).

    Only the slices that cross — escape another, or are escaped from — are walked; the
    others get their lane from their parent's, which is where the walk over every slice
    (:func:`_first_fit_walk`) puts them: a slice that escapes nothing nests in whatever is
    open on its parent's lane when it starts, and one that nothing escapes from decides
    nothing for the slices after it (whatever is under it on its lane ends no earlier, and
    nothing starting inside it outlasts it).
    """
    n = len(ts)
    if bad is None:
        bad = improperly_nested(np.zeros(n, np.int64), ts, end)
    crossing = bad | _escapers(ts, end, bad)
    # per slice, itself when it crosses, else its nearest crossing ancestor (-1: none):
    # pointer doubling, each pass twice as far up (log of the depth passes, not the depth)
    up = np.where(crossing, np.arange(n), parent)
    while True:
        live = np.flatnonzero(up >= 0)
        live = live[~crossing[up[live]]]
        if len(live) == 0:
            break
        up[live] = up[up[live]]
    walked = np.flatnonzero(crossing)
    out = np.zeros(n, np.int32)
    if len(walked):
        above = np.where(parent[walked] >= 0, up[np.maximum(parent[walked], 0)], -1)
        lanes = _first_fit_walk(ts[walked], end[walked], _local(above, walked))
        out[walked] = lanes
    clean = np.flatnonzero(~crossing & (up >= 0))
    out[clean] = out[up[clean]]
    return out


def _escapers(ts: np.ndarray, end: np.ndarray, bad: np.ndarray) -> np.ndarray:
    """Per slice (sorted by ``(ts, -dur)``): does it escape another — start inside a
    slice that ends before it does? Only a ``bad`` one can be escaped from, so: is there a
    bad slice earlier in the order ending in ``(ts, end)`` of this one? The bad slices
    ordered by their ends put those in one range per slice, and the range's earliest
    slice answers (a range-minimum table over the bad slices only): linear in the slices,
    where checking the slices inside each bad one costs a whole thread per top frame."""
    out = np.zeros(len(ts), bool)
    x = np.flatnonzero(bad)
    if len(x) == 0:
        return out
    by_end = np.argsort(end[x], kind="stable")
    ends, first = end[x][by_end], x[by_end]
    lo = np.searchsorted(ends, ts, side="right")  # bad ones ending after the slice starts
    hi = np.searchsorted(ends, end, side="left")  # ... and before it ends
    q = np.flatnonzero(hi > lo)
    if len(q) == 0:
        return out
    out[q] = range_reduce(first, lo[q], hi[q], np.minimum) < q
    return out


def _local(ids: np.ndarray, among: np.ndarray) -> np.ndarray:
    """Positions of ``ids`` (each one of ``among``, ascending, or -1) in ``among``."""
    out = np.full(len(ids), -1, np.int64)
    ok = ids >= 0
    out[ok] = np.searchsorted(among, ids[ok])
    return out


def _first_fit_walk(ts: np.ndarray, end: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """:func:`_first_fit` by walking every slice: each goes on its parent's lane
    (``parent``: a position, -1 for none) when it nests there, else on the first lane
    where it nests."""
    stacks: list[list[int]] = []
    out = np.empty(len(ts), np.int32)
    for i, (t, e, p) in enumerate(zip(ts.tolist(), end.tolist(), parent.tolist(), strict=True)):
        preferred = int(out[p]) if p >= 0 else 0
        order = [preferred, *(k for k in range(len(stacks)) if k != preferred)]
        for lane in order:
            if lane >= len(stacks):
                continue
            stack = stacks[lane]
            while stack and stack[-1] <= t:
                stack.pop()
            if not stack or stack[-1] >= e:
                stack.append(e)
                out[i] = lane
                break
        else:
            stacks.append([e])
            out[i] = len(stacks) - 1
    return out

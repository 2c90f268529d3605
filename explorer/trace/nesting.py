"""Nesting of slices on their tracks (depth and parent), the rows a timeline draws them
on, and "which slice encloses this time" look-ups — vectorised, because every trace has
up to millions of slices.

Slices must be sorted by ``(track, ts, -dur)`` first. A slice's parent is the nearest
slice that contains it in time: the last slice before it, in that order, on its track
that ends no earlier than it does. Real traces are not always well nested — with Python
stacks a ``ProfilerStep#N`` annotation starts inside a 7 µs
``<built-in method _record_function_enter_new>`` frame and outlives it — so "the slice
that was open when it started" is not good enough: a slice that only partly overlaps
another never becomes its child. Because parents precede their children and every
subtree is a contiguous run of that order, the parent links are also a preorder forest.
"""

from __future__ import annotations

import numpy as np


def nest(track: np.ndarray, ts: np.ndarray, dur: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Depth (int16) and parent id (int64, -1 for top level) of each slice.

    The parent of slice ``j`` is the last earlier slice ``i`` on its track (in
    ``(track, ts, -dur)`` order, so ``ts_i <= ts_j``) with ``end_i >= end_j``: the nearest
    slice that fully contains it. Zero-length slices are leaves, and nest in a slice only
    when they fall strictly before its end (``[ts, end)`` is half open).

    This is the "previous greater element" search, solved with pointer jumping instead of
    a sequential stack. Top-level slices are found first (nothing earlier on the track
    ends late enough: a running maximum). Every other slice holds a pointer ``q`` such
    that nothing between ``q`` and itself can be its parent; when the slice at ``q`` is
    not a parent either, the search jumps to that slice's parent (if known) or to that
    slice's own pointer, since nothing in between ends late enough. Pointers double their
    reach each round, so the loop runs O(log n) rounds of vectorised work, never one per
    slice.
    """
    n = len(ts)
    if n == 0:
        return np.empty(0, np.int16), np.empty(0, np.int64)
    track = np.asarray(track)
    ts = np.asarray(ts, np.int64)
    end = ts + np.asarray(dur, np.int64)
    need = end + (end == ts)  # a parent must end at or after this
    first = np.r_[True, track[1:] != track[:-1]]
    open_until = np.empty(n, np.int64)  # latest end of the earlier slices on the track
    open_until[1:] = segmented_running_max(end, np.cumsum(first) - 1)[:-1]
    open_until[first] = np.iinfo(np.int64).min
    parent = np.full(n, -1, np.int64)
    resolved = open_until < need
    q = np.arange(-1, n - 1, dtype=np.int64)
    active = np.flatnonzero(~resolved)
    del open_until, first
    while len(active):
        c = q[active]
        hit = end[c] >= need[active]
        parent[active[hit]] = c[hit]
        resolved[active[hit]] = True
        miss, c = active[~hit], c[~hit]
        q[miss] = np.where(resolved[c], parent[c], q[c])
        active = miss
    return depth_of(parent).astype(np.int16), parent


def depth_of(parent: np.ndarray) -> np.ndarray:
    """Depth (int64) of each node of a forest given by parent ids (-1 for roots), by
    pointer jumping: O(log depth) vectorised rounds."""
    depth = (parent >= 0).astype(np.int64)
    anc = parent.copy()
    live = np.flatnonzero(anc >= 0)
    while len(live):
        a = anc[live]
        step, up = depth[a], anc[a]
        depth[live] += step
        anc[live] = up
        live = live[up >= 0]
    return depth


def timeline_rows(
    track: np.ndarray, depth: np.ndarray, ts: np.ndarray, dur: np.ndarray
) -> np.ndarray:
    """The row (int64, 0 = top) of its track each slice is drawn on.

    Rows follow the nesting: every slice is on a row below its parent's (all rows of depth
    ``d`` come before those of depth ``d + 1``), and no two slices on one row overlap. A
    depth whose slices never overlap is one row; where slices of one depth do overlap (a
    ``ProfilerStep#N`` that begins inside a Python frame and outlives it is that frame's
    cousin, not its child) that depth gets as many rows as it needs, assigned first-fit.
    Only the stretches holding an overlap are walked slice by slice.
    """
    n = len(ts)
    out = np.zeros(n, np.int64)
    if n == 0:
        return out
    track = np.asarray(track, np.int64)
    depth = np.asarray(depth, np.int64)
    ts = np.asarray(ts, np.int64)
    end = ts + np.asarray(dur, np.int64)
    # Group by (track, depth), starts ascending within a group.
    order = np.lexsort((ts, depth, track))
    g_track, g_depth, g_ts, g_end = track[order], depth[order], ts[order], end[order]
    new = np.r_[True, (g_track[1:] != g_track[:-1]) | (g_depth[1:] != g_depth[:-1])]
    group = np.cumsum(new) - 1
    open_until = segmented_running_max(g_end, group)
    overlaps = np.zeros(n, bool)
    overlaps[1:] = ~new[1:] & (g_ts[1:] < open_until[:-1])
    sub = np.zeros(n, np.int64)
    if overlaps.any():
        # Stretches of a group with nothing open across their start; re-lay the ones
        # holding an overlap.
        cut = new.copy()
        cut[1:] |= g_ts[1:] >= open_until[:-1]
        stretch = np.cumsum(cut) - 1
        bounds = np.r_[np.flatnonzero(cut), n]
        for s in np.unique(stretch[overlaps]):
            lo, hi = bounds[s], bounds[s + 1]
            sub[lo:hi] = _first_free(g_ts[lo:hi], g_end[lo:hi])
    # Rows per (track, depth) group, then each group's first row within its track.
    n_groups = int(group[-1]) + 1
    height = np.ones(n_groups, np.int64)
    np.maximum.at(height, group, sub + 1)
    first_group = np.flatnonzero(new)
    track_start = np.r_[True, g_track[first_group][1:] != g_track[first_group][:-1]]
    before = np.cumsum(height) - height
    base = before - np.maximum.accumulate(np.where(track_start, before, 0))
    out[order] = base[group] + sub
    return out


def segmented_running_max(values: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Running maximum of ``values`` that restarts at every new ``group`` (sorted ids):
    one accumulate over the values lifted by ``group * span``."""
    lo = int(values.min())
    span = int(values.max()) - lo + 1
    if span * (int(group[-1]) + 1) < 2**62:
        lifted = (values - lo) + group * span
        return np.maximum.accumulate(lifted) - group * span + lo
    # Too wide to lift by value without overflow: lift by rank instead.
    distinct, rank = np.unique(values, return_inverse=True)
    span = len(distinct)
    lifted = rank.reshape(-1) + group * span
    return distinct[np.maximum.accumulate(lifted) - group * span]


def _first_free(ts: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Greedy rows for one stretch of overlapping slices: each slice takes the first row
    whose last slice has ended by its start (optimal for intervals)."""
    row_end: list[int] = []
    out = np.empty(len(ts), np.int64)
    for i, (t, e) in enumerate(zip(ts.tolist(), end.tolist(), strict=True)):
        for r, last in enumerate(row_end):
            if last <= t:
                row_end[r] = e
                out[i] = r
                break
        else:
            row_end.append(e)
            out[i] = len(row_end) - 1
    return out


def enclosing(
    track: np.ndarray,
    ts: np.ndarray,
    end: np.ndarray,
    parent: np.ndarray,
    q_track: np.ndarray,
    q_ts: np.ndarray,
) -> np.ndarray:
    """For each query (track, time), the deepest slice on that track containing the time
    (``ts <= t <= end``), or -1. Slices sorted by (track, ts) as in the model."""
    out = np.full(len(q_ts), -1, np.int64)
    if len(ts) == 0 or len(q_ts) == 0:
        return out
    # Last slice starting at or before t on the same track.
    cand = np.full(len(q_ts), -1, np.int64)
    for t in np.unique(q_track):
        lo, hi = np.searchsorted(track, t, "left"), np.searchsorted(track, t, "right")
        if hi == lo:
            continue
        sel = np.flatnonzero(q_track == t)
        k = np.searchsorted(ts[lo:hi], q_ts[sel], side="right") - 1
        cand[sel] = np.where(k >= 0, lo + k, -1)
    # Walk up until the candidate contains t.
    cur = cand
    for _ in range(int(np.iinfo(np.int16).max)):
        live = cur >= 0
        if not live.any():
            break
        bad = live & (end[np.clip(cur, 0, None)] < q_ts)
        if not bad.any():
            break
        cur = np.where(bad, parent[np.clip(cur, 0, None)], cur)
    return cur


def after(track: np.ndarray, ts: np.ndarray, q_track: np.ndarray, q_ts: np.ndarray) -> np.ndarray:
    """For each query, the first slice on that track starting at or after the time, or -1
    (Chrome's binding for flow ends that do not say ``bp: e``)."""
    out = np.full(len(q_ts), -1, np.int64)
    for t in np.unique(q_track):
        lo, hi = np.searchsorted(track, t, "left"), np.searchsorted(track, t, "right")
        if hi == lo:
            continue
        sel = np.flatnonzero(q_track == t)
        k = np.searchsorted(ts[lo:hi], q_ts[sel], side="left")
        out[sel] = np.where(k < hi - lo, lo + k, -1)
    return out

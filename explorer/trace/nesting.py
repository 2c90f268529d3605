"""Nesting of slices on their tracks (depth and parent), the rows a timeline draws them
on, and "which slice encloses this time" look-ups — vectorised, because every trace has
up to millions of slices.

Slices must be sorted by ``(track, ts, -dur)`` first. A slice's parent is the nearest
slice that fully contains it in time. Real traces are not always well nested — with
Python stacks a ``ProfilerStep#N`` annotation starts inside a 7 µs
``<built-in method _record_function_enter_new>`` frame and outlives it, and the training
function's frame starts inside ``ProfilerStep#0`` and outlives it — so "the slice that
was open when it started" is not good enough: a slice that only partly overlaps another
never becomes its child, and of two containers that partly overlap each other the
shorter one is the parent.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

#: Slices nested at once: slices are nested in groups of about this many, because the
#: search holds ~150 bytes per slice it works on and its random reads stay in the CPU's
#: caches (a track of millions of slices nested whole took 25x the time of one of 10x
#: fewer: 1.5 s against 0.06 s at 6.7M and 0.67M slices).
NEST_GROUP = 1 << 18


def nest(track: np.ndarray, ts: np.ndarray, dur: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Depth (int16) and parent id (int64, -1 for top level) of each slice (see
    :func:`_nest`), a group of slices at a time. A group starts where a track does, or
    where nothing earlier on the track is still open (:func:`independent_starts`): a
    slice's parent is on its own track and open at its start, so the groups' answers are
    the whole trace's."""
    n = len(ts)
    if n <= NEST_GROUP:
        return _nest(track, ts, dur)
    track = np.asarray(track)
    starts = independent_starts(track, ts, dur)
    depth = np.empty(n, np.int16)
    parent = np.empty(n, np.int64)
    lo = 0
    while lo < n:
        if lo + NEST_GROUP >= n:
            hi = n
        else:
            k = int(np.searchsorted(starts, lo + NEST_GROUP, "right")) - 1
            hi = int(starts[k]) if starts[k] > lo else _next_start(starts, lo, n)
        d, p = _nest(track[lo:hi], ts[lo:hi], dur[lo:hi])
        depth[lo:hi] = d
        parent[lo:hi] = np.where(p >= 0, p + lo, -1)
        lo = hi
    return depth, parent


def independent_starts(track: np.ndarray, ts: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """The slices (sorted by ``(track, ts, -dur)``) before which nothing on their track is
    still open — the first of each track, and each one that every earlier slice on its
    track has ended by (at or before its start) — in order: no slice from one of them on
    has a parent before it, so nesting can be cut there."""
    ts = np.asarray(ts, np.int64)
    end = ts + np.asarray(dur, np.int64)
    first = np.r_[True, track[1:] != track[:-1]]
    open_until = np.empty(len(ts), np.int64)  # latest end of the earlier slices on the track
    open_until[1:] = segmented_running_max(end, np.cumsum(first) - 1)[:-1]
    del end
    return np.flatnonzero(first | (open_until <= ts))


def _next_start(starts: np.ndarray, lo: int, n: int) -> int:
    """The first track start after ``lo`` (``n`` when none)."""
    k = int(np.searchsorted(starts, lo, "right"))
    return int(starts[k]) if k < len(starts) else n


def _nest(track: np.ndarray, ts: np.ndarray, dur: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Depth (int16) and parent id (int64, -1 for top level) of each slice.

    The parent of slice ``j`` is the shortest slice on its track that contains it
    (``ts_i <= ts_j`` and ``end_j <= end_i``, earlier in ``(track, ts, -dur)`` order; of
    equally long ones the latest). Zero-length slices are leaves, and nest in a slice only
    when they fall strictly before its end (``[ts, end)`` is half open).

    First the latest container: the "previous greater element" search, solved with pointer
    jumping instead of a sequential stack. Top-level slices are found first (nothing
    earlier on the track ends late enough: a running maximum). Every other slice holds a
    pointer ``q`` such that nothing between ``q`` and itself can contain it; when the
    slice at ``q`` does not either, the search jumps to that slice's parent (if known) or
    to that slice's own pointer, since nothing in between ends late enough. Pointers
    double their reach each round, so the loop runs O(log n) rounds of vectorised work,
    never one per slice.

    On a well-nested track the latest container is the shortest. A shorter container
    that is not an ancestor is a slice that something escapes from (still open at the
    later slice's start, ended before its end); the search lands on every such slice
    (from the earliest slice escaping it: everything in between lies inside it, so no
    jump passes over it), and :func:`_shortest_containers` checks only those.
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
    resolved = open_until < need  # top level
    # Top-level slices that escape something search too, only to mark what they escape.
    q = np.arange(-1, n - 1, dtype=np.int64)
    active = np.flatnonzero(~resolved | (open_until > ts))
    del open_until, first
    escaped = np.zeros(n, bool)
    while len(active):
        c = q[active]
        hit = end[c] >= need[active]
        parent[active[hit]] = c[hit]
        resolved[active[hit]] = True
        miss, c = active[~hit], c[~hit]
        escaped[c[end[c] > ts[miss]]] = True
        nxt = np.where(resolved[c], parent[c], q[c])
        q[miss] = nxt
        active = miss[nxt >= 0]
    if escaped.any():
        _shortest_containers(track, ts, end, need, parent, np.flatnonzero(escaped))
    return depth_of(parent).astype(np.int16), parent


#: Candidate (container, slice) pairs checked at once by :func:`_shortest_containers`.
_PAIRS_PER_CHUNK = 1 << 21


def _shortest_containers(
    track: np.ndarray,
    ts: np.ndarray,
    end: np.ndarray,
    need: np.ndarray,
    parent: np.ndarray,
    crossers: np.ndarray,
) -> None:
    """Replace latest containers by shortest ones, in place, where one of the
    ``crossers`` (the slices something escapes from) is a shorter container. Each
    crosser is checked against the slices starting inside it: on the Python-stack samples
    about two pairs per slice."""
    last = np.empty(len(crossers), np.int64)  # last slice starting inside the crosser
    c_track = track[crossers]
    for t in np.unique(c_track):
        lo, hi = np.searchsorted(track, t, "left"), np.searchsorted(track, t, "right")
        sel = c_track == t
        last[sel] = lo + np.searchsorted(ts[lo:hi], end[crossers[sel]], "left") - 1
    span = last - crossers
    dur = end - ts
    # A crosser can only be a shorter container when something longer starts inside it
    # (that slice escapes it and holds the slices that may move): the longest slice
    # starting inside each crosser, one maximum.reduceat over the ranges.
    has = span > 0
    crossers, span = crossers[has], span[has]
    if len(crossers) == 0:
        return
    bounds = np.empty(2 * len(crossers), np.int64)
    bounds[0::2] = crossers + 1
    bounds[1::2] = crossers + 1 + span
    longest = np.maximum.reduceat(np.append(dur, 0), bounds)[0::2]
    useful = longest > dur[crossers]
    crossers, span = crossers[useful], span[useful]
    # Rank the crossers shortest first, latest first among equals: per slice the
    # smallest rank is the one to take, a minimum.at over the pairs.
    by_rank = crossers[np.lexsort((-crossers, dur[crossers]))]
    rank = np.empty(len(ts), np.int64)
    rank[by_rank] = np.arange(len(by_rank))
    # Chunks of about _PAIRS_PER_CHUNK pairs (a chunk starts where its first crosser's
    # pairs start), so memory stays bounded whatever the trace.
    chunk = (np.cumsum(span) - span) // _PAIRS_PER_CHUNK
    cuts = np.r_[0, np.flatnonzero(chunk[1:] != chunk[:-1]) + 1, len(crossers)]
    best = np.full(len(ts), len(by_rank), np.int64)
    for start, stop in zip(cuts[:-1].tolist(), cuts[1:].tolist(), strict=True):
        k = np.repeat(crossers[start:stop], span[start:stop])
        offsets = np.repeat(np.cumsum(span[start:stop]) - span[start:stop], span[start:stop])
        j = k + 1 + (np.arange(len(k)) - offsets)
        ok = end[k] >= need[j]
        np.minimum.at(best, j[ok], rank[k[ok]])
    j = np.flatnonzero(best < len(by_rank))
    k = by_rank[best[j]]
    p = parent[j]  # the latest container, always there when another one is
    take = (dur[k] < dur[p]) | ((dur[k] == dur[p]) & (k > p))
    parent[j[take]] = k[take]


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


def improperly_nested(track: np.ndarray, ts: np.ndarray, end: np.ndarray) -> np.ndarray:
    """True for each slice that a later-starting slice on its track escapes from.

    Slices must be sorted by ``(track, ts, -dur)``. Slice ``i`` is clean when every slice
    starting inside it (``ts_i <= ts_j < end_i``, later in order) also ends by ``end_i``:
    a range-maximum query over ``end``, answered with a sparse table built level by level
    so memory stays O(n).
    """
    n = len(ts)
    if n == 0:
        return np.zeros(0, bool)
    # Last index starting before end_i on the same track (searchsorted per track).
    last = np.empty(n, np.int64)
    bounds = np.flatnonzero(np.diff(track)) + 1
    starts = np.concatenate([[0], bounds])
    stops = np.concatenate([bounds, [n]])
    for lo, hi in zip(starts, stops, strict=True):
        last[lo:hi] = lo + np.searchsorted(ts[lo:hi], end[lo:hi], side="left") - 1
    first = np.arange(1, n + 1, dtype=np.int64)  # queries cover [i + 1, last_i]
    bad = np.zeros(n, bool)
    q = np.flatnonzero(last >= first)
    if len(q) == 0:
        return bad
    ends = np.asarray(end, np.int64)
    bad[q] = range_reduce(ends, first[q], last[q] + 1, np.maximum) > ends[q]
    return bad


def range_reduce(values: np.ndarray, lo: np.ndarray, hi: np.ndarray, op: np.ufunc) -> np.ndarray:
    """``op`` (``np.maximum`` or ``np.minimum``) over each ``values[lo[i]:hi[i]]`` (none
    empty): a sparse table built level by level, each query answered at its level by the
    two overlapping blocks of the largest power of two it holds — O(n) memory, a pass per
    level."""
    out = np.empty(len(lo), values.dtype)
    if len(lo) == 0:
        return out
    level = np.frexp(hi - lo)[1] - 1  # floor(log2(length)), exact below 2**53
    table = values
    for k in range(int(level.max()) + 1):
        if k:
            step = 1 << (k - 1)
            table = op(table[:-step], table[step:])
        at = level == k
        if at.any():
            out[at] = op(table[lo[at]], table[hi[at] - (1 << k)])
    return out


def timeline_rows(
    track: np.ndarray, depth: np.ndarray, ts: np.ndarray, dur: np.ndarray
) -> np.ndarray:
    """The row (int64, 0 = top) of its track each slice is drawn on. Slices sorted by
    ``(track, ts, -dur)``, ``depth`` from :func:`nest`.

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
    # Group by (track, depth), starts ascending within a group (the slices are sorted by
    # track and start already, so a stable sort on the group key is enough).
    order = np.argsort(track * (int(depth.max()) + 1) + depth, kind="stable")
    g_track, g_depth, g_ts, g_end = track[order], depth[order], ts[order], end[order]
    new = np.r_[True, (g_track[1:] != g_track[:-1]) | (g_depth[1:] != g_depth[:-1])]
    group = np.cumsum(new) - 1
    open_until = segmented_running_max(g_end, group)
    overlaps = np.zeros(n, bool)
    overlaps[1:] = ~new[1:] & (g_ts[1:] < open_until[:-1])
    if not overlaps.any():
        return depth.copy()  # one row per depth
    # Stretches of a group with nothing open across their start; re-lay the ones holding
    # an overlap.
    sub = np.zeros(n, np.int64)
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
        # in place: two arrays of the values' length rather than six
        offset = group.astype(np.int64, copy=False) * span
        lifted = values.astype(np.int64)
        lifted -= lo
        lifted += offset
        np.maximum.accumulate(lifted, out=lifted)
        lifted -= offset
        del offset
        lifted += lo
        return lifted
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
    pos, lo, _ = _insertion_on_track(track, ts, q_track, q_ts, "right")
    cand = np.where(pos > lo, pos - 1, -1)
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
    pos, _, hi = _insertion_on_track(track, ts, q_track, q_ts, "left")
    return np.where(pos < hi, pos, -1)


def _insertion_on_track(
    track: np.ndarray,
    ts: np.ndarray,
    q_track: np.ndarray,
    q_ts: np.ndarray,
    side: Literal["left", "right"],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each query (track, time): where the time would be inserted among its track's
    slices (``np.searchsorted`` with ``side``, as an index into the whole (track, ts)-sorted
    table), and that track's ``[lo, hi)`` rows — one search per distinct track."""
    lo = np.searchsorted(track, q_track, "left").astype(np.int64)
    hi = np.searchsorted(track, q_track, "right").astype(np.int64)
    pos = lo.copy()
    for t in np.unique(q_track):
        sel = np.flatnonzero(q_track == t)
        a, b = lo[sel[0]], hi[sel[0]]
        if b > a:
            pos[sel] = a + np.searchsorted(ts[a:b], q_ts[sel], side=side)
    return pos, lo, hi

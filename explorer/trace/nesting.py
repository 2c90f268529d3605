"""Nesting of slices on their tracks (depth and parent), and "which slice encloses this
time" look-ups — vectorised, because every trace has up to millions of slices.

Slices must be sorted by ``(track, ts, -dur)`` first. Depth comes from a sweep over start
and end boundaries (a running count of open slices); the parent of a slice at depth ``d``
is the latest slice before it on its track at depth ``d - 1``.
"""

from __future__ import annotations

import numpy as np


def nest(track: np.ndarray, ts: np.ndarray, dur: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Depth (int16) and parent id (int64, -1 for top level) of each slice.

    Zero-length slices are leaves: they open nothing. Slices that overlap without nesting
    (which a well-formed track never has) are treated as nested in the earlier one.
    """
    n = len(ts)
    if n == 0:
        return np.empty(0, np.int16), np.empty(0, np.int64)
    pos = np.arange(n, dtype=np.int64)
    opens = dur > 0
    # Boundary events: every slice's start (+1 when it opens) and every opening slice's end
    # (-1). At equal (track, time), ends come before starts; starts keep slice order.
    o_idx = pos[opens]
    b_track = np.concatenate([track, track[o_idx]])
    b_time = np.concatenate([ts, ts[o_idx] + dur[o_idx]])
    b_is_start = np.concatenate([np.ones(n, np.int8), np.zeros(len(o_idx), np.int8)])
    b_pos = np.concatenate([pos, o_idx])
    b_delta = np.concatenate([opens.astype(np.int64), -np.ones(len(o_idx), np.int64)])
    order = np.lexsort((b_pos, b_is_start, b_time, b_track))
    del b_track, b_time
    delta = b_delta[order]
    before = np.cumsum(delta)
    before -= delta  # open count just before each boundary
    del delta, b_delta
    starts = b_is_start[order] == 1
    depth = np.empty(n, np.int64)
    depth[b_pos[order][starts]] = before[starts]
    del order, before, starts, b_pos, b_is_start
    # Every opening slice closes on its own track, so the count is back to 0 at each track's
    # first boundary: no per-track reset is needed.

    parent = np.full(n, -1, np.int64)
    max_depth = int(depth.max()) if n else 0
    for d in range(1, max_depth + 1):
        children = np.flatnonzero(depth == d)
        if len(children) == 0:
            continue
        cands = np.flatnonzero((depth == d - 1) & opens)
        k = np.searchsorted(cands, children) - 1
        ok = k >= 0
        p = np.where(ok, cands[np.clip(k, 0, None)], -1)
        ok &= track[np.clip(p, 0, None)] == track[children]
        parent[children] = np.where(ok, p, -1)
    return depth.astype(np.int16), parent


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

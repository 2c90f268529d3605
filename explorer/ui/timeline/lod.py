"""Level of detail: from the visible window of one lane to a few rectangles per pixel.

A *lane* is one row of one track (:func:`explorer.trace.nesting.timeline_rows`: rows follow
the nesting, parents above children). Slices on a lane do not overlap, so ordered by
start they are also (nearly) ordered by end; :class:`LaneIndex` keeps, per lane, the starts
and the running maximum of the ends, which makes both edges of the visible window a
``searchsorted``.

:func:`lane_rects` then asks, for every pixel column, "which slice started last before this
pixel ends, and is anything still running at the pixel's start?" — one ``searchsorted`` of
the pixel edges, so the cost of a repaint depends on the widget's width, not on how many
events are visible. Slices a few pixels wide or more keep their exact edges (and may get a
label); narrower ones are merged into per-pixel buckets that take the colour of the slice
that covers the pixel, and neighbouring buckets of one colour become one rectangle.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from explorer.trace.nesting import segmented_running_max, timeline_rows

#: Slices at least this many pixels wide are drawn with their own edges, not bucketed.
WIDE_PX = 3.0


@dataclass
class LaneIndex:
    """Slices re-ordered by lane (track, row) then start. Arrays are in *lane order*
    (position ``p``) unless named otherwise; ``order[p]`` is the slice id at ``p`` and
    ``pos[slice_id]`` its position."""

    order: np.ndarray  # slice id at each lane position (int32/int64)
    pos: np.ndarray  # lane position of each slice id
    ts: np.ndarray  # int64 start at each position
    endmax: np.ndarray  # int64 running max of ends within the lane
    color: np.ndarray  # int16 colour id at each position
    lane_track: np.ndarray  # int64 track id of each lane
    lane_row: np.ndarray  # int64 row of each lane within its track (0 = top)
    lane_start: np.ndarray  # int64 offsets: lane ``l`` is positions lane_start[l]:lane_start[l+1]
    dur: np.ndarray  # the trace's own dur column, by slice id (a view, not a copy)
    #: True for the coarse index of :func:`track_lanes` (one lane per track, its slices
    #: nested and overlapping): drawn as per-pixel buckets only, never with exact edges.
    overlapping: bool = False

    #: The arrays a cached index is made of (``dur`` is the trace's own).
    STORED = ("order", "pos", "ts", "endmax", "color", "lane_track", "lane_row", "lane_start")

    def arrays(self) -> dict[str, np.ndarray]:
        """The index as named arrays (what :mod:`explorer.store.lod` keeps)."""
        return {name: getattr(self, name) for name in self.STORED}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], dur: np.ndarray) -> LaneIndex:
        """The index of :meth:`arrays` again, over the trace's ``dur`` column."""
        o, p_, ts, endmax, color, lane_track, lane_row, lane_start = (
            arrays[name] for name in cls.STORED
        )
        return cls(o, p_, ts, endmax, color, lane_track, lane_row, lane_start, dur=dur)

    @classmethod
    def tracks_only(cls, track: np.ndarray, track_ids: np.ndarray) -> LaneIndex:
        """An index with one empty lane for each of ``track_ids`` that has slices: what the
        layout needs to show the rows before the slices are indexed. ``track`` is the
        slices' track column, sorted (the model's order): one ``searchsorted`` per track id,
        never a pass over the slices."""
        ids = np.unique(np.asarray(track_ids, track.dtype))  # same dtype: no pass to convert
        has = np.searchsorted(track, ids, "right") > np.searchsorted(track, ids, "left")
        tracks = ids[has].astype(np.int64)
        empty = np.zeros(0, np.int64)
        return cls(
            order=empty,
            pos=empty,
            ts=empty,
            endmax=empty,
            color=np.zeros(0, np.int16),
            lane_track=tracks,
            lane_row=np.zeros(len(tracks), np.int64),
            lane_start=np.zeros(len(tracks) + 1, np.int64),
            dur=empty,
        )

    @property
    def n_slices(self) -> int:
        return len(self.order)

    @property
    def nbytes(self) -> int:
        """Memory of the view's own arrays (the dur view belongs to the trace)."""
        arrays = (self.order, self.pos, self.ts, self.endmax, self.color)
        return int(sum(a.nbytes for a in arrays)) + int(
            self.lane_track.nbytes + self.lane_row.nbytes + self.lane_start.nbytes
        )

    def lanes_of_track(self, track: int) -> np.ndarray:
        """Lane ids of one track, shallowest first."""
        lo = np.searchsorted(self.lane_track, track, "left")
        hi = np.searchsorted(self.lane_track, track, "right")
        return np.arange(lo, hi)

    def lane_of(self, slice_ids: np.ndarray) -> np.ndarray:
        """Lane id of each slice."""
        return np.searchsorted(self.lane_start, self.pos[slice_ids], "right") - 1


#: Slices indexed at a time (whole tracks): the index's sort and rows take ~250 B a slice
#: while they run, and what is kept is 26 B a slice — so a trace of 8.4M slices is indexed
#: in ~2 GB less.
LANE_GROUP = 1 << 20


def build_lanes(slices: pd.DataFrame, color: np.ndarray, group: int = LANE_GROUP) -> LaneIndex:
    """Group slices into lanes with one stable sort (slices are already sorted by track,
    ts), ``group`` slices (whole tracks) at a time. Tracks never share a lane and lanes are
    ordered by track, so the index of consecutive groups of tracks, each shifted by its first
    slice, is the index of all of them — identical to one pass."""
    n = len(slices)
    idx_dtype = np.int32 if n < 2**31 - 1 else np.int64
    track = slices["track"].to_numpy()
    dur = slices["dur"].to_numpy()
    if n <= group:
        return _lanes_of(slices, color, idx_dtype, dur)
    firsts = np.flatnonzero(np.r_[True, track[1:] != track[:-1]])
    cuts = [0]
    for first in firsts:  # one per track: few
        if first - cuts[-1] >= group:
            cuts.append(int(first))
    cuts.append(n)
    order = np.empty(n, idx_dtype)
    pos: np.ndarray = np.empty(n, idx_dtype)
    ts = np.empty(n, np.int64)
    endmax = np.empty(n, np.int64)
    colors = np.empty(n, np.int16)
    lane_track, lane_row, lane_start = [], [], []
    for a, b in zip(cuts[:-1], cuts[1:], strict=True):
        part = _lanes_of(slices.iloc[a:b], color[a:b], idx_dtype, dur[a:b])
        order[a:b] = part.order + a
        pos[a:b] = part.pos + a
        ts[a:b], endmax[a:b], colors[a:b] = part.ts, part.endmax, part.color
        lane_track.append(part.lane_track)
        lane_row.append(part.lane_row)
        lane_start.append(part.lane_start[:-1] + a)
    return LaneIndex(
        order=order,
        pos=pos,
        ts=ts,
        endmax=endmax,
        color=colors,
        lane_track=np.concatenate(lane_track),
        lane_row=np.concatenate(lane_row),
        lane_start=np.r_[np.concatenate(lane_start), n].astype(np.int64),
        dur=dur,
    )


def _lanes_of(
    slices: pd.DataFrame, color: np.ndarray, idx_dtype: type, dur: np.ndarray
) -> LaneIndex:
    """:func:`build_lanes` of ``slices`` in one pass."""
    n = len(slices)
    track = slices["track"].to_numpy().astype(np.int64)
    ts_all = slices["ts"].to_numpy()
    row = timeline_rows(track, slices["depth"].to_numpy(), ts_all, dur)
    key = track * (int(row.max(initial=0)) + 1) + row
    # Lanes are few: a 16-bit key sorts by radix, 4x faster than int64's merge sort.
    small = n and 0 <= int(key.min()) and int(key.max()) < 2**16
    order: np.ndarray = np.argsort(key.astype(np.uint16) if small else key, kind="stable")
    order = order.astype(idx_dtype)
    skey = key[order]
    if n:
        starts = np.flatnonzero(np.r_[True, skey[1:] != skey[:-1]])
    else:
        starts = np.zeros(0, np.int64)
    lane_start = np.r_[starts, n].astype(np.int64)
    lane_track = track[order[starts]] if n else np.zeros(0, np.int64)
    lane_row = row[order[starts]] if n else np.zeros(0, np.int64)
    ts = ts_all[order]
    # ts is not guaranteed sorted within a lane when a reader's ordering ties; make sure.
    if n and np.any((np.diff(ts) < 0) & (np.diff(skey) == 0)):
        order = np.lexsort((ts_all, key)).astype(idx_dtype)
        ts = ts_all[order]
    end = ts + dur[order]
    lane_no = np.repeat(np.arange(len(starts), dtype=np.int64), np.diff(lane_start))
    endmax = segmented_running_max(end, lane_no) if n else end
    pos: np.ndarray = np.empty(n, idx_dtype)
    pos[order] = np.arange(n, dtype=idx_dtype)
    return LaneIndex(
        order=order,
        pos=pos,
        ts=ts,
        endmax=endmax,
        color=color[order].astype(np.int16),
        lane_track=lane_track,
        lane_row=lane_row,
        lane_start=lane_start,
        dur=dur,
    )


def track_lanes(slices: pd.DataFrame, color: np.ndarray) -> LaneIndex:
    """The coarse index: one lane per track holding all its slices in the model's order
    (sorted by track, then start), with the running maximum of their ends. No sort and no
    row assignment — a few passes over the columns, a tenth of :func:`build_lanes` — and
    still exact per pixel about *whether* a track is busy (see ``overlapping``)."""
    track = slices["track"].to_numpy()
    ts = slices["ts"].to_numpy()
    dur = slices["dur"].to_numpy()
    n = len(ts)
    idx_dtype = np.int32 if n < 2**31 - 1 else np.int64
    starts = np.flatnonzero(np.r_[True, track[1:] != track[:-1]]) if n else np.zeros(0, np.int64)
    lane_start = np.r_[starts, n].astype(np.int64)
    lane_no = np.repeat(np.arange(len(starts), dtype=np.int64), np.diff(lane_start))
    endmax = segmented_running_max(ts + dur, lane_no) if n else np.zeros(0, np.int64)
    order = np.arange(n, dtype=idx_dtype)
    return LaneIndex(
        order=order,
        pos=order,
        ts=ts,
        endmax=endmax,
        color=np.asarray(color, np.int16),
        lane_track=track[starts].astype(np.int64),
        lane_row=np.zeros(len(starts), np.int64),
        lane_start=lane_start,
        dur=dur,
        overlapping=True,
    )


@dataclass
class LaneRects:
    """Rectangles of one lane in pixels: left/right edges, colour id, and the slice id for
    rectangles that are one slice (-1 for merged buckets)."""

    x0: np.ndarray
    x1: np.ndarray
    color: np.ndarray
    slice_id: np.ndarray

    def __len__(self) -> int:
        return len(self.x0)


_EMPTY = LaneRects(np.zeros(0), np.zeros(0), np.zeros(0, np.int16), np.zeros(0, np.int64))


def pixel_edges(t0: float, t1: float, width: int) -> np.ndarray:
    """Start time (ns) of every pixel column plus the end of the last, as int64."""
    return np.floor(t0 + (t1 - t0) * np.arange(width + 1) / max(width, 1)).astype(np.int64)


def visible_positions(lanes: LaneIndex, lane: int, t0: float, t1: float) -> tuple[int, int]:
    """Lane positions ``[lo, hi)`` of the slices of ``lane`` that overlap ``(t0, t1)``: two
    ``searchsorted`` with integer bounds (a float bound would make numpy convert the whole
    lane to float first: a pass over millions of starts per lane per repaint)."""
    a, b = int(lanes.lane_start[lane]), int(lanes.lane_start[lane + 1])
    lo = np.searchsorted(lanes.endmax[a:b], np.int64(math.floor(t0)), "right")
    hi = np.searchsorted(lanes.ts[a:b], np.int64(math.ceil(t1)), "left")
    return a + int(lo), a + int(hi)


def lane_rects(lanes: LaneIndex, lane: int, t0: float, t1: float, width: int) -> LaneRects:
    """The rectangles that draw ``lane`` between ``t0`` and ``t1`` on ``width`` pixels."""
    a, b = int(lanes.lane_start[lane]), int(lanes.lane_start[lane + 1])
    ts = lanes.ts[a:b]
    em = lanes.endmax[a:b]
    lo, hi = visible_positions(lanes, lane, t0, t1)
    lo, hi = lo - a, hi - a
    if lo >= hi or width <= 0 or t1 <= t0:
        return _EMPTY
    scale = width / (t1 - t0)
    edges = pixel_edges(t0, t1, width)
    # The last slice that starts before each pixel ends, searched in the visible part only.
    j = np.searchsorted(ts[lo:hi], edges[1:], "left") - 1 + lo
    valid = j >= lo
    jj = np.where(valid, j, lo)
    valid &= em[jj] > edges[:-1]
    p = a + jj
    sid = lanes.order[p].astype(np.int64)
    start = lanes.ts[p]
    end = start + lanes.dur[sid]
    wide = ((end - start) * scale >= WIDE_PX) & (not lanes.overlapping)
    ncolors = 1 << 15
    key = np.where(valid, np.where(wide, p.astype(np.int64) + ncolors, lanes.color[p]), -1)
    change = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    run_end = np.r_[change[1:], width]
    keep = key[change] >= 0
    ps, pe = change[keep], run_end[keep]
    first = ps  # the pixel that names the run's slice
    is_wide = wide[first]
    x0 = ps.astype(np.float64)
    x1 = pe.astype(np.float64)
    ex0 = (start[first] - t0) * scale
    ex1 = (end[first] - t0) * scale
    x0 = np.where(is_wide, np.maximum(x0, ex0), x0)
    x1 = np.where(is_wide, np.minimum(x1, ex1), x1)
    x1 = np.maximum(x1, x0 + 1.0)
    return LaneRects(
        x0=x0,
        x1=x1,
        color=lanes.color[p[first]],
        slice_id=np.where(is_wide, sid[first], -1),
    )


def lane_slice_at(lanes: LaneIndex, lane: int, t: float, tolerance_ns: float) -> int:
    """The slice on ``lane`` under time ``t`` (or the nearest within ``tolerance_ns``), -1."""
    a, b = int(lanes.lane_start[lane]), int(lanes.lane_start[lane + 1])
    ts = lanes.ts[a:b]
    if b == a:
        return -1
    k = int(np.searchsorted(ts, np.int64(math.floor(t)), "right")) - 1
    candidates = [c for c in (k, k + 1) if 0 <= c < b - a]
    best, best_dist = -1, float("inf")
    for c in candidates:
        sid = int(lanes.order[a + c])
        s = int(ts[c])
        e = s + int(lanes.dur[sid])
        dist = 0.0 if s <= t <= e else min(abs(t - s), abs(t - e))
        if dist <= tolerance_ns and dist < best_dist:
            best, best_dist = sid, dist
    return best


def counter_pixels(
    ts: np.ndarray, values: np.ndarray, t0: float, t1: float, width: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per-pixel value of a counter series (``ts`` sorted, a step function): the max of the
    value holding at the pixel's start and the samples inside it. Returns (values, valid)."""
    if len(ts) == 0 or width <= 0:
        return np.zeros(max(width, 0)), np.zeros(max(width, 0), bool)
    edges = pixel_edges(t0, t1, width)
    k = np.searchsorted(ts, edges, "left")
    before = k[:-1] - 1
    out = np.where(before >= 0, values[np.maximum(before, 0)], np.nan)
    has = k[1:] > k[:-1]
    if has.any():
        inside = np.maximum.reduceat(values[: k[-1]], k[:-1][has])
        out[has] = np.fmax(out[has], inside)
    valid = ~np.isnan(out)
    return np.nan_to_num(out), valid

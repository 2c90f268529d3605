"""Hand-offs: where a track records nothing while another thread or a device works, the
path may follow the work.

A host thread that waits records nothing, or only a frame around the wait: ``backward()``
while the autograd engine's thread runs the backward ops (``## backward ##``, the bare self
time of ``ProfilerStep#N``, a ``run_backward`` Python leaf, or no slice at all on traces
that record the engine's ops under other names), a step waiting for the collectives gloo
runs on its own threads, a service thread idle between requests while the device computes.
A device stream idles between two ops while another stream of its device, or the host,
works. The rule reads what is busy, never names:

- a *waiting stretch* is a stretch of a track's chain (see
  :func:`~explorer.analysis.graph.host_edges.thread_chains`) that holds no work: on a host
  thread, idle time between top-level slices or the own time of an annotation or Python
  frame (:data:`WAITER_KINDS`) that the breakdown counts as nothing in particular (a gloo
  collective, a compile span, the DataLoader are work: :func:`counted_frames`); on a
  device stream, the gap between two ops;
- *work* is a point (start or end) of a busy slice: on a host thread any slice but a
  sync call, a non-leaf Python frame or an annotation the breakdown does not count; on a
  device, any op but a wait;
- for each waiting stretch ``p -> r`` of a track ``T`` and each other track ``U`` that
  may do ``T``'s work (:func:`_waits_for`) with work inside it, a ``handoff`` edge runs
  from ``p`` to ``U``'s first point of work after ``p``, and a ``handback`` edge from
  ``U``'s last point of work before ``r`` to ``r``. Before a track's first point and after
  its last, it records nothing too: a hand-back into its first point, a hand-off from its
  last (the engine's thread starts mid-step and ends before the optimizer runs).

Only the first and the last point are needed: ``U``'s own chain joins the points between
at no more waiting than the time between them. A hand-off is *not* a causal dependency:
it says the waiting track could have been waiting for that work, which is what the
critical path needs to follow it (the stretch itself then costs as waiting, see
:func:`~explorer.analysis.critical_path.path_costs`). The what-if replay
(:mod:`explorer.analysis.whatif`) keeps the hand-backs only: a stretch ends no sooner than
the work it may have waited for, less its recorded lead, so it ends sooner when that work
does; it never delays the work by a hand-off. Both edges move forward in time, so no cycle
runs through a hand-off.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from explorer.analysis.breakdown import DEVICE_REASONS, HOST_REASONS, host_slice_reasons
from explorer.analysis.classify import classes
from explorer.analysis.graph.edges import END, START, EdgeList
from explorer.analysis.graph.host_edges import ThreadPoints, host_points, with_points
from explorer.analysis.graph.nodes import SliceArrays, id_dtype
from explorer.trace.model import TraceData

#: Kinds of slice whose own time is the thread recording nothing of its own: annotations
#: and Python frames (an op, ``cpu_op``, a runtime call, is work; a sync call waits for
#: the device, which the sync edges follow).
WAITER_KINDS = ("annotation", "python", "other")


def counted_frames(trace: TraceData, device_mode: bool) -> np.ndarray:
    """Annotations and frames whose time the breakdown counts as something — a gloo
    collective (communication), a compile span, the input pipeline: work, not a thread
    recording nothing (the breakdown's own classifier, :func:`host_slice_reasons`)."""
    reasons = [r for r, _ in (DEVICE_REASONS if device_mode else HOST_REASONS)]
    code = host_slice_reasons(trace, device_mode)
    plain = (code == -1) | (code == reasons.index("host_busy"))
    kinds = trace.slices["kind"].array
    waiter = np.append([str(c) in WAITER_KINDS for c in kinds.categories], False)[kinds.codes]
    return (~plain | classes(trace).host_collective) & waiter


def busy_slices(arrays: SliceArrays, counted: np.ndarray) -> np.ndarray:
    """Node slices that are work: host slices but sync calls, Python frames with children
    and annotations the breakdown does not count (``counted``: those it does, see
    :func:`counted_frames`); device ops but waits."""
    has_child = np.zeros(arrays.n, bool)
    parent = arrays.parent
    ok = (parent >= 0) & arrays.node
    has_child[parent[ok]] = True
    waiter = arrays.kind_in(("annotation", "other", "sync")) | (
        arrays.kind_in(("python",)) & has_child
    )
    host = arrays.node & arrays.host & (~waiter | counted)
    device = arrays.node & arrays.device & ~arrays.kind_in(("sync",))
    return host | device


def chain_points(arrays: SliceArrays, host: ThreadPoints | None = None) -> ThreadPoints:
    """The points of every track's chain: host threads' slices and device streams' ops,
    in order per track. ``host``: the host points the chains were built from, sorted once
    (:func:`~explorer.analysis.graph.host_edges.host_points`); a caller that lets go of
    them once this returns holds one set of points through the hand-offs, not two (~20 MB
    on the synthetic 1M-event trace)."""
    dev = np.flatnonzero(arrays.node & arrays.device & (arrays.stream >= 0))
    return with_points(host if host is not None else host_points(arrays), arrays, dev)


def waiting_stretches(
    arrays: SliceArrays,
    owner_after: np.ndarray,
    counted: np.ndarray,
    until: int | None,
    points: ThreadPoints | None = None,
) -> tuple[ThreadPoints, np.ndarray, np.ndarray]:
    """The waiting stretches of every track: ``(points, a, b)`` — stretch ``i`` runs from
    point ``a[i]`` to point ``b[i]`` of ``points`` (the chain points of host threads and
    device streams, in order per track: :func:`chain_points`, made here when not given),
    and lasts some time; ``a[i] == -1``: from the start of time to the track's first
    point, ``b[i] == -1``: from its last point on."""
    if points is None:
        points = chain_points(arrays)
    # one mask of the stretches, then their positions as int32 where they fit: each
    # filter of the positions gathered the points' times twice over (~35 MB)
    stretch = points.track[1:] == points.track[:-1]
    stretch &= points.t[1:] > points.t[:-1]
    if until is not None:
        stretch &= (points.t[1:] <= until) | arrays.device[points.slice[1:]]
    k = np.flatnonzero(stretch).astype(id_dtype(len(points.slice)), copy=False)
    del stretch
    a_slice, a_end = points.slice[k], points.is_end[k]
    on_host = arrays.host[a_slice]
    owner = owner_after[a_slice, 0]  # after its start; after its end below
    at_end = np.flatnonzero(a_end)
    owner[at_end] = owner_after[a_slice[at_end], 1]
    del at_end, a_slice
    waits = np.zeros(len(k), bool)
    # host: idle, or the own time of an annotation / Python frame the breakdown does not
    # count as anything
    who = np.maximum(owner[on_host], 0)
    waits[on_host] = (owner[on_host] < 0) | (arrays.kind_in(WAITER_KINDS)[who] & ~counted[who])
    del who, owner
    # device: between one op's end and the next op's start
    dev_k = ~on_host
    waits[dev_k] = a_end[dev_k] & ~points.is_end[k[dev_k] + 1]
    k = k[waits]
    # Before its first point and after its last a track records nothing either: a head
    # (no start point) and a tail (no end point) of the chain.
    # (With ``until``, only its points before it: per track, the first and last of those,
    # found from a running count of them rather than by listing them.)
    _, head, stop = points.track_ranges()
    tail = stop - 1
    if until is not None:
        count = np.cumsum((points.t <= until) | arrays.device[points.slice])
        before = np.where(head > 0, count[np.maximum(head - 1, 0)], 0)
        has = count[tail] > before
        head = np.searchsorted(count, before[has] + 1, side="left")
        tail = np.searchsorted(count, count[tail[has]], side="left")
    none_h, none_t = np.full(len(head), -1), np.full(len(tail), -1)
    return points, np.r_[k, none_h, tail], np.r_[k + 1, head, none_t]


def _waits_for(
    working: int, on_host: bool, track_device: np.ndarray, s_track: np.ndarray
) -> np.ndarray:
    """Which of the stretches (on tracks ``s_track``) may wait for work on track
    ``working``: a host thread waits for any other host thread of the trace (its workers,
    the autograd engine, gloo) and for any device stream; a device stream waits for the
    host threads and for the other streams of its device."""
    other = s_track != working
    if on_host:
        return other
    s_dev = track_device[s_track]
    return other & ((s_dev < 0) | (s_dev == track_device[working]))


#: Waiting stretches matched against one track's work at a time (:func:`handoffs`).
STRETCHES_AT_ONCE = 1 << 18


def handoffs(
    edges: EdgeList,
    arrays: SliceArrays,
    owner_after: np.ndarray,
    track_device: np.ndarray,
    counted: np.ndarray,
    until: int | None = None,
    points: ThreadPoints | None = None,
) -> None:
    """Add the ``handoff`` and ``handback`` edges (see the module's docstring). ``owner_after`` as
    :func:`~explorer.analysis.graph.host_edges.thread_chains` returns it; ``track_device``:
    per track id, its device (-1: none, a host thread); ``counted``: see
    :func:`counted_frames`; ``until``: a step's end, past which host threads do nothing of
    the step's; ``points``: :func:`chain_points`, made here when not given."""
    points, a, b = waiting_stretches(arrays, owner_after, counted, until, points)
    if len(a) == 0:
        return
    busy = busy_slices(arrays, counted)[points.slice]
    if until is not None:
        busy &= (points.t <= until) | arrays.device[points.slice]
    # in (track, time) order, as the points are; positions as int32 where they fit (with
    # the points' times, the largest arrays while the merged points are held)
    work = np.flatnonzero(busy).astype(id_dtype(len(busy)), copy=False)
    del busy
    if len(work) == 0:
        return
    s_track = points.track[np.where(a >= 0, a, b)]
    big = np.iinfo(np.int64).max
    t_a = np.where(a >= 0, points.t[a], -big)
    t_b = np.where(b >= 0, points.t[b], big)
    # each working track's run of work, read off the points' track runs (``work`` is in
    # their order): the work's tracks and times are gathered a track at a time, not held
    # for every point of work through the loop (~15 MB on 1M slices, the graph's peak)
    tracks, head, stop = points.track_ranges()
    w_starts = np.searchsorted(work, head)
    w_ends = np.searchsorted(work, stop)
    for working, w_lo, w_hi in zip(
        tracks.tolist(), w_starts.tolist(), w_ends.tolist(), strict=True
    ):
        if w_hi <= w_lo:
            continue
        on_host = bool(arrays.host[points.slice[work[w_lo]]])
        mine = np.flatnonzero(_waits_for(int(working), on_host, track_device, s_track))
        if len(mine) == 0:
            continue
        t = points.t[work[w_lo:w_hi]]
        # the stretches a piece at a time: a million of them waiting for one track (the
        # synthetic 1M-event trace's) made ~20 MB of temporaries at once, the top of the
        # graph's build (the edges' table is sorted after: the same graph either way)
        for lo in range(0, len(mine), STRETCHES_AT_ONCE):
            _handoffs_into(
                edges, points, work, w_lo, t, mine[lo : lo + STRETCHES_AT_ONCE], a, b, t_a, t_b
            )


def _handoffs_into(
    edges: EdgeList,
    points: ThreadPoints,
    work: np.ndarray,
    w_lo: int,
    t: np.ndarray,
    mine: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    t_a: np.ndarray,
    t_b: np.ndarray,
) -> None:
    """The hand-off and hand-back edges between the waiting stretches ``mine`` and the run
    of work ``work[w_lo:]`` of one track (its points' times ``t``)."""
    # the first point of work after the stretch's start, the last before its end (both
    # strictly: a hand-off takes time, so none is part of a cycle)
    first = np.searchsorted(t, t_a[mine], side="right")
    last = np.searchsorted(t, t_b[mine], side="left") - 1
    ok = first <= last
    if not ok.any():
        return
    sa, sb = a[mine[ok]], b[mine[ok]]
    q_in = work[w_lo + first[ok]]
    q_out = work[w_lo + last[ok]]
    into, back = sa >= 0, sb >= 0
    sa, q_in, sb, q_out = sa[into], q_in[into], sb[back], q_out[back]
    _add_point_edges(edges, "handoff", points, sa, q_in)
    _add_point_edges(edges, "handback", points, q_out, sb)


def _add_point_edges(
    edges: EdgeList, kind: str, points: ThreadPoints, src: np.ndarray, dst: np.ndarray
) -> None:
    """Edges of ``kind`` from the points ``src`` to the points ``dst`` (indices into
    ``points``), each leaving or entering its slice at the start or end that point is."""
    edges.add(
        kind,
        points.slice[src],
        points.slice[dst],
        np.where(points.is_end[src], END, START),
        np.where(points.is_end[dst], END, START),
    )


def track_devices(tracks: pd.DataFrame) -> np.ndarray:
    """Per track id, the device it belongs to (-1: none)."""
    if len(tracks) == 0:
        return np.empty(0, np.int64)
    out = np.full(int(tracks["id"].max()) + 1, -1, np.int64)
    out[tracks["id"].to_numpy()] = tracks["device"].to_numpy(np.int64)
    return out

"""Waits between host threads: ``backward()`` waiting for the autograd engine's threads,
a step waiting for the collectives its communication threads run (gloo).

When a training step calls ``loss.backward()`` with its tensors on a device, the autograd
engine runs the backward ops on its own thread(s) while the calling thread blocks inside
``run_backward`` (a Python leaf when the trace has stacks, the bare self time of
``## backward ##`` / ``ProfilerStep#N`` when it has not). That blocked time is waiting: the
work is on the engine's thread. For each top-level engine op (``autograd::engine::
evaluate_function: ...``) that lies inside one stretch of a waiting slice on another thread
— a leaf annotation or Python frame, or a gap between the children of one — this module
adds ``thread_wait`` edges from the point where the stretch begins to the op's start, and
from the op's end to the point where the stretch ends. The critical path then counts the
stretch itself as waiting (see :mod:`explorer.analysis.critical_path`) and follows the
engine's work. Host collectives (``gloo:all_reduce`` on gloo's own threads) are waited
for the same way.
"""

from __future__ import annotations

import re

import numpy as np

from explorer.analysis.breakdown import name_flags
from explorer.analysis.graph.edges import END, START, EdgeList
from explorer.analysis.graph.nodes import SliceArrays
from explorer.trace.kinds import COLLECTIVE
from explorer.trace.model import TraceData

#: Ops the autograd engine runs for the thread that called ``backward()``.
ENGINE_OP = re.compile(r"^autograd::engine::evaluate_function")
#: Kinds of slice whose own time, while an engine thread works, is the caller waiting:
#: annotations and Python frames (an op of its own, ``cpu_op``, is never a wait).
WAITER_KINDS = ("annotation", "python", "other")


def awaited_op_mask(trace: TraceData) -> np.ndarray:
    """True for host slices another thread may block on: autograd engine ops and
    collectives (by kind, or by name as the breakdown counts gloo/c10d ops)."""
    kind = trace.slices["kind"].to_numpy()
    return name_flags(trace, ENGINE_OP) | name_flags(trace, COLLECTIVE) | (kind == "collective")


def stretch_owner(arrays: SliceArrays, point_slice: np.ndarray, is_end: np.ndarray) -> np.ndarray:
    """The slice whose own time follows each point on its thread: the slice itself after
    its start, its parent after its end (-1 after a top-level slice: the thread is idle)."""
    parent = arrays.parent[point_slice]
    parent = np.where((parent >= 0) & arrays.node[np.maximum(parent, 0)], parent, -1)
    return np.where(is_end, parent, point_slice)


def thread_waits(edges: EdgeList, arrays: SliceArrays, awaited: np.ndarray) -> None:
    """Add the ``thread_wait`` edges into and out of awaited ops (see
    :func:`awaited_op_mask`) run while another thread waited for them."""
    host = np.flatnonzero(arrays.node & arrays.host)
    parent = arrays.parent[host]
    top = (parent < 0) | ~arrays.node[np.maximum(parent, 0)]
    ops = host[top & awaited[host]]
    if len(ops) == 0:
        return
    for track in np.unique(arrays.track[host]):
        mine = host[arrays.track[host] == track]
        q = ops[arrays.track[ops] != track]
        if len(q) == 0 or len(mine) == 0:
            continue
        # Every start and end on this thread, in time order (at one instant: ends before
        # starts, inner ends before outer ones, outer starts before inner ones).
        pt_slice = np.concatenate([mine, mine])
        is_end = np.r_[np.zeros(len(mine), bool), np.ones(len(mine), bool)]
        t = np.where(is_end, arrays.end[pt_slice], arrays.ts[pt_slice])
        order = np.lexsort((np.where(is_end, -pt_slice, pt_slice), ~is_end, t))
        pt_slice, is_end, t = pt_slice[order], is_end[order], t[order]
        before = np.searchsorted(t, arrays.ts[q], side="right") - 1
        after = np.searchsorted(t, arrays.end[q], side="left")
        # The op lies in one stretch of this thread: no point of it strictly inside the op.
        ok = (before >= 0) & (after < len(t)) & (after == before + 1)
        q, before, after = q[ok], before[ok], after[ok]
        owner = stretch_owner(arrays, pt_slice[before], is_end[before])
        ok = owner >= 0
        ok[ok] = np.isin(arrays.kind[owner[ok]], WAITER_KINDS)
        q, before, after = q[ok], before[ok], after[ok]
        if len(q) == 0:
            continue
        edges.add("thread_wait", pt_slice[before], q, np.where(is_end[before], END, START), START)
        edges.add("thread_wait", q, pt_slice[after], END, np.where(is_end[after], END, START))

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

import numpy as np

from explorer.analysis.classify import classes
from explorer.analysis.graph.edges import END, START, EdgeList
from explorer.analysis.graph.host_edges import stretch_owner, thread_points
from explorer.analysis.graph.nodes import SliceArrays
from explorer.trace.model import TraceData

#: Kinds of slice whose own time, while an engine thread works, is the caller waiting:
#: annotations and Python frames (an op of its own, ``cpu_op``, is never a wait).
WAITER_KINDS = ("annotation", "python", "other")


def awaited_op_mask(trace: TraceData) -> np.ndarray:
    """True for host slices another thread may block on: autograd engine ops and
    collectives (by kind, or by name as the breakdown counts gloo/c10d ops)."""
    cls = classes(trace)
    return cls.autograd | cls.host_collective


def thread_waits(
    edges: EdgeList, arrays: SliceArrays, awaited: np.ndarray, owner_after: np.ndarray
) -> None:
    """Add the ``thread_wait`` edges into and out of awaited ops (see
    :func:`awaited_op_mask`) run while another thread waited for them; ``owner_after`` as
    :func:`~explorer.analysis.graph.host_edges.thread_chains` returns it."""
    host = np.flatnonzero(arrays.node & arrays.host)
    parent = arrays.parent[host]
    top = (parent < 0) | ~arrays.node[np.maximum(parent, 0)]
    ops = host[top & awaited[host]]
    if len(ops) == 0:
        return
    points = thread_points(arrays, host)
    for track in np.unique(arrays.track[host]):
        q = ops[arrays.track[ops] != track]
        if len(q) == 0:
            continue
        on = np.full(len(q), track)
        before = points.last_before(on, arrays.ts[q])
        after = points.first_after(on, arrays.end[q])
        # The op lies in one stretch of this thread: no point of it strictly inside the op.
        ok = (before >= 0) & (after == before + 1)
        q, before, after = q[ok], before[ok], after[ok]
        owner = stretch_owner(owner_after, points.slice[before], points.is_end[before])
        ok = owner >= 0
        ok[ok] = np.isin(arrays.kind[owner[ok]], WAITER_KINDS)
        q, before, after = q[ok], before[ok], after[ok]
        if len(q) == 0:
            continue
        src_point = np.where(points.is_end[before], END, START)
        dst_point = np.where(points.is_end[after], END, START)
        edges.add("thread_wait", points.slice[before], q, src_point, START)
        edges.add("thread_wait", q, points.slice[after], END, dst_point)

"""Host-side edges: each leaf slice's duration, nesting, the order of ops on a thread,
forward -> backward, and the runtime lock that serialises launches from several threads."""

from __future__ import annotations

import numpy as np
import pandas as pd

from explorer.analysis.graph.edges import END, START, EdgeList
from explorer.analysis.graph.nodes import SliceArrays

#: A launch that starts this soon after another thread's launch returns is taken to have
#: waited for the runtime's lock (the CUDA runtime serialises launches per context).
RUNTIME_LOCK_GAP_NS = 1_000

_LAUNCH_CALL = r"Launch|launch|Memcpy|Memset|memcpy|memset|enqueue|runFunction"


def _order_edges(edges: EdgeList, kind: str, ids: np.ndarray, arrays: SliceArrays) -> None:
    """``kind`` edges between consecutive ``ids`` (already in order): end -> start, or
    start -> start where the two overlap."""
    if len(ids) < 2:
        return
    a, b = ids[:-1], ids[1:]
    src_point = np.where(arrays.end[a] <= arrays.ts[b], END, START)
    edges.add(kind, a, b, src_point, START)


def duration_and_nesting(edges: EdgeList, arrays: SliceArrays) -> np.ndarray:
    """Duration edges of leaves; parent -> first child, last child -> parent, child -> next
    sibling on host threads. Returns the ids of host nodes that have children."""
    node = arrays.node
    host_nodes = np.flatnonzero(node & arrays.host)
    parent = arrays.parent[host_nodes]
    has_parent = parent >= 0
    has_parent[has_parent] = node[parent[has_parent]]
    children = host_nodes[has_parent]
    parents = np.unique(arrays.parent[children])
    is_parent = np.zeros(arrays.n, bool)
    is_parent[parents] = True
    leaves = np.flatnonzero(node & ~is_parent)
    edges.add("duration", leaves, leaves, START, END)

    if len(children):
        order = np.lexsort((arrays.ts[children], arrays.parent[children]))
        c = children[order]
        p = arrays.parent[c]
        first = np.ones(len(c), bool)
        first[1:] = p[1:] != p[:-1]
        last = np.ones(len(c), bool)
        last[:-1] = p[1:] != p[:-1]
        edges.add("nest", p[first], c[first], START, START)
        edges.add("nest", c[last], p[last], END, END)
        a, b = c[:-1][~first[1:]], c[1:][~first[1:]]
        edges.add("sibling", a, b, np.where(arrays.end[a] <= arrays.ts[b], END, START), START)

    top = host_nodes[~has_parent]  # already in (track, ts) order
    if len(top) > 1:
        same = arrays.track[top[1:]] == arrays.track[top[:-1]]
        a, b = top[:-1][same], top[1:][same]
        edges.add("thread_order", a, b, np.where(arrays.end[a] <= arrays.ts[b], END, START), START)
    return parents


def forward_backward(edges: EdgeList, arrays: SliceArrays, flows: pd.DataFrame) -> None:
    """Forward op -> backward op, from ``fwdbwd`` flows, else from autograd sequence numbers
    (the forward op is the first slice with a number; the backward op is the first slice on
    another thread that carries the same number after it)."""
    node = arrays.node
    if len(flows):
        fb = flows["type"].astype(str).to_numpy() == "fwdbwd"
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
    calls = np.flatnonzero(arrays.node & arrays.host & (arrays.kind == "runtime") & is_launch_call)
    if len(calls) < 2 or len(np.unique(arrays.track[calls])) < 2:
        return
    calls = calls[np.argsort(arrays.ts[calls], kind="stable")]
    a, b = calls[:-1], calls[1:]
    gap = arrays.ts[b] - arrays.end[a]
    hit = (arrays.track[a] != arrays.track[b]) & (gap >= 0) & (gap <= RUNTIME_LOCK_GAP_NS)
    edges.add("runtime_lock", a[hit], b[hit], END, START)

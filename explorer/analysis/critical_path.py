"""The critical path: the chain of work that set a step's time.

Every edge of the dependency graph joins two points in time and weighs the time between
them, so every path is contiguous and its length is the time from its first point to its
last. Time along any route between two points is the same, so what tells routes apart is how
much of that time is *work* rather than *waiting* (idle gaps, launch queueing, syncs — the
graph's :data:`~explorer.analysis.graph.edges.WAIT_TYPES`, and the own time of waits,
blocked calls, annotations and Python frames: :func:`path_costs`). So where a track records
nothing while another thread or a device works — ``backward()`` while the autograd engine's
thread runs, a step while gloo's threads run its collectives, a service thread between
requests while the device computes, a stream idle while another stream computes — the path
follows that work (the graph's hand-offs, ruled by what is busy, not by names), a sync
follows the device, and no frame or annotation holds time that its children or another
thread did. The critical path is the
longest path under the work weight: the route carrying the most work, ending at the point
where the most work has accumulated (the latest such point on ties — normally the end of
the step) and starting where the graph allows. Waiting costs, work is free, so it is the
cheapest route from a virtual source whose edge to each root costs the idle time before
that root: one Dijkstra over the event-point graph (``scipy.sparse.csgraph``, C speed on
millions of points) — equivalent to the topological longest-path DP, without a Python loop
over nodes.

The result lists the slices on the path in order, the path's edges with the category of
their time (the breakdown's, instant by instant: :mod:`explorer.analysis.graph.categories`), a summary by category that adds up to the length exactly, and the ops and
source lines that hold the most path time — which is where speeding up buys step time.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from explorer.analysis.attribution import frame_codes
from explorer.analysis.dependency_graph import DependencyGraph, dependency_graph, scope_label
from explorer.analysis.graph.categories import TimeCategories
from explorer.analysis.graph.edges import (
    EDGE_TYPES,
    INFERRED_TYPES,
    PATH_CATEGORIES,
    TYPE_CATEGORY,
    WAIT_TYPES,
    point_times,
)
from explorer.analysis.graph.host_edges import launch_call_mask, stretch_owner
from explorer.analysis.graph.thread_edges import WAITER_KINDS
from explorer.trace.columns import dense_ranks
from explorer.trace.memo import memoised
from explorer.trace.memory_limits import ensure_room, release_freed_memory
from explorer.trace.model import TraceData
from explorer.trace.order import lexsort
from explorer.trace.source import is_explorer_file, parse_frame

#: How many ops and source lines the result keeps (ranked by path time).
TOP = 20
#: Memory scipy's own OpenBLAS takes to start its threads (measured: 64-128 MB under a
#: data-size limit; short of it, it spins rather than failing).
SCIPY_INIT_BYTES = 128 << 20


@dataclass
class CriticalPath:
    """``slices``: slice ids on the path in time order. ``edges``: the path's edges in
    order (``src, dst, type, weight, src_point, dst_point, category, owner`` — ``owner`` is
    the slice whose time the edge is, -1 for gaps). ``summary``: ``category, ns`` over
    :data:`PATH_CATEGORIES`, summing to ``length_ns``. ``top_ops``: ``name, kind, ns,
    count, share``. ``top_lines``: ``file, line, function, ns, share``."""

    slices: np.ndarray
    edges: pd.DataFrame
    start_ns: int
    end_ns: int
    summary: pd.DataFrame
    top_ops: pd.DataFrame
    top_lines: pd.DataFrame
    step: int | None = None
    window: tuple[int, int] = (0, 0)
    #: What the path covers, in words (``step 3``, ``steps 0-9``, ``the whole trace``).
    scope: str = "the whole trace"
    #: Where the path runs: consecutive path edges on one track merged into a segment —
    #: ``track, label, start_ns, end_ns, ns, top_op`` (the op holding most of it).
    segments: pd.DataFrame = field(default_factory=lambda: _segments_frame([]), repr=False)

    @property
    def length_ns(self) -> int:
        """The path's length: from its start to its end."""
        return self.end_ns - self.start_ns

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON: numbers in ns, slices as ids."""
        return {
            "step": self.step,
            "scope": self.scope,
            "window_ns": [int(self.window[0]), int(self.window[1])],
            "start_ns": int(self.start_ns),
            "end_ns": int(self.end_ns),
            "length_ns": int(self.length_ns),
            "slices": np.asarray(self.slices, dtype=np.int64).tolist(),
            "summary": {str(r.category): int(r.ns) for r in self.summary.itertuples()},
            "top_ops": [
                {
                    "name": str(r.name),
                    "kind": str(r.kind),
                    "ns": int(r.ns),
                    "count": int(r.count),
                    "share": float(r.share),
                }
                for r in self.top_ops.itertuples()
            ],
            "top_lines": [
                {
                    "file": str(r.file),
                    "line": int(r.line),
                    "function": str(r.function),
                    "ns": int(r.ns),
                    "share": float(r.share),
                }
                for r in self.top_lines.itertuples()
            ],
            "edges": {t: int(n) for t, n in self.edges["type"].value_counts().items() if n},
        }


@memoised("critical_path", depends_on=("dependency_graph", "frame_codes"))
def critical_path(
    trace: TraceData, step: int | None = None, all_steps: bool = False
) -> CriticalPath:
    """The critical path of one step (``None``: the whole trace, or with ``all_steps``
    the span of every step — what a report covers). Kept in the memo per scope."""
    result = path_through(trace, dependency_graph(trace, step, all_steps))
    result.scope = scope_label(trace, step, all_steps)
    return result


def path_through(trace: TraceData, graph: DependencyGraph) -> CriticalPath:
    """The critical path of a graph: the trace's own, or one whose slices a what-if replay
    moved (:mod:`explorer.analysis.whatif`)."""
    costs = path_costs(trace, graph)
    owners, categories = costs.owner, costs.categories
    # its per-edge costs handed to the search (freed there once its matrix holds them),
    # not held through the search's peak nor the description's
    handed = [costs.point_time, costs.u, costs.v, costs.cost, costs.inferred]
    del costs
    points, at = _longest_handed(handed)
    # the search's freed heap given back before the path's edges are gathered, and each
    # later stage's before the next: each stage's, kept by glibc, was the next one's floor
    release_freed_memory()
    owner = owners[at].astype(np.int64) if owners is not None else None
    edges = graph.edges.iloc[at]
    del owners, at
    if graph.arrays is None or categories is None or len(points) == 0:
        return _no_path(graph, edges)
    slices, start_ns, end_ns = _route(graph, points)
    del points
    edges, cat = _categorised(graph, edges, categories, owner)
    # Let go here, not held by this frame through the description: the route's points, the
    # breakdown's sweep of the slices and the owners (the edges' column now), ~25 MB that
    # were under the description's peak on a million-edge path.
    del categories, owner
    release_freed_memory()
    out = _describe(trace, graph, slices, start_ns, end_ns, edges, cat)
    release_freed_memory()
    return out


@dataclass(frozen=True)
class PathCosts:
    """The graph as the path search sees it: points ``2*k + 0|1`` (start or end of
    ``graph.nodes[k]``) at ``point_time``; edges ``u -> v`` (the rows of ``graph.edges``)
    costing ``cost`` ns of waiting; ``categories``: what the time on them is (None for an
    empty graph)."""

    point_time: np.ndarray
    u: np.ndarray
    v: np.ndarray
    cost: np.ndarray
    categories: TimeCategories | None
    #: Per edge: an inferred hand-off, which a route takes only where nothing else carries
    #: as much work.
    inferred: np.ndarray | None = None
    #: Per edge, the slice whose time it is (:func:`owners`).
    owner: np.ndarray | None = None


#: Edge types along a thread: their time is the slice whose own time follows the first point.
ALONG_THREAD: tuple[str, ...] = ("duration", "nest", "sibling", "thread_order")


def owners(graph: DependencyGraph, edges: pd.DataFrame) -> np.ndarray:
    """The slice whose time each edge is (-1: nobody's — an idle gap, a launch delay...).

    An edge along a thread (a duration, nesting, sibling or thread-order edge) is the time
    of the slice whose own time follows its first point: the slice after its start, its
    parent after its end (:func:`~explorer.analysis.graph.host_edges.stretch_owner`).
    """
    # By type code, not by name: an object array of names compared five times over
    # millions of edges took a second.
    code = type_codes(edges)
    src = edges["src"].to_numpy()
    dst = edges["dst"].to_numpy()
    sp = edges["src_point"].to_numpy()
    owner = np.full(len(edges), -1, np.int64)
    along = _type_table(ALONG_THREAD)[code]
    assert graph.owner_after is not None  # dependency_graph always fills it
    owner[along] = stretch_owner(graph.owner_after, src[along], sp[along] == 1)
    for t, who in (
        ("launch", src),
        ("sync", dst),
        ("queue", dst),
        ("cross_stream", dst),
        ("runtime_lock", dst),
    ):
        mine = code == EDGE_TYPES.index(t)
        owner[mine] = who[mine]
    return owner


def _type_table(types: Any) -> np.ndarray:
    """Per edge type code (and -1, last), whether it is one of ``types``: a lookup that
    replaces ``np.isin`` over millions of edges."""
    return np.array([t in types for t in EDGE_TYPES] + [False], bool)


def type_codes(edges: pd.DataFrame) -> np.ndarray:
    """Each edge's type as its index in :data:`EDGE_TYPES`."""
    types = edges["type"]
    cats = [str(c) for c in types.cat.categories]
    if cats == list(EDGE_TYPES[: len(cats)]):
        return types.cat.codes.to_numpy()
    to_edge = np.array([EDGE_TYPES.index(c) for c in cats] + [-1], np.int64)
    return to_edge[types.cat.codes.to_numpy()]


def path_costs(trace: TraceData, graph: DependencyGraph) -> PathCosts:
    """What each edge of the graph costs the path: its weight when the time is waiting,
    nothing when it is work."""
    arrays = graph.arrays
    nodes = graph.nodes
    e = graph.edges
    empty = np.empty(0, np.int64)
    if arrays is None or len(nodes) == 0:
        return PathCosts(empty, empty, empty, empty.astype(np.float64), None)
    launches = np.zeros(arrays.n, bool)
    flows = trace.flows
    if len(flows):
        launches[flows["src"].to_numpy()[np.asarray(flows["type"] == "launch")]] = True
    launches |= launch_call_mask(trace.slices["name"].array)
    categories = TimeCategories(trace, arrays, launches)
    categories.sweep_all()  # its peak before the per-edge arrays below are held
    m = len(nodes)
    src = e["src"].to_numpy()
    dst = e["dst"].to_numpy()
    u, v = graph.point_edges()
    weight = e["weight"].to_numpy(np.int64)
    type_code = type_codes(e)
    waiting = _type_table(WAIT_TYPES)[type_code]
    # A slice's own time is waiting when the slice is a wait (a sync call, an event wait),
    # a call the graph shows blocked on the device (a synchronous or pageable copy, a
    # launch held back by a full queue), or a stretch in which its thread recorded nothing
    # while another thread or the device worked (``backward()`` while the autograd engine
    # runs; :mod:`explorer.analysis.graph.thread_edges`): the route through that work is
    # then the critical one.
    is_dur = type_code == EDGE_TYPES.index("duration")
    blocked = np.zeros(arrays.n, bool)
    waited = (type_code == EDGE_TYPES.index("sync")) | (type_code == EDGE_TYPES.index("queue"))
    blocked[dst[waited]] = True
    waiting[is_dur] = arrays.kind_in(("sync",), src[is_dur]) | blocked[src[is_dur]]
    # A stretch that hands off to work elsewhere (a hand-back ends at its end) is waiting.
    joined = np.zeros(2 * m, bool)
    joined[v[type_code == EDGE_TYPES.index("handback")]] = True
    own = _type_table(("duration", "nest", "sibling"))[type_code]
    waiting |= own & joined[v]
    # The own time of an annotation or a Python frame — a bare annotation, the gaps between
    # a frame's children — is not work the path should credit to it (unless the breakdown
    # counts it as something, like gloo's collectives or compile spans): it costs as
    # waiting, so wherever the trace shows what ran meanwhile (another thread, a slice
    # that overlaps the frame instead of nesting in it) the path goes there. Where nothing
    # else ran it is the only route, and the path still takes it.
    # (Each test on the edges still in question only: per-edge temporaries of 2M edges
    # are 17 MB each, on top of everything the search holds.)
    owner = graph.edge_owners()
    framing = own & (owner >= 0)
    frame_dur = np.flatnonzero(framing & is_dur)
    framing[frame_dur] = ~arrays.kind_in(("python",), np.maximum(src[frame_dur], 0))
    del frame_dur
    framing[framing] = arrays.kind_in(WAITER_KINDS, owner[framing])
    asked = np.flatnonzero(framing)
    at = np.where(
        e["src_point"].to_numpy()[asked] == 0, arrays.ts[src[asked]], arrays.end[src[asked]]
    )
    plain = [PATH_CATEGORIES.index("host_compute"), PATH_CATEGORIES.index("idle_gap")]
    framing[asked] = np.isin(categories(owner[asked], at), plain)
    del asked, at
    waiting |= framing
    cost = weight.astype(np.float64)
    cost[~waiting] = 0.0

    point_time = np.empty(2 * m, np.int64)
    point_time[0::2] = arrays.ts[nodes]
    point_time[1::2] = arrays.end[nodes]
    inferred = _type_table(INFERRED_TYPES)[type_code]
    return PathCosts(point_time, u, v, cost, categories, inferred, owner)


def longest_work_path(
    point_time: np.ndarray,
    u: np.ndarray,
    v: np.ndarray,
    cost: np.ndarray,
    avoid: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The route carrying the most work through a graph of time points.

    Every edge ``u[i] -> v[i]`` runs forward in time and costs ``cost[i]`` (0 <= cost <=
    its span) of waiting; a route from a point with no incoming edge (a root) to a point
    ``p`` carries ``t(p) - t(root) - waiting`` of work. Returns the points of the route with
    the most work (ties: the latest end, then the earliest root) and the indices of its
    edges. One Dijkstra from a virtual source whose edge to each root costs the time before
    that root (``dist = (t - t0) - work``): C speed on millions of points, the same answer
    as the longest-path DP over a topological order, without a Python loop over nodes.
    Where routes carry the same work, one that takes no edge marked in ``avoid`` (the
    graph's inferred hand-offs) is preferred at each point: a sync the trace records
    explains a wait better than a hand-off inferred from what was busy.
    """
    return _longest_handed([point_time, u, v, cost, avoid])


def _longest_handed(given: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """:func:`longest_work_path` of ``[point_time, u, v, cost, avoid]``, handed over:
    ``given`` is emptied, so that where the caller keeps no other reference the costs are
    freed once the search's matrix holds them (17 MB on a 2.2M-edge graph)."""
    point_time, u, v, cost, avoid = given
    given.clear()
    if "scipy.sparse.csgraph" not in sys.modules:
        ensure_room(SCIPY_INIT_BYTES)
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import dijkstra

    n = len(point_time)
    if n == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    # the costs' freed temporaries given back before the matrix's arrays are written: kept
    # by glibc, they were under the matrix's layout, the first report's peak
    release_freed_memory()
    u = np.asarray(u)
    v = np.asarray(v)
    cost = np.asarray(cost, np.float64)
    t0 = int(point_time.min())
    has_in = np.zeros(n, bool)
    has_in[v] = True
    roots = np.flatnonzero(~has_in)
    del has_in
    late = (point_time[roots] - t0).astype(np.float64)
    entry = late + np.where(late > 0, 0.5, 0.0)  # the half ns breaks ties towards early starts
    source = n
    tiny = np.finfo(np.float64).tiny
    index = np.int32 if n + 2 < np.iinfo(np.int32).max else np.int64
    prefer = avoid is not None and bool(np.any(avoid))
    # The matrix is laid out directly, in CSR order (rows, then columns; the roots' edges
    # in the source's row, last), so that only its own arrays live through the search (its
    # peak on a million-point graph). csr_matrix would add up duplicate (u, v) entries:
    # each pair keeps its cheapest edge, and zero costs are stored as the smallest positive
    # float (a stored zero is no edge to csgraph). ``sel``: per stored edge, its index in
    # the edges given (None: the edges as they come).
    sel: np.ndarray | None = None
    if in_pair_order(u, v):
        # The graph's edges as they come (sorted, each pair once): no sort (0.1 s on 1.6M)
        # and no concatenated copies of them.
        e = len(u)
        data = np.empty(e + len(roots), np.float64)
        np.maximum(cost, tiny, out=data[:e])
        np.maximum(entry, tiny, out=data[e:])
        indices = np.empty(e + len(roots), index)
        indices[:e] = v
        indices[e:] = roots
        del cost
        counts = np.bincount(u, minlength=n + 1)
        counts[source] += len(roots)
        bad = np.r_[np.asarray(avoid, bool), np.zeros(len(roots), bool)] if prefer else None
    else:
        rows = np.concatenate([np.asarray(u, np.int64), np.full(len(roots), source)])
        cols = np.concatenate([np.asarray(v, np.int64), roots])
        both = np.concatenate([cost, entry])
        del cost
        pair = rows * (n + 1) + cols
        order = lexsort((both, pair))  # edges come nearly in pair order: ties only sorted
        sorted_pair = pair[order]
        del pair
        sel = order[np.r_[True, sorted_pair[1:] != sorted_pair[:-1]]]
        del order, sorted_pair
        data = np.maximum(both[sel], tiny)
        indices = cols[sel].astype(index)
        counts = np.bincount(rows[sel], minlength=n + 1)
        del rows, cols, both
        bad = np.r_[np.asarray(avoid, bool), np.zeros(len(roots), bool)][sel] if prefer else None
    del u, v  # the matrix holds them now
    indptr = np.zeros(n + 2, index)
    np.cumsum(counts, out=indptr[1:])
    del counts
    matrix = csr_matrix((data, indices, indptr), shape=(n + 1, n + 1))
    # The search's own memory (~24 MB over its outputs on 2M points, scipy 1.17) is mapped
    # fresh: the heap the costs' temporaries were freed to is given back first, or it is
    # under the search, kept but unused.
    release_freed_memory()
    dist, pred = dijkstra(matrix, directed=True, indices=source, return_predecessors=True)
    del matrix
    release_freed_memory()  # the search's own (~24 MB on 2M points), before the preference's
    if prefer:
        assert bad is not None
        rows = np.repeat(np.arange(n + 1, dtype=index), np.diff(indptr))
        pred = _preferring(pred, dist, rows, indices, data, bad)
        del rows, bad
    del data
    dist = dist[:n]
    release_freed_memory()  # the matrix's and the preference's, before the route's temporaries
    # The path ends where the work is largest (the latest such point on ties): a watchdog
    # thread polling until the very end of a trace ends late, but does little work, and is
    # not what set the step's time.
    # (per point, in place: -inf where unreached; the reached points' gathered times and
    # their differences were five temporaries of the points' length, the search's peak)
    work = np.empty(n, np.float64)
    np.subtract(point_time, t0, out=work, casting="unsafe")  # in int64, as the times are
    work -= dist
    del dist
    np.round(work, 3, out=work)
    most = np.flatnonzero(work == work.max())  # of these, the latest; of those, the last point
    del work
    latest = most[point_time[most] == point_time[most].max()]
    sink = int(latest[-1])
    # The distances and the points' times (two arrays of the points' length, 22 MB on the
    # synthetic 1M-event trace) let go before the route is walked, the predecessors before
    # its edges are looked up: held to the end, they were under the first report's peak.
    del point_time, most, latest
    points = _route_to(pred, sink, source)
    del pred
    if len(points) < 2:
        return points, np.empty(0, np.int64)
    at = _stored_at(indptr, indices, points[:-1], points[1:])
    return points, (at if sel is None else sel[at])


def in_pair_order(u: np.ndarray, v: np.ndarray) -> bool:
    """Whether edges ``u -> v`` come sorted by ``(u, v)``, each pair once."""
    if len(u) < 2:
        return True
    return bool(np.all((u[1:] > u[:-1]) | ((u[1:] == u[:-1]) & (v[1:] > v[:-1]))))


#: Path edges :func:`_stored_at` finds at a time.
STORED_AT_ONCE = 1 << 18


def _stored_at(indptr: np.ndarray, indices: np.ndarray, p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Position in a CSR matrix (columns ascending in each row, each once) of each stored
    entry ``(p[i], q[i])``: a binary search within each row's columns, all rows at once —
    :data:`STORED_AT_ONCE` entries at a time (the search's bounds and masks over a
    million-edge path at once were ~20 MB, the top of a first report's search)."""
    if len(p) > STORED_AT_ONCE:
        out = np.empty(len(p), np.int64)
        for i in range(0, len(p), STORED_AT_ONCE):
            j = i + STORED_AT_ONCE
            out[i:j] = _stored_at(indptr, indices, p[i:j], q[i:j])
        return out
    # (in the matrix's index width, bounds narrowed in place: a million-edge path's int64
    # bounds, rebuilt each round, were the search's peak)
    lo = indptr[p]
    hi = indptr[p + 1]
    last = max(len(indices) - 1, 0)
    while True:
        live = lo < hi
        if not live.any():
            return lo.astype(np.int64)
        mid = hi - lo
        mid //= 2
        mid += lo
        np.minimum(mid, last, out=mid)
        right = live & (indices[mid] < q)
        lo[right] = mid[right] + 1
        live &= ~right
        hi[live] = mid[live]


def _preferring(
    pred: np.ndarray,
    dist: np.ndarray,
    r: np.ndarray,
    c: np.ndarray,
    data: np.ndarray,
    bad: np.ndarray,
) -> np.ndarray:
    """The search's predecessors, changed where the edge into a point is one to avoid
    (``bad``) and another edge into it is as cheap (tight: ``dist[r] + cost == dist[c]``,
    exact in float for integer costs). ``r -> c``: the stored edges, ``data`` their costs.
    ``pred`` is changed in place (a copy of it was the search's peak) and returned."""
    is_pred = pred[c] == r
    pred_bad = np.zeros(len(pred), bool)
    pred_bad[c[is_pred]] = bad[is_pred]
    del is_pred
    # Only edges into a point reached by an edge to avoid can replace it: tested for
    # tightness alone (a few of the millions), in edge order (the last tight one wins).
    cand = np.flatnonzero(pred_bad[c] & ~bad)
    del pred_bad
    cost = data[cand]
    cost[cost <= np.finfo(np.float64).tiny] = 0.0
    at = dist[r[cand]]
    swap = cand[np.isfinite(at) & (at + cost == dist[c[cand]])]
    pred[c[swap]] = r[swap]
    return pred


def _route_to(pred: np.ndarray, sink: int, source: int) -> np.ndarray:
    """The points from the search's source to ``sink`` (source left out), following the
    predecessors back: a breadth-first walk of the predecessor tree from ``sink`` (each
    point's one edge to its predecessor), C speed where a Python loop over a million-point
    route took 0.2 s."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import breadth_first_order

    has = pred >= 0
    index = np.int32 if len(pred) + 1 < np.iinfo(np.int32).max else np.int64
    indptr = np.zeros(len(pred) + 1, index)
    np.cumsum(has, out=indptr[1:])
    tree = csr_matrix(
        (np.ones(int(indptr[-1]), np.int8), pred[has].astype(index), indptr),
        shape=(len(pred), len(pred)),
    )
    back = breadth_first_order(tree, sink, directed=True, return_predecessors=False)
    back = back[back != source]
    return np.ascontiguousarray(back[::-1], dtype=np.int64)


def _route(graph: DependencyGraph, points: np.ndarray) -> tuple[np.ndarray, int, int]:
    """The slices a route of points passes (each once, in the order the route first
    reaches it), and its start and end times."""
    arrays = graph.arrays
    assert arrays is not None  # path_through returns early without them
    slice_of_point = graph.nodes[points // 2]
    # Each slice once, where the path first reaches it (as ``np.unique``'s first index,
    # by a table over the slice ids rather than a sort of the route).
    first_at = _first_positions(slice_of_point, arrays.n)
    first = first_at[first_at < len(points)]
    del first_at
    slices = slice_of_point[np.sort(first)]
    del first
    # only the route's two ends' times: every point's was the description's largest
    # temporaries (three arrays of the route's length) on a million-edge path
    ends = [0, -1]
    route_ends = point_times(slice_of_point[ends], points[ends] % 2, arrays.ts, arrays.end)
    return slices, int(route_ends[0]), int(route_ends[1])


def _describe(
    trace: TraceData,
    graph: DependencyGraph,
    slices: np.ndarray,
    start_ns: int,
    end_ns: int,
    edges: pd.DataFrame,
    cat: np.ndarray,
) -> CriticalPath:
    """The path as results: its slices, its edges with what their time is (``cat``: the
    categories as indices, from :func:`_categorised`), the time per category, and the
    ops, lines and track segments that hold it."""
    w = edges["weight"].to_numpy(np.int64)
    summary = _summary(cat, w)
    # Idle time (only a step span around it) is nobody's to speed up.
    busy_owner = np.where(cat == PATH_CATEGORIES.index("idle_gap"), -1, edges["owner"].to_numpy())
    del cat
    top_ops = _top_ops(trace, busy_owner, w, end_ns - start_ns)
    top_lines = _top_lines(trace, busy_owner, w, end_ns - start_ns)
    del busy_owner  # (each per-edge array let go before the segments' temporaries)
    release_freed_memory()
    return CriticalPath(
        slices=slices,
        edges=edges,
        start_ns=start_ns,
        end_ns=end_ns,
        summary=summary,
        top_ops=top_ops,
        top_lines=top_lines,
        step=graph.step,
        window=graph.window,
        segments=_segments(trace, edges, start_ns),
    )


def _no_path(graph: DependencyGraph, edges: pd.DataFrame) -> CriticalPath:
    """The result for a graph with no route through it (no nodes)."""
    return CriticalPath(
        slices=np.empty(0, np.int64),
        edges=edges.assign(category=[], owner=[]),
        start_ns=0,
        end_ns=0,
        summary=_summary(np.empty(0, np.int64), np.empty(0, np.int64)),
        top_ops=_empty_ops(),
        top_lines=_empty_lines(),
        step=graph.step,
        window=graph.window,
    )


def _categorised(
    graph: DependencyGraph,
    edges: pd.DataFrame,
    categories: TimeCategories,
    owner: np.ndarray | None = None,
) -> tuple[pd.DataFrame, np.ndarray]:
    """The path's edges with ``owner`` (the slice whose time each is, -1: nobody's) and
    ``category`` (one of :data:`PATH_CATEGORIES`), and the categories as indices into it
    (-1: none)."""
    arrays = graph.arrays
    assert arrays is not None  # path_through returns early without them
    if owner is None:
        owner = owners(graph, edges)
    code = type_codes(edges)
    # A slice's own time (duration, self time) is what the slice is; launch delays, waits
    # and gaps are what their type says. As indices into PATH_CATEGORIES (-1: ""), named
    # once at the end: object arrays of a million names cost a second between them.
    names = [*PATH_CATEGORIES, ""]
    type_cat = [
        PATH_CATEGORIES.index(TYPE_CATEGORY[t]) if t in TYPE_CATEGORY else -1 for t in EDGE_TYPES
    ]
    cat = np.array(type_cat + [-1], np.int8)[code]
    own = _type_table(("duration", "nest", "sibling"))[code] | (cat < 0)
    has = own & (owner >= 0)
    src = edges["src"].to_numpy()
    src_point = edges["src_point"].to_numpy()

    def leaves(which: np.ndarray) -> np.ndarray:
        """When the edges ``which`` picks leave their source (its start or its end): for
        them only, not every edge of a million-edge path."""
        return point_times(src[which], src_point[which], arrays.ts, arrays.end)

    cat[has] = categories(owner[has], leaves(has))
    # A hand-off's time is the waiting track's: what the breakdown says that thread was
    # doing then (a bare step span: idle; a loader's annotation: input), idle on a stream.
    hand = _type_table(INFERRED_TYPES)[code]
    waiter = np.where(code == EDGE_TYPES.index("handoff"), src, edges["dst"].to_numpy())
    on_host = hand & arrays.host[waiter]
    cat[hand] = PATH_CATEGORIES.index("idle_gap")
    cat[on_host] = categories.on_track(arrays.track[waiter[on_host]], leaves(on_host))
    # Categorical: a million category names as strings cost 0.1 s to build (Arrow strings).
    category = pd.Categorical.from_codes(np.where(cat < 0, len(names) - 1, cat), names)
    return edges.reset_index(drop=True).assign(category=category, owner=owner), cat


def _summary(cat: np.ndarray, w: np.ndarray) -> pd.DataFrame:
    """``category, ns``: the path's time in each of :data:`PATH_CATEGORIES` (zeros kept);
    ``cat``: indices into it (-1: none)."""
    ok = cat >= 0
    ns = np.zeros(len(PATH_CATEGORIES), np.int64)
    np.add.at(ns, cat[ok], np.asarray(w, np.int64)[ok])
    return pd.DataFrame({"category": list(PATH_CATEGORIES), "ns": ns})


def _segments_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    cols = ["track", "label", "start_ns", "end_ns", "ns", "top_op"]
    return pd.DataFrame(rows, columns=cols)


def _segments(trace: TraceData, edges: pd.DataFrame, start: int) -> pd.DataFrame:
    """Merge consecutive path edges on the same track (the owner's, else the destination's;
    a hand-off's, the source's) into segments: the path read as "host 0-570 us, then stream 7 for 36 us, then ..."."""
    if len(edges) == 0:
        return _segments_frame([])
    # Temporaries over the path's million edges kept narrow (int32 segment and pair keys,
    # no per-edge running end): they were the description's peak.
    owner = edges["owner"].to_numpy()
    mine = owner >= 0
    where = edges["dst"].to_numpy().copy()
    where[mine] = owner[mine]
    # a hand-off's time is the waiting track's, and it leaves from there
    hand = type_codes(edges) == EDGE_TYPES.index("handoff")
    where[hand] = edges["src"].to_numpy()[hand]
    track = trace.slices["track"].to_numpy()[where]
    del where, hand
    w = edges["weight"].to_numpy(np.int64)
    new_seg = np.empty(len(track), bool)
    new_seg[0] = True
    np.not_equal(track[1:], track[:-1], out=new_seg[1:])
    brk = np.flatnonzero(new_seg)
    seg_id = np.cumsum(new_seg, dtype=np.int32 if len(brk) < 2**31 else np.int64)
    seg_id -= 1
    del new_seg
    # By name code, named once per segment: a million names as strings took half a second.
    name = trace.slices["name"].array
    # Per (segment, name) the time, then per segment the name with the most (ties: the one
    # first on the path): by a dense code of one integer key (:func:`~explorer.trace.columns.dense_ranks`), not a
    # frame grouped by two columns (the critical path's peak on a million-edge path).
    width = len(name.categories) + 1  # codes + 1: a missing name (-1) is 0
    space = len(brk) * width
    key = seg_id[mine].astype(np.int32 if space < 2**31 else np.int64)
    del seg_id
    key *= width
    key += name.codes[owner[mine]]
    key += 1
    pairs, group = dense_ranks(key)
    del key
    sums = np.zeros(len(pairs), np.int64)
    np.add.at(sums, group, w[mine])
    first_at = _first_positions(group, len(pairs))
    del group
    group_seg, group_code = np.divmod(pairs.astype(np.int64), width)
    best = np.lexsort((first_at, -sums, group_seg))
    best = best[np.r_[True, group_seg[best][1:] != group_seg[best][:-1]]] if len(best) else best
    texts = np.append(np.asarray(name.categories.astype(str), dtype=object), "nan")
    top_op = np.full(len(brk), "", dtype=object)
    top_op[group_seg[best]] = texts[group_code[best] - 1]
    seg_ns = np.add.reduceat(w, brk)
    seg_end = start + np.cumsum(seg_ns)
    seg_track = track[brk]
    labels = trace.tracks.set_index("id")["label"].astype(str)
    label = labels.reindex(seg_track).fillna("").to_numpy(dtype=object)
    return pd.DataFrame(
        {
            "track": seg_track.astype(np.int64),
            "label": label,
            "start_ns": (seg_end - seg_ns).astype(np.int64),
            "end_ns": seg_end.astype(np.int64),
            "ns": seg_ns.astype(np.int64),
            "top_op": top_op,
        }
    )


def _empty_ops() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "name": pd.Series([], dtype=object),
            "kind": pd.Series([], dtype=object),
            "ns": np.empty(0, np.int64),
            "count": np.empty(0, np.int64),
            "share": np.empty(0),
        }
    )


def _empty_lines() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "file": pd.Series([], dtype=object),
            "line": np.empty(0, np.int64),
            "function": pd.Series([], dtype=object),
            "ns": np.empty(0, np.int64),
            "share": np.empty(0),
        }
    )


def _explorer_frame(name: str, kind: str) -> bool:
    """A Python frame of Explorer's own code (the collector's hooks): never listed as work
    on the user's path."""
    frame = parse_frame(name) if kind == "python" else None
    return frame is not None and is_explorer_file(frame[0])


def _first_positions(group: np.ndarray, groups: int) -> np.ndarray:
    """Per group ``0..groups-1``, the first position in ``group`` that holds it (as
    ``np.unique``'s first index): the positions in int32 where they fit, the table in the
    same type (``np.minimum.at`` of values of another type than its table's takes ~15x
    longer: 49 vs 3 ms on a million)."""
    kind = np.int32 if len(group) < 2**31 else np.int64
    first = np.full(groups, len(group), kind)
    np.minimum.at(first, group, np.arange(len(group), dtype=kind))
    return first


def _top_ops(trace: TraceData, owner: np.ndarray, w: np.ndarray, length: int) -> pd.DataFrame:
    """Path time per op name (a slice's duration or self time on the path, its launch delay
    and the waits it ended)."""
    has = owner >= 0
    if not has.any():
        return _empty_ops()
    s = trace.slices
    ids = owner[has].astype(np.int32 if len(s) < 2**31 else np.int64)
    names, kinds = s["name"].array, s["kind"].array
    # Grouped by (name, kind) code, in the order each pair first appears (as a groupby
    # with sort=False; missing names or kinds left out, as it drops them): a million names
    # and kinds taken as strings cost more than the rest of the path's description.
    # Each slice has one (name, kind), so a pair's distinct slices are counted over the
    # distinct owners; tables by dense pair code, not sorts of the million path edges.
    # (narrow keys and positions: per-edge temporaries of a million-edge path were the
    # description's peak)
    width = len(kinds.categories) + 1
    space = (len(names.categories) + 1) * width
    name_code, kind_code = names.codes[ids], kinds.codes[ids]
    known = (name_code >= 0) & (kind_code >= 0)
    key = name_code[known].astype(np.int32 if space < 2**31 else np.int64)
    del name_code
    key *= width
    key += kind_code[known]
    del kind_code
    if len(key) == 0:
        return _empty_ops()
    pairs, group = dense_ranks(key)
    del key
    first = _first_positions(group, len(pairs))
    counted = has.copy()
    counted[has] = known
    ns = np.zeros(len(pairs), np.int64)
    np.add.at(ns, group, w[counted])
    del group, counted
    seen = np.zeros(len(s), bool)
    seen[ids[known]] = True
    del ids, known
    distinct = np.flatnonzero(seen)
    distinct_key = names.codes[distinct].astype(np.int64) * width + kinds.codes[distinct]
    count = np.bincount(np.searchsorted(pairs, distinct_key), minlength=len(pairs))
    seen_order = np.argsort(first, kind="stable")
    pairs = pairs[seen_order]
    name_text = np.asarray(names.categories.astype(str), dtype=object)
    kind_text = np.asarray(kinds.categories.astype(str), dtype=object)
    out = pd.DataFrame(
        {
            "name": pd.Series(name_text[pairs // width], dtype=object),
            "kind": pd.Series(kind_text[pairs % width], dtype=object),
            "ns": ns[seen_order],
            "count": count[seen_order].astype(np.int64),
        }
    )
    ours = [_explorer_frame(n, k) for n, k in zip(out["name"], out["kind"], strict=True)]
    out = out[~np.asarray(ours, bool)]
    out = out.sort_values("ns", ascending=False, kind="stable").head(TOP).reset_index(drop=True)
    out["share"] = out["ns"] / length if length else 0.0
    return out


def _top_lines(trace: TraceData, owner: np.ndarray, w: np.ndarray, length: int) -> pd.DataFrame:
    """Path time per user source line of the owning slices (device ops through the call
    that launched them)."""
    has = owner >= 0
    if not has.any():
        return _empty_lines()
    code, frames = frame_codes(trace)
    c = code[owner[has]]
    known = c >= 0
    if not known.any():
        return _empty_lines()
    df = frames.iloc[c[known]].reset_index(drop=True)
    df = df[["file", "line", "function"]].assign(ns=w[has][known])
    out = (
        df.groupby(["file", "line", "function"], sort=False, observed=True)["ns"]
        .sum()
        .reset_index()
    )
    out = out.sort_values("ns", ascending=False, kind="stable").head(TOP).reset_index(drop=True)
    out["share"] = out["ns"] / length if length else 0.0
    return out

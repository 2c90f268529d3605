"""What waited for what: a typed, weighted DAG over the slices of a trace or of one step.

Nodes are slice ids; each edge joins a point of one slice (its start or end) to a point of
another and says the second could not happen before the first (see
:mod:`explorer.analysis.graph.edges` for the types and what their weights mean). The edge
families come from :mod:`explorer.analysis.graph`: host nesting and thread order, launches
and stream order, host syncs and cross-stream events, forward -> backward, Execution Trace
data dependencies, the runtime lock between launching threads, and hand-offs: where a
track records nothing while another thread or a device works (``backward()`` waiting for
the autograd engine's thread, a stream idle while another stream computes), the work
done meanwhile. The collector's own
copy, sync and fallback events sit on the thread that made them, around the ops they serve,
so nesting ties them in.

Every edge type but the hand-offs is a dependency the trace records (a launch, a sync, an
event, a flow, a thread's own order); the hand-offs
(:data:`~explorer.analysis.graph.edges.INFERRED_TYPES`) are inferred from what was busy, for
the critical path to follow the work, and are no constraint for a replay.

Built vectorised (sorts, ``searchsorted``, merges); cached on the trace per step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from explorer.analysis.attribution import launcher as launched_by
from explorer.analysis.graph import data_edges, device_edges, host_edges, sync_edges, thread_edges
from explorer.analysis.graph.edges import EDGE_TYPES, EdgeList
from explorer.analysis.graph.nodes import SliceArrays, graph_device_mode, id_dtype, slice_arrays
from explorer.trace.memo import memoised
from explorer.trace.memory_limits import release_freed_memory
from explorer.trace.model import TraceData


@dataclass
class DependencyGraph:
    """``nodes``: slice ids in the graph (ascending). ``edges``: one row per edge —
    ``src``, ``dst`` (slice ids), ``type`` (one of :data:`EDGE_TYPES`), ``weight`` (ns that
    pass along the edge, >= 0), ``src_point``/``dst_point`` (0 = the slice's start,
    1 = its end). ``window``: the ``[start, end)`` it was built for (the step's, or the
    trace's). ``dropped``: edges left out because the trace's clocks put them back in time.
    """

    nodes: np.ndarray
    edges: pd.DataFrame
    step: int | None = None
    window: tuple[int, int] = (0, 0)
    dropped: int = 0
    #: The slices' columns the path search, its description and the replays read (the
    #: edge builders' own columns left out: :meth:`~explorer.analysis.graph.nodes.SliceArrays.kept`).
    arrays: SliceArrays | None = field(default=None, repr=False)
    #: Per slice, whose own time follows its start (``[:, 0]``) and end (``[:, 1]``) on its
    #: thread (-1: idle) — see :func:`~explorer.analysis.graph.host_edges.thread_chains`.
    owner_after: np.ndarray | None = field(default=None, repr=False)
    #: What :meth:`point_edges` and :meth:`edge_owners` computed (the path search and every
    #: replay read them): not copied by ``dataclasses.replace``, which may change the edges.
    _cache: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def point_edges(self) -> tuple[np.ndarray, np.ndarray]:
        """Each edge as point ids ``u -> v``: ``2*k + 0|1``, the start or end of
        ``nodes[k]``. Computed once per graph, and held by it (the path search and every
        replay read them) as int32 where the points fit: a key made of them is widened
        first (``u.astype(np.int64) * (n + 1) + v``)."""
        got = self._cache.get("points")
        if got is None:
            e = self.edges
            src = e["src"].to_numpy(np.int64)
            dst = e["dst"].to_numpy(np.int64)
            rank = _node_rank(self.nodes, src, dst)
            kind = id_dtype(2 * len(self.nodes))
            got = (
                (2 * rank(src) + e["src_point"].to_numpy(np.int64)).astype(kind, copy=False),
                (2 * rank(dst) + e["dst_point"].to_numpy(np.int64)).astype(kind, copy=False),
            )
            self._cache["points"] = got
        return got

    def edge_owners(self) -> np.ndarray:
        """Per edge, the slice whose time it is (-1: nobody's; see
        :func:`~explorer.analysis.critical_path.owners`). Computed once per graph, held as
        int32 where the slice ids fit."""
        got = self._cache.get("owners")
        if got is None:
            from explorer.analysis.critical_path import owners

            kind = id_dtype(self.arrays.n if self.arrays is not None else 0)
            got = self._cache["owners"] = owners(self, self.edges).astype(kind, copy=False)
        return got

    def counts(self) -> dict[str, int]:
        """Number of edges of each type (every type listed, zeros included)."""
        vc = self.edges["type"].value_counts()
        return {t: int(vc.get(t, 0)) for t in EDGE_TYPES}

    def edges_of(self, slice_id: int) -> pd.DataFrame:
        """Edges into or out of one slice — what it waited for and what waited for it."""
        e = self.edges
        return e[(e["src"].to_numpy() == slice_id) | (e["dst"].to_numpy() == slice_id)]

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "window": list(self.window),
            "nodes": int(len(self.nodes)),
            "edges": self.counts(),
            "dropped": self.dropped,
        }


def _node_rank(nodes: np.ndarray, *ids: np.ndarray) -> Any:
    """A function giving each slice id its index in ``nodes`` (ascending ids): a lookup
    table where every id is a node (linear, unlike a binary search per id), else
    ``searchsorted`` as before."""
    if len(nodes) == 0 or any(len(i) and (i.min() < 0 or i.max() > nodes[-1]) for i in ids):
        return lambda i: np.searchsorted(nodes, i)
    table = np.full(int(nodes[-1]) + 1, -1, np.int64)
    table[nodes] = np.arange(len(nodes))
    if any(len(i) and (table[i] < 0).any() for i in ids):
        return lambda i: np.searchsorted(nodes, i)
    return lambda i: table[i]


def step_window(
    trace: TraceData, step: int | None, all_steps: bool = False
) -> tuple[int, int] | None:
    """The ``[start, end)`` of a step; for ``None``, the whole trace (None) or, with
    ``all_steps``, the span of all the trace's steps (``ProfilerStep#N`` or the user's
    ``--steps`` pattern — still the whole trace when it has none)."""
    from explorer.analysis.steps import select_steps, steps

    if step is not None:
        row = select_steps(trace, step)
        return int(row["start_ns"].iloc[0]), int(row["end_ns"].iloc[0])
    table = steps(trace)
    if not all_steps or len(table) == 0 or (table["slice"] < 0).any():
        return None
    return int(table["start_ns"].min()), int(table["end_ns"].max())


#: The memo results a graph build reads before its own work (:func:`read_first`).
READ_FIRST: tuple[str, ...] = (
    "steps",
    "slice_sides",
    "launcher",
    "slice_classes",
    "host_slice_reasons",
)


def read_first(trace: TraceData) -> None:
    """Compute what a graph build reads of the other analyses (:data:`READ_FIRST`: the
    steps its window comes from, the slice classes and the host reasons in the graph's
    mode): a process that forks a child for the graph-free analyses has the child make
    these first and hand them over while it writes the cache entry (see
    :func:`~explorer.analysis.ahead.compute_ahead`'s ``early``)."""
    from explorer.analysis.breakdown import host_slice_reasons
    from explorer.analysis.classify import classes
    from explorer.analysis.steps import steps

    steps(trace)
    classes(trace)
    host_slice_reasons(trace, graph_device_mode(trace))


def scope_label(trace: TraceData, step: int | None, all_steps: bool = False) -> str:
    """What a graph or path covers, in words: ``step 3``, ``steps 0-9``, ``the whole
    trace``."""
    if step is not None:
        return f"step {step}"
    if step_window(trace, None, all_steps) is None:
        return "the whole trace"
    from explorer.analysis.steps import steps

    numbers = steps(trace)["step"]
    lo, hi = int(numbers.min()), int(numbers.max())
    return f"step {lo}" if lo == hi else f"steps {lo}-{hi}"


@memoised("dependency_graph", depends_on=("steps", "launcher"))
def dependency_graph(
    trace: TraceData, step: int | None = None, all_steps: bool = False
) -> DependencyGraph:
    """The dependency graph of one step (``None``: the whole trace, or with ``all_steps``
    every step, see :func:`step_window`). Kept in the memo per scope."""
    window = step_window(trace, step, all_steps)
    arrays = slice_arrays(trace, window)
    edges = EdgeList()
    flows = trace.flows
    host = host_edges.host_points(arrays)  # sorted once: the chains and the hand-offs read it
    owner_after = host_edges.thread_chains(
        edges, arrays, None if window is None else window[1], host
    )
    # The freed temporaries of each stage given back before the next allocates (twice: after
    # the chains, and before the join): a worker thread's heap keeps them otherwise, and
    # the viewer's peak with every panel filled was the graph's (467 MB rather than
    # 479-487 on the synthetic 1M-event trace, in no measurable time).
    release_freed_memory()
    launcher = launched_by(trace)
    device_edges.launches(edges, arrays, launcher)
    device_edges.stream_order(edges, arrays)
    work = device_edges.device_work_mask(arrays)
    name_codes = trace.slices["name"].cat.codes.to_numpy()
    device_edges.queue_backpressure(edges, arrays, launcher, name_codes, work)
    sync_edges.host_syncs(edges, arrays, trace, launcher, work)
    host_edges.forward_backward(edges, arrays, flows)
    host_edges.runtime_lock(edges, arrays, host_edges.launch_call_mask(trace.slices["name"].array))
    counted = thread_edges.counted_frames(trace, graph_device_mode(trace))
    points = thread_edges.chain_points(arrays, host)
    del host  # only the chains' points, with the device streams', held from here
    thread_edges.handoffs(
        edges,
        arrays,
        owner_after,
        thread_edges.track_devices(trace.tracks),
        counted,
        None if window is None else window[1],
        points,
    )
    del points, counted  # ~25 MB of points on a million slices: not held through the join
    release_freed_memory()
    data_edges.execution_trace_edges(edges, arrays, trace.execution_trace)
    frame, dropped = edges.to_frame(arrays.ts, arrays.end)
    nodes = np.flatnonzero(arrays.node)
    return DependencyGraph(
        nodes=nodes,
        edges=frame,
        step=step,
        window=window if window is not None else _span(arrays, nodes),
        dropped=dropped,
        arrays=arrays.kept(),
        owner_after=owner_after,
    )


def _span(arrays: SliceArrays, nodes: np.ndarray) -> tuple[int, int]:
    """``[start, end)`` of the nodes: the window of a graph over the whole trace."""
    if not len(nodes):
        return (0, 0)
    return int(arrays.ts[nodes].min()), int(arrays.end[nodes].max())


#: Dependency-graph edges worth an arrow: a wait that crosses from one track to another.
CROSS_TRACK_WAITS: frozenset[str] = frozenset({"cross_stream", "sync", "queue"})


@memoised("cross_track_waits", depends_on=("dependency_graph",))
def cross_track_waits(trace: TraceData, step: int | None = None) -> pd.DataFrame:
    """``src, dst, type`` (type as text): the graph's edges where one stream or thread
    waited on another (cross-stream events, host syncs, a full launch queue), one per pair
    of slices. What an export draws as flows; kept (and stored) on its own, so an export
    after a report does not build the whole graph again."""
    e = dependency_graph(trace, step).edges
    keep = e["type"].astype(str).isin(CROSS_TRACK_WAITS).to_numpy() & (
        e["src"].to_numpy() != e["dst"].to_numpy()
    )
    flows = e.loc[keep, ["src", "dst", "type"]].astype({"type": str})
    return flows.drop_duplicates(["src", "dst"]).reset_index(drop=True)

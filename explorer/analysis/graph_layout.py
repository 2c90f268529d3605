"""What the dependency graph panel draws: the nodes around a slice or over a step, capped,
each in a lane (one per track) and a nesting row, in time order; the edges between them; the
critical path's nodes and edges flagged.

Pure (pandas/numpy), so it runs in the panel's worker thread and in tests without Qt. The
panel (:mod:`explorer.ui.panels.dependency_graph`) only turns a :class:`GraphLayout` into
boxes and routed edges.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from explorer.analysis.slice_steps import slice_steps
from explorer.trace.model import TraceData


@dataclass
class GraphLayout:
    """Nodes and edges to draw, with positions; built off the UI thread."""

    nodes: pd.DataFrame  # id, name, kind, ts, dur, lane, row, column, critical
    edges: pd.DataFrame  # src, dst, type, weight, critical
    lanes: list[str]  # lane labels, top to bottom
    total_nodes: int  # nodes in the scope before the cap
    critical_ns: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def limited(self) -> bool:
        return len(self.nodes) < self.total_nodes


def neighbourhood(edges: pd.DataFrame, center: int, hops: int) -> pd.Series:
    """Hop distance from ``center`` of every node within ``hops`` (edges in either direction).

    One vectorised ``isin`` per hop; returns a Series indexed by slice id.
    """
    src = edges["src"].to_numpy(np.int64)
    dst = edges["dst"].to_numpy(np.int64)
    distance = {int(center): 0}
    frontier = np.array([center], np.int64)
    for hop in range(1, hops + 1):
        out_mask = np.isin(src, frontier)
        in_mask = np.isin(dst, frontier)
        reached = np.unique(np.concatenate([dst[out_mask], src[in_mask]]))
        new = reached[~np.isin(reached, np.fromiter(distance, np.int64, len(distance)))]
        if not len(new):
            break
        distance.update(dict.fromkeys(new.tolist(), hop))
        frontier = new
    return pd.Series(distance, dtype=np.int64)


def graph_layout(
    trace: TraceData, step: int | None, center: int | None, hops: int, max_nodes: int
) -> GraphLayout:
    """Pick, cap and place the nodes to draw (pure; runs in a worker thread).

    With ``center`` the scope is the nodes within ``hops`` of it in the graph of its step;
    otherwise every node of ``step``'s graph. Over ``max_nodes``, keep the nearest hops (then
    the nodes closest in time to the centre) or, for a step, critical-path nodes and then the
    longest ones.
    """
    from explorer.analysis.dependency_graph import dependency_graph

    notes: list[str] = []
    if center is not None and step is None:
        # The graph of the step the centre belongs to (a device op: its launcher's step).
        own = int(slice_steps(trace)[int(center)])
        step = own if own >= 0 else None
    graph = dependency_graph(trace, step=step)
    edges = graph.edges
    edges = edges[edges["src"] != edges["dst"]]  # a leaf's own duration is the node itself
    cp_ids, critical_ns, cp_edges = _critical(trace, step, notes)
    ids, total, edges = _scope(trace, graph.nodes, edges, center, hops, max_nodes, cp_ids, notes)
    keep = np.isin(edges["src"].to_numpy(), ids) & np.isin(edges["dst"].to_numpy(), ids)
    edges = edges[keep].reset_index(drop=True)
    lane_of, lanes = _lanes(trace, ids)
    s = trace.slices
    nodes = pd.DataFrame(
        {
            "id": ids,
            "name": s["name"].astype(str).to_numpy()[ids],
            "kind": s["kind"].astype(str).to_numpy()[ids],
            "ts": s["ts"].to_numpy(np.int64)[ids],
            "dur": s["dur"].to_numpy(np.int64)[ids],
            "lane": lane_of,
            "row": np.zeros(len(ids), np.int64),
            "column": np.arange(len(ids), dtype=np.int64),
            "critical": np.isin(ids, cp_ids),
        }
    )
    # Nesting rows inside a lane: the dense rank of the depth among the lane's nodes.
    depth = s["depth"].to_numpy(np.int64)[ids]
    nodes["row"] = (
        pd.Series(depth).groupby(nodes["lane"].to_numpy()).rank(method="dense").to_numpy(np.int64)
        - 1
    )
    if len(cp_edges):
        pairs = cp_edges[["src", "dst"]].drop_duplicates().assign(critical=True)
        edges = edges.merge(pairs, on=["src", "dst"], how="left")
        edges["critical"] = edges["critical"].eq(True)
    else:
        edges = edges.assign(critical=False)
    return GraphLayout(nodes, edges, lanes, total, critical_ns, notes)


def _critical(
    trace: TraceData, step: int | None, notes: list[str]
) -> tuple[np.ndarray, int, pd.DataFrame]:
    """The critical path's slices, length and edges (none, with a note, when it cannot be
    computed: the graph is still worth showing without it)."""
    from explorer.analysis.critical_path import critical_path

    try:
        cp = critical_path(trace, step=step)
        cp_ids = np.asarray(cp.slices, np.int64)
        cp_edges = cp.edges if {"src", "dst"} <= set(cp.edges.columns) else pd.DataFrame()
        return cp_ids, int(cp.length_ns), cp_edges
    except Exception as exc:  # noqa: BLE001 - the graph is still worth showing without it
        notes.append(f"critical path unavailable: {exc}")
        return np.zeros(0, np.int64), 0, pd.DataFrame()


def _scope(
    trace: TraceData,
    graph_nodes: np.ndarray,
    edges: pd.DataFrame,
    center: int | None,
    hops: int,
    max_nodes: int,
    cp_ids: np.ndarray,
    notes: list[str],
) -> tuple[np.ndarray, int, pd.DataFrame]:
    """The nodes to draw, in time order, how many the scope held before the cap, and the
    edges (none when ``center`` is not a node: it is then drawn alone)."""
    ts = trace.slices["ts"].to_numpy(np.int64)
    dur = trace.slices["dur"].to_numpy(np.int64)
    graph_nodes = np.asarray(graph_nodes, np.int64)
    if center is not None:
        if not np.isin(center, graph_nodes):
            notes.append("the selected event is not a node of the dependency graph")
            edges = edges.iloc[:0]
            distance = pd.Series({int(center): 0}, dtype=np.int64)
        else:
            distance = neighbourhood(edges, center, hops)
        ids = distance.index.to_numpy(np.int64)
        total = len(ids)
        priority = np.lexsort((np.abs(ts[ids] - ts[center]), distance.to_numpy()))
        ids = ids[priority[:max_nodes]]
    else:
        ids = graph_nodes
        total = len(ids)
        if total > max_nodes:
            on_cp = np.isin(ids, cp_ids)
            priority = np.lexsort((-dur[ids], ~on_cp))
            ids = ids[priority[:max_nodes]]
    return ids[np.argsort(ts[ids], kind="stable")], total, edges


def _lanes(trace: TraceData, ids: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Each node's lane (one per track: host threads first, then device streams, each in
    the tracks' order) and the lanes' labels, top to bottom."""
    tracks = trace.tracks.set_index("id")
    node_tracks = trace.slices["track"].to_numpy()[ids]
    lane_tracks = pd.unique(node_tracks)
    order_col = "order" if "order" in tracks.columns else None
    type_rank = {"host_thread": 0, "device_stream": 1}
    lane_key = [
        (
            type_rank.get(str(tracks.at[t, "type"]), 2) if t in tracks.index else 3,
            int(tracks.at[t, order_col]) if order_col and t in tracks.index else int(t),
            int(t),
        )
        for t in lane_tracks.tolist()  # one per track
    ]
    lane_tracks = [t for _, t in sorted(zip(lane_key, lane_tracks.tolist(), strict=True))]
    lane_of = {t: i for i, t in enumerate(lane_tracks)}
    lanes = [str(tracks.at[t, "label"]) if t in tracks.index else f"track {t}" for t in lane_tracks]
    return pd.Series(node_tracks).map(lane_of).to_numpy(np.int64), lanes


__all__ = ["GraphLayout", "graph_layout", "neighbourhood"]

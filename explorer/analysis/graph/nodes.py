"""Which slices are nodes of the dependency graph, for the whole trace or for one step.

Nodes are the slices on host threads and device streams. Left out: device-side copies of
annotations (``gpu_user_annotation`` spans overlap the kernels they label, they are not
work), and rows on tracks that are neither (the profiler's own "PyTorch Profiler (0)" span,
which would otherwise look like one op lasting the whole trace).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from explorer.trace.columns import category_in
from explorer.trace.model import TraceData


@dataclass(frozen=True)
class SliceArrays:
    """The columns the edge builders read, as numpy arrays over *all* slices (ids = rows)."""

    ts: np.ndarray
    end: np.ndarray
    track: np.ndarray
    parent: np.ndarray
    correlation: np.ndarray
    stream: np.ndarray
    seq: np.ndarray
    host: np.ndarray  # bool: on a host thread
    device: np.ndarray  # bool: on a device stream
    node: np.ndarray  # bool: a node of the graph being built
    #: ``kind`` as a categorical, what :meth:`kind_in` reads: compared per category
    #: (:func:`~explorer.trace.columns.category_in`), not per row — comparing a
    #: million-row object array of strings took tens of ms a time.
    kind_cat: pd.Categorical = field(repr=False)

    @property
    def n(self) -> int:
        return len(self.ts)

    def kept(self) -> SliceArrays:
        """These arrays as a built graph keeps them: without the columns only the edge
        builders read (:data:`BUILD_ONLY`, each left an empty array, so that a reader of
        one fails rather than reads another's rows). A first report builds its graph over
        the parse's columns and then maps the stored tables in their place: the graph
        held four of the parse's slice-length columns through the path search and the
        replays (22 MB on the synthetic 1M-event trace)."""
        empty = np.empty(0, np.int64)
        return replace(self, **{name: empty for name in BUILD_ONLY})

    def kind_in(self, kinds: Iterable[str], at: np.ndarray | None = None) -> np.ndarray:
        """Whether each slice (each of ``at``, slice ids) is of one of ``kinds``."""
        return category_in(self.kind_cat if at is None else self.kind_cat[at], set(kinds))


#: The :class:`SliceArrays` columns only the edge builders read (see :meth:`SliceArrays.kept`).
BUILD_ONLY = ("parent", "correlation", "stream", "seq")


def id_dtype(n: int) -> type[np.signedinteger[Any]]:
    """The narrowest of int32 and int64 that holds ids ``-1 .. n`` (and ``2 * n + 1``):
    a graph's per-edge ids held as int32 halve what the path search and the replays keep
    through their searches (33 MB on a 2.2M-edge graph)."""
    return np.int32 if 2 * n + 2 < np.iinfo(np.int32).max else np.int64


def track_types(trace: TraceData) -> np.ndarray:
    """Type of every track, indexed by track id (object array)."""
    tracks = trace.tracks
    if len(tracks) == 0:
        return np.empty(0, object)
    out = np.full(int(tracks["id"].max()) + 1, "other", dtype=object)
    out[tracks["id"].to_numpy()] = tracks["type"].astype(str).to_numpy()
    return out


def graph_device_mode(trace: TraceData) -> bool:
    """Whether a graph reads the host reasons in the device mode: the trace has slices on a
    device (:meth:`~explorer.trace.model.TraceData.on_device`, the ``device`` column of
    :func:`slice_arrays`). One rule for the graph's build, its path's time categories and
    what a child computes for it ahead (:func:`~explorer.analysis.dependency_graph.
    read_first`)."""
    return bool(trace.on_device().any())


def slice_arrays(trace: TraceData, window: tuple[int, int] | None = None) -> SliceArrays:
    """Columns of the slices table, with ``node`` true for the slices the graph includes.

    With a ``window`` (a step's ``[start, end)``), nodes are the slices that start in it,
    plus device ops launched from inside it (they belong to the step even when the device
    runs them after the host has moved on), less device ops launched before it or whose
    launch the trace does not hold.
    """
    s = trace.slices
    ts = s["ts"].to_numpy(np.int64)
    end = ts + s["dur"].to_numpy(np.int64)
    kinds = s["kind"].astype("category")
    track = s["track"].to_numpy(np.int64)
    host = trace.on_host()
    device = trace.on_device()
    node = (host | device) & ~category_in(kinds.array, {"device_annotation"})
    if window is not None:
        lo, hi = window
        inside = (ts >= lo) & (ts < hi)
        flows = trace.flows
        if len(flows):
            launch = np.asarray(flows["type"] == "launch")
            fsrc = flows["src"].to_numpy(np.int64)[launch]
            fdst = flows["dst"].to_numpy(np.int64)[launch]
            launched_inside = fdst[(ts[fsrc] >= lo) & (ts[fsrc] < hi)]
            launched_before = fdst[ts[fsrc] < lo]
            inside[launched_inside] = True
            # Work launched by an earlier step belongs to that step, even if it runs here.
            inside[launched_before] = False
        # Device work whose launch is not in the trace (a capture, or a window of steps,
        # that starts while earlier work still runs: its correlation matches no runtime
        # call) belongs to no step here — as work launched before the window.
        from explorer.analysis.attribution import launcher

        launched = launcher(trace)
        corr = s["correlation"].to_numpy(np.int64)
        inside[device & (corr >= 0) & (launched < 0)] = False
        node &= inside
    return SliceArrays(
        ts=ts,
        end=end,
        track=track,
        parent=s["parent"].to_numpy(np.int64),
        correlation=s["correlation"].to_numpy(np.int64),
        stream=s["stream"].to_numpy(np.int64),
        seq=s["seq"].to_numpy(np.int64),
        host=host,
        device=device,
        node=node,
        kind_cat=kinds.array,
    )

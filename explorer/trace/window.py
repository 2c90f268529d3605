"""A time window of a trace, as a trace of its own: what the analyses read when the whole
trace's analyses cannot fit in memory, or when a user asks for some steps only.

:func:`cut` keeps every slice that overlaps the window, and every slice enclosing one (so
nesting stays whole: a kept slice's parent is always kept), every flow whose two ends are
kept, and the counters, instants and memory events inside the window. Rows keep their
order and their times (``ts`` stays relative to the whole trace's start, so ranges and
timestamps a report prints are the whole trace's); ids are renumbered, and
:attr:`~explorer.trace.model.Window.ids` maps each row back to the whole trace's id. Only
the window's rows are copied: a whole trace mapped from the store is read, not held.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from explorer.trace.model import TraceData, Window


class WindowArgs:
    """The args of a window's slices, read from the whole trace's store by id."""

    def __init__(self, store: Any, ids: np.ndarray) -> None:
        self._store = store
        self._ids = ids

    def __len__(self) -> int:
        return len(self._ids)

    def raw(self, i: int) -> bytes:
        return self._store.raw(int(self._ids[i]))

    def get(self, i: int) -> dict[str, Any]:
        return self._store.get(int(self._ids[i]))  # a fresh dict each call


def overlapping(trace: TraceData, start_ns: int, end_ns: int) -> np.ndarray:
    """Per slice of ``trace``: does it overlap ``[start_ns, end_ns)`` or enclose one that
    does? (An instant-like slice of no duration overlaps when it starts inside.)"""
    s = trace.slices
    ts = s["ts"].to_numpy(np.int64)
    keep = ts < end_ns
    keep &= (ts + s["dur"].to_numpy(np.int64) > start_ns) | (ts >= start_ns)
    parent = s["parent"].to_numpy(np.int64)
    frontier = parent[keep]
    while True:  # one pass per nesting level, vectorised
        frontier = frontier[frontier >= 0]
        frontier = np.unique(frontier[~keep[frontier]])
        if len(frontier) == 0:
            return keep
        keep[frontier] = True
        frontier = parent[frontier]


def cut(
    trace: TraceData,
    start_ns: int,
    end_ns: int,
    *,
    steps: pd.DataFrame,
    attributed_steps: pd.DataFrame,
    whole_steps: int,
    reason: str,
) -> TraceData:
    """The window ``[start_ns, end_ns)`` of ``trace`` (see the module docstring).

    ``steps``/``attributed_steps``: the whole trace's step tables for the steps in the window
    (their ``slice`` column in the whole trace's ids; renumbered here), which the window's
    analyses use instead of deriving steps from the cut. ``whole_steps``: how many steps the
    whole trace has; ``reason``: why the window (:attr:`Window.reason`).
    """
    keep = overlapping(trace, start_ns, end_ns)
    ids = np.flatnonzero(keep)

    def renumber(old: np.ndarray) -> np.ndarray:
        """Whole-trace ids → window ids, -1 for ids outside the window (or -1 already)."""
        old = np.asarray(old, np.int64)
        inside = (old >= 0) & (old < len(keep))
        inside[inside] = keep[old[inside]]
        out = np.full(len(old), -1, np.int64)
        out[inside] = np.searchsorted(ids, old[inside])
        return out

    slices = trace.slices.take(ids).reset_index(drop=True)
    slices["parent"] = renumber(slices["parent"].to_numpy())

    f = trace.flows
    src, dst = renumber(f["src"].to_numpy()), renumber(f["dst"].to_numpy())
    both = (src >= 0) & (dst >= 0)
    flows = f[both].reset_index(drop=True)
    flows["src"], flows["dst"] = src[both], dst[both]

    def inside(table: pd.DataFrame) -> pd.DataFrame:
        ts = table["ts"].to_numpy(np.int64)
        return table[(ts >= start_ns) & (ts < end_ns)].reset_index(drop=True)

    memory = inside(trace.memory)
    if len(memory):
        memory["slice"] = renumber(memory["slice"].to_numpy())
    et = trace.execution_trace
    if et is not None and "slice" in et.columns:
        et = et.copy()
        et["slice"] = renumber(et["slice"].to_numpy())

    def steps_of_window(table: pd.DataFrame) -> pd.DataFrame:
        out = table.reset_index(drop=True).copy()
        out["slice"] = renumber(out["slice"].to_numpy())
        return out

    whole_ids, whole_slices = ids, len(trace.slices)
    if trace.window is not None:  # a window of a window: ids of the whole trace still
        whole_ids, whole_slices = trace.window.ids[ids], trace.window.whole_slices
    out = TraceData(
        slices=slices,
        tracks=trace.tracks,
        flows=flows,
        counters=inside(trace.counters),
        instants=inside(trace.instants),
        memory=memory,
        metadata=dict(trace.metadata),
        args_store=None if trace.args_store is None else WindowArgs(trace.args_store, ids),
        execution_trace=et,
        window=Window(
            start_ns=int(start_ns),
            end_ns=int(end_ns),
            ids=whole_ids,
            whole_slices=whole_slices,
            whole_steps=int(whole_steps),
            steps=steps_of_window(steps),
            attributed_steps=steps_of_window(attributed_steps),
            reason=reason,
        ),
    )
    out.step_options = trace.step_options
    return out


__all__ = ["WindowArgs", "cut", "overlapping"]
